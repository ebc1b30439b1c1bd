"""Retention: ``store.prune`` and ``run-journal URL prune`` on every backend.

Threads are made old by writing their events with a ``created_at`` 60 days back. The concurrency
test prunes while another process (a subprocess writer; a task for the in-process memory store)
writes to a young thread, which must keep every event at a dense seq.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Awaitable, Callable, Collection
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import BACKENDS, backend_url

from run_journal import NewEvent, RunEvent, RunEventStore, RunRow, RunStatus, open_store
from run_journal.cli import main
from run_journal.stores import base
from run_journal.stores.base import PruneResult
from run_journal.testing import read_all

WRITER = Path(__file__).with_name("_conformance_writer.py")
OLD = datetime.now(UTC) - timedelta(days=60)
MONTH = timedelta(days=30)
GUARD = 120.0


def run_events(thread_id: str, run_id: str, *, at: datetime | None, answers: int = 1,
               terminal: str | None = "run.end") -> list[NewEvent]:
    """One run as the journal writes it: start, human input, answers, terminal event."""
    events = [
        NewEvent(thread_id=thread_id, run_id=run_id, event_type="run.start", category="trace",
                 content={"run_name": "agent"}, created_at=at),
        NewEvent(thread_id=thread_id, run_id=run_id, event_type="llm.human.input", category="message",
                 content={"type": "human", "content": "hi"}, created_at=at),
    ]
    events += [
        NewEvent(thread_id=thread_id, run_id=run_id, event_type="llm.ai.response", category="message",
                 content={"type": "ai", "content": f"answer {n}"}, metadata={"n": n}, created_at=at)
        for n in range(answers)
    ]
    if terminal is not None:
        events.append(NewEvent(thread_id=thread_id, run_id=run_id, event_type=terminal,
                               category="outputs" if terminal == "run.end" else "error",
                               content={"output": None}, created_at=at))
    return events


async def write_thread(
    store: RunEventStore, thread_id: str, *, at: datetime | None = OLD, runs: int = 2, answers: int = 1,
    status: str = RunStatus.SUCCESS, rows: bool = True,
) -> list[RunEvent]:
    """``runs`` finished runs (rows with ``status``) whose events were all written at ``at``."""
    written: list[RunEvent] = []
    for n in range(runs):
        run_id = f"{thread_id}-r{n}"
        terminal = "run.end" if status != RunStatus.RUNNING else None
        written += await store.put_batch(run_events(thread_id, run_id, at=at, answers=answers,
                                                    terminal=terminal))
        if rows:
            moment = at or datetime.now(UTC)
            await store.put_run(RunRow(run_id=run_id, thread_id=thread_id, status=status,
                                       started_at=moment, updated_at=moment))
    return written


def outcomes(result: PruneResult) -> dict[str, str]:
    return {item.thread_id: item.outcome for item in result.threads}


# -- the contract on every backend --------------------------------------------------------------------
async def test_old_threads_go_whole_and_young_ones_stay(store: RunEventStore) -> None:
    old = await write_thread(store, "old", runs=2, answers=2)
    await write_thread(store, "old-too", runs=1)
    young = await write_thread(store, "young", at=None)
    result = await store.prune(older_than=MONTH)
    assert outcomes(result) == {"old": "pruned", "old-too": "pruned"}
    assert result.examined == 3
    assert not result.dry_run
    assert (result.events, result.runs) == (len(old) + 4, 3)
    pruned = {item.thread_id: item for item in result.threads}["old"]
    assert (pruned.events, pruned.runs, pruned.last_seq) == (10, 2, 10)
    assert pruned.last_event_at == old[-1].created_at
    assert await store.list_threads() == ["young"]
    for thread_id in ("old", "old-too"):
        assert await store.list_events(thread_id) == []
        assert await store.list_runs(thread_id) == []
        assert await store.count_messages(thread_id) == 0
    assert await store.get_run("old-r0") is None
    assert [row.thread_id for row in await store.list_runs()] == ["young", "young"]
    assert [e.event_id for e in await read_all(store, "young")] == [e.event_id for e in young]
    # the counter is kept: a pruned thread id used again never reuses a seq
    assert await store.last_seq("old") == 10
    again = await store.put(thread_id="old", run_id="new", event_type="run.start", category="trace")
    assert again.seq == 11
    assert await store.list_threads() == ["old", "young"]


async def test_a_dry_run_reports_and_changes_nothing(store: RunEventStore) -> None:
    old = await write_thread(store, "old", runs=3)
    await write_thread(store, "young", at=None)
    result = await store.prune(older_than=MONTH, dry_run=True)
    assert result.dry_run
    assert [(item.thread_id, item.outcome, item.events, item.runs) for item in result.threads] == [
        ("old", "would_prune", len(old), 3)]
    assert await read_all(store, "old") == old
    assert len(await store.list_runs("old")) == 3


async def test_running_runs_are_never_pruned(store: RunEventStore) -> None:
    await write_thread(store, "row-running", status=RunStatus.RUNNING, runs=1)
    # a run whose last lifecycle event is run.start, with a finished row (and one without a row)
    await store.put_batch(run_events("started", "s1", at=OLD, terminal=None))
    await store.put_run(RunRow(run_id="s1", thread_id="started", status=RunStatus.SUCCESS,
                               updated_at=OLD))
    await store.put_batch(run_events("started-no-row", "s2", at=OLD, terminal=None))
    # pending: live when touched after the limit (a run about to start), stale before it
    await write_thread(store, "pending-fresh", rows=False, runs=1)
    await store.put_run(RunRow(run_id="p1", thread_id="pending-fresh", status=RunStatus.PENDING))
    await write_thread(store, "pending-stale", rows=False, runs=1)
    await store.put_run(RunRow(run_id="p2", thread_id="pending-stale", status=RunStatus.PENDING,
                               updated_at=OLD))
    result = await store.prune(older_than=MONTH)
    assert outcomes(result) == {
        "row-running": "running", "started": "running", "started-no-row": "running",
        "pending-fresh": "running", "pending-stale": "pruned",
    }
    reasons = {item.thread_id: item.reason for item in result.kept}
    assert reasons["started"] == "run 's1' is still running"
    assert reasons["row-running"] == "run 'row-running-r0' is still running"
    assert sorted(await store.list_threads()) == [
        "pending-fresh", "row-running", "started", "started-no-row"]
    assert await store.get_run("p2") is None
    assert await store.get_run("p1") is not None


async def test_events_of_runs_without_a_row_and_rows_without_events_go_too(store: RunEventStore) -> None:
    await write_thread(store, "raw", rows=False, runs=3)
    await store.put_batch([NewEvent(thread_id="raw", run_id=f"loose-{n}", event_type="tool.call",
                                    category="trace", created_at=OLD) for n in range(5)])
    await store.put_run(RunRow(run_id="no-events", thread_id="raw", status=RunStatus.ERROR,
                               updated_at=OLD))
    result = await store.prune(older_than=MONTH)
    assert [(item.outcome, item.events, item.runs) for item in result.threads] == [("pruned", 17, 1)]
    assert await store.list_events("raw") == []
    assert await store.get_run("no-events") is None


async def test_thread_id_and_a_moment_limit_what_is_pruned(store: RunEventStore) -> None:
    await write_thread(store, "a")
    await write_thread(store, "b")
    await write_thread(store, "c", at=OLD + timedelta(days=10))
    result = await store.prune(older_than=MONTH, thread_id="b")
    assert (outcomes(result), result.examined) == ({"b": "pruned"}, 1)
    assert await store.list_threads() == ["a", "c"]
    result = await store.prune(older_than=OLD + timedelta(days=5))  # a moment: only "a" is older
    assert outcomes(result) == {"a": "pruned"}
    assert await store.list_threads() == ["c"]
    assert outcomes(await store.prune(older_than=MONTH, thread_id="nobody")) == {}


async def test_many_threads_and_events_are_paged(
    store: RunEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.put_batch([NewEvent(thread_id=f"t{n:03}", run_id="r", event_type="tool.call",
                                    category="trace", created_at=OLD) for n in range(25)])
    await write_thread(store, "young", at=None, runs=1)
    monkeypatch.setattr(base, "PRUNE_PAGE", 4)  # small pages: the listing and the reads page often
    result = await store.prune(older_than=MONTH)
    assert (len(result.pruned), result.examined, result.events) == (25, 26, 25)
    assert await store.list_threads() == ["young"]


async def test_the_archive_keeps_seq_and_rows(
    store: RunEventStore, tmp_path_factory: pytest.TempPathFactory
) -> None:
    archive_url = f"jsonl:///{tmp_path_factory.mktemp('archive')}/archive"
    old = await write_thread(store, "old", runs=2, answers=3)
    rows = await store.list_runs("old")
    await write_thread(store, "young", at=None, runs=1)
    result = await store.prune(older_than=MONTH, archive=archive_url)
    assert [(item.outcome, item.archived, item.events) for item in result.threads] == [
        ("pruned", len(old), len(old))]
    async with open_store(archive_url) as archive:
        assert await read_all(archive, "old") == old  # every field, seq included
        assert await archive.list_runs("old") == rows
        assert await archive.list_threads() == ["old"]
        # the thread id is used again, then pruned again: the archive continues it, seq kept
        later = await store.put_batch(run_events("old", "later", at=OLD))
        assert later[0].seq == len(old) + 1
        result = await store.prune(older_than=MONTH, archive=archive)
        assert outcomes(result) == {"old": "pruned"}
        assert await read_all(archive, "old") == old + later
    assert await store.list_threads() == ["young"]


async def test_an_archive_that_cannot_keep_seq_keeps_the_thread(store: RunEventStore) -> None:
    await write_thread(store, "holes", runs=3)
    await store.delete_by_run("holes", "holes-r0")  # seq 1-4 are gone: a copy would start at 1
    await write_thread(store, "fine", runs=1)
    async with open_store("memory://") as archive:
        await archive.put(thread_id="taken", run_id="other", event_type="tool.call", category="trace")
        await write_thread(store, "taken", runs=1)
        result = await store.prune(older_than=MONTH, archive=archive)
        assert outcomes(result) == {"holes": "not_archived", "fine": "pruned", "taken": "not_archived"}
        reasons = {item.thread_id: item.reason for item in result.kept}
        assert "seq 5 would be renumbered" in reasons["holes"]
        assert "seq 1 of this thread holds another event in the archive" in reasons["taken"]
        assert await archive.list_events("holes") == []
        assert len(await archive.list_events("fine")) == 4
    assert len(await store.list_events("holes")) == 8
    assert len(await store.list_runs("holes")) == 2
    assert sorted(await store.list_threads()) == ["holes", "taken"]


async def test_an_archive_that_stopped_half_way_is_completed(store: RunEventStore) -> None:
    events = await write_thread(store, "old", runs=2)
    async with open_store("memory://") as archive:
        await archive.put_batch([event.as_new_event() for event in events[:3]])  # an earlier try
        result = await store.prune(older_than=MONTH, archive=archive)
        assert [(item.outcome, item.archived) for item in result.threads] == [("pruned", 8)]
        assert await read_all(archive, "old") == events


async def test_pruned_run_ids_are_free_again_but_not_in_the_archive(store: RunEventStore) -> None:
    await write_thread(store, "old", runs=1)  # run "old-r0"
    async with open_store("memory://") as archive:
        assert outcomes(await store.prune(older_than=MONTH, archive=archive)) == {"old": "pruned"}
        # the store forgot the run id, as delete_by_run does; the archive still names that run
        await store.put_batch(run_events("other", "old-r0", at=OLD))
        result = await store.prune(older_than=MONTH, archive=archive)
        assert outcomes(result) == {"other": "not_archived"}
        assert "run id 'old-r0' is already used by another run" in result.kept[0].reason
    assert len(await store.list_events("other")) == 4


async def test_arguments_are_checked(store: RunEventStore) -> None:
    with pytest.raises(ValueError, match="non-negative"):
        await store.prune(older_than=timedelta(days=-1))
    with pytest.raises(ValueError, match="timezone-aware"):
        await store.prune(older_than=datetime(2020, 1, 1))  # a naive moment: refused
    with pytest.raises(ValueError, match="thread_id"):
        await store.prune(older_than=MONTH, thread_id="")
    with pytest.raises(TypeError, match="archive"):
        await store.prune(older_than=MONTH, archive=42)  # type: ignore[arg-type]  # the wrong type is the point
    with pytest.raises(ValueError, match="the archive is the store being pruned"):
        await store.prune(older_than=MONTH, archive=store)


async def test_a_write_just_before_the_delete_keeps_the_whole_thread(store: RunEventStore) -> None:
    old = await write_thread(store, "busy", runs=2)
    original = store._delete_thread_through
    fresh: list[RunEvent] = []

    async def write_first(thread_id: str, through_seq: int, run_ids: Collection[str]) -> int | None:
        fresh.extend(await store.put_batch(run_events("busy", "late", at=None)))
        return await original(thread_id, through_seq, run_ids)

    store._delete_thread_through = write_first  # type: ignore[method-assign]  # interleave a write
    result = await store.prune(older_than=MONTH)
    assert [(item.outcome, item.events, item.runs) for item in result.threads] == [("resumed", 0, 0)]
    assert await read_all(store, "busy") == old + fresh
    assert len(await store.list_runs("busy")) == 2


async def test_a_write_between_two_runs_stops_the_prune(store: RunEventStore) -> None:
    await write_thread(store, "busy", runs=2)
    original = store._delete_run_through
    fresh: list[RunEvent] = []

    async def run_by_run(thread_id: str, through_seq: int, run_ids: Collection[str]) -> int | None:
        return None

    async def delete_then_write(thread_id: str, run_id: str, through_seq: int) -> int:
        deleted = await original(thread_id, run_id, through_seq)
        if not fresh:  # a producer writes to the thread right after the first run went
            fresh.extend(await store.put_batch(run_events("busy", "late", at=None)))
        return deleted

    store._delete_thread_through = run_by_run  # type: ignore[method-assign]  # the run-by-run path
    store._delete_run_through = delete_then_write  # type: ignore[method-assign]  # interleave a write
    result = await store.prune(older_than=MONTH)
    assert [(item.outcome, item.events, item.runs) for item in result.threads] == [("resumed", 4, 1)]
    assert fresh[0].seq == 9
    remaining = await read_all(store, "busy")
    assert [e.run_id for e in remaining] == ["busy-r1"] * 4 + ["late"] * 4
    assert [row.run_id for row in await store.list_runs("busy")] == ["busy-r1"]
    assert outcomes(await store.prune(older_than=MONTH)) == {}  # the thread is young now


async def test_a_run_row_put_while_pruning_is_kept(store: RunEventStore) -> None:
    await write_thread(store, "busy", runs=2)
    original = store._delete_thread_through

    async def put_row_first(thread_id: str, through_seq: int, run_ids: Collection[str]) -> int | None:
        await store.put_run(RunRow(run_id="starting", thread_id="busy", status=RunStatus.PENDING))
        return await original(thread_id, through_seq, run_ids)

    store._delete_thread_through = put_row_first  # type: ignore[method-assign]  # interleave a row
    result = await store.prune(older_than=MONTH)
    assert [(item.outcome, item.events, item.runs) for item in result.threads] == [("pruned", 8, 2)]
    assert await store.list_events("busy") == []
    assert [row.run_id for row in await store.list_runs("busy")] == ["starting"]


# -- pruning while another process writes --------------------------------------------------------------
@pytest.fixture(params=BACKENDS)
def any_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return backend_url(request.param, request, tmp_path_factory)


async def start_writer(url: str, store: RunEventStore) -> Callable[[], Awaitable[int]]:
    """Write batches to thread ``young`` (event ids ``p1-<n>``) from another process (a task for
    ``memory://``) until stopped; returns, once the first batch is in, a stop that gives the number
    of events acknowledged."""
    if url == "memory://":
        acknowledged = 0
        started, stopping = asyncio.Event(), asyncio.Event()

        async def write() -> None:
            nonlocal acknowledged
            while not stopping.is_set():
                await store.put_batch([
                    NewEvent(thread_id="young", run_id="p1", event_type="llm.ai.response",
                             category="message", content={"n": acknowledged + i},
                             event_id=f"p1-{acknowledged + i}")
                    for i in range(25)])
                acknowledged += 25
                started.set()
                await asyncio.sleep(0)

        task = asyncio.create_task(write())
        await started.wait()

        async def stop_task() -> int:
            stopping.set()
            await task
            return acknowledged

        return stop_task
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(WRITER), url, "young", "1", "0",  # 0: write until killed
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    await process.stdout.readline()  # it has written its first batch

    async def stop_process() -> int:
        assert process.returncode is None, "the writer stopped before the prune ended"
        process.send_signal(signal.SIGKILL)
        stdout, _ = await process.communicate()
        return int(stdout.split()[-1]) if stdout.split() else 0

    return stop_process


async def test_pruning_while_another_process_writes_to_a_young_thread(any_url: str) -> None:
    async with open_store(any_url) as store:
        for n in range(12):
            await write_thread(store, f"old-{n:02}", runs=3, answers=4)
        async with asyncio.timeout(GUARD):
            stop = await start_writer(any_url, store)
            result = await store.prune(older_than=MONTH)
            acknowledged = await stop()  # the writer ran from before the prune to after it
        assert len(result.pruned) == 12
        assert result.kept == []
        assert result.events == 12 * 3 * 7
        young = await read_all(store, "young")
        assert len(young) >= acknowledged > 0
        assert [e.seq for e in young] == list(range(1, len(young) + 1))
        assert [e.event_id for e in young] == [f"p1-{n}" for n in range(len(young))]
        assert await store.list_threads() == ["young"]
        assert await store.list_runs() == []


# -- Redis keeps its TTL option ---------------------------------------------------------------------
@pytest.mark.redis
async def test_redis_ttl_retention_and_prune_work_together(redis_prefix_url: str) -> None:
    from run_journal.stores.redis import RedisRunEventStore

    url = f"{redis_prefix_url}ttl:&ttl_seconds=3600"
    async with open_store(url) as store:
        await write_thread(store, "old")
        await write_thread(store, "young", at=None)
        assert outcomes(await store.prune(older_than=MONTH)) == {"old": "pruned"}
        assert isinstance(store, RedisRunEventStore)
        client: Any = store._client  # the test looks at the TTL of a young thread's keys
        ttl = await client.ttl(f"{store.prefix}t/young/ev")
        assert 0 < ttl <= 3600
        assert await store.list_threads() == ["young"]


# -- the command line -------------------------------------------------------------------------------
@pytest.fixture(params=[backend for backend in BACKENDS if backend != "memory"])
def shared_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return backend_url(request.param, request, tmp_path_factory)


def test_the_command_prunes_with_an_archive(
    shared_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def prepare() -> None:
        async with open_store(shared_url) as store:
            await write_thread(store, "old", runs=2)
            await write_thread(store, "busy", status=RunStatus.RUNNING, runs=1)
            await write_thread(store, "young", at=None, runs=1)

    asyncio.run(prepare())
    archive = f"jsonl:///{tmp_path}/archive"
    assert main([shared_url, "prune", "--older-than", "30d", "--archive", archive, "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "kept thread busy (running): run 'busy-r0' is still running"
    assert lines[1].startswith("would prune thread old: 8 events, 2 run rows, seq up to 8, last event ")
    assert lines[2].startswith("would prune 1 of 3 thread(s) (last event before ")
    assert lines[2].endswith("): 8 events, 2 run rows; 1 old thread(s) kept")
    assert not (tmp_path / "archive").exists()

    assert main([shared_url, "prune", "--older-than", "30d", "--archive", archive, "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r.get("thread_id"), r.get("outcome"), r.get("archived")) for r in records[:2]] == [
        ("busy", "running", 0), ("old", "pruned", 8)]
    assert {key: records[2][key] for key in ("pruned", "kept", "events", "runs", "examined")} == {
        "pruned": 1, "kept": 1, "events": 8, "runs": 2, "examined": 3}

    async def check() -> None:
        async with open_store(shared_url) as store:
            assert sorted(await store.list_threads()) == ["busy", "young"]
        async with open_store(archive) as copy:
            assert [e.seq for e in await read_all(copy, "old")] == list(range(1, 9))
            assert len(await copy.list_runs("old")) == 2

    asyncio.run(check())


def test_the_command_checks_its_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([f"sqlite:///{tmp_path}/j.db", "prune", "--older-than", "soon"])
    assert "not an age: 'soon'" in capsys.readouterr().err
    assert main([f"sqlite:///{tmp_path}/missing.db", "prune", "--older-than", "1d"]) == 1
    assert "no store at" in capsys.readouterr().err
