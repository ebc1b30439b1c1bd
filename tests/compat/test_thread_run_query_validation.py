"""Port of DeerFlow's ``tests/test_thread_run_query_validation.py``: the query bounds of the thread
message and run event reads, on every backend (422 for a limit or cursor below 1)."""

from __future__ import annotations

import pytest

from run_journal import RunEventStore

from ._support import gateway, put_message, put_row


@pytest.mark.parametrize(
    ("path", "limit"),
    [
        ("/api/threads/thread-1/messages", 0),
        ("/api/threads/thread-1/messages", -1),
        ("/api/threads/thread-1/runs/run-1/events", 0),
        ("/api/threads/thread-1/runs/run-1/events", -1),
    ],
)
async def test_read_endpoints_reject_non_positive_limits(
    store: RunEventStore, path: str, limit: int
) -> None:
    async with gateway(store) as client:
        response = await client.get(path, params={"limit": limit})
    assert response.status_code == 422


@pytest.mark.parametrize(
    ("path", "cursor"),
    [
        ("/api/threads/thread-1/messages", "before_seq"),
        ("/api/threads/thread-1/messages", "after_seq"),
        ("/api/threads/thread-1/runs/run-1/messages", "before_seq"),
        ("/api/threads/thread-1/runs/run-1/messages", "after_seq"),
        ("/api/threads/thread-1/runs/run-1/events", "after_seq"),
    ],
)
@pytest.mark.parametrize("value", [0, -1])
async def test_read_endpoints_reject_non_positive_seq_cursors(
    store: RunEventStore, path: str, cursor: str, value: int
) -> None:
    async with gateway(store) as client:
        response = await client.get(path, params={cursor: value})
    assert response.status_code == 422


async def test_read_endpoints_accept_positive_limits_and_hit_store(store: RunEventStore) -> None:
    await put_row(store, "run-1")
    await put_message(store, "run-1", "human", "h1")
    await put_message(store, "run-1", "human", "h2")
    async with gateway(store) as client:
        thread_messages = await client.get("/api/threads/thread-1/messages", params={"limit": 1})
        run_messages = await client.get("/api/threads/thread-1/runs/run-1/messages", params={"limit": 1})
        run_events = await client.get("/api/threads/thread-1/runs/run-1/events", params={"limit": 1})
        most = await client.get("/api/threads/thread-1/runs/run-1/events", params={"limit": 2000})
        too_many = await client.get("/api/threads/thread-1/runs/run-1/events", params={"limit": 2001})
    assert thread_messages.status_code == 200
    assert run_messages.status_code == 200
    assert run_events.status_code == 200
    assert [row["content"]["id"] for row in thread_messages.json()] == ["h2"]  # the newest
    assert [row["content"]["id"] for row in run_messages.json()["data"]] == ["h2"]
    assert run_messages.json()["has_more"] is True
    assert [row["content"]["id"] for row in run_events.json()] == ["h1"]  # events read forwards
    assert most.status_code == 200
    assert len(most.json()) == 2
    assert too_many.status_code == 422
