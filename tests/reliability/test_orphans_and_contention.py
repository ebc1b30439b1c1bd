"""Orphans and multi-process contention on the backends several processes share.

* Orphans: a worker process runs a journaled LangGraph run and is SIGKILLed inside a tool, after its
  ``run.start`` is durable. Two reconcilers on separate store connections race to close it:
  exactly one ``run.cancel`` is written, exactly one reconciler reports it, the row is cancelled, and
  a later reconciliation finds nothing.
* Contention: several processes each make single-event ``put`` calls (one transaction per event, the
  worst case for the SQLite write lock and the PostgreSQL counter row) into one thread while the
  parent reads: seq stays dense, nobody deadlocks, every process finishes inside the guard.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter
from datetime import timedelta

import pytest
from conftest import backend_url  # the top-level tests/conftest.py

from run_journal import open_store
from run_journal.envelope import utc_now
from run_journal.projections import reconcile_orphans
from run_journal.runs import RunStatus
from run_journal.testing import read_all

from ._support import spawn_worker

pytestmark = pytest.mark.reliability

SHARED = ("jsonl", "sqlite", "postgres")
GUARD = 120.0


async def start_and_kill(url: str, run_id: str) -> None:
    worker = await spawn_worker("orphan", url, "orphans", run_id)
    assert worker.stdout is not None
    assert worker.stderr is not None
    line = await worker.stdout.readline()
    if line.strip() != b"started":
        pytest.fail(f"orphan worker did not start: {(await worker.stderr.read()).decode()[-3000:]}")
    worker.send_signal(signal.SIGKILL)
    await worker.wait()


async def reconcile_race(url: str) -> list[int]:
    """Two reconcilers with their own connections, started together; how many runs each closed."""
    async with open_store(url) as first, open_store(url) as second:
        later = utc_now() + timedelta(hours=1)
        results = await asyncio.gather(
            *(reconcile_orphans(s, older_than=timedelta(minutes=30), now=later) for s in (first, second))
        )
    return [len(closed) for closed in results]


async def test_a_killed_worker_run_is_closed_exactly_once(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
    postgres_database_url: str,  # created before the loop runs (its fixture uses asyncio.run)
) -> None:
    urls = {backend: backend_url(backend, request, tmp_path_factory) for backend in SHARED}
    async with asyncio.timeout(GUARD):
        await asyncio.gather(*(start_and_kill(url, f"orphan-{b}") for b, url in urls.items()))
    for backend, url in urls.items():
        async with open_store(url) as store:
            row = await store.get_run(f"orphan-{backend}")
            assert row is not None, backend
            assert row.status == RunStatus.RUNNING, backend
        assert sorted(await reconcile_race(url)) == [0, 1], backend
        assert await reconcile_race(url) == [0, 0], backend
        async with open_store(url) as store:
            events = await read_all(store, "orphans")
            kinds = Counter(e.event_type for e in events)
            assert kinds["run.start"] == 1, (backend, kinds)
            assert kinds["run.cancel"] == 1, (backend, kinds)
            assert not {"run.end", "run.error", "run.interrupt"} & set(kinds)
            assert events[-1].event_type == "run.cancel"
            row = await store.get_run(f"orphan-{backend}")
            assert row is not None, backend
            assert row.status == RunStatus.CANCELLED, backend
            assert [e.seq for e in events] == list(range(1, len(events) + 1))


@pytest.fixture(params=("sqlite", "postgres"))
def sql_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return backend_url(request.param, request, tmp_path_factory)


async def contention(url: str, processes: int, puts: int) -> list[float]:
    async with open_store(url) as store:  # schema ready before the race starts
        workers = [await spawn_worker("contend", url, "contend", str(w), str(puts)) for w in range(processes)]
        seen = 0
        async with asyncio.timeout(GUARD):  # a deadlock or an unbounded wait fails here
            done = asyncio.gather(*(worker.communicate() for worker in workers))
            while not done.done():
                page = await store.list_events("contend", limit=500, after_seq=seen)
                assert [e.seq for e in page] == list(range(seen + 1, seen + 1 + len(page)))
                seen += len(page)
                await asyncio.sleep(0.05)
            outputs = await done
        for worker, (_, stderr) in zip(workers, outputs, strict=True):
            assert worker.returncode == 0, stderr.decode()[-3000:]
        events = await read_all(store, "contend")
    assert [e.seq for e in events] == list(range(1, processes * puts + 1))
    assert {e.event_id for e in events} == {f"w{w}-{n}" for w in range(processes) for n in range(puts)}
    for w in range(processes):  # each writer's own events keep their order
        mine = [int(e.event_id.split("-")[1]) for e in events if e.run_id == f"w{w}"]
        assert mine == sorted(mine)
    return [json.loads(out)["slowest_put_s"] for out, _ in outputs]


async def test_processes_contend_for_one_thread(sql_url: str) -> None:
    slowest = await contention(sql_url, processes=3, puts=40)
    backend = sql_url.split(":", maxsplit=1)[0]
    print(f"contention {backend}: 3 processes x 40 puts, slowest put {max(slowest):.3f}s")


@pytest.mark.soak
async def test_many_processes_contend_for_one_thread(sql_url: str) -> None:
    slowest = await contention(sql_url, processes=8, puts=300)
    backend = sql_url.split(":", maxsplit=1)[0]
    print(f"contention {backend}: 8 processes x 300 puts, slowest put {max(slowest):.3f}s")
