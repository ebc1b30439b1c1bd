"""What only the JSONL store promises: paths stay inside, lines survive any text, damage is contained,
processes share a thread, and a page reads a bounded number of bytes however long the thread is.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO

import pytest
from blockbuster import BlockingError, blockbuster_ctx

from run_journal import NewEvent, RunRow, open_store
from run_journal.bodies import Body
from run_journal.stores.jsonl import JsonlRunEventStore
from run_journal.stores.jsonl import log as jsonl_log
from run_journal.stores.jsonl.layout import file_name
from run_journal.stores.jsonl.log import CorruptRecordWarning

WRITER = Path(__file__).with_name("_conformance_writer.py")
GUARD = 120.0  # a hang guard, not a timing assertion


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JsonlRunEventStore]:
    async with JsonlRunEventStore(tmp_path / "journal") as opened:
        yield opened


def thread_files(store: JsonlRunEventStore, thread_id: str) -> tuple[Path, Path]:
    directory = store.root / "threads" / file_name(thread_id)
    generation = json.loads((directory / "meta.json").read_text())["generation"]
    return directory / f"events-{generation}.jsonl", directory / f"index-{generation}.bin"


async def put(store: JsonlRunEventStore, thread_id: str = "t", **fields: object) -> int:
    event = await store.put(thread_id=thread_id, run_id=str(fields.pop("run_id", "r")),
                            event_type="tool.call", category="trace", **fields)  # type: ignore[arg-type]  # test helper
    return event.seq


# -- ids never escape the directory ---------------------------------------------------------------
@pytest.mark.parametrize("bad", ["..", ".", "a/b", "/etc", "../../x", "a\\b", "nul\x00", "", "x" * 256])
async def test_ids_that_could_escape_the_directory_are_rejected(
    store: JsonlRunEventStore, tmp_path: Path, bad: str
) -> None:
    with pytest.raises(ValueError, match="thread_id"):
        await put(store, bad)
    with pytest.raises(ValueError, match="thread_id"):
        await store.list_events(bad)
    with pytest.raises(ValueError, match="run_id"):
        await store.delete_by_run("t", bad)
    with pytest.raises(ValueError, match="run_id"):
        await store.get_run(bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal"]  # noqa: ASYNC240 - a tiny check of what exists


async def test_a_thread_directory_swapped_for_a_symlink_outside_is_refused(
    store: JsonlRunEventStore, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (store.root / "threads" / file_name("t")).symlink_to(outside)
    with pytest.raises(ValueError, match="outside the store directory"):
        await put(store, "t")
    assert list(outside.iterdir()) == []


async def test_ids_differing_only_in_case_or_unsafe_characters_get_their_own_files(
    store: JsonlRunEventStore,
) -> None:
    ids = ["Thread", "thread", "th read", "th:read", "th?read", "ü" * 255]
    for thread_id in ids:
        await put(store, thread_id)
    assert len({file_name(thread_id) for thread_id in ids}) == len(ids)
    assert await store.list_threads() == sorted(ids)
    for thread_id in ids:
        assert [e.thread_id for e in await store.list_events(thread_id)] == [thread_id]


# -- lines ----------------------------------------------------------------------------------------
async def test_unicode_line_separators_round_trip_and_stay_one_line(store: JsonlRunEventStore) -> None:
    text = "a\u2028b\u2029c\u0085d\x0be\x0cf\x1cg\rh\ni"
    for _ in range(3):
        await store.put(thread_id="t", run_id="r", event_type="llm.ai.response", category="message",
                        content=text, metadata={"k": text})
    events, _ = thread_files(store, "t")
    assert events.read_bytes().count(b"\n") == 3
    assert "\u2028" in events.read_text("utf-8")  # kept raw, so a str.splitlines reader would break
    for event in await store.list_messages("t"):
        assert event.content == text
        assert event.metadata == {"k": text}


async def test_lines_are_the_record_json_form(store: JsonlRunEventStore) -> None:
    written = await store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace",
                              content={"x": [1, 2.5, None]}, user_id="u")
    events, _ = thread_files(store, "t")
    assert json.loads(events.read_bytes()) == written.to_dict()


async def test_bodies_are_files_of_the_thread_and_a_killed_writer_leaves_none_half_written(
    store: JsonlRunEventStore,
) -> None:
    body = Body.of("t", {"role": "system", "content": "stored once"})
    await store.put_batch([NewEvent("t", "r", "tool.call", "trace")], bodies=[body])
    folder = store.root / "threads" / file_name("t") / "bodies"
    assert (folder / body.digest).read_bytes() == body.data
    later = Body.of("t", "written by a killed process")
    (folder / f".{later.digest}.0123abcd.tmp").write_bytes(later.data[:5])  # killed before the link
    assert await store.list_bodies("t") == [body]
    assert await store.get_bodies("t", [later.digest]) == {}
    await store.put_bodies([later, body])
    assert await store.get_bodies("t", [later.digest]) == {later.digest: later.data}
    assert await store.delete_by_thread("t") == 1
    assert not folder.exists()


# -- damage ---------------------------------------------------------------------------------------
async def test_a_torn_last_line_is_invisible_to_readers_and_cut_by_the_next_writer(
    store: JsonlRunEventStore,
) -> None:
    assert [await put(store) for _ in range(3)] == [1, 2, 3]
    events, _ = thread_files(store, "t")
    with events.open("ab") as handle:
        handle.write(b'{"thread_id":"t","run_id":"r","seq":4,"event_ty')  # writer killed mid-line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [e.seq for e in await store.list_events("t")] == [1, 2, 3]
        assert await store.last_seq("t") == 3
    assert await put(store) == 4
    lines = events.read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert [json.loads(line)["seq"] for line in lines[:-1]] == [1, 2, 3, 4]


async def test_a_lost_index_is_rebuilt_and_a_torn_tail_skipped_with_a_warning(
    store: JsonlRunEventStore,
) -> None:
    for _ in range(3):
        await put(store)
    await put(store, run_id="gone")
    await put(store)
    await store.delete_by_run("t", "gone")  # seq 4 becomes an empty span
    events, index = thread_files(store, "t")
    with events.open("ab") as handle:
        handle.write(b'{"seq":6,"torn')
    index.unlink()
    with pytest.warns(CorruptRecordWarning, match="damaged line"):
        assert [e.seq for e in await store.list_events("t")] == [1, 2, 3, 5]
    assert await store.last_seq("t") == 5
    assert await put(store) == 6


async def test_a_corrupted_committed_line_is_skipped_with_a_warning(store: JsonlRunEventStore) -> None:
    for _ in range(3):
        await put(store)
    events, _ = thread_files(store, "t")
    data = bytearray(events.read_bytes())
    second = data.index(b"\n") + 1
    data[second : second + 5] = b"#####"
    events.write_bytes(bytes(data))
    with pytest.warns(CorruptRecordWarning, match="seq 2 is not valid JSON"):
        assert [e.seq for e in await store.list_events("t")] == [1, 3]


# -- processes ------------------------------------------------------------------------------------
async def test_four_processes_write_one_thread_with_seq_1_to_800_exactly_once(tmp_path: Path) -> None:
    url = f"jsonl:///{tmp_path}/shared"
    async with open_store(url) as store:
        async with asyncio.timeout(GUARD):
            workers = [
                await asyncio.create_subprocess_exec(
                    sys.executable, str(WRITER), url, "mp", str(worker), "200",
                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
                )
                for worker in range(4)
            ]
            for worker in workers:
                _, stderr = await worker.communicate()
                assert worker.returncode == 0, stderr.decode()
        events = await store.list_events("mp", limit=1000)
    assert [e.seq for e in events] == list(range(1, 801))
    assert sorted(e.event_id for e in events) == sorted(f"p{w}-{n}" for w in range(4) for n in range(200))


async def test_a_retry_seen_by_another_process_is_not_written_twice(tmp_path: Path) -> None:
    first = JsonlRunEventStore(tmp_path / "j")
    second = JsonlRunEventStore(tmp_path / "j")  # another process's view: its own cache
    original = await first.put(thread_id="t", run_id="r", event_type="tool.call", category="trace",
                               event_id="e", content="first")
    retried = await second.put(thread_id="t", run_id="r", event_type="tool.call", category="trace",
                               event_id="e", content="second")
    assert retried == original
    assert await second.last_seq("t") == 1


# -- bounded reads --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def long_thread(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A thread of 100,000 events: every 4th a message, every 10th tagged with task k."""
    root = tmp_path_factory.mktemp("long") / "journal"

    async def build() -> None:
        async with JsonlRunEventStore(root) as store:
            for start in range(0, 100_000, 5000):
                await store.put_batch(
                    NewEvent(thread_id="long", run_id=f"r{n // 1000}",
                             event_type="llm.ai.response" if n % 4 == 0 else "tool.call",
                             category="message" if n % 4 == 0 else "trace",
                             content={"n": n, "text": "x" * 100},
                             metadata={"task_id": "k"} if n % 10 == 0 else {})
                    for n in range(start, start + 5000)
                )

    asyncio.run(build())
    return root


@pytest.fixture
def bytes_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    counted: list[int] = []
    real = jsonl_log.read_at

    def counting(handle: IO[bytes], offset: int, size: int) -> bytes:
        data = real(handle, offset, size)
        counted.append(len(data))
        return data

    monkeypatch.setattr(jsonl_log, "read_at", counting)
    return counted


async def test_a_page_of_a_long_thread_reads_a_bounded_number_of_bytes(
    long_thread: Path, bytes_read: list[int]
) -> None:
    store = JsonlRunEventStore(long_thread)
    events_file, _ = thread_files(store, "long")
    file_size = events_file.stat().st_size
    pages = {
        "latest messages": lambda: store.list_messages("long", limit=50),
        "messages before the middle": lambda: store.list_messages("long", limit=50, before_seq=50_001),
        "messages after the middle": lambda: store.list_messages("long", limit=50, after_seq=50_000),
        "events after the middle": lambda: store.list_events("long", limit=50, after_seq=50_000),
        "task events": lambda: store.list_events("long", task_id="k", limit=50, after_seq=50_000),
    }
    for name, read in pages.items():
        bytes_read.clear()
        page = await read()
        assert len(page) == 50, name
        assert sum(bytes_read) < 400_000, (name, sum(bytes_read))
        assert sum(bytes_read) * 50 < file_size, name  # far from reading the thread
    latest = await store.list_messages("long", limit=50)
    assert [e.seq for e in latest] == list(range(99_997 - 49 * 4, 99_998, 4))


# -- the event loop never blocks ------------------------------------------------------------------
async def test_file_work_runs_off_the_event_loop(store: JsonlRunEventStore) -> None:
    with blockbuster_ctx("run_journal"):
        await put(store)
        await store.list_messages("t")
        await store.list_events("t", event_types=["tool.call"])
        await store.count_messages("t")
        await store.put_run(RunRow(run_id="r", thread_id="t"))
        await store.list_runs("t")
        await store.list_threads()
        await store.delete_by_run("t", "r")
        await store.delete_by_thread("t")


async def test_the_blocking_check_would_notice_file_work_on_the_loop(store: JsonlRunEventStore) -> None:
    with blockbuster_ctx("run_journal"), pytest.raises(BlockingError):
        store._last_seq_sync("t")  # the sync helper, called on the loop on purpose


def test_the_lock_file_is_never_removed_so_processes_share_one_inode(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with JsonlRunEventStore(tmp_path / "j") as store:
            await put(store)
            lock = store.root / "threads" / file_name("t") / "lock"
            inode = os.stat(lock).st_ino
            await store.delete_by_thread("t")
            assert os.stat(lock).st_ino == inode
            assert await put(store) == 2  # the counter outlives the events

    asyncio.run(scenario())


async def test_a_run_row_cannot_move_to_another_thread(store: JsonlRunEventStore) -> None:
    await store.put_run(RunRow(run_id="r", thread_id="t1"))
    with pytest.raises(ValueError, match="belongs to thread 't1'"):
        await store.put_run(RunRow(run_id="r", thread_id="t2"))
    assert [row.thread_id for row in await store.list_runs()] == ["t1"]


async def test_two_stores_racing_one_run_into_two_threads_give_it_one_owner(tmp_path: Path) -> None:
    """The ownership check is the run pointer's exclusive creation, not a per-thread lock, so two
    writers (processes, here two stores with worker threads) holding different thread locks can
    not both claim a run."""
    async with JsonlRunEventStore(tmp_path / "j") as a, JsonlRunEventStore(tmp_path / "j") as b:
        runs = [f"r{n}" for n in range(40)]
        results = await asyncio.gather(
            *(
                store.put_run(RunRow(run_id=run_id, thread_id=thread_id))
                for run_id in runs
                for store, thread_id in ((a, "t1"), (b, "t2"))
            ),
            return_exceptions=True,
        )
        for run_id, pair in zip(runs, zip(results[::2], results[1::2], strict=True), strict=True):
            won = [result for result in pair if isinstance(result, RunRow)]
            lost = [result for result in pair if isinstance(result, ValueError)]
            assert (len(won), len(lost)) == (1, 1), (run_id, pair)
            stored = await a.get_run(run_id)
            assert stored is not None
            assert stored.thread_id == won[0].thread_id
        listed = [row.run_id for row in await a.list_runs("t1")] + [
            row.run_id for row in await a.list_runs("t2")
        ]
        assert sorted(listed) == sorted(runs)


# -- writes that do not finish ---------------------------------------------------------------------
async def test_a_short_write_is_finished_and_a_write_without_room_is_an_error(
    store: JsonlRunEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``os.pwrite`` may write fewer bytes than asked (a full disk, a file size limit): the rest is
    written, or the call is an error with nothing committed, never an acknowledgement."""
    from run_journal.stores.jsonl import files

    real = os.pwrite
    monkeypatch.setattr(files.os, "pwrite", lambda fd, data, offset: real(fd, bytes(data)[:7], offset))
    assert [await put(store) for _ in range(2)] == [1, 2]  # 7 bytes at a time, but whole
    monkeypatch.setattr(files.os, "pwrite", lambda fd, data, offset: 0)  # no room at all
    with pytest.raises(OSError, match="wrote 0 of"):
        await put(store)
    monkeypatch.setattr(files.os, "pwrite", real)
    assert await store.last_seq("t") == 2
    assert await put(store) == 3
    assert [e.seq for e in await store.list_events("t")] == [1, 2, 3]


async def test_a_store_written_before_the_activity_order_gains_it_at_setup(tmp_path: Path) -> None:
    import shutil

    from run_journal.testing._activity import assert_history, write_history

    async with JsonlRunEventStore(tmp_path / "journal") as store:
        await write_history(store)
    root = tmp_path / "journal"
    for folder in ("activity", "users"):
        shutil.rmtree(root / folder)
    for directory in (root / "threads").iterdir():
        (directory / "activity").unlink()
        shutil.rmtree(directory / "users")
    async with JsonlRunEventStore(root) as store:
        assert (root / "activity" / ".complete").exists()
        await assert_history(store)
