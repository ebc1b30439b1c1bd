"""The provider matrix: a ``create_agent`` turn with one tool call, through each provider's real
LangChain package, against a local server replaying that provider's wire format.

On every backend: the tokens by kind are what the provider reported; the cost is what genai-prices
computes from the provider's own usage body for that model; a streamed run agrees with the plain run
of the same conversation; the per-model bucket is keyed by the model name the provider returned; the
API key given to the client is in no stored byte. A stream that reports no usage has an unknown cost
with a reason, never $0.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import genai_prices
import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool

from providers.raw import stored_bytes
from providers.server import ProviderServer
from providers.wire import ANSWER, CASES_BY_ID, Case, openai_chat
from run_journal import RunEventStore, RunJournal
from run_journal.runs import UsageTotals
from run_journal.usage import TokenUsage
from run_journal.usage.tokens import FIELDS

CASES = CASES_BY_ID


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}, 21 degrees"


@pytest.fixture(scope="module")
def server() -> Iterator[ProviderServer]:
    running = ProviderServer().start()
    yield running
    running.stop()


API_KEY = f"sk-test-{uuid.uuid4().hex}"
"""The key every client is given (a new one each test run, so no stored byte can hold it by chance)."""


def api_key() -> str:
    return API_KEY


async def run_turn(case: Case, server: ProviderServer, store: RunEventStore, key: str) -> RunJournal:
    server.expect(*case.replies)
    result: Any = None
    agent = create_agent(case.model(server.url, key), [get_weather])
    question = {"messages": [{"role": "user", "content": "What's the weather in Paris?"}]}
    async with RunJournal(store, thread_id=f"t-{uuid.uuid4().hex[:8]}") as journal:
        if case.stream_the_agent:
            chunks = 0
            async for mode, part in agent.astream(question, config={"callbacks": [journal]},
                                                  stream_mode=["messages", "values"]):
                chunks += mode == "messages"
                result = part if mode == "values" else result
            assert chunks > 4, "the model calls streamed"
        else:
            result = await agent.ainvoke(question, config={"callbacks": [journal]})
    assert result["messages"][-1].text == ANSWER
    assert [m.type for m in result["messages"]] == ["human", "ai", "tool", "ai"]
    assert not server.script, "every scripted reply was asked for"
    return journal


def genai_cost(case: Case) -> float | None:
    """What genai-prices computes from the provider's own usage bodies (None: it has no price)."""
    if case.genai is None:
        return None
    provider_id, flavor = case.genai
    total = 0.0
    for body in case.usage_bodies:
        extracted = genai_prices.extract_usage(body, provider_id=provider_id, api_flavor=flavor)
        if extracted.model is not None:
            price = extracted.calc_price()
        else:
            assert case.price_model is not None
            price = genai_prices.calc_price(extracted.usage, case.price_model, provider_id=provider_id)
        total += float(price.total_price)
    return total


def token_counts(totals: UsageTotals | TokenUsage) -> dict[str, int]:
    return {name: getattr(totals, name) for name in FIELDS}


def summed(usages: list[TokenUsage]) -> TokenUsage:
    total = TokenUsage()
    for usage in usages:
        total = total + usage
    return total


@pytest.mark.parametrize("case_id", [k for k in CASES if not k.endswith("no-usage")])
async def test_a_turn_is_journaled_as_the_provider_reported_and_billed_it(
        case_id: str, server: ProviderServer, store: RunEventStore, store_url: str) -> None:
    case = CASES[case_id]
    key = api_key()
    journal = await run_turn(case, server, store, key)
    assert any(key in " ".join(request.headers.values()) for request in server.requests), "the key was sent"
    streamed = [("stream" in request.path) or (request.json or {}).get("stream") is True
                for request in server.requests]
    if case.twin is not None:
        assert all(streamed), "a streamed case streams"
    elif any(other.twin == case.id for other in CASES.values()):
        assert not any(streamed), "its plain twin does not"
    row = await store.get_run(journal.run_id)
    assert row is not None
    responses = await store.list_events(journal.thread_id, event_types=["llm.ai.response"])
    assert [TokenUsage.from_dict(event.metadata["usage"]) for event in responses] == case.reported
    assert [event.metadata["model_name"] for event in responses] == [case.returned_model] * 2

    bucket = row.usage_by_model[case.returned_model]  # the model name the provider returned
    assert list(row.usage_by_model) == [case.returned_model]
    assert token_counts(bucket) == token_counts(summed(case.reported))
    assert (bucket.llm_calls, row.usage.llm_calls) == (2, 2)
    expected = genai_cost(case)
    if expected is None:
        assert row.cost_usd is None
        assert row.cost_note is not None
        assert repr(case.returned_model) in row.cost_note
    else:
        assert row.cost_usd == pytest.approx(expected, rel=1e-9)
        assert bucket.cost_usd == pytest.approx(expected, rel=1e-9)
        assert sum(event.metadata["cost_usd"] for event in responses) == pytest.approx(expected, rel=1e-9)
        assert row.cost_note is None

    if case.twin is not None:  # streamed and plain agree (as far as the stream reports: see below)
        twin = CASES[case.twin]
        assert token_counts(bucket) == token_counts(summed(case.reported))
        known_gap = case.id == "anthropic-1h-streamed"
        expected_twin = [dataclasses.replace(u, cache_creation_1h_tokens=0) for u in twin.reported] \
            if known_gap else twin.reported
        assert token_counts(bucket) == token_counts(summed(expected_twin))
        if not known_gap:
            assert row.cost_usd == pytest.approx(genai_cost(twin), rel=1e-9)

    stored = await stored_bytes(store_url, store, journal.thread_id)
    assert b"Paris" in stored  # the scan sees what the journal wrote
    assert key.encode() not in stored


@pytest.mark.xfail(strict=True, reason="langchain-anthropic reads a stream's usage from message_delta, "
                                       "which has the cache writes' total but not their split by lifetime")
async def test_a_streamed_anthropic_call_knows_its_one_hour_writes(server: ProviderServer) -> None:
    from run_journal import open_store

    async with open_store("memory://") as store:
        journal = await run_turn(CASES["anthropic-1h-streamed"], server, store, api_key())
        row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.usage.cache_creation_1h_tokens == sum(u.cache_creation_1h_tokens
                                                     for u in CASES["anthropic-1h"].reported)


async def test_a_stream_without_usage_has_an_unknown_cost_with_a_reason(
        server: ProviderServer, store: RunEventStore, store_url: str) -> None:
    case = openai_chat(streamed=True, include_usage=False)
    key = api_key()
    journal = await run_turn(case, server, store, key)
    assert all("stream_options" not in (request.json or {}) for request in server.requests)
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.usage.llm_calls == 2
    assert row.usage.total_tokens == 0
    assert row.cost_usd is None  # unknown, not $0
    assert row.usage_by_model[case.returned_model].cost_usd is None
    assert row.cost_note == f"a call to {case.returned_model!r} reported no token usage"
    responses = await store.list_events(journal.thread_id, event_types=["llm.ai.response"])
    assert [(e.metadata["usage"], e.metadata["cost_usd"]) for e in responses] == [(None, None)] * 2
    assert key.encode() not in await stored_bytes(store_url, store, journal.thread_id)

