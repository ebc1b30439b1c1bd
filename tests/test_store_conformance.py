"""Every backend runs the conformance kit, plus what only shared backends can do: many processes.

``TestStoreConformance`` is the kit (``run_journal.testing``) parametrized over the ``store_url``
fixture of ``conftest.py`` (memory, jsonl, sqlite, postgres). The multi-process tests spawn real
writer processes (``_conformance_writer.py``) against the backends that are shared between processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import pytest
from _conformance_writer import SHARED_BODIES, shared_body
from conftest import backend_url

from run_journal import RunEvent, RunEventStore, open_store
from run_journal.testing import RunEventStoreConformance, StoreFactory, new_event, read_all

WORKER = Path(__file__).with_name("_conformance_writer.py")
PROCESSES = 8
EVENTS_PER_PROCESS = 500
GUARD = 120.0


class TestStoreConformance(RunEventStoreConformance):
    @pytest.fixture
    def store_factory(self, store_url: str) -> StoreFactory:
        return lambda: open_store(store_url)


@pytest.fixture(params=("jsonl", "sqlite", "postgres", "redis"))
def shared_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh store URL of a backend that several processes can share."""
    return backend_url(request.param, request, tmp_path_factory)


async def spawn(url: str, thread_id: str, worker: int, count: int) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, str(WORKER), url, thread_id, str(worker), str(count),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


async def poll_dense(store: RunEventStore, thread_id: str, seen: list[int]) -> None:
    """Read what is new; fail if a page is not exactly the next seqs (a seq appeared below one seen)."""
    page = await store.list_events(thread_id, limit=500, after_seq=seen[-1] if seen else 0)
    assert [e.seq for e in page] == list(range(len(seen) + 1, len(seen) + 1 + len(page)))
    seen.extend(e.seq for e in page)


def assert_dense(events: list[RunEvent]) -> None:
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    duplicates = [key for key, n in Counter(e.event_id for e in events).items() if n > 1]
    assert duplicates == []


async def test_processes_write_one_thread_with_dense_seq(shared_url: str) -> None:
    async with open_store(shared_url) as store:
        workers = [await spawn(shared_url, "mp", w, EVENTS_PER_PROCESS) for w in range(PROCESSES)]
        seen: list[int] = []
        async with asyncio.timeout(GUARD):
            waiting = asyncio.gather(*(worker.communicate() for worker in workers))
            while not waiting.done():
                await poll_dense(store, "mp", seen)
                await asyncio.sleep(0.02)
            outputs = await waiting
        for worker, (_, stderr) in zip(workers, outputs, strict=True):
            assert worker.returncode == 0, stderr.decode()
        events = await read_all(store, "mp")
        assert_dense(events)
        assert len(events) == PROCESSES * EVENTS_PER_PROCESS
        assert {e.event_id for e in events} == {
            f"p{w}-{n}" for w in range(PROCESSES) for n in range(EVENTS_PER_PROCESS)
        }
        shared = [shared_body("mp", k) for k in range(SHARED_BODIES)]  # each stored once
        assert await store.list_bodies("mp") == sorted(shared, key=lambda body: body.digest)
        while len(seen) < len(events):  # catch up, a page at a time, on what the last polls left
            await poll_dense(store, "mp", seen)
        assert seen == list(range(1, len(events) + 1))


async def test_a_killed_writer_leaves_a_readable_dense_store(shared_url: str) -> None:
    """SIGKILL a writer mid-stream: what it wrote is dense, batches are whole, writing continues."""
    async with open_store(shared_url) as store:
        async with asyncio.timeout(GUARD):
            victim = await spawn(shared_url, "killed", 0, 0)
            assert victim.stdout is not None
            for _ in range(5):
                await victim.stdout.readline()
            victim.send_signal(signal.SIGKILL)
            await victim.wait()
        events = await read_all(store, "killed")
        assert_dense(events)
        batches = Counter(str(e.metadata["batch"]) for e in events)
        sizes = {str(e.metadata["batch"]): e.metadata["batch_size"] for e in events}
        assert {batch: n for batch, n in batches.items() if n != sizes[batch]} == {}
        after = await store.put(thread_id="killed", run_id="next", event_type="tool.call", category="trace")
        assert after.seq == len(events) + 1


async def test_processes_set_up_a_fresh_store_at_once(shared_url: str) -> None:
    """``setup()`` is safe when several processes run it at the same time on an empty store."""
    async with asyncio.timeout(GUARD):
        workers = [await spawn(shared_url, "fresh", w, 20) for w in range(4)]
        outputs = await asyncio.gather(*(worker.communicate() for worker in workers))
    for worker, (_, stderr) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, stderr.decode()
    async with open_store(shared_url) as store:
        events = await read_all(store, "fresh")
    assert_dense(events)
    assert len(events) == 80


async def test_follow_sees_writes_of_another_process(shared_url: str) -> None:
    async with open_store(shared_url) as store:
        store.follow_poll_interval = 0.01
        seqs: list[int] = []
        async with asyncio.timeout(GUARD):
            writer = await spawn(shared_url, "tail", 0, 100)
            async for event in store.follow("tail"):
                seqs.append(event.seq)
                if len(seqs) == 100:
                    break
            _, stderr = await writer.communicate()
        assert writer.returncode == 0, stderr.decode()
        assert seqs == list(range(1, 101))


# -- what an idle follower costs ------------------------------------------------------------------
IDLE_SECONDS = 5.0
FEW_READS_PER_SECOND = 6.0
"""An idle follower may poll (SQLite and JSONL read the thread's last seq every 0.2 s by default):
more than this per second and per follower is a follower that does not wait."""


class CountedReads:
    """Counts a store's reads: the units of work of a SQL store (each one transaction or query), the
    backend's selection hooks otherwise. Each counted call first yields to the event loop, so a
    follower that never waits cannot stop the test's own clock (it shows up as a count instead)."""

    HOOKS = ("_read", "_write", "_select_events", "_last_seq", "_count_messages", "_select_threads")

    def __init__(self, store: RunEventStore) -> None:
        self.calls = 0
        self.counting = False
        hooks = ("_read", "_write") if hasattr(store, "_read") else self.HOOKS[2:]
        for name in hooks:
            setattr(store, name, self._counted(getattr(store, name)))

    def _counted(self, hook: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def counted(*args: Any) -> Any:
            await asyncio.sleep(0)
            if self.counting:
                self.calls += 1
            return await hook(*args)

        return counted


class ServerCommands:
    """What the server itself saw over a window: committed and rolled back transactions of the test's
    PostgreSQL database, or the Redis commands that name the store's key prefix (``MONITOR``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.count: int | None = None

    @contextlib.asynccontextmanager
    async def window(self) -> AsyncIterator[None]:
        if self.url.startswith("postgresql"):
            async with self._postgres():
                yield
        elif self.url.startswith("redis"):
            async with self._redis():
                yield
        else:
            yield

    @contextlib.asynccontextmanager
    async def _postgres(self) -> AsyncIterator[None]:
        import asyncpg

        connection = await asyncpg.connect(self.url.split("?", 1)[0])
        sql = ("SELECT xact_commit + xact_rollback FROM pg_stat_database "
               "WHERE datname = current_database()")
        try:
            before = int(await connection.fetchval(sql))
            yield
            await asyncio.sleep(1.1)  # a busy backend reports its counts at most once a second
            self.count = int(await connection.fetchval(sql)) - before - 1
        finally:
            await connection.close()

    @contextlib.asynccontextmanager
    async def _redis(self) -> AsyncIterator[None]:
        import redis.asyncio as aioredis

        prefix = parse_qs(urlsplit(self.url).query)["prefix"][0]
        client = aioredis.Redis.from_url(self.url.split("?", 1)[0])
        seen = 0

        async def watch() -> None:
            nonlocal seen
            async with client.monitor() as monitor:
                while True:
                    command = await monitor.next_command()
                    if prefix in str(command.get("command", "")):
                        seen += 1

        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.sleep(0.2)  # MONITOR is on before the window opens
            yield
            self.count = seen
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
            await client.aclose()


async def idle_costs(url: str, reads: CountedReads, seconds: float) -> tuple[float, float]:
    """(store reads, server commands) per second while the followers of the store wait."""
    server = ServerCommands(url)
    async with server.window():
        reads.calls, reads.counting = 0, True
        await asyncio.sleep(seconds)
        reads.counting = False
    return reads.calls / seconds, (server.count or 0) / seconds


@pytest.mark.slow  # waits out real idle windows
async def test_an_idle_user_scoped_follow_costs_a_few_reads_a_second(store_url: str) -> None:
    """A follower of alice whose thread's latest events are bob's waits on the last seq it *saw*: it
    does not read again until the thread moves (it used to drive PostgreSQL to ~2,000 transactions
    a second and freeze the memory store's event loop), also once bob's run is deleted, and neither
    does a follower of a thread whose events were all deleted."""
    async with open_store(store_url) as store:
        await store.put_batch([
            new_event("idle", "r-alice", user_id="alice", content="hers", event_id="hers"),
            *(new_event("emptied", "r-gone", content=n) for n in range(3)),
        ])
        reads = CountedReads(store)
        scoped = cast("AsyncGenerator[RunEvent, None]", store.follow("idle", user_id="alice"))
        emptied = cast("AsyncGenerator[RunEvent, None]", store.follow("emptied"))
        async with asyncio.timeout(GUARD), aclosing(scoped), aclosing(emptied):
            assert (await anext(scoped)).event_id == "hers"
            next_scoped = asyncio.ensure_future(anext(scoped))
            await asyncio.sleep(0.3)  # the follower waits; then the thread moves on, with bob's events
            await store.put_batch([new_event("idle", "r-bob", user_id="bob", content=n) for n in range(3)])
            await asyncio.sleep(0.5)
            store_rate, server_rate = await idle_costs(store_url, reads, IDLE_SECONDS)
            print(f"idle scoped follow, {store_url.split(':', 1)[0]}: {store_rate:.1f} store reads/s, "
                  f"{server_rate:.1f} server commands/s")
            assert not next_scoped.done()
            assert store_rate <= FEW_READS_PER_SECOND, f"{store_rate:.0f} store reads/s while idle"
            assert server_rate <= FEW_READS_PER_SECOND, f"{server_rate:.0f} server commands/s while idle"

            assert await store.delete_by_run("idle", "r-bob") == 3
            assert await store.delete_by_thread("emptied") == 3
            next_emptied = asyncio.ensure_future(anext(emptied))
            await asyncio.sleep(0.5)
            store_rate, server_rate = await idle_costs(store_url, reads, 2.0)
            assert not next_scoped.done()
            assert not next_emptied.done()
            assert store_rate <= 2 * FEW_READS_PER_SECOND, f"{store_rate:.0f} store reads/s (2 followers)"
            assert server_rate <= 2 * FEW_READS_PER_SECOND, f"{server_rate:.0f} server commands/s"

            theirs = await store.put(thread_id="idle", run_id="r-bob2", event_type="tool.call",
                                     category="trace", user_id="bob")
            mine = await store.put(thread_id="idle", run_id="r-alice", event_type="llm.ai.response",
                                   category="message", content="again", user_id="alice")
            again = await store.put(thread_id="emptied", run_id="r-new", event_type="tool.call",
                                    category="trace")
            assert (await next_scoped).event_id == mine.event_id
            assert theirs.seq < mine.seq
            assert (await next_emptied).to_dict() == again.to_dict()
            assert again.seq == 4
