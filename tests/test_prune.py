"""Retention: ``store.prune`` and ``run-journal URL prune`` on every backend, beyond the conformance kit.

The kit (``run_journal.testing``, run by ``test_store_conformance.py``) holds prune's contract: old
threads go whole, young and running ones stay, dry runs, the thread and moment limits, paging, the
archive and its seqs, a repeated prune. Here: the archive as a URL, the reasons given, an archive
completed, run ids, argument checks, writes interleaved with a prune, pruning while another process
writes, Redis TTL and the command line.

Threads are made old by writing their events with a ``created_at`` 60 days back. The concurrency test
prunes while another process (a subprocess writer; a task for the in-process memory store) writes to a
young thread, which must keep every event at a dense seq.
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


# -- beyond the kit, on every backend ---------------------------------------------------------------------
async def test_an_archive_given_as_a_url_is_opened_for_the_prune(
    store: RunEventStore, tmp_path_factory: pytest.TempPathFactory
) -> None:
    archive_url = f"jsonl:///{tmp_path_factory.mktemp('archive')}/archive"
    old = await write_thread(store, "old", runs=2, answers=3)
    rows = await store.list_runs("old")
    result = await store.prune(older_than=MONTH, archive=archive_url)
    assert [(item.outcome, item.archived, item.events) for item in result.threads] == [
        ("pruned", len(old), len(old))]
    async with open_store(archive_url) as archive:
        assert await read_all(archive, "old") == old  # every field, seq included
        assert await archive.list_runs("old") == rows
    assert await store.list_threads() == []


async def test_why_an_archive_could_not_keep_seq(store: RunEventStore) -> None:
    await write_thread(store, "holes", runs=3)
    await store.delete_by_run("holes", "holes-r0")  # seq 1-4 are gone: a copy would start at 1
    async with open_store("memory://") as archive:
        await archive.put(thread_id="taken", run_id="other", event_type="tool.call", category="trace")
        await write_thread(store, "taken", runs=1)
        result = await store.prune(older_than=MONTH, archive=archive)
    reasons = {item.thread_id: item.reason for item in result.kept}
    assert "seq 5 would be renumbered" in reasons["holes"]
    assert "seq 1 of this thread holds another event in the archive" in reasons["taken"]


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
    assert "not a duration: 'soon'" in capsys.readouterr().err
    assert main([f"sqlite:///{tmp_path}/missing.db", "prune", "--older-than", "1d"]) == 1
    assert "no store at" in capsys.readouterr().err


async def test_an_archive_that_vanishes_with_the_process_is_refused(store: RunEventStore) -> None:
    old = await write_thread(store, "old")
    for archive in ("memory://", "MEMORY://"):
        for dry_run in (False, True):
            with pytest.raises(ValueError, match="an archive must be a durable store"):
                await store.prune(older_than=MONTH, archive=archive, dry_run=dry_run)
    assert await read_all(store, "old") == old


async def test_an_archive_that_loses_what_it_acknowledged_keeps_the_thread(
    store: RunEventStore, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The archive's copy is read back and counted before anything is removed: a SQLite archive
    whose database drops every event it just stored (a trigger) acknowledges the writes, and the
    read-back finds none of them."""
    import sqlite3

    path = tmp_path_factory.mktemp("lossy") / "archive.db"
    async with open_store(f"sqlite:///{path}"):
        pass
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TRIGGER lose AFTER INSERT ON run_journal_events "
                           "BEGIN DELETE FROM run_journal_events WHERE rowid = NEW.rowid; END")
    old = await write_thread(store, "old", runs=2, answers=3)
    result = await store.prune(older_than=MONTH, archive=f"sqlite:///{path}")
    [item] = result.threads
    assert item.outcome == "not_archived"
    assert item.reason == (f"the archive holds 0 of the {len(old)} events it took (read back before "
                           "removing anything)")
    assert await read_all(store, "old") == old
    assert len(await store.list_runs("old")) == 2


def test_the_prune_command_refuses_a_memory_archive(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path}/journal.db"

    async def fill() -> None:
        async with open_store(url) as store:
            await write_thread(store, "old")

    asyncio.run(fill())
    assert main([url, "prune", "--older-than", "30d", "--archive", "memory://"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "an archive must be a durable store, not memory://" in err
    assert main([url, "threads"]) == 0
    assert "old" in capsys.readouterr().out
