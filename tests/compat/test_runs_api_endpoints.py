"""Port of DeerFlow's ``tests/test_runs_api_endpoints.py``: the stateless ``GET /api/runs/{run_id}/
messages`` and ``GET /api/runs/{run_id}/feedback``, on every backend.

The originals fed a mocked event store and asserted the arguments it received; here the rows are in a
real store and each test asserts the rows that come back, which is what those arguments decide. Not
ported: the three tests of run creation (``_resolve_thread_id``, ``RunCreateRequest``,
``build_run_config``): starting runs is the gateway's run manager, not a journal (docs/http.md).
"""

from __future__ import annotations

import pytest

from run_journal import RunEventStore
from run_journal.checks import record_score

from ._support import gateway, put_messages, put_row, seqs


async def test_run_messages_returns_envelope(store: RunEventStore) -> None:
    await put_row(store, "run-1")
    await put_messages(store, "run-1", 3)
    async with gateway(store) as client:
        response = await client.get("/api/runs/run-1/messages")
    assert response.status_code == 200
    body = response.json()
    assert body["has_more"] is False
    assert len(body["data"]) == 3


async def test_run_messages_404_when_run_not_found(store: RunEventStore) -> None:
    async with gateway(store) as client:
        response = await client.get("/api/runs/missing-run/messages")
    assert response.status_code == 404
    assert "missing-run" in response.json()["detail"]


async def test_run_messages_has_more_true_when_extra_row_returned(store: RunEventStore) -> None:
    await put_row(store, "run-2", thread="thread-2")
    await put_messages(store, "run-2", 51, thread="thread-2")
    async with gateway(store) as client:
        body = (await client.get("/api/runs/run-2/messages")).json()
    assert body["has_more"] is True
    assert len(body["data"]) == 50  # trimmed to the default limit
    assert seqs(body["data"]) == list(range(2, 52))


@pytest.fixture
async def long_run(store: RunEventStore) -> RunEventStore:
    """A run of 66 messages: seq 1 to 66."""
    await put_row(store, "run-2", thread="thread-2")
    await put_messages(store, "run-2", 66, thread="thread-2")
    return store


async def test_run_messages_default_page_keeps_newest_messages_when_extra_row_returned(
    long_run: RunEventStore,
) -> None:
    async with gateway(long_run) as client:
        body = (await client.get("/api/runs/run-2/messages")).json()
    assert body["has_more"] is True
    assert seqs(body["data"]) == list(range(17, 67))  # the older sentinel row is the one dropped


async def test_run_messages_before_seq_page_keeps_newest_side_when_extra_row_returned(
    long_run: RunEventStore,
) -> None:
    async with gateway(long_run) as client:
        body = (await client.get("/api/runs/run-2/messages?before_seq=18&limit=16")).json()
    assert body["has_more"] is True
    assert seqs(body["data"]) == list(range(2, 18))  # adjacent pages meet without a gap


async def test_run_messages_after_seq_page_keeps_oldest_side_when_extra_row_returned(
    long_run: RunEventStore,
) -> None:
    async with gateway(long_run) as client:
        body = (await client.get("/api/runs/run-2/messages?after_seq=10")).json()
    assert body["has_more"] is True
    assert seqs(body["data"]) == list(range(11, 61))


async def test_run_messages_passes_after_seq_to_event_store(long_run: RunEventStore) -> None:
    async with gateway(long_run) as client:
        response = await client.get("/api/runs/run-2/messages?after_seq=5")
    assert response.status_code == 200
    assert seqs(response.json()["data"]) == list(range(6, 56))  # above the cursor, default limit


async def test_run_messages_respects_custom_limit(long_run: RunEventStore) -> None:
    async with gateway(long_run) as client:
        page = await client.get("/api/runs/run-2/messages?limit=10")
        over = await client.get("/api/runs/run-2/messages?limit=201")
    assert seqs(page.json()["data"]) == list(range(57, 67))
    assert over.status_code == 422  # capped at 200


async def test_run_messages_passes_before_seq_to_event_store(long_run: RunEventStore) -> None:
    async with gateway(long_run) as client:
        response = await client.get("/api/runs/run-2/messages?before_seq=10")
    assert response.status_code == 200
    assert seqs(response.json()["data"]) == list(range(1, 10))
    assert response.json()["has_more"] is False


@pytest.mark.parametrize("cursor", ["before_seq", "after_seq"])
@pytest.mark.parametrize("value", [0, -1])
async def test_run_messages_rejects_non_positive_seq_cursors(
    store: RunEventStore, cursor: str, value: int
) -> None:
    await put_row(store, "run-6", thread="thread-6")
    async with gateway(store) as client:
        response = await client.get("/api/runs/run-6/messages", params={cursor: value})
    assert response.status_code == 422


async def test_run_messages_empty_data(store: RunEventStore) -> None:
    await put_row(store, "run-6", thread="thread-6")
    await store.put(thread_id="thread-6", run_id="run-6", event_type="run.start", category="trace")
    async with gateway(store) as client:
        body = (await client.get("/api/runs/run-6/messages")).json()
    assert body["data"] == []
    assert body["has_more"] is False


class TestRunFeedback:
    async def test_returns_list_of_feedback_dicts(self, store: RunEventStore) -> None:
        await put_row(store, "run-fb-1", thread="thread-fb-1")
        for value in ("up", True, -1):
            await record_score(store, "thread-fb-1", "run-fb-1", "feedback", value, source="human")
        await record_score(store, "thread-fb-1", "run-fb-1", "helpfulness", 0.9)  # not feedback
        async with gateway(store) as client:
            response = await client.get("/api/runs/run-fb-1/feedback")
        assert response.status_code == 200
        body = response.json()
        assert isinstance(body, list)
        assert [row["rating"] for row in body] == [1, 1, -1]
        assert {row["run_id"] for row in body} == {"run-fb-1"}

    async def test_404_when_run_not_found(self, store: RunEventStore) -> None:
        async with gateway(store) as client:
            response = await client.get("/api/runs/missing-run/feedback")
        assert response.status_code == 404
        assert "missing-run" in response.json()["detail"]

    async def test_empty_list_when_no_feedback(self, store: RunEventStore) -> None:
        await put_row(store, "run-fb-2", thread="thread-fb-2")
        async with gateway(store) as client:
            response = await client.get("/api/runs/run-fb-2/feedback")
        assert response.status_code == 200
        assert response.json() == []

    async def test_503_when_feedback_repo_not_configured(self, store: RunEventStore) -> None:
        """Deliberately different: feedback is a score in the journal itself, so there is no separate
        repository that can be missing; the endpoint answers from the store (docs/http.md). What
        stays is the 503 when the storage fails: here the store is closed under the server."""
        await put_row(store, "run-fb-3", thread="thread-fb-3")
        async with gateway(store) as client:
            assert (await client.get("/api/runs/run-fb-3/feedback")).json() == []
            await store.aclose()
            response = await client.get("/api/runs/run-fb-3/feedback")
        assert response.status_code == 503
