"""Conformance tests: ``prune`` removes old threads whole, keeps the rest, archives with their seqs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from run_journal.envelope import NewEvent, RunEvent
from run_journal.runs import RunRow, RunStatus
from run_journal.stores import retention
from run_journal.stores.base import PruneResult, RunEventStore
from run_journal.stores.memory import MemoryRunEventStore
from run_journal.testing._support import StoreFactory, StoreSuiteBase, read_all

OLD = datetime(2020, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
"""When the events of an old thread were written: long before any cutoff of these tests."""
MONTH = timedelta(days=30)


def run_events(
    thread_id: str, run_id: str, *, at: datetime | None = OLD, answers: int = 1, ended: bool = True,
    user_id: str | None = None,
) -> list[NewEvent]:
    """One run as the journal writes it: ``run.start``, a question, answers, ``run.end`` if ``ended``."""
    kinds = [("run.start", "trace"), ("llm.human.input", "message")]
    kinds += [("llm.ai.response", "message")] * answers + ([("run.end", "outputs")] if ended else [])
    return [
        NewEvent(thread_id=thread_id, run_id=run_id, event_type=kind, category=category,
                 content={"n": n}, metadata={"task_id": "k"} if n == 1 else {}, created_at=at,
                 user_id=user_id)
        for n, (kind, category) in enumerate(kinds)
    ]


async def old_thread(
    store: RunEventStore, thread_id: str, *, runs: int = 2, at: datetime | None = OLD,
    status: RunStatus = RunStatus.SUCCESS, user_id: str | None = None,
) -> list[RunEvent]:
    """``runs`` runs of 4 events (``thread_id-r<n>``), all written at ``at``, each with a row."""
    written: list[RunEvent] = []
    for n in range(runs):
        run_id = f"{thread_id}-r{n}"
        written += await store.put_batch(run_events(
            thread_id, run_id, at=at, ended=status != RunStatus.RUNNING, user_id=user_id))
        moment = at or datetime.now(UTC)
        await store.put_run(RunRow(run_id=run_id, thread_id=thread_id, user_id=user_id, status=status,
                                   started_at=moment, updated_at=moment))
    return written


def outcomes(result: PruneResult) -> dict[str, tuple[str, int, int]]:
    """Thread id -> (outcome, events, run rows) of every old thread ``prune`` reported."""
    return {item.thread_id: (item.outcome, item.events, item.runs) for item in result.threads}


async def assert_gone(store: RunEventStore, thread_id: str, run_ids: list[str]) -> None:
    """Nothing of the thread is left to any read (its counter aside)."""
    assert thread_id not in await store.list_threads()
    assert thread_id not in [item.thread_id for item in await store.list_recent_threads(limit=1000)]
    assert await store.list_events(thread_id) == []
    assert await store.list_events(thread_id, event_types=["run.start", "run.end"]) == []
    assert await store.list_events(thread_id, task_id="k") == []
    assert await store.list_messages(thread_id) == []
    assert await store.count_messages(thread_id) == 0
    assert await store.list_runs(thread_id) == []
    for run_id in run_ids:
        assert await store.list_events(thread_id, run_id) == []
        assert await store.list_messages_by_run(thread_id, run_id) == []
        assert await store.get_run(run_id) is None


class PruneTests(StoreSuiteBase):
    """``prune``: old threads go whole (events, run rows, index entries), the seq counter stays."""

    async def test_prune_removes_old_threads_whole_and_leaves_young_ones(self, store: RunEventStore) -> None:
        old = await old_thread(store, "old", runs=2, user_id="u")
        await old_thread(store, "old-too", runs=1)
        young = await old_thread(store, "young", runs=1, at=None, user_id="u")
        young_rows = await store.list_runs("young")
        result = await store.prune(older_than=MONTH)
        assert outcomes(result) == {"old": ("pruned", 8, 2), "old-too": ("pruned", 4, 1)}
        assert (result.dry_run, result.examined, result.events, result.runs) == (False, 3, 12, 3)
        assert [item.thread_id for item in result.pruned] == ["old", "old-too"]
        assert result.kept == []
        report = result.threads[0]
        assert (report.last_seq, report.last_event_at, report.archived) == (8, old[-1].created_at, 0)
        await assert_gone(store, "old", ["old-r0", "old-r1"])
        await assert_gone(store, "old-too", ["old-too-r0"])
        assert await store.list_threads() == ["young"]
        assert await store.list_threads(user_id="u") == ["young"]
        assert await store.list_runs_without_row() == []
        assert await read_all(store, "young") == young
        assert await store.list_runs() == young_rows
        # the seq counter is kept (a thread id used again continues above it); run ids are free again
        assert await store.last_seq("old") == 8
        again = await store.put_batch(run_events("old", "old-r0", at=None))
        assert [event.seq for event in again] == [9, 10, 11, 12]
        assert await store.list_threads() == ["old", "young"]

    async def test_prune_removes_runs_without_a_row_and_rows_without_events(
        self, store: RunEventStore
    ) -> None:
        await store.put_batch(run_events("raw", "rowless", answers=3))
        await store.put_batch([NewEvent(thread_id="raw", run_id=f"loose-{n}", event_type="tool.call",
                                        category="trace", created_at=OLD) for n in range(3)])
        await store.put_run(RunRow(run_id="eventless", thread_id="raw", status=RunStatus.ERROR,
                                   updated_at=OLD))
        result = await store.prune(older_than=MONTH)
        assert outcomes(result) == {"raw": ("pruned", 9, 1)}
        await assert_gone(store, "raw", ["rowless", "loose-0", "loose-2", "eventless"])
        assert await store.list_runs_without_row() == []

    async def test_prune_keeps_a_thread_with_a_running_run(self, store: RunEventStore) -> None:
        kept = {"row-running": await old_thread(store, "row-running", runs=1, status=RunStatus.RUNNING)}
        # the last lifecycle event of a run is run.start: running, whatever its row says, or without one
        kept["started"] = await store.put_batch(run_events("started", "s1", ended=False))
        await store.put_run(RunRow(run_id="s1", thread_id="started", status=RunStatus.SUCCESS,
                                   updated_at=OLD))
        kept["started-no-row"] = await store.put_batch(run_events("started-no-row", "s2", ended=False))
        # a pending row: about to start when touched after the cutoff, stale before it
        kept["pending-fresh"] = await store.put_batch(run_events("pending-fresh", "p1"))
        await store.put_run(RunRow(run_id="p1", thread_id="pending-fresh", status=RunStatus.PENDING))
        await store.put_batch(run_events("pending-stale", "p2"))
        await store.put_run(RunRow(run_id="p2", thread_id="pending-stale", status=RunStatus.PENDING,
                                   updated_at=OLD))
        result = await store.prune(older_than=MONTH)
        assert outcomes(result) == {
            "pending-fresh": ("running", 0, 0), "pending-stale": ("pruned", 4, 1),
            "row-running": ("running", 0, 0), "started": ("running", 0, 0),
            "started-no-row": ("running", 0, 0),
        }
        running = {"pending-fresh": "p1", "row-running": "row-running-r0", "started": "s1",
                   "started-no-row": "s2"}
        named = {item.thread_id for item in result.kept if f"'{running[item.thread_id]}'" in item.reason}
        assert named == set(running)  # each reason names the run that is still running
        assert await store.list_threads() == sorted(kept)
        for thread_id, events in kept.items():
            assert await read_all(store, thread_id) == events
        assert [row.run_id for row in await store.list_runs()] == ["row-running-r0", "s1", "p1"]
        await assert_gone(store, "pending-stale", ["p2"])

    async def test_prune_dry_run_reports_and_changes_nothing(self, store: RunEventStore) -> None:
        old = await old_thread(store, "old", runs=3)
        await old_thread(store, "busy", runs=1, status=RunStatus.RUNNING)
        await old_thread(store, "young", runs=1, at=None)
        rows = await store.list_runs()
        async with MemoryRunEventStore() as archive:
            result = await store.prune(older_than=MONTH, dry_run=True, archive=archive)
            assert await archive.list_threads() == []  # a dry run does not even open the archive
        assert outcomes(result) == {"busy": ("running", 0, 0), "old": ("would_prune", 12, 3)}
        assert (result.dry_run, result.examined, result.events, result.runs) == (True, 3, 12, 3)
        assert [item.thread_id for item in result.pruned] == ["old"]
        assert result.threads[1].archived == 0
        assert await store.list_threads() == ["busy", "old", "young"]
        assert await read_all(store, "old") == old
        assert await store.list_runs() == rows

    async def test_prune_refuses_an_archive_that_is_the_store_itself(
        self, store: RunEventStore, store_factory: StoreFactory
    ) -> None:
        """A second store object on the same storage (same ``location``) is the same store: copying a
        thread into it and then deleting it would lose it."""
        await old_thread(store, "old", runs=1)
        with pytest.raises(ValueError, match="the archive is the store being pruned"):
            await store.prune(older_than=MONTH, archive=store)
        async with store_factory() as twin:
            if store.location is None:  # a store that lives in this process: every object is its own
                assert twin.location is None
                return
            assert twin.location == store.location
            with pytest.raises(ValueError, match="the archive is the store being pruned"):
                await store.prune(older_than=MONTH, archive=twin)
        assert await store.list_threads() == ["old"]

    async def test_prune_is_limited_to_one_thread_or_by_a_moment(self, store: RunEventStore) -> None:
        await old_thread(store, "a")
        await old_thread(store, "b")
        c = await old_thread(store, "c", at=OLD + timedelta(days=10))
        result = await store.prune(older_than=MONTH, thread_id="b")
        assert (outcomes(result), result.examined) == ({"b": ("pruned", 8, 2)}, 1)
        assert await store.list_threads() == ["a", "c"]
        assert outcomes(await store.prune(older_than=MONTH, thread_id="nobody")) == {}
        result = await store.prune(older_than=OLD + timedelta(days=5))  # a moment: only "a" is older
        assert (outcomes(result), result.examined) == ({"a": ("pruned", 8, 2)}, 2)
        assert await store.list_threads() == ["c"]
        assert await read_all(store, "c") == c
        # a thread whose last event was created at the cutoff itself is not older than it
        assert outcomes(await store.prune(older_than=c[-1].created_at)) == {}
        assert await store.list_threads() == ["c"]

    async def test_prune_pages_through_many_threads(
        self, store: RunEventStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        await store.put_batch([NewEvent(thread_id=f"t{n:02}", run_id=f"r{n}", event_type="tool.call",
                                        category="trace", created_at=OLD) for n in range(21)])
        young = await old_thread(store, "t10-young", runs=1, at=None)
        await store.put_batch(run_events("t99", "last", answers=9))  # 12 events: 3 pages of 4
        monkeypatch.setattr(retention, "PRUNE_PAGE", 4)  # threads listed, events read, 4 at a time
        result = await store.prune(older_than=MONTH)
        assert (len(result.pruned), result.examined, result.events, result.kept) == (22, 23, 33, [])
        assert await store.list_threads() == ["t10-young"]
        assert await read_all(store, "t10-young") == young

    async def test_prune_removes_and_archives_a_run_of_many_pages(self, store: RunEventStore) -> None:
        """More events than one page of reads or copies (1,000), or one step of a backend's delete."""
        big = await store.put_batch(run_events("big", "huge", answers=1_197))
        await store.put_run(RunRow(run_id="huge", thread_id="big", status=RunStatus.SUCCESS,
                                   updated_at=OLD))
        async with MemoryRunEventStore() as archive:
            result = await store.prune(older_than=MONTH, archive=archive)
            assert [(item.outcome, item.events, item.runs, item.archived) for item in result.threads] == [
                ("pruned", 1_200, 1, 1_200)]
            assert await read_all(archive, "big") == big
        await assert_gone(store, "big", ["huge"])

    async def test_prune_archive_keeps_seq_event_ids_and_rows(self, store: RunEventStore) -> None:
        old = await old_thread(store, "old", runs=2, user_id="u")
        rows = await store.list_runs("old")
        young = await old_thread(store, "young", runs=1, at=None)
        async with MemoryRunEventStore() as archive:
            result = await store.prune(older_than=MONTH, archive=archive)
            assert [(item.thread_id, item.outcome, item.events, item.runs, item.archived)
                    for item in result.threads] == [("old", "pruned", 8, 2, 8)]
            assert await read_all(archive, "old") == old  # every field: seq, event id, time, payload
            assert await archive.list_runs() == rows
            assert await archive.list_threads() == ["old"]
            await assert_gone(store, "old", ["old-r0", "old-r1"])
            assert await read_all(store, "young") == young
            # the thread id is used again and pruned again: the archive continues it at the same seqs
            later = await store.put_batch(run_events("old", "later"))
            assert [event.seq for event in later] == [9, 10, 11, 12]
            result = await store.prune(older_than=MONTH, archive=archive)
            assert outcomes(result) == {"old": ("pruned", 4, 0)}
            assert result.threads[0].archived == 4
            assert await read_all(archive, "old") == old + later

    async def test_prune_keeps_a_thread_the_archive_cannot_take_with_its_seqs(
        self, store: RunEventStore
    ) -> None:
        holes = await old_thread(store, "holes", runs=3)
        await store.delete_by_run("holes", "holes-r0")  # seqs 1-4 are gone: a copy would renumber
        fine = await old_thread(store, "fine", runs=1)
        taken = await old_thread(store, "taken", runs=1)
        async with MemoryRunEventStore() as archive:
            other = await archive.put(thread_id="taken", run_id="other", event_type="tool.call",
                                      category="trace")
            result = await store.prune(older_than=MONTH, archive=archive)
            assert {item.thread_id: (item.outcome, item.events) for item in result.threads} == {
                "fine": ("pruned", 4), "holes": ("not_archived", 0), "taken": ("not_archived", 0)}
            assert all(item.reason for item in result.kept)
            assert await archive.list_events("holes") == []
            assert await read_all(archive, "taken") == [other]
            assert await read_all(archive, "fine") == fine
        assert await read_all(store, "holes") == holes[4:]
        assert [row.run_id for row in await store.list_runs("holes")] == ["holes-r1", "holes-r2"]
        assert await read_all(store, "taken") == taken
        assert await store.list_threads() == ["holes", "taken"]

    async def test_prune_again_is_a_no_op(self, store: RunEventStore) -> None:
        await old_thread(store, "old", runs=2)
        busy = await old_thread(store, "busy", runs=1, status=RunStatus.RUNNING)
        young = await old_thread(store, "young", runs=1, at=None)
        rows = await store.list_runs()
        async with MemoryRunEventStore() as archive:
            first = await store.prune(older_than=MONTH, archive=archive)
            assert outcomes(first) == {"busy": ("running", 0, 0), "old": ("pruned", 8, 2)}
            archived = await read_all(archive, "old")
            for _ in range(2):
                again = await store.prune(older_than=MONTH, archive=archive)
                assert (outcomes(again), again.examined) == ({"busy": ("running", 0, 0)}, 2)
                assert (again.events, again.runs) == (0, 0)
                assert await read_all(archive, "old") == archived
                assert await archive.list_threads() == ["old"]
        assert await store.list_threads() == ["busy", "young"]
        assert await read_all(store, "busy") == busy
        assert await read_all(store, "young") == young
        assert await store.list_runs() == [row for row in rows if row.thread_id != "old"]
        assert await store.last_seq("old") == 8
