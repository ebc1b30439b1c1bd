"""JSONL on a full disk: an acknowledged write is on disk at its seq, and a failed one is an error.

A worker process writes with every file it writes limited in size (``RLIMIT_FSIZE``, its signal
ignored): past the limit a write is cut short, then refused, as on a full disk. Every batch the store
acknowledged must be stored at the seqs it returned, every other batch must have raised, no seq is
handed out twice, and a journal closing on such a disk reports the failure instead of a ``success``
row without events. ``verify`` reports a log whose committed length covers bytes that are not there.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from run_journal import open_store
from run_journal.testing import read_all

from ._support import run_cli, spawn_worker

pytestmark = pytest.mark.reliability
GUARD = 120.0


def events_file(root: Path) -> Path:
    (path,) = root.glob("threads/*/events-*.jsonl")
    return path


async def seed(url: str, thread_id: str, count: int) -> None:
    async with open_store(url) as store:
        for n in range(count):
            await store.put(thread_id=thread_id, run_id="seed", event_type="llm.human.input",
                            category="message", content={"type": "human", "content": f"seed {n}"},
                            metadata={"caller": "seed"}, event_id=f"seed-{n}")


async def test_a_full_disk_acknowledges_only_what_is_written_and_never_reuses_a_seq(tmp_path: Path) -> None:
    url = f"jsonl:///{tmp_path}/journal"
    await seed(url, "full", 3)
    limit = events_file(tmp_path / "journal").stat().st_size + 30_000
    worker = await spawn_worker("fullfile", url, "full", "w", str(limit))
    async with asyncio.timeout(GUARD):
        output, errors = await worker.communicate()
    assert worker.returncode == 0, errors.decode()[-3000:]
    acked: dict[str, int] = {}
    failed: list[list[str]] = []
    for line in output.decode().splitlines():
        reply = json.loads(line)
        if isinstance(reply, dict):
            assert "File too large" in reply["error"] or "wrote" in reply["error"], reply["error"]
            failed.append(reply["ids"])
        else:
            acked.update((event_id, seq) for event_id, seq in reply)
    assert len(failed) == 3  # the limit was reached: the writes past it were errors, not acknowledged
    assert acked
    async with open_store(url) as store:
        events = await read_all(store, "full")
        stored = {event.event_id: event.seq for event in events}
        lost = {event_id: seq for event_id, seq in acked.items() if stored.get(event_id) != seq}
        assert lost == {}, f"{len(lost)} of {len(acked)} acknowledged events lost or moved"
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert len(events) == 3 + len(acked)  # a refused batch left nothing behind
        # space is back: the refused batches are written now, once, above every seq handed out
        retried = await store.put_batch([
            {"thread_id": "full", "run_id": "w", "event_type": "llm.human.input", "category": "message",
             "content": {"type": "human", "content": "again"}, "metadata": {"caller": "full"},
             "event_id": event_id}
            for ids in failed for event_id in ids if event_id not in acked
        ])
        assert min(e.seq for e in retried) == len(events) + 1
        after = await read_all(store, "full")
        assert [e.seq for e in after] == list(range(1, len(after) + 1))
        assert len({e.event_id for e in after}) == len(after)
    code, report = await run_cli(url, "verify")
    assert code == 0, report
    print(f"full disk, JSONL: {len(acked)} events acknowledged, {len(acked)} stored at their seq, "
          f"{len(failed)} batches refused with an error, 0 lost, 0 seqs reused")


async def test_a_journal_on_a_full_disk_fails_its_close_instead_of_a_success_row(tmp_path: Path) -> None:
    url = f"jsonl:///{tmp_path}/journal"
    worker = await spawn_worker("fulljournal", url, "full-journal", "20000")
    async with asyncio.timeout(GUARD):
        output, errors = await worker.communicate()
    assert worker.returncode == 0, errors.decode()[-3000:]
    (result,) = [json.loads(line) for line in output.decode().splitlines()]
    async with open_store(url) as store:
        row = await store.get_run("full-run")
        events = await read_all(store, "full-journal")
    assert "error" in result, (result, row, [e.event_type for e in events])
    assert "could not write" in result["error"]
    assert row is None or row.status != "success"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_verify_reports_a_committed_length_the_file_does_not_hold(tmp_path: Path) -> None:
    """What a short write used to leave: a commit that covers bytes that never reached the file.
    ``verify`` names the file and both lengths, and the next write keeps the lost seqs as holes."""
    url = f"jsonl:///{tmp_path}/journal"
    await seed(url, "cut", 5)
    path = events_file(tmp_path / "journal")
    size = path.stat().st_size
    with path.open("r+b") as handle:
        handle.truncate(size - 60)
    code, report = await run_cli(url, "verify")
    assert code == 1, report
    assert f"{path.name}: the index commits 5 events ending at byte {size}, but the file holds " \
           f"{size - 60} bytes" in report, report
    async with open_store(url) as store:
        after = await store.put(thread_id="cut", run_id="next", event_type="tool.call", category="trace")
        assert after.seq == 6  # seq 5 was handed out already: it stays a hole, never reused
        assert [e.seq for e in await read_all(store, "cut")] == [1, 2, 3, 4, 6]
    code, report = await run_cli(url, "verify")
    assert code == 1
    assert "missing seq 5" in report, report
