"""A run whose worker died before its first run row is found and closed exactly once.

The journal stores a run's first batch (``run.start`` among it) before the run's first row. A worker
process runs a journaled LangGraph run against a store that never answers ``put_run`` and is
SIGKILLed once ``run.start`` is stored: the run has events and no row. ``verify`` mentions it, two
reconcilers racing on their own connections close it exactly once (one ``run.cancel``, a
``cancelled`` row), and a later reconciliation finds nothing.
"""

from __future__ import annotations

import asyncio
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

from ._support import run_cli, spawn_worker

pytestmark = pytest.mark.reliability
SHARED = ("jsonl", "sqlite", "postgres", "redis")
GUARD = 120.0


async def start_and_kill(url: str, run_id: str) -> None:
    worker = await spawn_worker("rowless", url, "rowless", run_id)
    assert worker.stdout is not None
    assert worker.stderr is not None
    line = await worker.stdout.readline()
    if line.strip() != b"started":
        pytest.fail(f"rowless worker did not start: {(await worker.stderr.read()).decode()[-3000:]}")
    worker.send_signal(signal.SIGKILL)
    await worker.wait()


async def reconcile_race(url: str) -> list[list[str]]:
    async with open_store(url) as first, open_store(url) as second:
        later = utc_now() + timedelta(hours=1)
        results = await asyncio.gather(
            *(reconcile_orphans(s, older_than=timedelta(minutes=30), now=later) for s in (first, second))
        )
    return [[item.row.run_id for item in closed] for closed in results]


async def test_a_run_killed_before_its_first_row_is_closed_exactly_once(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
    postgres_database_url: str, redis_prefix_url: str,  # set up before the loop runs (asyncio.run)
) -> None:
    urls = {backend: backend_url(backend, request, tmp_path_factory) for backend in SHARED}
    async with asyncio.timeout(GUARD):
        await asyncio.gather(*(start_and_kill(url, f"rowless-{b}") for b, url in urls.items()))
    for backend, url in urls.items():
        run_id = f"rowless-{backend}"
        async with open_store(url) as store:
            assert await store.get_run(run_id) is None, backend
            first = (await read_all(store, "rowless"))[0]
            assert first.event_type == "run.start", backend
        _, report = await run_cli(url, "verify")
        assert f"run {run_id} (thread rowless): started at seq 1" in report, (backend, report)
        assert "has no run row" in report, (backend, report)
        closed = await reconcile_race(url)
        assert sorted(closed) == [[], [run_id]], (backend, closed)
        assert await reconcile_race(url) == [[], []], backend
        async with open_store(url) as store:
            kinds = Counter(e.event_type for e in await read_all(store, "rowless"))
            assert (kinds["run.start"], kinds["run.cancel"]) == (1, 1), (backend, kinds)
            assert not {"run.end", "run.error", "run.interrupt"} & set(kinds), backend
            row = await store.get_run(run_id)
            assert row is not None, backend
            assert (row.status, row.thread_id) == (RunStatus.CANCELLED, "rowless"), backend
        _, report = await run_cli(url, "verify")
        assert "has no run row" not in report, (backend, report)
