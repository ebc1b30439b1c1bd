"""JSONL file damage is contained and reported: intact events stay readable, no seq is used twice.

Each test damages a real store directory the way a disk, a crash or a hand edit does (a garbage line
pasted into the middle, bytes cut out of the middle, lost index words, an unreadable ``meta.json``,
one unreadable run-row file) and then checks the promises: ``verify`` names the file and the byte
offset, reads of the intact events keep working, a damaged run row affects only its run, and the next
write continues above every seq ever handed out.
"""

from __future__ import annotations

import json
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from run_journal import RunRow, open_store
from run_journal.projections import reconcile_orphans
from run_journal.stores.base import StoreError
from run_journal.testing import read_all

from ._support import run_cli

pytestmark = pytest.mark.reliability


def thread_dir(root: Path) -> Path:
    (directory,) = (root / "threads").iterdir()
    return directory


def events_file(root: Path) -> Path:
    (path,) = thread_dir(root).glob("events-*.jsonl")
    return path


async def seed(url: str, count: int = 10, thread_id: str = "t") -> list[dict[str, Any]]:
    async with open_store(url) as store:
        written = await store.put_batch([
            {"thread_id": thread_id, "run_id": "r", "event_type": "llm.human.input", "category": "message",
             "content": {"type": "human", "content": f"message {n} " + "x" * (n * 7)},
             "metadata": {"caller": "seed"}, "event_id": f"e{n}"}
            for n in range(1, count + 1)
        ])
    return [event.to_dict() for event in written]


async def read_quietly(url: str, thread_id: str = "t") -> list[dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        async with open_store(url) as store:
            return [event.to_dict() for event in await read_all(store, thread_id)]


def line_offsets(path: Path) -> list[int]:
    """Byte offset where each line starts."""
    offsets, position = [], 0
    for line in path.read_bytes().splitlines(keepends=True):
        offsets.append(position)
        position += len(line)
    return offsets


async def next_seq(url: str, thread_id: str = "t") -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        async with open_store(url) as store:
            written = await store.put(thread_id=thread_id, run_id="next", event_type="llm.human.input",
                                      category="message", content={"type": "human", "content": "next"},
                                      metadata={"caller": "seed"})
    return written.seq


async def test_a_garbage_line_in_the_middle_hides_no_event_and_is_reported(tmp_path: Path) -> None:
    url = f"jsonl:///{tmp_path}/journal"
    written = await seed(url)
    path = events_file(tmp_path / "journal")
    garbage_at = line_offsets(path)[4]  # before the line of seq 5
    data = path.read_bytes()
    path.write_bytes(data[:garbage_at] + b"#### this line is not an event ####\n" + data[garbage_at:])
    assert await read_quietly(url) == written  # every intact event, before anyone writes
    code, report = await run_cli(url, "verify")
    assert code == 1, report
    damage = f"{path.name} byte {garbage_at}: 36 bytes of damaged data before the line of seq 5"
    assert damage in report, report
    assert await next_seq(url) == 11
    assert [e["seq"] for e in await read_quietly(url)] == list(range(1, 12))


async def test_bytes_cut_from_the_middle_lose_one_event_and_never_reuse_a_seq(tmp_path: Path) -> None:
    url = f"jsonl:///{tmp_path}/journal"
    written = await seed(url)
    path = events_file(tmp_path / "journal")
    offsets = line_offsets(path)
    cut = offsets[4] + 20  # inside the line of seq 5
    data = path.read_bytes()
    path.write_bytes(data[:cut] + data[cut + 40 :])
    code, report = await run_cli(url, "verify")
    assert code == 1, report
    assert f"{path.name} byte {offsets[4]}: " in report, report  # the first span that disagrees
    intact = [event for event in written if event["seq"] != 5]
    assert await read_quietly(url) == intact
    assert await next_seq(url) == 11  # seq 10 was handed out already (and is still readable)
    code, report = await run_cli(url, "verify")
    assert "missing seq 5" in report, report
    assert [e["seq"] for e in await read_quietly(url)] == [1, 2, 3, 4, 6, 7, 8, 9, 10, 11]


async def test_lost_index_words_never_give_a_seq_twice(tmp_path: Path) -> None:
    url = f"jsonl:///{tmp_path}/journal"
    written = await seed(url)
    (index,) = thread_dir(tmp_path / "journal").glob("index-*.bin")
    with index.open("r+b") as handle:
        handle.truncate(index.stat().st_size - 16)  # the offsets of seq 9 and 10 are gone
    code, report = await run_cli(url, "verify")
    assert code == 1, report
    assert f"{index.name}: commits 10 events but holds the offsets of 8" in report, report
    assert await next_seq(url) == 11
    events = await read_quietly(url)
    assert events[:10] == written
    assert [e["seq"] for e in events] == list(range(1, 12))


async def test_a_damaged_meta_json_is_named_and_the_thread_stays_readable(tmp_path: Path) -> None:
    url = f"jsonl:///{tmp_path}/journal"
    written = await seed(url)
    meta = thread_dir(tmp_path / "journal") / "meta.json"
    meta.write_bytes(b"\xff\xfe\x00garbage")
    code, report = await run_cli(url, "verify")
    assert code == 1, report
    assert "meta.json: is not valid JSON" in report, report
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with open_store(url) as store:
            assert [e.to_dict() for e in await read_all(store, "t")] == written
            assert await store.list_threads() == ["t"]
    assert any("meta.json is not valid JSON" in str(warning.message) for warning in caught)
    assert await next_seq(url) == 11
    assert json.loads(meta.read_bytes())["thread_id"] == "t"  # the writer put a good one back
    # with two generations of data files beside it, nothing says which is current: a clear error
    (thread_dir(tmp_path / "journal") / f"events-{'0' * 32}.jsonl").write_bytes(b"")
    meta.write_bytes(b"{not json")
    async with open_store(url) as store:
        with pytest.raises(StoreError, match=r"meta\.json is not valid JSON"):
            await store.list_events("t")
        with pytest.raises(StoreError, match=r"meta\.json"):
            await store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")


async def test_one_damaged_run_row_affects_only_its_run(tmp_path: Path) -> None:
    url = f"jsonl:///{tmp_path}/journal"
    await seed(url)
    old = datetime.now(UTC) - timedelta(hours=2)
    async with open_store(url) as store:
        for run_id, status in (("r1", "success"), ("r2", "success"), ("orphan", "running")):
            await store.put_run(RunRow(run_id=run_id, thread_id="t", status=status, started_at=old,
                                       updated_at=old))
    (damaged,) = (thread_dir(tmp_path / "journal") / "runs").glob("r1-*.json")
    damaged.write_bytes(b'{"row": {"run_id": "r1", "sta')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with open_store(url) as store:
            assert [row.run_id for row in await store.list_runs()] == ["orphan", "r2"]
            assert (await store.get_run("r2")) is not None
            with pytest.raises(StoreError, match=damaged.name):
                await store.get_run("r1")
            closed = await reconcile_orphans(store, older_than=timedelta(minutes=30))
            assert [item.row.run_id for item in closed] == ["orphan"]
    assert any(damaged.name in str(warning.message) for warning in caught)
    code, report = await run_cli(url, "verify")
    assert code == 1, report
    assert f"{damaged.name}: damaged run row" in report, report
    assert report.rstrip().endswith("1 problem(s)"), report
