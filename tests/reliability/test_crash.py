"""Crash: a writer SIGKILLed in the middle of its batches loses nothing it acknowledged.

The worker prints ``[[event_id, seq], ...]`` after every ``put_batch`` that returned; the parent
kills it after a random number of acknowledgements (while it is inside the next batch), then checks
every acknowledged event is stored with the seq the worker was told, the thread is dense, SQLite's
``integrity_check`` is ok, ``run-journal URL verify`` exits 0 and new writes continue the sequence.
The next kill then hits the same store, so damage would accumulate and show.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sqlite3
import warnings
from pathlib import Path

import pytest
from conftest import backend_url  # the top-level tests/conftest.py

from run_journal import RunEvent, open_store
from run_journal.stores.urls import file_path_of
from run_journal.testing import read_all

from ._support import run_cli, spawn_worker

pytestmark = pytest.mark.reliability

GUARD = 60.0


@pytest.fixture(params=("jsonl", "sqlite", "postgres"))
def crash_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return backend_url(request.param, request, tmp_path_factory)


async def kill_mid_batch(url: str, thread_id: str, tag: str, rng: random.Random) -> dict[str, int]:
    """Run one crash worker, SIGKILL it after 1-8 acknowledgements; return what it acknowledged."""
    acked: dict[str, int] = {}
    worker = await spawn_worker("crash", url, thread_id, tag)
    assert worker.stdout is not None
    async with asyncio.timeout(GUARD):
        for _ in range(rng.randint(1, 8)):
            line = await worker.stdout.readline()
            if not line:
                stderr = await worker.stderr.read() if worker.stderr else b""
                pytest.fail(f"worker exited early: {stderr.decode()[-2000:]}")
            acked.update(dict(json.loads(line)))
        await asyncio.sleep(rng.random() * 0.02)  # land anywhere inside the next batch
        worker.send_signal(signal.SIGKILL)
        rest, _ = await worker.communicate()
    for line in rest.splitlines():  # acknowledgements printed between the last read and the kill
        if line.strip():
            acked.update(dict(json.loads(line)))
    return acked


def sqlite_integrity(url: str) -> str:
    with sqlite3.connect(file_path_of(url)) as connection:
        return str(connection.execute("PRAGMA integrity_check").fetchone()[0])


async def check_after_kill(url: str, thread_id: str, acked: dict[str, int]) -> list[RunEvent]:
    async with open_store(url) as store:
        events = await read_all(store, thread_id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1)), "seq is not dense"
        stored = {e.event_id: e.seq for e in events}
        lost = {event_id: seq for event_id, seq in acked.items() if stored.get(event_id) != seq}
        assert lost == {}, f"{len(lost)} acknowledged events missing or moved"
        assert await store.last_seq(thread_id) == len(events)
    if url.startswith("sqlite"):
        assert sqlite_integrity(url) == "ok"
    return events


async def crash_scenario(url: str, kills: int) -> dict[str, int]:
    rng = random.Random(f"{url}-{kills}")
    acked: dict[str, int] = {}
    for kill in range(kills):
        acked.update(await kill_mid_batch(url, "crash", f"k{kill}", rng))
        events = await check_after_kill(url, "crash", acked)
    code, output = await run_cli(url, "verify")
    assert code == 0, output
    async with open_store(url) as store:
        after = await store.put(thread_id="crash", run_id="after", event_type="tool.call", category="trace")
        assert after.seq == len(events) + 1
    return {"kills": kills, "acknowledged": len(acked), "stored": len(events), "lost": 0}


async def test_killed_writers_lose_no_acknowledged_event(crash_url: str) -> None:
    figures = await crash_scenario(crash_url, 3)
    print(f"crash {crash_url.split(':', maxsplit=1)[0]}: {figures}")


@pytest.mark.soak
async def test_twenty_kills_lose_no_acknowledged_event(crash_url: str) -> None:
    figures = await crash_scenario(crash_url, 20)
    print(f"crash {crash_url.split(':', maxsplit=1)[0]}: {figures}")


def events_file(root: Path) -> Path:
    (path,) = root.glob("threads/*/events-*.jsonl")
    return path


async def test_jsonl_torn_tail_is_cut_not_read(tmp_path: Path) -> None:
    """A torn last line (a writer killed inside ``write``) is never read, and the next write cuts it."""
    url = f"jsonl:///{tmp_path}/journal"
    acked = await kill_mid_batch(url, "torn", "t0", random.Random(7))
    events_path = events_file(tmp_path / "journal")
    with events_path.open("ab") as handle:
        handle.write(b'{"thread_id":"torn","seq":99999,"content":{"half a li')
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        events = await check_after_kill(url, "torn", acked)
    code, output = await run_cli(url, "verify")
    assert code == 0, output
    async with open_store(url) as store:
        after = await store.put(thread_id="torn", run_id="after", event_type="tool.call", category="trace")
        assert after.seq == len(events) + 1
    assert b"half a li" not in events_path.read_bytes()
    lines = events_path.read_bytes().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, len(events) + 2))


async def test_jsonl_damaged_committed_line_is_skipped_with_a_warning(tmp_path: Path) -> None:
    """A committed line damaged on disk is reported with a warning and skipped; reads never crash."""
    url = f"jsonl:///{tmp_path}/journal"
    async with open_store(url) as store:
        for n in range(3):
            await store.put(thread_id="bad", run_id="r", event_type="tool.call", category="trace",
                            content={"n": n})
    path = events_file(tmp_path / "journal")
    data = bytearray(path.read_bytes())
    second = data.index(b"\n") + 1
    data[second:second + 5] = b"#####"  # same length: offsets stay valid
    path.write_bytes(bytes(data))
    with pytest.warns(Warning, match="seq 2"):
        async with open_store(url) as store:
            events = await read_all(store, "bad")
    assert [e.seq for e in events] == [1, 3]
