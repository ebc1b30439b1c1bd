"""Port of DeerFlow's ``tests/test_thread_messages_page.py``: thread history
(``GET /api/threads/{thread_id}/messages/page``) and the legacy ``GET .../messages`` list, on every
backend. Superseded runs come from what the gateway puts in a run's metadata (``regenerate_from_run_id``,
``replay_kind``), which the journal records in the run's ``run.start``; the originals stubbed the run
manager that answers the same question.
"""

from __future__ import annotations

from typing import Any

import pytest

from run_journal import RunEvent, RunEventStore
from run_journal.checks import record_score
from run_journal.projections import HISTORY_CHUNK_MIN

from ._support import (
    THREAD,
    answers,
    fails,
    gateway,
    put_message,
    put_row,
    record_turn,
    seqs,
)


class CountingStore:
    """Delegates to a real store and counts its ``list_messages`` calls."""

    def __init__(self, inner: RunEventStore) -> None:
        self.inner = inner
        self.calls = 0

    async def list_messages(self, *args: Any, **kwargs: Any) -> list[RunEvent]:
        self.calls += 1
        return await self.inner.list_messages(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def start(store: RunEventStore, run_id: str, status: str = "success", **run_metadata: Any) -> None:
    """What a gateway run leaves besides its messages: its ``run.start`` (with the run's metadata)
    and its row."""
    await store.put(thread_id=THREAD, run_id=run_id, event_type="run.start", category="trace",
                    metadata={"caller": "lead_agent", "run_metadata": run_metadata})
    await put_row(store, run_id, status=status)


def ids(rows: list[dict[str, Any]]) -> list[str]:
    return [row["content"]["id"] for row in rows]


async def test_thread_page_orders_across_runs_and_paginates_without_gaps(store: RunEventStore) -> None:
    for index in range(1, 7):
        await put_message(store, f"run-{(index + 1) // 2}", "human" if index % 2 else "ai", f"m-{index}")
    async with gateway(store) as client:
        latest = (await client.get(f"/api/threads/{THREAD}/messages/page?limit=3")).json()
        older = (await client.get(f"/api/threads/{THREAD}/messages/page?limit=3&before_seq=4")).json()
    assert seqs(latest["data"]) == [4, 5, 6]
    assert latest["has_more"] is True
    assert latest["next_before_seq"] == 4
    assert seqs(older["data"]) == [1, 2, 3]
    assert older["has_more"] is False
    assert older["next_before_seq"] is None


@pytest.mark.parametrize("caller", ["middleware:title", "subagent:general-purpose"])
async def test_thread_page_scans_past_internal_ai_chunks_to_fill_visible_page(
    store: RunEventStore, caller: str
) -> None:
    internal = HISTORY_CHUNK_MIN + 3  # more hidden rows than the first read takes
    await put_message(store, "run-1", "human", "visible-old")
    for index in range(internal):
        await put_message(store, "run-1", "ai", f"internal-{index}", caller=caller)
    await put_message(store, "run-2", "human", "visible-new-human")
    await put_message(store, "run-2", "ai", "visible-new-ai")
    async with gateway(store) as client:
        body = (await client.get(f"/api/threads/{THREAD}/messages/page?limit=2")).json()
    assert seqs(body["data"]) == [internal + 2, internal + 3]
    assert body["has_more"] is True  # visible-old, past the hidden rows, proves it
    assert body["next_before_seq"] == internal + 2


async def test_thread_page_hides_subagent_ai_but_keeps_root_task_result(store: RunEventStore) -> None:
    await put_message(store, "run-1", "human", "user-prompt")
    await put_message(store, "run-1", "ai", "lead-task-call", content="",
                      tool_calls=[{"id": "task-0", "name": "task", "args": {}}])
    await put_message(store, "run-1", "ai", "internal-subagent-answer", caller="subagent:general-purpose")
    await put_message(store, "run-1", "tool", "root-task-result", caller="lead_agent",
                      tool_call_id="task-0", content="Task Succeeded. Result: poem",
                      additional_kwargs={"subagent_status": "completed"})
    await put_message(store, "run-1", "ai", "lead-final-answer")
    async with gateway(store) as client:
        response = await client.get(f"/api/threads/{THREAD}/messages/page")
    assert response.status_code == 200
    assert ids(response.json()["data"]) == [
        "user-prompt", "lead-task-call", "root-task-result", "lead-final-answer"]


async def test_thread_page_scans_large_middleware_only_region_with_production_batch_size(
    store: RunEventStore,
) -> None:
    """The original counted 3 reads of 201 rows; ours grow from 32 rows and double, so the same
    402-row hidden region takes at most 5 reads (docs/http.md)."""
    await put_message(store, "run-old", "human", "visible-old")
    await store.put_batch([
        {"thread_id": THREAD, "run_id": "run-middle", "event_type": "llm.ai.response",
         "category": "message", "metadata": {"caller": "middleware:title"},
         "content": {"type": "ai", "id": f"middleware-{index}", "content": "title"}}
        for index in range(402)
    ])
    await put_message(store, "run-new", "human", "visible-new-human")
    await put_message(store, "run-new", "ai", "visible-new-ai")
    counting = CountingStore(store)
    async with gateway(counting) as client:  # type: ignore[arg-type]  # delegates to the store
        response = await client.get(f"/api/threads/{THREAD}/messages/page?limit=2")
    body = response.json()
    assert response.status_code == 200
    assert seqs(body["data"]) == [404, 405]
    assert body["has_more"] is True
    assert body["next_before_seq"] == 404
    assert counting.calls <= 5  # 32 + 64 + 128 + 256 rows reach the old visible row


async def test_thread_page_filters_all_successfully_superseded_runs_before_filling(
    store: RunEventStore,
) -> None:
    """Real runs: two answers, each regenerated by the next (the gateway's metadata on the run)."""
    first = await record_turn(store, "a poem", answers("answer-a"))
    second = await record_turn(store, "a poem", answers("answer-b"),
                               metadata={"regenerate_from_run_id": first})
    third = await record_turn(store, "a poem", answers("answer-c"),
                              metadata={"regenerate_from_run_id": second})
    async with gateway(store) as client:
        body = (await client.get(f"/api/threads/{THREAD}/messages/page?limit=2")).json()
    assert {row["run_id"] for row in body["data"]} == {third}
    assert [row["content"]["content"] for row in body["data"]] == ["a poem", "answer-c"]
    assert body["has_more"] is False
    assert body["next_before_seq"] is None


async def test_thread_page_a_failed_regeneration_supersedes_nothing(store: RunEventStore) -> None:
    """The other half of the rule above: only a successful regeneration hides its source."""
    first = await record_turn(store, "a poem", answers("answer-a"))
    failed = await record_turn(store, "a poem", fails(), metadata={"regenerate_from_run_id": first})
    assert (await store.get_run(failed)).status == "error"  # type: ignore[union-attr]
    async with gateway(store) as client:
        body = (await client.get(f"/api/threads/{THREAD}/messages/page")).json()
    assert first in {row["run_id"] for row in body["data"]}


async def test_thread_page_applies_edit_replay_visibility_before_filling(store: RunEventStore) -> None:
    await start(store, "source-success")
    await start(store, "edit-success", regenerate_from_run_id="source-success", replay_kind="edit")
    await start(store, "source-failed")
    await start(store, "edit-failed", "error", regenerate_from_run_id="source-failed",
                replay_kind="edit")
    for run in ("source-success", "edit-success", "source-failed", "edit-failed"):
        await put_message(store, run, "ai", f"{run}-answer")
    async with gateway(store) as client:
        body = (await client.get(f"/api/threads/{THREAD}/messages/page?limit=4")).json()
    assert [row["run_id"] for row in body["data"]] == ["edit-success", "source-failed"]
    assert body["has_more"] is False
    assert body["next_before_seq"] is None


async def test_legacy_thread_messages_apply_regenerate_and_edit_replay_visibility(
    store: RunEventStore,
) -> None:
    await start(store, "regen-source")
    await start(store, "regen", regenerate_from_run_id="regen-source")
    await start(store, "source-success")
    await start(store, "edit-success", regenerate_from_run_id="source-success", replay_kind="edit")
    await start(store, "source-failed")
    await start(store, "edit-failed", "interrupted", regenerate_from_run_id="source-failed",
                replay_kind="edit")
    for run in ("regen-source", "source-success", "edit-success", "source-failed", "edit-failed"):
        await put_message(store, run, "ai", f"{run}-answer")
    async with gateway(store) as client:
        response = await client.get(f"/api/threads/{THREAD}/messages?limit=5")
    assert [row["run_id"] for row in response.json()] == ["edit-success", "source-failed"]


async def test_legacy_thread_messages_applies_limit_after_visibility_filtering(
    store: RunEventStore,
) -> None:
    for run in ("visible-old-1", "visible-old-2", "hidden-new-1", "hidden-new-2"):
        await put_message(store, run, "ai", f"{run}-answer")
    await start(store, "regen-1", regenerate_from_run_id="hidden-new-1")
    await start(store, "regen-2", regenerate_from_run_id="hidden-new-2")
    async with gateway(store) as client:
        response = await client.get(f"/api/threads/{THREAD}/messages?limit=2")
    assert response.status_code == 200
    assert [row["run_id"] for row in response.json()] == ["visible-old-1", "visible-old-2"]


async def test_thread_page_keeps_earlier_branch_turns_when_the_last_one_is_regenerated(
    store: RunEventStore,
) -> None:
    """A branched thread's seeded history keeps one run per turn, so regenerating the inherited last
    answer hides that turn only (the original seeded it with the gateway's branch helper; here
    each seeded turn is its own journaled run)."""
    await record_turn(store, "turn one", answers("answer one"))
    seeded = await record_turn(store, "turn two", answers("answer two"))
    await record_turn(store, "turn two", answers("answer two, again"),
                      metadata={"regenerate_from_run_id": seeded})
    async with gateway(store) as client:
        body = (await client.get(f"/api/threads/{THREAD}/messages/page?limit=50")).json()
    texts = [row["content"]["content"] for row in body["data"]]
    assert texts == ["turn one", "answer one", "turn two", "answer two, again"]


async def test_thread_page_logs_rows_missing_sequence_values(store: RunEventStore) -> None:
    """Deliberately different: the gateway logged and failed on a stored row without a seq; ours
    cannot hold one (the store assigns every seq, dense from 1), so the test checks the property the
    frontend's page parser enforces instead: every row has a positive integer seq, none repeated."""
    for index in range(30):
        await put_message(store, f"run-{index // 4}", "human" if index % 2 else "ai", f"m-{index}")
    async with gateway(store) as client:
        rows: list[dict[str, Any]] = []
        cursor: int | None = None
        while True:
            params = {"limit": 7, **({"before_seq": cursor} if cursor else {})}
            body = (await client.get(f"/api/threads/{THREAD}/messages/page", params=params)).json()
            rows = body["data"] + rows
            if not body["has_more"]:
                break
            cursor = body["next_before_seq"]
    assert all(isinstance(row["seq"], int) and row["seq"] >= 1 for row in rows)
    assert seqs(rows) == list(range(1, 31))


async def test_thread_page_logs_when_scan_cursor_does_not_advance(store: RunEventStore) -> None:
    """Deliberately different, as above: seqs are unique, so a cursor always advances. What stays
    is the guarantee: each next page's cursor is strictly older and the walk ends."""
    for index in range(12):
        await put_message(store, "run-1", "ai", f"m-{index}")
    cursors: list[int] = []
    async with gateway(store) as client:
        cursor: int | None = 10
        while cursor is not None:
            body = (await client.get(f"/api/threads/{THREAD}/messages/page",
                                     params={"limit": 2, "before_seq": cursor})).json()
            assert all(row["seq"] < cursor for row in body["data"])
            cursor = body["next_before_seq"]
            if cursor is not None:
                cursors.append(cursor)
    assert cursors == sorted(cursors, reverse=True)
    assert len(set(cursors)) == len(cursors) == 4


async def test_thread_page_feedback_only_attaches_to_global_last_ai_row(store: RunEventStore) -> None:
    await put_row(store, "run-1", user="alice")
    await put_message(store, "run-1", "ai", "draft", user="alice")
    await put_message(store, "run-1", "human", "follow-up", user="alice")
    await put_message(store, "run-1", "ai", "final", user="alice")
    score = await record_score(store, THREAD, "run-1", "feedback", 1, comment="good", source="human",
                               metadata={"rated_by": "alice"})
    async with gateway(store, user_header="X-User", headers={"X-User": "alice"}) as client:
        data = (await client.get(f"/api/threads/{THREAD}/messages/page?limit=3")).json()["data"]
        first = (await client.get(f"/api/threads/{THREAD}/messages/page?limit=1&before_seq=3")
                 ).json()["data"]
    assert data[0]["feedback"] is None
    assert data[1]["feedback"] is None
    assert data[2]["feedback"] == {"feedback_id": score.event_id, "rating": 1, "comment": "good"}
    assert first[0]["content"]["id"] == "follow-up"
    assert first[0]["feedback"] is None  # a page without the run's last AI row shows none


async def test_thread_page_helpers_forward_explicit_user_without_request_context(
    store: RunEventStore,
) -> None:
    """The scan and the enrichment read as the same user: a scoped page holds that user's rows and
    feedback only (the original checked the user id passed to each helper)."""
    await put_row(store, "run-a", user="alice")
    await put_row(store, "run-b", user="bob")
    await put_message(store, "run-a", "ai", "for alice", user="alice")
    await put_message(store, "run-b", "ai", "for bob", user="bob")
    await record_score(store, THREAD, "run-a", "feedback", 1, source="human",
                       metadata={"rated_by": "alice"})
    await record_score(store, THREAD, "run-b", "feedback", -1, source="human",
                       metadata={"rated_by": "bob"})
    async with gateway(store, user_header="X-User", headers={"X-User": "alice"}) as client:
        data = (await client.get(f"/api/threads/{THREAD}/messages/page")).json()["data"]
    assert ids(data) == ["for alice"]
    assert data[0]["feedback"]["rating"] == 1


async def test_thread_page_scan_rejects_any_row_without_sequence() -> None:
    """Deliberately different (see above): a record without a seq is refused when it is made."""
    with pytest.raises((TypeError, ValueError)):
        RunEvent.from_dict({"thread_id": THREAD, "run_id": "run-1", "seq": None,
                            "event_type": "llm.ai.response", "category": "message",
                            "content": {"type": "ai"}, "metadata": {},
                            "created_at": "2026-01-01T00:00:00+00:00"})


async def test_thread_page_batch_hydrates_duration_for_old_runs(store: RunEventStore) -> None:
    await put_message(store, "run-old", "ai", "answer")
    await put_row(store, "run-old", seconds=7)
    async with gateway(store) as client:
        data = (await client.get(f"/api/threads/{THREAD}/messages/page")).json()["data"]
    assert data[0]["content"]["additional_kwargs"]["turn_duration"] == 7


async def test_thread_page_stamps_turn_duration_on_last_ai_message_only(store: RunEventStore) -> None:
    await put_message(store, "run-multi", "ai", "first-answer")
    await put_message(store, "run-multi", "ai", "second-answer")
    await put_row(store, "run-multi", seconds=7)
    async with gateway(store) as client:
        data = (await client.get(f"/api/threads/{THREAD}/messages/page")).json()["data"]
    first = next(row for row in data if row["content"]["id"] == "first-answer")
    second = next(row for row in data if row["content"]["id"] == "second-answer")
    assert second["content"]["additional_kwargs"]["turn_duration"] == 7
    assert "turn_duration" not in first["content"].get("additional_kwargs", {})


async def test_thread_page_preserves_tool_and_subagent_wrapper_metadata(store: RunEventStore) -> None:
    await store.put(thread_id=THREAD, run_id="run-tool", event_type="llm.tool.result",
                    category="message",
                    content={"type": "tool", "id": "tool-message-1", "tool_call_id": "call-1",
                             "content": "result", "artifact": {"kind": "subagent"}},
                    metadata={"caller": "subagent:research", "task_id": "task-1", "message_index": 3})
    async with gateway(store) as client:
        row = (await client.get(f"/api/threads/{THREAD}/messages/page")).json()["data"][0]
    assert row["run_id"] == "run-tool"
    assert row["content"]["artifact"] == {"kind": "subagent"}
    assert row["metadata"] == {"caller": "subagent:research", "task_id": "task-1", "message_index": 3}


async def test_thread_page_empty_and_exact_limit_cursor_contract(store: RunEventStore) -> None:
    async with gateway(store) as client:
        empty = await client.get(f"/api/threads/{THREAD}/messages/page?limit=2")
    assert empty.status_code == 200  # a thread without rows is an empty page, not a 404
    assert empty.json() == {"data": [], "has_more": False, "next_before_seq": None}
    await put_message(store, "run-1", "human", "one")
    await put_message(store, "run-1", "ai", "two")
    async with gateway(store) as client:
        exact = (await client.get(f"/api/threads/{THREAD}/messages/page?limit=2")).json()
    assert seqs(exact["data"]) == [1, 2]
    assert exact["has_more"] is False
    assert exact["next_before_seq"] is None


async def test_thread_page_rejects_forward_cursor_and_invalid_bounds(store: RunEventStore) -> None:
    async with gateway(store) as client:
        path = f"/api/threads/{THREAD}/messages/page"
        assert (await client.get(f"{path}?after_seq=1")).status_code == 422
        assert (await client.get(f"{path}?limit=0")).status_code == 422
        assert (await client.get(f"{path}?limit=201")).status_code == 422
        assert (await client.get(f"{path}?before_seq=0")).status_code == 422
