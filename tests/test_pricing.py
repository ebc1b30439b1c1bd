"""Known costs by default: genai-prices when no table is given, the user's table over it, a reason when
no price is known, and ``run-journal URL reprice`` on SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import backend_url
from genai_prices import Usage, calc_price
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from run_journal import RunJournal, RunRow, UsageTotals, open_store
from run_journal.runs import RunStatus
from run_journal.usage import PricingOption, RunTally, TokenUsage, cost_of, quote, reprice_row

RUN_JOURNAL = str(Path(sys.executable).with_name("run-journal"))


def tokens(inputs: int, outputs: int, cache_read: int = 0, cache_write: int = 0,
           reasoning: int = 0) -> TokenUsage:
    return TokenUsage(inputs, outputs, inputs + outputs, cache_read, cache_write, reasoning)


def database_cost(usage: TokenUsage, model: str, provider: str | None = None, **kw: Any) -> float:
    """What genai-prices' own calculation says (slow, exact)."""
    found = calc_price(Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                             cache_read_tokens=usage.cache_read_tokens,
                             cache_write_tokens=usage.cache_creation_tokens,
                             output_reasoning_tokens=usage.reasoning_tokens),
                       model, provider_id=provider, **kw)
    return float(found.total_price)


# -- the database ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "canonical"), [
    ("gpt-4o-2024-08-06", "gpt-4o"),  # a dated name
    ("gpt-4o-2024-11-20", "gpt-4o"),
    ("claude-3-5-sonnet-latest", "claude-3-5-sonnet"),  # an alias
    ("claude-3-5-sonnet-20241022", "claude-3-5-sonnet"),
    ("claude-sonnet-4-20250514", "claude-sonnet-4-0"),
    ("GPT-4O", "gpt-4o"),  # case
    ("models/gemini-1.5-pro", "gemini-1.5-pro"),  # Google's resource name
    ("gemini-1.5-pro-002", "gemini-1.5-pro"),
])
def test_dated_names_and_aliases_are_matched_as_the_database_matches_them(name: str, canonical: str) -> None:
    usage = tokens(12_000, 800, cache_read=3_000)
    assert cost_of(usage, name) == pytest.approx(database_cost(usage, canonical), rel=1e-12)
    assert cost_of(usage, name) == pytest.approx(database_cost(usage, name), rel=1e-12)


@pytest.mark.parametrize(("name", "model", "provider"), [
    ("openai:gpt-4o-mini", "gpt-4o-mini", "openai"),  # init_chat_model's provider:model
    ("anthropic/claude-3-5-haiku-latest", "claude-3-5-haiku-latest", "anthropic"),  # provider/model
])
def test_a_provider_prefix_names_the_provider(name: str, model: str, provider: str) -> None:
    usage = tokens(5_000, 500)
    assert cost_of(usage, name) == pytest.approx(database_cost(usage, model, provider), rel=1e-12)


def test_cache_reads_and_writes_are_priced_separately() -> None:
    """Anthropic bills a cache read at a tenth of the input price and a cache write at 1.25x."""
    plain = cost_of(tokens(10_000, 0), "claude-3-5-sonnet-latest")
    read = cost_of(tokens(10_000, 0, cache_read=10_000), "claude-3-5-sonnet-latest")
    written = cost_of(tokens(10_000, 0, cache_write=10_000), "claude-3-5-sonnet-latest")
    assert plain == pytest.approx(10_000 * 3.0 / 1e6)
    assert read == pytest.approx(10_000 * 0.30 / 1e6)
    assert written == pytest.approx(10_000 * 3.75 / 1e6)
    mixed = tokens(10_000, 2_000, cache_read=4_000, cache_write=1_000)
    assert cost_of(mixed, "claude-3-5-sonnet-latest") == pytest.approx(
        (5_000 * 3.0 + 4_000 * 0.30 + 1_000 * 3.75 + 2_000 * 15.0) / 1e6)


MODELS = ["gpt-4o", "gpt-4o-mini", "gpt-4.1", "o3-mini", "o1", "gpt-5", "claude-sonnet-4-5",
          "claude-opus-4-1", "claude-3-5-haiku-latest", "gemini-2.5-pro", "gemini-2.5-flash",
          "gemini-1.5-pro", "deepseek-chat", "deepseek-reasoner", "mistral-large-latest", "grok-3"]
USAGES = [tokens(0, 0), tokens(1, 1), tokens(1_234, 567, cache_read=200, cache_write=100, reasoning=300),
          tokens(199_999, 1_000, cache_read=50_000), tokens(200_001, 1_000, cache_read=50_000, cache_write=7),
          tokens(1_500_000, 90_000, cache_read=1_000_000, reasoning=40_000)]


@pytest.mark.parametrize("model", MODELS)
def test_the_fast_rates_agree_with_the_databases_own_calculation(model: str) -> None:
    """Across tiers (200k-token thresholds), cache and reasoning tokens, and dates when prices changed."""
    for usage in USAGES:
        for at in (None, datetime(2025, 1, 15, 3, 0, tzinfo=UTC), datetime(2025, 7, 1, 17, 0, tzinfo=UTC)):
            expected = database_cost(usage, model, genai_request_timestamp=at)
            assert cost_of(usage, model, at=at) == pytest.approx(expected, rel=1e-9, abs=1e-15), (usage, at)


def test_one_hour_cache_writes_are_priced_at_their_own_rate() -> None:
    """Claude Sonnet 4.5: $3.75 per million for a five-minute write, $6 for a one-hour write."""
    five = TokenUsage(20_000, 1_000, 21_000, cache_creation_tokens=10_000)
    hour = TokenUsage(20_000, 1_000, 21_000, cache_creation_tokens=10_000, cache_creation_1h_tokens=10_000)
    sonnet = "claude-sonnet-4-5"
    assert cost_of(five, sonnet) == pytest.approx((10_000 * 3 + 10_000 * 3.75 + 1_000 * 15) / 1e6)
    assert cost_of(hour, sonnet) == pytest.approx((10_000 * 3 + 10_000 * 6 + 1_000 * 15) / 1e6)
    table = {"mine": {"input": 1.0, "output": 1.0, "cache_write": 2.0, "cache_write_1h": 4.0}}
    assert cost_of(hour, "mine", table) == pytest.approx((10_000 * 1 + 10_000 * 4 + 1_000 * 1) / 1e6)
    assert cost_of(hour, "mine", {"mine": {"input": 1.0, "output": 1.0, "cache_write": 2.0}}) == \
        pytest.approx((10_000 * 1 + 10_000 * 2 + 1_000 * 1) / 1e6)


def test_audio_tokens_are_priced_at_their_own_rate() -> None:
    """gpt-realtime: text $4 in / $16 out, audio $32 in / $64 out per million."""
    usage = TokenUsage(10_000, 2_000, 12_000, input_audio_tokens=6_000, output_audio_tokens=1_500)
    assert cost_of(usage, "gpt-realtime") == pytest.approx(
        (4_000 * 4 + 6_000 * 32 + 500 * 16 + 1_500 * 64) / 1e6)


EVERY_KIND = [
    TokenUsage(12_000, 3_000, 15_000, cache_read_tokens=2_000, cache_creation_tokens=3_000,
               reasoning_tokens=1_000, cache_creation_1h_tokens=1_000, input_audio_tokens=1_500,
               output_audio_tokens=500),
    TokenUsage(250_000, 9_000, 259_000, cache_read_tokens=60_000, cache_creation_tokens=30_000,
               reasoning_tokens=4_000, cache_creation_1h_tokens=20_000, input_audio_tokens=10_000,
               output_audio_tokens=2_000),  # above every 200k tier
    TokenUsage(1_200_000, 50_000, 1_250_000, cache_read_tokens=900_000, cache_creation_tokens=100_000,
               cache_creation_1h_tokens=100_000, input_audio_tokens=100_000),  # above the 1M tiers
    TokenUsage(5_000, 800, 5_800, cache_creation_tokens=5_000, cache_creation_1h_tokens=5_000),
]


def database_usage(usage: TokenUsage) -> Usage:
    """The usage as genai-prices takes it; the kinds where two counted kinds meet (cached audio, audio
    reasoning) are not reported by any provider through LangChain, so they are zero."""
    return Usage(input_tokens=usage.input_tokens, cache_read_tokens=usage.cache_read_tokens,
                 cache_write_tokens=usage.cache_creation_tokens,
                 cache_write_1h_tokens=usage.cache_creation_1h_tokens,
                 input_audio_tokens=usage.input_audio_tokens, output_tokens=usage.output_tokens,
                 output_reasoning_tokens=usage.reasoning_tokens,
                 output_audio_tokens=usage.output_audio_tokens, cache_audio_read_tokens=0,
                 cache_audio_write_tokens=0, cache_audio_write_1h_tokens=0, output_audio_reasoning_tokens=0)


def special_prices() -> list[tuple[str, Any]]:
    """Every price in the database with a rate beyond input, output and cache reads: one-hour writes,
    audio, reasoning, a per-request fee, or tiers."""
    from genai_prices import data
    from genai_prices.types import ModelPrice, TieredPrices

    special = {"cache_write_1h_mtok", "input_audio_mtok", "output_audio_mtok", "output_reasoning_mtok",
               "requests_kcount"}
    found = []
    for provider in data.providers:
        for model in provider.models:
            options = [model.prices] if isinstance(model.prices, ModelPrice) else \
                [conditional.prices for conditional in model.prices]
            options += [variant.prices for variant in model.price_variants or ()]
            for price in options:
                values = {key: value for key, value in vars(price).items() if value is not None}
                if special & values.keys() or any(isinstance(v, TieredPrices) for v in values.values()):
                    found.append((f"{provider.id}:{model.id}", price))
    return found


def test_the_compiled_rates_agree_with_the_database_on_every_price_with_special_rates() -> None:
    """Every such price compiles (none falls back to the slow calculation) and its rates price usages
    holding every token kind exactly as genai-prices does, across its tiers."""
    from run_journal import prices

    found = special_prices()
    kinds = {key for _, price in found for key, value in vars(price).items() if value is not None}
    assert {"cache_write_1h_mtok", "input_audio_mtok", "output_audio_mtok", "output_reasoning_mtok"} <= kinds
    assert len(found) > 100
    for name, price in found:
        rates = prices.DEFAULT.compiled(price)
        assert rates is not None, name
        for usage in EVERY_KIND:
            expected = float(price.calc_price(database_usage(usage))["total_price"])
            assert rates.cost(usage) == pytest.approx(expected, rel=1e-9, abs=1e-15), (name, usage)


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "claude-opus-4-1", "gemini-2.5-pro",
                                   "gemini-2.5-flash", "gpt-realtime", "gpt-5", "deepseek-reasoner"])
def test_every_token_kind_is_priced_as_the_database_prices_it(model: str) -> None:
    for usage in EVERY_KIND:
        expected = float(calc_price(database_usage(usage), model).total_price)
        assert cost_of(usage, model) == pytest.approx(expected, rel=1e-9, abs=1e-15), usage


def test_the_provider_of_the_call_names_whose_price_applies() -> None:
    """A Bedrock model id is only known as AWS's; LangChain's ls_provider says where the call went."""
    usage = tokens(10_000, 1_000)
    bedrock = "anthropic.claude-3-5-sonnet-20240620-v1:0"
    assert quote(usage, bedrock)[0] is None
    cost, why = quote(usage, bedrock, provider="amazon_bedrock")
    assert why is None
    assert cost == pytest.approx(database_cost(usage, bedrock, "aws"))
    assert quote(usage, "gpt-4o", provider="ollama") == quote(usage, "gpt-4o")  # an unknown provider


def test_the_callers_table_overrides_the_database_and_the_database_prices_the_rest() -> None:
    usage = tokens(1_000_000, 1_000_000, cache_read=500_000, cache_write=100_000)
    table = {"gpt-4o": {"input": 2.0, "output": 8.0, "cache_read": 0.5, "cache_write": 2.5}}
    assert cost_of(usage, "gpt-4o", table) == pytest.approx(0.4 * 2 + 0.5 * 0.5 + 0.1 * 2.5 + 8.0)
    assert cost_of(usage, "gpt-4o-mini", table) == pytest.approx(database_cost(usage, "gpt-4o-mini"))
    assert cost_of(usage, "gpt-4o") == pytest.approx(database_cost(usage, "gpt-4o"))
    assert cost_of(usage, "in-house", {"in-house": {"input": 1, "output": 1}}) == pytest.approx(2.0)


@pytest.mark.parametrize(("model", "pricing", "usage", "reason"), [
    ("my-model", None, tokens(10, 1), "no price for model 'my-model' in genai-prices"),
    (None, None, tokens(10, 1), "did not report which model answered"),
    ("gpt-4o", False, tokens(10, 1), "pricing is off"),
    ("mine", {"mine": {"input": 1.0}}, tokens(10, 1), "needs both 'input' and 'output'"),
    ("mine", {"mine": {"input": "cheap", "output": 1}}, tokens(10, 1), "not a number"),
])
def test_an_unknown_price_is_none_with_a_reason(model: str | None, pricing: PricingOption, usage: TokenUsage,
                                                reason: str) -> None:
    cost, why = quote(usage, model, pricing)
    assert cost is None
    assert why is not None
    assert reason in why


def test_the_tally_keeps_why_a_cost_is_unknown_and_says_nothing_when_it_is_known() -> None:
    tally = RunTally()
    tally.add_call("lead_agent", "gpt-4o", tokens(100, 10))
    assert (tally.total.cost_usd is not None, tally.cost_note) == (True, None)
    tally.add_call("middleware:summarization", "my-summarizer", tokens(100, 10))
    tally.add_call("lead_agent", "gpt-4o", None)  # a stream that reported no usage
    assert tally.total.cost_usd is None
    assert tally.by_model["my-summarizer"].cost_usd is None
    assert tally.cost_note == ("no price for model 'my-summarizer' in genai-prices "
                               f"{__import__('genai_prices').__version__}; a call to 'gpt-4o' reported no "
                               "token usage")
    assert tally.row_fields()["cost_note"] == tally.cost_note
    assert tally.copy().cost_note == tally.cost_note


def test_cost_note_round_trips_through_the_row_dict() -> None:
    row = RunRow(run_id="r", thread_id="t", cost_note="no price for model 'x'")
    assert RunRow.from_dict(row.to_dict()) == row
    assert RunRow.from_dict({"run_id": "r", "thread_id": "t"}).cost_note is None  # rows written before


def test_import_run_journal_does_not_load_the_price_database() -> None:
    code = ("import sys, run_journal; from run_journal.usage import RunTally; "
            "print('genai_prices' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# -- journaled runs ----------------------------------------------------------------------------------
def answer(model: str, text: str = "hello", inputs: int = 1_000, outputs: int = 200,
           cache_read: int = 0) -> AIMessage:
    usage = {"input_tokens": inputs, "output_tokens": outputs, "total_tokens": inputs + outputs,
             "input_token_details": {"cache_read": cache_read}}
    return AIMessage(text, usage_metadata=usage, response_metadata={"model_name": model})


async def journal_one(store: Any, thread: str, model: str, pricing: PricingOption = None,
                      **usage: int) -> RunJournal:
    chat = GenericFakeChatModel(messages=iter([answer(model, **usage)]))
    async with RunJournal(store, thread_id=thread, pricing=pricing) as journal:
        await chat.ainvoke("hi", config={"callbacks": [journal]})
    return journal


async def test_a_run_is_priced_by_default_and_an_unknown_model_leaves_a_reason_on_the_row() -> None:
    async with open_store("memory://") as store:
        known = await journal_one(store, "known", "gpt-4o-2024-08-06", cache_read=400)
        unknown = await journal_one(store, "unknown", "my-model")
        off = await journal_one(store, "off", "gpt-4o", pricing=False)
        known_row, unknown_row, off_row = [await store.get_run(j.run_id) for j in (known, unknown, off)]
        assert known_row is not None
        assert unknown_row is not None
        assert off_row is not None
        expected = database_cost(tokens(1_000, 200, cache_read=400), "gpt-4o")
        assert known_row.cost_usd == pytest.approx(expected)
        assert known_row.cost_note is None
        (response,) = await store.list_events("known", event_types=["llm.ai.response"])
        assert response.metadata["cost_usd"] == pytest.approx(known_row.cost_usd)
        assert unknown_row.cost_usd is None
        assert unknown_row.cost_note is not None
        assert "'my-model'" in unknown_row.cost_note
        assert off_row.cost_usd is None
        assert off_row.cost_note == "pricing is off (pricing=False)"


def test_reprice_with_events_prices_each_call_and_keeps_known_costs() -> None:
    async def main() -> None:
        async with open_store("memory://") as store:
            journal = await journal_one(store, "t", "my-model", pricing=False)
            row = await store.get_run(journal.run_id)
            assert row is not None
            assert row.cost_usd is None
            events = await store.list_events("t")
            assert reprice_row(row, events).cost_usd is None  # still no price for my-model
            table = {"my-model": {"input": 1.0, "output": 2.0}}
            priced = reprice_row(row, events, table)
            assert priced.cost_usd == pytest.approx((1_000 * 1.0 + 200 * 2.0) / 1e6)
            assert priced.usage_by_caller["lead_agent"].cost_usd == priced.cost_usd
            assert priced.usage_by_model["my-model"].cost_usd == priced.cost_usd
            assert priced.cost_note is None
            assert reprice_row(priced, events).cost_usd == priced.cost_usd  # kept without the table
            assert reprice_row(priced, events, keep_known=False).cost_usd is None

    import asyncio

    asyncio.run(main())


def test_reprice_without_events_prices_the_rows_per_model_totals() -> None:
    usage = UsageTotals(input_tokens=3_000, output_tokens=600, total_tokens=3_600, cache_read_tokens=1_200,
                        llm_calls=3)
    row = RunRow(run_id="r", thread_id="t", status=RunStatus.SUCCESS,
                 started_at=datetime(2025, 6, 1, tzinfo=UTC),
                 usage=usage, usage_by_caller={"lead_agent": usage}, usage_by_model={"gpt-4o": usage},
                 cost_note="pricing is off (pricing=False)")
    priced = reprice_row(row, [])
    one_call = database_cost(tokens(1_000, 200, cache_read=400), "gpt-4o")
    assert priced.cost_usd == pytest.approx(3 * one_call)
    assert priced.usage_by_caller["lead_agent"].cost_usd == pytest.approx(3 * one_call)
    assert priced.cost_note is None
    two = row.replace(usage=usage + usage, usage_by_caller={"lead_agent": usage + usage},
                      usage_by_model={"gpt-4o": usage, "my-model": usage})
    repriced = reprice_row(two, [])
    assert repriced.cost_usd is None
    assert repriced.usage_by_model["gpt-4o"].cost_usd == pytest.approx(3 * one_call)
    assert repriced.cost_note is not None
    assert "'my-model'" in repriced.cost_note


# -- run-journal URL reprice -------------------------------------------------------------------------
@pytest.fixture(params=["sqlite", "postgres"])
def file_or_server_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return backend_url(request.param, request, tmp_path_factory)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RUN_JOURNAL, *args], capture_output=True, text=True, timeout=120, check=False)


async def test_the_reprice_command_fills_in_unknown_costs(file_or_server_url: str, tmp_path: Path) -> None:
    url = file_or_server_url
    async with open_store(url) as store:
        known = await journal_one(store, "a", "gpt-4o", pricing={"gpt-4o": {"input": 1.0, "output": 1.0}})
        old = await journal_one(store, "b", "claude-3-5-sonnet-latest", pricing=False, cache_read=300)
        mine = await journal_one(store, "b", "my-model")
    dry = cli(url, "reprice", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"run {old.run_id} (thread b): unknown -> $" in dry.stdout
    assert "repriced 3 run(s): 1 would change, 1 still unknown" in dry.stdout
    done = cli(url, "reprice", "--thread", "b")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "repriced 2 run(s): 1 changed, 1 still unknown"
    prices = tmp_path / "prices.json"
    prices.write_text('{"my-model": {"input": 10, "output": 20}}', encoding="utf-8")
    assert "repriced 0 run(s)" in cli(url, "reprice", "--since", "2999-01-01").stdout
    table = cli(url, "reprice", "--pricing", str(prices), "--since", "2020-01-01")
    assert table.stdout.splitlines()[-1] == "repriced 3 run(s): 1 changed, 0 still unknown", table.stdout
    async with open_store(url) as store:
        kept, filled, tabled = [await store.get_run(j.run_id) for j in (known, old, mine)]
    assert kept is not None
    assert filled is not None
    assert tabled is not None
    assert kept.cost_usd == pytest.approx(1_200 / 1e6)  # the table it was recorded with is kept
    claude = database_cost(tokens(1_000, 200, cache_read=300), "claude-3-5-sonnet")
    assert filled.cost_usd == pytest.approx(claude)
    assert tabled.cost_usd == pytest.approx((1_000 * 10 + 200 * 20) / 1e6)
    assert (tabled.cost_note, tabled.status) == (None, "success")
    unchanged = cli(url, "reprice")
    assert unchanged.stdout.splitlines()[-1] == "repriced 3 run(s): 0 changed, 0 still unknown"
    bad = cli(url, "reprice", "--since", "yesterday")
    assert bad.returncode == 2
    assert "not a date" in bad.stderr


CONTRADICTORY = [
    TokenUsage(1_000, 100, 1_100, cache_read_tokens=800, cache_creation_tokens=500),  # parts > input
    TokenUsage(1_000, 100, 1_100, cache_creation_tokens=300, cache_creation_1h_tokens=900),  # 1h > writes
    TokenUsage(1_000, 100, 1_100, reasoning_tokens=400, output_audio_tokens=50),  # reasoning > output
    TokenUsage(1_000, 100, 1_100, input_audio_tokens=2_000, output_audio_tokens=300),  # audio > totals
]


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "gpt-realtime", "gemini-2.5-pro"])
def test_contradictory_counts_are_reconciled_alike_by_the_rates_and_the_database(model: str) -> None:
    """Counts a provider got wrong are reconciled the same way on the fast path and on the database's."""
    from run_journal import prices

    found = prices.DEFAULT.find(model)
    assert isinstance(found, prices.Found)
    price = found.model.get_prices(datetime.now(UTC))
    rates = prices.DEFAULT.compiled(price)
    assert rates is not None
    for usage in CONTRADICTORY:
        expected = float(price.calc_price(prices.DEFAULT.usage_of(usage))["total_price"])
        assert rates.cost(usage) == pytest.approx(expected, rel=1e-9, abs=1e-15), usage
