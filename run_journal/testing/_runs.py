"""Conformance tests: ``put_if_absent`` singletons, deletes, run rows and thread listing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from run_journal.catalog import TERMINAL_RUN_EVENTS, category_of
from run_journal.runs import RunRow, RunStatus, UsageTotals
from run_journal.stores.base import RunEventStore
from run_journal.testing._support import GUARD, StoreSuiteBase, new_event, read_all


class RunTests(StoreSuiteBase):
    """``put_if_absent`` singletons, deletes, run rows and thread listing."""

    async def test_put_if_absent_is_a_run_scoped_singleton(self, store: RunEventStore) -> None:
        args: dict[str, Any] = {"thread_id": "t", "event_type": "context:memory", "category": "context"}
        first, created = await store.put_if_absent(run_id="r1", content="first", **args)
        again, created_again = await store.put_if_absent(run_id="r1", content="second", **args)
        assert (created, created_again) == (True, False)
        assert again.to_dict() == first.to_dict()
        other_run, created_other = await store.put_if_absent(run_id="r2", content="x", **args)
        assert created_other
        assert other_run.seq == 2
        plain = await store.put(run_id="r3", content="plain", **args)
        existing, created_late = await store.put_if_absent(run_id="r3", content="late", **args)
        assert not created_late
        assert existing.to_dict() == plain.to_dict()
        assert await store.last_seq("t") == 3

    async def test_put_if_absent_under_concurrent_callers(self, store: RunEventStore) -> None:
        results = await asyncio.gather(
            *(
                store.put_if_absent(
                    thread_id="t", run_id="r", event_type="context:memory", category="context",
                    content=i, event_id=f"c{i}",
                )
                for i in range(20)
            )
        )
        assert sum(created for _, created in results) == 1
        winner = next(event for event, created in results if created)
        assert {event.event_id for event, _ in results} == {winner.event_id}
        assert [e.event_id for e in await read_all(store, "t")] == [winner.event_id]

    async def test_put_if_absent_exclusive_types_writes_one_terminal_event(
        self, store: RunEventStore
    ) -> None:
        kinds = sorted(TERMINAL_RUN_EVENTS)
        results = await asyncio.gather(
            *(
                store.put_if_absent(
                    thread_id="t", run_id="r", event_type=kinds[i % len(kinds)],
                    category=category_of(kinds[i % len(kinds)]).value, content=i,
                    event_id=f"end{i}", exclusive_types=TERMINAL_RUN_EVENTS,
                )
                for i in range(20)
            )
        )
        assert sum(created for _, created in results) == 1
        winner = next(event for event, created in results if created)
        assert {event.event_id for event, _ in results} == {winner.event_id}
        stored = await read_all(store, "t")
        assert [e.event_id for e in stored] == [winner.event_id]
        other, created = await store.put_if_absent(  # another run is not affected
            thread_id="t", run_id="r2", event_type="run.cancel", category="error",
            exclusive_types=TERMINAL_RUN_EVENTS,
        )
        assert created
        assert (other.seq, other.run_id) == (2, "r2")
        plain = await store.put(thread_id="t", run_id="r3", event_type="run.error", category="error")
        late, created_late = await store.put_if_absent(
            thread_id="t", run_id="r3", event_type="run.end", category="outputs",
            exclusive_types=["run.error", "run.end"],
        )
        assert not created_late
        assert late.to_dict() == plain.to_dict()
        with pytest.raises(TypeError):
            await store.put_if_absent(
                thread_id="t", run_id="r4", event_type="run.end", category="outputs",
                exclusive_types="run.end",
            )
        assert await store.last_seq("t") == 3

    async def test_put_run_close_writes_events_terminal_and_row_once(self, store: RunEventStore) -> None:
        events = [new_event("t", "r", content=n, event_id=f"e{n}") for n in range(3)]
        terminal = new_event("t", "r", "run.end", "outputs", content="done", event_id="end")
        row = RunRow(run_id="r", thread_id="t", status=RunStatus.SUCCESS, message_count=3)
        for _ in range(2):  # the second call is a retry after an ambiguous failure: nothing doubles
            assert await store.put_run_close(events, terminal, row)
        stored = await read_all(store, "t")
        assert [(e.seq, e.event_id) for e in stored] == [(1, "e0"), (2, "e1"), (3, "e2"), (4, "end")]
        assert await store.get_run("r") == row
        no_events = new_event("t", "r2", "run.error", "error", event_id="end2")
        assert await store.put_run_close([], no_events, RunRow(run_id="r2", thread_id="t",
                                                               status=RunStatus.ERROR))
        assert [e.event_id for e in await read_all(store, "t")][-1] == "end2"

    async def test_put_run_close_on_a_closed_run_writes_only_the_events(self, store: RunEventStore) -> None:
        await store.put_run(RunRow(run_id="r", thread_id="t", status=RunStatus.RUNNING))
        await store.put_if_absent(
            thread_id="t", run_id="r", event_type="run.cancel", category="error", event_id="orphan",
            exclusive_types=TERMINAL_RUN_EVENTS,
        )
        late = [new_event("t", "r", content="late", event_id="late")]
        terminal = new_event("t", "r", "run.end", "outputs", event_id="end")
        row = RunRow(run_id="r", thread_id="t", status=RunStatus.SUCCESS)
        assert not await store.put_run_close(late, terminal, row)
        assert [e.event_id for e in await read_all(store, "t")] == ["orphan", "late"]
        kept = await store.get_run("r")
        assert kept is not None
        assert kept.status == RunStatus.RUNNING

    async def test_put_run_close_with_a_terminal_among_the_events_writes_only_the_events(
        self, store: RunEventStore
    ) -> None:
        failed = new_event("t", "r", "run.error", "error", event_id="failed")
        terminal = new_event("t", "r", "run.end", "outputs", event_id="end")
        row = RunRow(run_id="r", thread_id="t", status=RunStatus.SUCCESS)
        assert not await store.put_run_close([failed], terminal, row)
        assert [e.event_id for e in await read_all(store, "t")] == ["failed"]

    async def test_put_run_close_refuses_a_row_of_another_thread_after_the_events(
        self, store: RunEventStore
    ) -> None:
        await store.put_run(RunRow(run_id="r", thread_id="home", status=RunStatus.RUNNING))
        events = [new_event("elsewhere", "r", content="last", event_id="last")]
        terminal = new_event("elsewhere", "r", "run.end", "outputs", event_id="end")
        with pytest.raises(ValueError, match=r"home.*elsewhere|elsewhere.*home"):
            await store.put_run_close(events, terminal, RunRow(run_id="r", thread_id="elsewhere",
                                                               status=RunStatus.SUCCESS))
        assert [e.event_id for e in await read_all(store, "elsewhere")] == ["last", "end"]
        kept = await store.get_run("r")
        assert kept is not None
        assert (kept.thread_id, kept.status) == ("home", RunStatus.RUNNING)

    async def test_put_run_refuses_to_move_a_run_to_another_thread(self, store: RunEventStore) -> None:
        await store.put_run(RunRow(run_id="r", thread_id="home", status=RunStatus.RUNNING))
        for status in (RunStatus.RUNNING, RunStatus.SUCCESS):
            with pytest.raises(ValueError, match=r"home.*elsewhere|elsewhere.*home"):
                await store.put_run(RunRow(run_id="r", thread_id="elsewhere", status=status))
        stored = await store.get_run("r")
        assert stored is not None
        assert (stored.thread_id, stored.status) == ("home", RunStatus.RUNNING)
        assert await store.list_runs("elsewhere") == []
        assert [row.run_id for row in await store.list_runs("home")] == ["r"]
        assert [(row.run_id, row.thread_id) for row in await store.list_runs()] == [("r", "home")]

    async def test_delete_by_thread_never_reuses_a_seq(self, store: RunEventStore) -> None:
        await store.put_batch([new_event("t", "r") for _ in range(3)])
        assert await store.delete_by_thread("t") == 3
        assert await store.last_seq("t") == 3
        assert await store.list_threads() == []
        again = await store.put(thread_id="t", run_id="r2", event_type="tool.call", category="trace")
        assert again.seq == 4
        assert [e.seq for e in await read_all(store, "t")] == [4]
        assert [e.seq for e in await store.list_events("t", after_seq=3)] == [4]

    async def test_list_runs_refuses_a_single_status_string(self, store: RunEventStore) -> None:
        await store.put_run(RunRow(run_id="r", thread_id="t", status=RunStatus.RUNNING))
        with pytest.raises(TypeError):
            await store.list_runs(statuses="running")
        with pytest.raises(TypeError):
            await store.list_runs("t", statuses="running")
        assert [row.run_id for row in await store.list_runs(statuses=("running",))] == ["r"]

    async def test_list_runs_order_is_started_at_else_first_put_then_run_id(
        self, store: RunEventStore
    ) -> None:
        early = datetime(2001, 1, 1, tzinfo=UTC)
        await store.put_run(RunRow(run_id="b-first-put", thread_id="t"))
        await asyncio.sleep(0.01)
        await store.put_run(RunRow(run_id="a-second-put", thread_id="t"))
        await store.put_run(RunRow(run_id="z-started", thread_id="t", started_at=early))
        await store.put_run(RunRow(run_id="y-started", thread_id="t", started_at=early))
        await store.put_run(RunRow(run_id="x-started", thread_id="u", started_at=early - timedelta(1)))
        # a later update of a row without started_at does not move it
        later = datetime.now(UTC) + timedelta(days=365)
        await store.put_run(RunRow(run_id="b-first-put", thread_id="t", updated_at=later))
        expected = ["y-started", "z-started", "b-first-put", "a-second-put"]
        assert [row.run_id for row in await store.list_runs("t")] == expected
        assert [row.run_id for row in await store.list_runs()] == ["x-started", *expected]

    @pytest.mark.parametrize("bad", ["a/b", "", ".."])
    async def test_reads_refuse_an_invalid_user_id(self, store: RunEventStore, bad: str) -> None:
        await store.put(thread_id="t", run_id="r", event_type="llm.ai.response", category="message")
        reads: list[Callable[[], Awaitable[object]]] = [
            lambda: store.list_threads(user_id=bad),
            lambda: store.count_messages("t", user_id=bad),
            lambda: store.list_messages("t", user_id=bad),
            lambda: store.list_messages_by_run("t", "r", user_id=bad),
            lambda: store.list_events("t", user_id=bad),
            lambda: anext(aiter(store.follow("t", user_id=bad))),
        ]
        for read in reads:
            with pytest.raises(ValueError, match="user_id"):
                async with asyncio.timeout(GUARD):
                    await read()

    async def test_list_threads_pages_with_after(self, store: RunEventStore) -> None:
        names = ["a", "b", "bb", "c", "d", "e"]
        await store.put_batch([new_event(name, "r", user_id="u" if name != "c" else "v") for name in names])
        pages: list[list[str]] = []
        cursor: str | None = None
        while True:
            page = await store.list_threads(limit=2, after=cursor)
            if not page:
                break
            pages.append(page)
            cursor = page[-1]
        assert pages == [["a", "b"], ["bb", "c"], ["d", "e"]]
        assert await store.list_threads(after="b") == ["bb", "c", "d", "e"]
        assert await store.list_threads(after="ba", limit=1) == ["bb"]
        assert await store.list_threads(after="e") == []
        assert await store.list_threads(user_id="u", after="bb") == ["d", "e"]
        with pytest.raises(ValueError, match="after"):
            await store.list_threads(after="a/b")

    async def test_delete_by_thread(self, store: RunEventStore) -> None:
        await store.put_batch([new_event("gone", f"r{i % 2}") for i in range(5)])
        keep = await store.put_batch([new_event("kept", "k") for _ in range(2)])
        await store.put_run(RunRow(run_id="r0", thread_id="gone"))
        await store.put_run(RunRow(run_id="k", thread_id="kept"))
        assert await store.delete_by_thread("gone") == 5
        assert await read_all(store, "gone") == []
        assert await store.count_messages("gone") == 0
        assert await store.get_run("r0") is None
        assert await store.list_runs("gone") == []
        assert await store.list_threads() == ["kept"]
        assert [e.to_dict() for e in await read_all(store, "kept")] == [e.to_dict() for e in keep]
        assert await store.get_run("k") is not None
        assert await store.delete_by_thread("gone") == 0
        again = await store.put(thread_id="gone", run_id="new", event_type="tool.call", category="trace")
        assert [e.event_id for e in await read_all(store, "gone")] == [again.event_id]

    async def test_delete_by_run_keeps_seq_above_the_highest_ever_assigned(
        self, store: RunEventStore
    ) -> None:
        written = await store.put_batch([new_event("t", run) for run in ("a", "b", "a", "b")])
        await store.put_run(RunRow(run_id="b", thread_id="t"))
        assert await store.delete_by_run("t", "b") == 2
        assert [e.to_dict() for e in await read_all(store, "t")] == [
            written[0].to_dict(), written[2].to_dict()
        ]
        assert await store.get_run("b") is None
        assert await store.last_seq("t") == 4
        assert (await store.put(thread_id="t", run_id="c", event_type="tool.call", category="trace")).seq == 5
        await store.put_batch([new_event("solo", "only") for _ in range(3)])
        assert await store.delete_by_run("solo", "only") == 3
        assert await store.delete_by_run("solo", "only") == 0
        assert (await store.put_batch([new_event("solo", "next")]))[0].seq == 4

    async def test_run_rows_round_trip_and_list(self, store: RunEventStore) -> None:
        start = datetime(2024, 3, 1, 12, tzinfo=UTC)
        usage = UsageTotals(input_tokens=10, output_tokens=5, total_tokens=15, llm_calls=2, cost_usd=0.25)
        rows = [
            RunRow(
                run_id=f"run-{i}", thread_id="t" if i < 3 else "other", user_id="u",
                status=status, started_at=start + timedelta(minutes=i), usage=usage,
                usage_by_model={"m": usage}, usage_by_caller={"lead": usage}, message_count=i,
                first_human_message="hi\u2028there", metadata={"k": [1, "x"]},
            )
            for i, status in enumerate(["success", "running", "error", "running"])
        ]
        for row in rows:
            assert (await store.put_run(row)).to_dict() == row.to_dict()
        fetched = await store.get_run("run-0")
        assert fetched is not None
        assert fetched.to_dict() == rows[0].to_dict()
        assert await store.get_run("missing") is None
        assert [r.run_id for r in await store.list_runs("t")] == ["run-0", "run-1", "run-2"]
        assert [r.run_id for r in await store.list_runs()] == [r.run_id for r in rows]
        assert [r.run_id for r in await store.list_runs("t", statuses=["running"])] == ["run-1"]
        done = await store.list_runs(statuses=["success", "error"])
        assert [r.run_id for r in done] == ["run-0", "run-2"]

    async def test_a_finished_run_is_never_reopened(self, store: RunEventStore) -> None:
        running = RunRow(run_id="r", thread_id="t", status=RunStatus.RUNNING)
        await store.put_run(running)
        done = running.replace(status=RunStatus.SUCCESS, message_count=3)
        assert (await store.put_run(done)).status == RunStatus.SUCCESS
        for refused in (RunStatus.RUNNING, RunStatus.PENDING, RunStatus.ERROR):
            answer = await store.put_run(running.replace(status=refused, message_count=99))
            assert (answer.status, answer.message_count) == (RunStatus.SUCCESS, 3)
        await store.put_run(done.replace(message_count=5))
        stored = await store.get_run("r")
        assert stored is not None
        assert (stored.status, stored.message_count) == (RunStatus.SUCCESS, 5)

    async def test_list_threads_and_last_seq(self, store: RunEventStore) -> None:
        for thread_id in ("b", "a", "c", "b"):
            await store.put(thread_id=thread_id, run_id="r", event_type="tool.call", category="trace")
        await store.put_run(RunRow(run_id="no-events", thread_id="d"))
        assert await store.list_threads() == ["a", "b", "c"]
        assert await store.list_threads(limit=2) == ["a", "b"]
        assert [await store.last_seq(t) for t in "abcd"] == [1, 2, 1, 0]

