"""``GET /api/threads/{thread}/compare?a=&b=`` on every backend: two runs of a thread through
``compare_runs``, the first divergence and the deltas, scoped by user like every read."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the HTTP API needs the serve extra")
httpx = pytest.importorskip("httpx", reason="the HTTP tests need httpx (dev extra)")

from test_http import T, a_turn, ev, row  # noqa: E402  (the HTTP tests' run builders)

from run_journal import RunEventStore  # noqa: E402
from run_journal.http import create_app  # noqa: E402


def same_turn(run: str, *, user: str | None = None, second: float = 0) -> list[Any]:
    """``a_turn`` with the same question and answer whatever the run."""
    events = a_turn(run, user=user, second=second)
    events[1] = ev(run, "llm.human.input", "message", {"type": "human", "content": "where is my order?"},
                   user=user, second=second + 0.1)
    events[5] = ev(run, "llm.ai.response", "message", {"type": "ai", "content": "it ships Friday"},
                   user=user, second=second + 0.5)
    return events


def another_tool(run: str, *, user: str | None = None, second: float = 0) -> list[Any]:
    """``same_turn`` whose tool is ``lookup`` instead of ``search``, with more tokens."""
    events = same_turn(run, user=user, second=second)
    ai = {"type": "ai", "content": "looking", "tool_calls": [{"name": "lookup", "args": {}, "id": "c1"}]}
    events[2] = ev(run, "llm.ai.response", "message", ai, user=user, second=second + 0.2,
                   usage={"input_tokens": 30, "output_tokens": 5}, model_name="gpt-a")
    events[3] = ev(run, "tool.call", "trace",
                   {"tool_call_id": "c1", "tool_name": "lookup", "args_preview": "{}"},
                   user=user, second=second + 0.3, tool_call_id="c1")
    events[4] = ev(run, "tool.outcome", "trace", {"tool_call_id": "c1", "tool_name": "lookup",
                                                  "outcome": "success", "result_size": 3},
                   user=user, second=second + 0.4, tool_call_id="c1")
    return events


async def test_two_runs_of_a_thread_compared_with_their_first_divergence(store: RunEventStore) -> None:
    await store.put_batch(same_turn("base", user="ann") + another_tool("changed", user="ann", second=10)
                          + same_turn("again", user="ann", second=20))
    for run, second in (("base", 0), ("changed", 10), ("again", 20)):
        await store.put_run(row(run, user="ann", second=second))
    transport = httpx.ASGITransport(app=create_app(store))
    async with httpx.AsyncClient(transport=transport, base_url="http://journal") as client:
        found = await client.get(f"/api/threads/{T}/compare", params={"a": "base", "b": "changed"})
        assert found.status_code == 200, found.text
        body = found.json()
        assert body["same"] is False
        assert body["a"]["run_id"] == "base"
        assert body["b"]["run_id"] == "changed"
        divergence = body["divergence"]
        assert divergence["kind"] in {"model_call", "tool_call"}
        assert divergence["a_seq"] == 3
        assert divergence["b_seq"] == 10
        assert "search" in body["summary"]
        assert "lookup" in body["summary"]
        assert set(body["deltas"]) >= {"model_calls", "tool_calls", "total_tokens", "cost_usd", "duration_ms"}
        assert any(pair["a"] is None or pair["b"] is None or pair["differences"] for pair in body["steps"])
        same = (await client.get(f"/api/threads/{T}/compare", params={"a": "base", "b": "again"})).json()
        assert same["same"] is True
        assert same["divergence"] is None
        missing = await client.get(f"/api/threads/{T}/compare", params={"a": "base", "b": "nope"})
        assert missing.status_code == 404
        assert missing.json()["error"] == "not_found"
        assert (await client.get(f"/api/threads/{T}/compare", params={"a": "base"})).status_code == 400
        bad = await client.get(f"/api/threads/{T}/compare", params={"a": "base", "b": "../x"})
        assert bad.status_code == 400
    scoped = httpx.ASGITransport(app=create_app(store, user_header="X-User"))
    async with httpx.AsyncClient(transport=scoped, base_url="http://journal") as client:
        params = {"a": "base", "b": "changed"}
        assert (await client.get(f"/api/threads/{T}/compare", params=params,
                                 headers={"X-User": "ann"})).status_code == 200
        assert (await client.get(f"/api/threads/{T}/compare", params=params,
                                 headers={"X-User": "bob"})).status_code == 404
