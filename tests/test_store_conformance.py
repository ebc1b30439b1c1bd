"""Every backend runs the conformance kit, plus what only shared backends can do: many processes.

``TestStoreConformance`` is the kit (``run_journal.testing``) parametrized over the ``store_url``
fixture of ``conftest.py`` (memory, jsonl, sqlite, postgres). The multi-process tests spawn real
writer processes (``_conformance_writer.py``) against the backends that are shared between processes.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import backend_url

from run_journal import RunEvent, RunEventStore, open_store
from run_journal.testing import RunEventStoreConformance, StoreFactory, read_all

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
