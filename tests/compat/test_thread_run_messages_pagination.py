"""Port of DeerFlow's ``tests/test_thread_run_messages_pagination.py``: ``GET /api/threads/{tid}/runs/
{rid}/messages`` paging, a stored run's row, turn durations on the run and legacy thread lists, on
every backend. The four tests of cancelling, joining and streaming a live run are ported as what
this router does instead: it does not serve them (re-attaching to a live run belongs to a run
manager; docs/http.md)."""

from __future__ import annotations

import pytest

from run_journal import RunEventStore

from ._support import (
    THREAD,
    gateway,
    put_message,
    put_messages,
    put_row,
    record_turn,
    searches_then_answers,
    seqs,
)


def path(thread: str, run: str) -> str:
    return f"/api/threads/{thread}/runs/{run}/messages"


async def test_returns_paginated_envelope(store: RunEventStore) -> None:
    await put_messages(store, "run-1", 3)
    async with gateway(store) as client:
        response = await client.get(path(THREAD, "run-1"))
    assert response.status_code == 200
    body = response.json()
    assert body["has_more"] is False
    assert len(body["data"]) == 3


async def test_has_more_true_when_extra_row_returned(store: RunEventStore) -> None:
    await put_messages(store, "run-2", 51, thread="thread-2")
    async with gateway(store) as client:
        body = (await client.get(path("thread-2", "run-2"))).json()
    assert body["has_more"] is True
    assert len(body["data"]) == 50
    assert seqs(body["data"]) == list(range(2, 52))


@pytest.fixture
async def long_run(store: RunEventStore) -> RunEventStore:
    await put_messages(store, "run-2", 66, thread="thread-2")
    return store


async def test_default_page_keeps_newest_messages_when_extra_row_returned(
    long_run: RunEventStore,
) -> None:
    async with gateway(long_run) as client:
        body = (await client.get(path("thread-2", "run-2"))).json()
    assert body["has_more"] is True
    assert seqs(body["data"]) == list(range(17, 67))


async def test_before_seq_page_keeps_newest_side_when_extra_row_returned(long_run: RunEventStore) -> None:
    async with gateway(long_run) as client:
        body = (await client.get(path("thread-2", "run-2") + "?before_seq=18&limit=16")).json()
    assert body["has_more"] is True
    assert seqs(body["data"]) == list(range(2, 18))


async def test_after_seq_page_keeps_oldest_side_when_extra_row_returned(long_run: RunEventStore) -> None:
    async with gateway(long_run) as client:
        body = (await client.get(path("thread-2", "run-2") + "?after_seq=10")).json()
    assert body["has_more"] is True
    assert seqs(body["data"]) == list(range(11, 61))


async def test_after_seq_forwarded_to_event_store(long_run: RunEventStore) -> None:
    async with gateway(long_run) as client:
        body = (await client.get(path("thread-2", "run-2") + "?after_seq=5")).json()
    assert seqs(body["data"]) == list(range(6, 56))


async def test_before_seq_forwarded_to_event_store(long_run: RunEventStore) -> None:
    async with gateway(long_run) as client:
        body = (await client.get(path("thread-2", "run-2") + "?before_seq=10")).json()
    assert seqs(body["data"]) == list(range(1, 10))


async def test_custom_limit_forwarded_to_event_store(long_run: RunEventStore) -> None:
    async with gateway(long_run) as client:
        body = (await client.get(path("thread-2", "run-2") + "?limit=10")).json()
    assert seqs(body["data"]) == list(range(57, 67))
    assert body["has_more"] is True


async def test_empty_data_when_no_messages(store: RunEventStore) -> None:
    await store.put(thread_id="thread-6", run_id="run-6", event_type="run.start", category="trace")
    async with gateway(store) as client:
        known = (await client.get(path("thread-6", "run-6"))).json()
        unknown = (await client.get(path("thread-6", "no-such-run"))).json()
    assert known == {"data": [], "has_more": False}
    assert unknown == {"data": [], "has_more": False}  # as the gateway: no 404 for a run's messages


async def test_get_run_hydrates_store_only_run(store: RunEventStore) -> None:
    await put_row(store, "store-only-run", thread="thread-store", status="running")
    async with gateway(store) as client:
        response = await client.get("/api/threads/thread-store/runs/store-only-run")
        elsewhere = await client.get("/api/threads/other-thread/runs/store-only-run")
    assert response.status_code == 200
    body = response.json()
    assert body["run_id"] == "store-only-run"
    assert body["thread_id"] == "thread-store"
    assert body["status"] == "running"
    assert elsewhere.status_code == 404


async def test_cancel_store_only_run_returns_409(store: RunEventStore) -> None:
    """Deliberately different: the journal cannot stop a run, so there is no cancel endpoint."""
    await put_row(store, "store-only-run", thread="thread-store", status="running")
    async with gateway(store) as client:
        response = await client.post("/api/threads/thread-store/runs/store-only-run/cancel")
    assert response.status_code in {404, 405}


async def test_join_store_only_run_returns_409(store: RunEventStore) -> None:
    """Out of scope: joining a live run's stream is the run manager's (docs/http.md)."""
    await put_row(store, "store-only-run", thread="thread-store", status="running")
    async with gateway(store) as client:
        response = await client.get("/api/threads/thread-store/runs/store-only-run/join")
    assert response.status_code == 404


async def test_stream_store_only_run_returns_409(store: RunEventStore) -> None:
    """Out of scope, as above."""
    await put_row(store, "store-only-run", thread="thread-store", status="running")
    async with gateway(store) as client:
        response = await client.get("/api/threads/thread-store/runs/store-only-run/stream")
    assert response.status_code == 404


async def test_join_store_only_run_allowed_with_cross_process_bridge(store: RunEventStore) -> None:
    """Out of scope, as above: a finished run's record is served as rows and events instead."""
    run = await record_turn(store, "weather?", searches_then_answers("weather in Paris", "Sunny."))
    async with gateway(store) as client:
        join = await client.get(f"/api/threads/{THREAD}/runs/{run}/join")
        events = await client.get(f"/api/threads/{THREAD}/runs/{run}/events")
    assert join.status_code == 404
    assert events.json()[-1]["event_type"] == "run.end"


async def test_list_run_messages_injects_turn_duration_only_on_last_ai(store: RunEventStore) -> None:
    await put_message(store, "run-1", "human", "Hello")
    await put_message(store, "run-1", "ai", "Thinking...")
    await put_message(store, "run-1", "ai", "Response")
    await put_row(store, "run-1", seconds=5)
    async with gateway(store) as client:
        data = (await client.get(path(THREAD, "run-1"))).json()["data"]
    assert "turn_duration" not in data[0]["content"].get("additional_kwargs", {})
    assert "turn_duration" not in data[1]["content"].get("additional_kwargs", {})
    assert data[2]["content"]["additional_kwargs"]["turn_duration"] == 5


async def test_list_run_messages_turn_duration_skips_middleware_tail(store: RunEventStore) -> None:
    await put_message(store, "run-1", "ai", "Response")
    await put_message(store, "run-1", "ai", "Title", caller="middleware:title")
    await put_row(store, "run-1", seconds=5)
    async with gateway(store) as client:
        data = (await client.get(path(THREAD, "run-1"))).json()["data"]
    assert data[0]["content"]["additional_kwargs"]["turn_duration"] == 5
    assert "turn_duration" not in data[1]["content"].get("additional_kwargs", {})


async def test_list_thread_messages_injects_turn_duration_once_per_run(store: RunEventStore) -> None:
    await put_message(store, "run-1", "human", "Hello")
    await put_message(store, "run-1", "ai", "Before tools")
    await put_message(store, "run-1", "ai", "Final answer")
    await put_message(store, "run-2", "human", "Again")
    await put_message(store, "run-2", "ai", "Second answer")
    await put_row(store, "run-1", seconds=5)
    await put_row(store, "run-2", seconds=9)
    async with gateway(store) as client:
        data = (await client.get(f"/api/threads/{THREAD}/messages")).json()
    assert "turn_duration" not in data[0]["content"].get("additional_kwargs", {})
    assert "turn_duration" not in data[1]["content"].get("additional_kwargs", {})
    assert data[2]["content"]["additional_kwargs"]["turn_duration"] == 5
    assert "turn_duration" not in data[3]["content"].get("additional_kwargs", {})
    assert data[4]["content"]["additional_kwargs"]["turn_duration"] == 9


async def test_list_thread_messages_turn_duration_skips_middleware_tail(store: RunEventStore) -> None:
    await put_message(store, "run-1", "ai", "Response")
    await put_message(store, "run-1", "ai", "Title", caller="middleware:title")
    await put_row(store, "run-1", seconds=5)
    async with gateway(store) as client:
        data = (await client.get(f"/api/threads/{THREAD}/messages")).json()
    assert data[0]["content"]["additional_kwargs"]["turn_duration"] == 5
    assert "turn_duration" not in data[1]["content"].get("additional_kwargs", {})
    assert data[1]["metadata"]["caller"] == "middleware:title"  # the legacy list keeps such rows
