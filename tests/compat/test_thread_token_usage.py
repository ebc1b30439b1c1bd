"""Port of DeerFlow's ``tests/test_thread_token_usage.py``: ``GET /api/threads/{thread_id}/token-usage``
and its context-window usage, on every backend. Totals come from the run rows (as the gateway's
``aggregate_tokens_by_thread``); the context in use is the thread's latest model call (its prompt and
reply tokens, as the provider counted them) where the gateway counted its checkpoint's messages
approximately; the window comes from ``context_windows=`` where it came from the gateway's model
config (docs/http.md)."""

from __future__ import annotations

from typing import Any

from run_journal import RunEventStore, UsageTotals
from run_journal.http.compat_views import context_usage_payload

from ._support import THREAD, gateway, put_message, put_row, record_turn, searches_then_answers


def tokens(total: int, tokens_in: int = 0, calls: int = 1) -> UsageTotals:
    return UsageTotals(input_tokens=tokens_in, output_tokens=total - tokens_in, total_tokens=total,
                       llm_calls=calls)


def aggregate_result() -> dict[str, Any]:
    return {
        "total_tokens": 150, "total_input_tokens": 90, "total_output_tokens": 60, "total_runs": 2,
        "by_model": {"unknown": {"tokens": 150, "runs": 2}},
        "by_caller": {"lead_agent": 120, "subagent": 25, "middleware": 5},
    }


async def two_runs(store: RunEventStore) -> None:
    await put_row(store, "run-a", seconds=3, usage=tokens(100, 60),
                  usage_by_model={"unknown": tokens(100, 60)},
                  usage_by_caller={"lead_agent": tokens(80), "subagent:research": tokens(15),
                                   "middleware:title": tokens(5)})
    await put_row(store, "run-b", seconds=3, usage=tokens(50, 30),
                  usage_by_model={"unknown": tokens(50, 30)},
                  usage_by_caller={"agent:writer": tokens(40), "subagent:research": tokens(10)})


async def model_call(store: RunEventStore, run_id: str, model: str, tokens_in: int,
                     tokens_out: int) -> None:
    await store.put(thread_id=THREAD, run_id=run_id, event_type="llm.ai.response", category="message",
                    content={"type": "ai", "content": "answer"},
                    metadata={"caller": "lead_agent", "model_name": model,
                              "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out}})


async def test_thread_token_usage_returns_stable_shape(store: RunEventStore) -> None:
    await two_runs(store)
    async with gateway(store) as client:
        response = await client.get(f"/api/threads/{THREAD}/token-usage")
    assert response.status_code == 200
    assert response.json() == {"thread_id": THREAD, **aggregate_result(), "context_usage": None}


async def test_thread_token_usage_can_include_active_runs(store: RunEventStore) -> None:
    await two_runs(store)
    await put_row(store, "run-live", status="running", usage=tokens(10, 4),
                  usage_by_model={"unknown": tokens(10, 4)}, usage_by_caller={"lead_agent": tokens(10)})
    async with gateway(store) as client:
        ended = (await client.get(f"/api/threads/{THREAD}/token-usage")).json()
        active = (await client.get(f"/api/threads/{THREAD}/token-usage?include_active=true")).json()
    assert ended["total_tokens"] == 150
    assert ended["total_runs"] == 2
    assert active["total_tokens"] == 160
    assert active["total_runs"] == 3
    assert active["by_model"] == {"unknown": {"tokens": 160, "runs": 3}}


async def test_thread_token_usage_serializes_context_percentage(store: RunEventStore) -> None:
    await put_row(store, "run-1")
    await model_call(store, "run-1", "m", 300, 50)
    async with gateway(store, context_windows={"m": 1000}) as client:
        body = (await client.get(f"/api/threads/{THREAD}/token-usage")).json()
    assert body["context_usage"] == {"token_count": 350, "max_context_tokens": 1000, "percentage": 35.0}


def test_build_context_usage_payload_computes_percentage() -> None:
    assert context_usage_payload(350, 1000) == {
        "token_count": 350, "max_context_tokens": 1000, "percentage": 35.0}


def test_build_context_usage_payload_handles_unknown_capacity() -> None:
    assert context_usage_payload(350, None) == {
        "token_count": 350, "max_context_tokens": None, "percentage": None}


async def test_resolve_thread_model_prefers_latest_run(store: RunEventStore) -> None:
    await put_row(store, "run-old")
    await model_call(store, "run-old", "fallback-model", 90, 10)
    await put_row(store, "run-new")
    await model_call(store, "run-new", "thread-model", 180, 20)
    windows = {"fallback-model": 100, "thread-model": 1000}
    async with gateway(store, context_windows=windows) as client:
        body = (await client.get(f"/api/threads/{THREAD}/token-usage")).json()
    assert body["context_usage"] == {"token_count": 200, "max_context_tokens": 1000, "percentage": 20.0}


async def test_resolve_thread_model_falls_back_to_first_configured_model(store: RunEventStore) -> None:
    """Deliberately different: there is no model config to fall back on; a model without a known
    window still reports its token count, with no capacity or percentage."""
    await put_row(store, "run-1")
    await model_call(store, "run-1", "unlisted-model", 90, 10)
    async with gateway(store, context_windows={"fallback-model": 1000}) as client:
        body = (await client.get(f"/api/threads/{THREAD}/token-usage")).json()
    assert body["context_usage"] == {"token_count": 100, "max_context_tokens": None, "percentage": None}


async def test_build_context_usage_counts_materialized_messages(store: RunEventStore) -> None:
    """A real run: the latest model call's prompt and reply (40 + 12 tokens, as the scripted
    provider reports them) is the context the next call starts from."""
    await record_turn(store, "weather?", searches_then_answers("weather in Paris", "Sunny."))
    async with gateway(store, context_windows={"fake-gpt": 1000}) as client:
        body = (await client.get(f"/api/threads/{THREAD}/token-usage")).json()
    assert body["context_usage"] == {"token_count": 52, "max_context_tokens": 1000, "percentage": 5.2}
    assert body["total_tokens"] == 104  # two calls
    assert body["by_model"] == {"fake-gpt": {"tokens": 104, "runs": 1}}


async def test_build_context_usage_returns_none_when_checkpoint_read_fails(store: RunEventStore) -> None:
    """Translated: with no model call that reported usage there is nothing to measure, so
    ``context_usage`` is None (the gateway's answer when it could not read a checkpoint)."""
    await put_row(store, "run-1")
    await put_message(store, "run-1", "human", "hello")
    async with gateway(store, context_windows={"fake-gpt": 1000}) as client:
        body = (await client.get(f"/api/threads/{THREAD}/token-usage")).json()
        unknown = (await client.get("/api/threads/no-such-thread/token-usage")).json()
    assert body["context_usage"] is None
    assert unknown == {"thread_id": "no-such-thread", "total_tokens": 0, "total_input_tokens": 0,
                       "total_output_tokens": 0, "total_runs": 0, "by_model": {},
                       "by_caller": {"lead_agent": 0, "subagent": 0, "middleware": 0},
                       "context_usage": None}
