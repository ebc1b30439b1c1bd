"""Projections on every backend: history filtering and paging, folds, audits, workspace, orphans, usage."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from run_journal import RunEventStore, RunRow, RunStatus, UsageTotals, open_store
from run_journal.contract import validate_record
from run_journal.projections import (
    HISTORY_CHUNK_MIN,
    find_gaps,
    latest_workspace_changes,
    memory_audit,
    reconcile_orphans,
    status_of,
    subtask_steps,
    thread_history,
    usage_summary,
)

T = "thread-1"
LONG_AGO = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


def message(kind: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "content": text, **extra}


def ev(event_type: str, category: str, *, run: str = "r1", caller: str = "lead_agent",
       content: Any = "", thread: str = T, **meta: Any) -> dict[str, Any]:
    return {"thread_id": thread, "run_id": run, "event_type": event_type, "category": category,
            "content": content, "metadata": {"caller": caller, **meta}}


def human(text: str, **kw: Any) -> dict[str, Any]:
    return ev("llm.human.input", "message", content=message("human", text), **kw)


def ai(text: str, *, event_type: str = "llm.ai.response", **kw: Any) -> dict[str, Any]:
    return ev(event_type, "message", content=message("ai", text), llm_call_index=0, **kw)


def tool(text: str, **kw: Any) -> dict[str, Any]:
    return ev("llm.tool.result", "message", content=message("tool", text, tool_call_id="c1"),
              tool_call_id="c1", tool_name="task", **kw)


def texts(events: Sequence[Any]) -> list[str]:
    return [event.content["content"] for event in events]


class CountingStore:
    """Delegates to a real store and counts the rows ``list_messages`` hands back."""

    def __init__(self, inner: RunEventStore) -> None:
        self.inner = inner
        self.rows_read = 0
        self.calls = 0

    async def list_messages(self, *args: Any, **kwargs: Any) -> list[Any]:
        rows = await self.inner.list_messages(*args, **kwargs)
        self.rows_read += len(rows)
        self.calls += 1
        return rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# -- thread history ------------------------------------------------------------------------------
async def test_history_hides_middleware_subagent_ai_and_superseded_runs(store: RunEventStore) -> None:
    await store.put_batch([
        human("hello"),
        ev("run.start", "trace", content={"run_name": "agent"}),
        ai("guard check", caller="middleware:guardrail"),
        ai("sub thinking", caller="subagent:research"),
        ev("llm.tool.result", "message", caller="subagent:research",
           content=message("tool", "sub tool"), tool_call_id="s1"),
        tool("task done"),
        ai("answer one"),
        ai("legacy answer", event_type="ai_message"),
        ai("legacy sub", event_type="ai_message", caller="subagent:research"),
        human("again", run="r2"),
        ai("superseded answer", run="r2"),
        ai("regenerated answer", run="r3"),
    ])
    page = await thread_history(store, T, hidden_run_ids={"r2"})
    assert texts(page.data) == [
        "hello", "sub tool", "task done", "answer one", "legacy answer", "regenerated answer",
    ]
    assert (page.has_more, page.next_before_seq) == (False, None)
    assert [e.seq for e in page.data] == sorted(e.seq for e in page.data)


async def test_history_pages_newest_first_and_exactly(store: RunEventStore) -> None:
    await store.put_batch([human(f"m{i}") for i in range(7)])
    first = await thread_history(store, T, limit=3)
    assert texts(first.data) == ["m4", "m5", "m6"]
    assert first.has_more
    assert first.next_before_seq == first.data[0].seq
    second = await thread_history(store, T, limit=3, before_seq=first.next_before_seq)
    assert texts(second.data) == ["m1", "m2", "m3"]
    assert second.has_more
    third = await thread_history(store, T, limit=3, before_seq=second.next_before_seq)
    assert texts(third.data) == ["m0"]
    assert (third.has_more, third.next_before_seq) == (False, None)
    exact = await thread_history(store, T, limit=7)
    assert len(exact.data) == 7
    assert not exact.has_more


async def test_history_full_pages_under_heavy_filtering_read_a_bounded_number_of_rows(
    store: RunEventStore,
) -> None:
    ratio, visible_count = 30, 20
    batch = []
    for i in range(visible_count * ratio):
        visible = i % ratio == 0
        batch.append(human(f"v{i // ratio}") if visible else ai(f"x{i}", caller="middleware:summarize"))
    await store.put_batch(batch)
    counting = CountingStore(store)
    limit, seen, cursor, pages = 3, [], None, 0
    while True:
        before = counting.rows_read
        page = await thread_history(counting, T, limit=limit, before_seq=cursor)  # type: ignore[arg-type]
        pages += 1
        read = counting.rows_read - before
        # enough rows for limit+1 visible ones, plus at most one chunk of overshoot
        assert read <= (limit + 1) * ratio * 2 + HISTORY_CHUNK_MIN, read
        assert len(page.data) == limit or not page.has_more
        seen = texts(page.data) + seen
        if not page.has_more:
            assert page.next_before_seq is None
            break
        cursor = page.next_before_seq
    assert seen == [f"v{i}" for i in range(visible_count)]
    assert pages == 7  # 20 visible rows, 3 per page
    first = await thread_history(counting, T, limit=limit)  # type: ignore[arg-type]
    assert texts(first.data) == ["v17", "v18", "v19"]
    assert first.has_more


async def test_history_keeps_only_the_users_rows(store: RunEventStore) -> None:
    await store.put_batch([{**human("mine"), "user_id": "alice"}, {**human("theirs"), "user_id": "bob"}])
    page = await thread_history(store, T, user_id="alice")
    assert texts(page.data) == ["mine"]


async def test_history_rejects_a_bad_limit(store: RunEventStore) -> None:
    with pytest.raises(ValueError, match="limit"):
        await thread_history(store, T, limit=0)


# -- folds ---------------------------------------------------------------------------------------
async def test_status_folds_over_every_lifecycle_including_an_orphan(store: RunEventStore) -> None:
    terminal = {
        "ok": ("run.end", "outputs", {"output": []}, "success"),
        "bad": ("run.error", "error", {"error_type": "E", "message": "m"}, "error"),
        "wait": ("run.interrupt", "outputs", {"interrupts": []}, "interrupted"),
        "stop": ("run.cancel", "error", {"reason": "user"}, "cancelled"),
    }
    batch = []
    for run, (name, category, content, status) in terminal.items():
        batch.append(ev("run.start", "trace", run=run, content={"run_name": "g"}))
        batch.append(human("hi", run=run))
        batch.append(ev(name, category, run=run, content=content, status=status))
    batch += [ev("run.start", "trace", run="orphan", content={"run_name": "g"}), human("x", run="orphan")]
    batch += [human("queued", run="never")]
    await store.put_batch(batch)
    expected = {"ok": "success", "bad": "error", "wait": "interrupted", "stop": "cancelled",
                "orphan": "running", "never": "pending"}
    for run, status in expected.items():
        assert status_of(await store.list_events(T, run)) == RunStatus(status), run
    resumed = [ev("run.start", "trace"), ev("run.interrupt", "outputs"), ev("run.start", "trace")]
    assert status_of([_Named(e["event_type"]) for e in resumed]) == RunStatus.RUNNING


class _Named:
    def __init__(self, event_type: str) -> None:
        self.event_type = event_type


def test_find_gaps_lists_missing_seqs_between_one_and_the_highest() -> None:
    assert find_gaps([]) == []
    assert find_gaps([1, 2, 3]) == []
    assert find_gaps([5, 2, 3]) == [1, 4]


async def test_find_gaps_sees_the_hole_a_deleted_run_leaves(store: RunEventStore) -> None:
    await store.put_batch([human("a", run="r1"), human("b", run="r2"), human("c", run="r1"),
                           human("d", run="r2")])
    assert find_gaps(await store.list_events(T)) == []
    await store.delete_by_run(T, "r1")
    assert find_gaps(await store.list_events(T)) == [1, 3]


# -- subtask cards, audits, workspace ------------------------------------------------------------
async def test_subtask_steps_page_forward_by_task(store: RunEventStore) -> None:
    batch = [ev("subagent.start", "subagent", content={"task_id": "A", "description": "d"}, task_id="A")]
    for i in range(5):
        for task in ("A", "B"):
            batch.append(ev("subagent.step", "subagent", task_id=task, message_index=i, content={
                "task_id": task, "message_index": i, "kind": "ai", "text": f"{task}{i}",
                "truncated": False}))
    await store.put_batch(batch)
    first = await subtask_steps(store, T, "r1", "A", limit=2)
    assert [e.content["text"] for e in first.data] == ["A0", "A1"]
    assert first.has_more
    rest = await subtask_steps(store, T, "r1", "A", after_seq=first.next_after_seq, limit=3)
    assert [e.content["text"] for e in rest.data] == ["A2", "A3", "A4"]
    assert (rest.has_more, rest.next_after_seq) == (False, None)
    assert (await subtask_steps(store, T, "other-run", "A")).data == ()


async def test_memory_audit(store: RunEventStore) -> None:
    good = hashlib.sha256(b"memory").hexdigest()
    await store.put(**ev("context:memory", "context", content={"content_sha256": good}))
    match = await memory_audit(store, T, "r1", good.upper())
    assert (match.present, match.matches, match.recorded_sha256) == (True, True, good)
    other = await memory_audit(store, T, "r1", "0" * 64)
    assert other.present
    assert not other.matches
    assert other.recorded_sha256 == good
    absent = await memory_audit(store, T, "r2", good)
    assert (absent.present, absent.matches, absent.recorded_sha256) == (False, False, None)


def changes(paths: list[str]) -> dict[str, Any]:
    files = [{"path": p, "root": "/w", "status": "modified", "diff": f"-a\n+{p}"} for p in paths]
    summary = {"created": 0, "modified": len(paths), "deleted": 0, "additions": len(paths),
               "deletions": len(paths), "truncated": False}
    return {"version": 1, "summary": summary, "files": files, "limits": {}}


async def test_latest_workspace_changes(store: RunEventStore) -> None:
    assert (await latest_workspace_changes(store, T, "r1"))["available"] is False
    for paths in (["old.txt"], ["a.py", "b.py"]):
        await store.put(**ev("workspace_changes", "workspace", content=f"{len(paths)} file(s) changed",
                             workspace_changes=changes(paths)))
    full = await latest_workspace_changes(store, T, "r1")
    assert full["available"]
    assert full["summary_text"] == "2 file(s) changed"
    assert [f["path"] for f in full["workspace_changes"]["files"]] == ["a.py", "b.py"]
    assert full["workspace_changes"]["files"][0]["diff"] == "-a\n+a.py"
    no_diffs = await latest_workspace_changes(store, T, "r1", include_diffs=False)
    assert [sorted(f) for f in no_diffs["workspace_changes"]["files"]] == [["path", "root", "status"]] * 2
    summary_only = await latest_workspace_changes(store, T, "r1", include_files=False)
    assert "files" not in summary_only["workspace_changes"]
    assert summary_only["workspace_changes"]["summary"]["modified"] == 2


# -- orphan reconciliation -----------------------------------------------------------------------
async def seed_orphans(store: RunEventStore) -> None:
    """dead (running, silent), fresh (running, recent event), done (running row but run.end),
    queued (pending, no start), started (pending row with a run.start), finished (success row)."""
    old, recent = LONG_AGO, datetime.now(UTC)
    rows = {"dead": "running", "fresh": "running", "done": "running", "queued": "pending",
            "started": "pending", "finished": "success"}
    for run, status in rows.items():
        await store.put_run(RunRow(run_id=run, thread_id=T, status=status, updated_at=old,
                                   started_at=old, user_id="u1"))
    for run in ("dead", "fresh", "done", "started", "finished"):
        await store.put(**ev("run.start", "trace", run=run, content={"run_name": "g"}), created_at=old)
    await store.put(**ev("llm.human.input", "message", run="fresh", content=message("human", "hi")),
                    created_at=recent)
    await store.put(**ev("run.end", "outputs", run="done", content={"output": []}, status="success"),
                    created_at=old)
    await store.put(**ev("run.end", "outputs", run="finished", content={"output": []}, status="success"),
                    created_at=old)


async def test_reconcile_closes_silent_started_runs_once(store: RunEventStore) -> None:
    await seed_orphans(store)
    closed = await reconcile_orphans(store, older_than=timedelta(minutes=30))
    assert sorted(item.row.run_id for item in closed) == ["dead", "started"]
    for run in ("dead", "started"):
        events = await store.list_events(T, run)
        cancels = [e for e in events if e.event_type == "run.cancel"]
        assert len(cancels) == 1
        assert cancels[0].content["reason"] == "worker lost"
        assert cancels[0].metadata["reconciled"] is True
        assert cancels[0].metadata["status"] == "cancelled"
        assert validate_record(cancels[0].to_dict()) == []
        assert status_of(events) == RunStatus.CANCELLED
        row = await store.get_run(run)
        assert row is not None
        assert row.status == RunStatus.CANCELLED
        assert row.ended_at is not None
    for run, status in (("fresh", "running"), ("done", "running"), ("queued", "pending"),
                        ("finished", "success")):
        row = await store.get_run(run)
        assert row is not None, run
        assert row.status == status, run
        assert not [e for e in await store.list_events(T, run) if e.event_type == "run.cancel"]
    assert await reconcile_orphans(store, older_than=timedelta(minutes=30)) == []


async def test_reconcile_respects_older_than(store: RunEventStore) -> None:
    await seed_orphans(store)
    now = LONG_AGO + timedelta(minutes=10)
    assert await reconcile_orphans(store, older_than=timedelta(hours=1), now=now) == []
    assert (await store.get_run("dead")).status == RunStatus.RUNNING  # type: ignore[union-attr]


async def test_two_concurrent_reconcilers_close_each_run_exactly_once(
    store: RunEventStore, store_url: str
) -> None:
    await seed_orphans(store)
    if store_url.startswith("memory"):
        results = await asyncio.gather(*(reconcile_orphans(store, older_than=timedelta(minutes=5))
                                         for _ in range(2)))
    else:  # two independent store objects on the same data, like two workers
        async with open_store(store_url) as other:
            results = await asyncio.gather(reconcile_orphans(store, older_than=timedelta(minutes=5)),
                                           reconcile_orphans(other, older_than=timedelta(minutes=5)))
    closed = sorted(item.row.run_id for result in results for item in result)
    assert closed == ["dead", "started"]
    for run in ("dead", "started"):
        cancels = await store.list_events(T, run, event_types=["run.cancel"])
        assert len(cancels) == 1


def test_two_processes_reconcile_a_sqlite_store_exactly_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/journal.db"

    async def seed() -> None:
        async with open_store(url) as store:
            await seed_orphans(store)
            for i in range(10):
                await store.put_run(RunRow(run_id=f"dead{i}", thread_id=T, status="running",
                                           updated_at=LONG_AGO))
                await store.put(**ev("run.start", "trace", run=f"dead{i}", content={"run_name": "g"}),
                                created_at=LONG_AGO)

    asyncio.run(seed())
    command = [str(Path(sys.executable).with_name("run-journal")), url, "reconcile", "--older-than", "5m"]
    workers = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    outputs = [worker.communicate(timeout=120) for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], outputs
    closed = [line.split()[2] for out, _ in outputs for line in out.splitlines()
              if line.startswith("closed run")]
    assert sorted(closed) == sorted(["dead", "started", *(f"dead{i}" for i in range(10))])

    async def cancels() -> dict[str, int]:
        async with open_store(url) as store:
            events = await store.list_events(T, event_types=["run.cancel"], limit=1000)
            counts: dict[str, int] = {}
            for event in events:
                counts[event.run_id] = counts.get(event.run_id, 0) + 1
            return counts

    assert set(asyncio.run(cancels()).values()) == {1}


# -- usage ---------------------------------------------------------------------------------------
async def test_usage_summary_adds_rows_per_run_model_and_caller(store: RunEventStore) -> None:
    a = UsageTotals(input_tokens=10, output_tokens=5, total_tokens=15, llm_calls=1, cost_usd=0.5)
    b = UsageTotals(input_tokens=1, output_tokens=1, total_tokens=2, llm_calls=1, cost_usd=0.25)
    await store.put_run(RunRow(run_id="r1", thread_id=T, usage=a, usage_by_model={"m1": a},
                               usage_by_caller={"lead_agent": a}))
    await store.put_run(RunRow(run_id="r2", thread_id=T, usage=b, usage_by_model={"m2": b},
                               usage_by_caller={"lead_agent": b}))
    await store.put_run(RunRow(run_id="r3", thread_id="other", usage=a, usage_by_model={"m1": a}))
    summary = await usage_summary(store, T)
    assert [row.run_id for row in summary.runs] == ["r1", "r2"]
    assert summary.total.total_tokens == 17
    assert summary.total.cost_usd == pytest.approx(0.75)
    assert summary.by_caller["lead_agent"].llm_calls == 2
    assert set(summary.by_model) == {"m1", "m2"}
    everything = await usage_summary(store)
    assert everything.by_model["m1"].total_tokens == 30
    assert len(everything.runs) == 3


# -- real journaled LangGraph runs -----------------------------------------------------------------
def tool_loop_graph(replies: list[Any]) -> Any:
    """agent -> (tools -> agent)* with an offline fake chat model and a checkpointer (one thread)."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    model = GenericFakeChatModel(messages=iter(replies))

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([add]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


async def test_projections_over_journaled_langgraph_runs(store: RunEventStore) -> None:
    import uuid

    from langchain_core.messages import AIMessage, HumanMessage

    from run_journal import RunJournal

    call = {"name": "add", "args": {"a": 1, "b": 2}, "id": "c1", "type": "tool_call"}
    graph = tool_loop_graph([AIMessage("adding", tool_calls=[call]), AIMessage("the answer is 3"),
                             AIMessage("first try"), AIMessage("second try")])
    config: dict[str, Any] = {"configurable": {"thread_id": "t1"}}
    journals = []
    for text in ("what is 1+2?", "say hi", "say hi"):
        journal = RunJournal(store)
        journal.record_memory_context(content="likes cats")
        await graph.ainvoke({"messages": [HumanMessage(text)]}, {**config, "callbacks": [journal]})
        await journal.aclose()
        journals.append(journal)
    first, superseded, regenerated = journals

    page = await thread_history(store, "t1", hidden_run_ids={superseded.run_id})
    assert [(e.content["type"], e.content["content"]) for e in page.data] == [
        ("human", "what is 1+2?"), ("ai", "adding"), ("tool", "3"), ("ai", "the answer is 3"),
        ("human", "say hi"), ("ai", "second try")]
    assert {e.run_id for e in page.data} == {first.run_id, regenerated.run_id}
    older = await thread_history(store, "t1", limit=2, hidden_run_ids={superseded.run_id})
    assert texts(older.data) == ["say hi", "second try"]
    assert older.has_more

    all_events = await store.list_events("t1", limit=1000)
    assert find_gaps(all_events) == []
    for journal in journals:
        assert status_of(await store.list_events("t1", journal.run_id)) == RunStatus.SUCCESS
        audit = await memory_audit(store, "t1", journal.run_id, hashlib.sha256(b"likes cats").hexdigest())
        assert (audit.present, audit.matches) == (True, True)

    # a worker that started a run and died: its row says running and nothing ends it
    dead = RunJournal(store, thread_id="t1")
    dead.on_chain_start({}, {"messages": []}, run_id=uuid.uuid4())
    await dead.flush()
    assert status_of(await store.list_events("t1", dead.run_id)) == RunStatus.RUNNING
    later = datetime.now(UTC) + timedelta(hours=2)
    closed = await reconcile_orphans(store, older_than=timedelta(hours=1), now=later)
    assert [item.row.run_id for item in closed] == [dead.run_id]
    assert status_of(await store.list_events("t1", dead.run_id)) == RunStatus.CANCELLED
    assert await reconcile_orphans(store, older_than=timedelta(hours=1), now=later) == []
