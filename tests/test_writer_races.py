"""The writer's flush / close / backpressure under races a review found (each failed before its fix)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

import run_journal.writer as writer_module
from run_journal import JournalError, RetryPolicy, RunEventStore, RunJournal
from run_journal.envelope import NewEvent
from run_journal.runs import RunRow, RunStatus
from run_journal.stores.memory import MemoryRunEventStore
from run_journal.writer import EventWriter

FAST = RetryPolicy(attempts=2, initial_delay=0.001, max_delay=0.002)


def event(n: int) -> NewEvent:
    return NewEvent(thread_id="t", run_id="r", event_type="workspace.file.write", category="trace",
                    content={"n": n}, event_id=f"e{n}")


def start() -> NewEvent:
    return NewEvent(thread_id="t", run_id="r", event_type="run.start", category="trace", event_id="start")


class SlowStore(MemoryRunEventStore):
    """A memory store whose writes can be slowed down or made to fail."""

    def __init__(self, append_delay: float = 0.0) -> None:
        super().__init__()
        self.append_delay = append_delay
        self.fail_rows = False

    async def _append(self, batch: Any) -> Any:
        await asyncio.sleep(self.append_delay)
        return await super()._append(batch)

    async def put_run(self, row: RunRow) -> RunRow:
        if self.fail_rows:
            raise ConnectionError("row store down")
        return await super().put_run(row)


class Rows:
    """The journal's row source: a run row with a changing message count."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, status: RunStatus) -> RunRow:
        return RunRow(run_id="r", thread_id="t", status=status, message_count=self.count)


async def stored_row(store: MemoryRunEventStore) -> RunRow:
    row = await store.get_run("r")
    assert row is not None
    return row


@pytest.mark.parametrize("closing", [False, True])
async def test_a_flush_during_a_timer_drain_returns_after_the_row_and_reports_its_failure(
    closing: bool,
) -> None:
    store, rows = SlowStore(), Rows()
    writer = EventWriter(store, rows, flush_interval=0.02, retry=FAST)
    rows.count = 1
    writer.submit(start())
    await writer.flush()
    store.append_delay = 0.2
    rows.count = 2
    writer.submit(event(2))
    await asyncio.sleep(0.05)  # the timer's drain is inside the store, not forcing the row
    await writer.flush()
    assert (await stored_row(store)).message_count == 2  # written before the flush returned
    rows.count = 3
    writer.submit(event(3))
    await asyncio.sleep(0.05)
    store.fail_rows = True
    with pytest.raises(JournalError, match="row store down"):
        await writer.flush(closing=closing)


async def test_a_cancelled_close_keeps_the_store_it_opened_and_a_second_close_finishes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = SlowStore(append_delay=0.3)
    monkeypatch.setattr(writer_module, "open_store", lambda url: store)
    writer = EventWriter("memory://", Rows(), flush_interval=0.02, retry=FAST)
    writer.submit(start())
    writer.submit(event(1))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(writer.flush(closing=True), 0.1)
    assert not store._closed  # the drain it started is still writing
    await writer.flush(closing=True)
    assert writer.stats().written == 2
    assert store._closed


def test_two_sync_closes_at_once_both_return(tmp_path: Any) -> None:
    writer = EventWriter(f"sqlite:///{tmp_path / 'closes.db'}", Rows(), flush_interval=0.02)
    writer.submit(start())  # no running loop: a private writer thread
    for n in range(1, 50):
        writer.submit(event(n))
    results: list[str] = []
    threads = [threading.Thread(target=lambda: (writer.close_blocking(), results.append("ok")))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert results == ["ok", "ok"]
    assert writer.stats().written == 50


def test_a_flush_racing_a_sync_close_from_another_thread_returns() -> None:
    for _ in range(100):
        writer = EventWriter(MemoryRunEventStore(), Rows(), flush_interval=0.001)
        writer.submit(start())
        stop, errors = threading.Event(), []

        def flush_until_stopped(target: EventWriter = writer, done: threading.Event = stop,
                                found: list[BaseException] = errors) -> None:
            while not done.is_set():
                try:
                    asyncio.run(target.flush())
                except BaseException as error:  # noqa: BLE001 - reported by the assertion below
                    found.append(error)
                    return

        flusher = threading.Thread(target=flush_until_stopped, daemon=True)
        flusher.start()
        time.sleep(0.002)
        writer.close_blocking()
        stop.set()
        flusher.join(5)
        assert not flusher.is_alive()
        assert errors == []


async def test_a_producer_thread_over_the_limit_asks_the_writer_to_drain() -> None:
    store = MemoryRunEventStore()
    writer = EventWriter(store, Rows(), flush_interval=3.0, max_pending=5, batch_size=200)
    writer.submit(start())

    def produce() -> None:
        for n in range(1, 301):
            writer.submit(event(n))
            if writer.backlogged:
                assert not writer.throttle()  # another thread: it waits here instead

    began = time.monotonic()
    await asyncio.get_running_loop().run_in_executor(None, produce)
    assert time.monotonic() - began < 2.5  # not one batch timer (3 s) per wait
    assert writer.stats().pending <= 6
    await writer.flush(closing=True)
    assert writer.stats().written == 301


@pytest.mark.parametrize("options", [{"attempts": 0}, {"initial_delay": -1}, {"multiplier": 0.5}])
def test_a_retry_policy_that_cannot_work_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="RetryPolicy"):
        RetryPolicy(**options)


def test_a_failed_close_from_another_loop_still_stops_the_private_thread() -> None:
    class Down(MemoryRunEventStore):
        async def _append(self, batch: Any) -> Any:
            raise ConnectionError("store down")

    writer = EventWriter(Down(), Rows(), flush_interval=0.02, retry=FAST)
    writer.submit(event(1))  # no running loop: a private writer thread
    thread = writer._thread
    assert thread is not None
    with pytest.raises(JournalError, match="store down"):
        asyncio.run(writer.flush(closing=True))
    thread.join(2)
    assert not thread.is_alive()
    with pytest.raises(JournalError, match="store down"):  # and it still says what is unwritten
        writer.close_blocking()


async def test_a_close_reports_events_that_arrived_during_it_and_could_not_be_written() -> None:
    class Failing(MemoryRunEventStore):
        down = False

        async def _append(self, batch: Any) -> Any:
            if self.down:
                raise ConnectionError("store down")
            return await super()._append(batch)

        async def put_run(self, row: RunRow) -> RunRow:
            if row.message_count == 2:  # while the close writes the row: one more event, then down
                writer.submit(event(3))
                self.down = True
            await asyncio.sleep(0.02)
            return await super().put_run(row)

    store, rows = Failing(), Rows()
    writer = EventWriter(store, rows, flush_interval=10, retry=FAST)
    writer.submit(event(1))
    await writer.flush()
    rows.count = 2
    writer.submit(event(2))
    with pytest.raises(JournalError, match="store down"):
        await writer.flush(closing=True)
    assert [e.event_id for e in writer.unwritten()] == ["e3"]


def test_concurrent_closes_and_flushes_from_threads_never_crash_the_writer_thread() -> None:
    crashes: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: crashes.append(args.exc_value)  # type: ignore[assignment,return-value]  # collects, returns None
    try:
        for _ in range(60):
            writer = EventWriter(MemoryRunEventStore(), Rows(), flush_interval=0.001)
            writer.submit(start())
            barrier = threading.Barrier(4)

            def run(action: str, target: EventWriter = writer, gate: threading.Barrier = barrier) -> None:
                gate.wait()
                if action == "close":
                    target.close_blocking()
                else:
                    asyncio.run(target.flush(closing=action == "aclose"))

            threads = [threading.Thread(target=run, args=(action,), daemon=True)
                       for action in ("aclose", "aclose", "flush", "close")]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(5)
            assert not any(thread.is_alive() for thread in threads)
            assert writer._thread is not None
            writer._thread.join(5)
            assert not writer._thread.is_alive()
    finally:
        threading.excepthook = previous
    assert crashes == []


@pytest.mark.parametrize("yields", range(12))
async def test_a_flush_cancelled_inside_the_driver_loses_and_repeats_nothing(
    store: RunEventStore, yields: int
) -> None:
    """Cancelled after ``yields`` loop iterations: before the store call, in the hand-off to the
    driver, while the driver writes (aiosqlite's thread, asyncpg's query, a Redis script), or after.
    The next drain writes the batch again; every event must be stored once, in order."""
    thread = f"cancel-in-driver-{yields}"
    journal = RunJournal(store, thread_id=thread)
    root = uuid.uuid4()
    journal.on_chain_start({"name": "root"}, {"messages": [HumanMessage("hi")]}, run_id=root)
    for index in range(20):
        journal.record("context:memory", content={"content_sha256": f"{index:064x}"})
    flushing = asyncio.create_task(journal.flush())
    for _ in range(yields):
        await asyncio.sleep(0)
    flushing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await flushing
    journal.on_chain_end({"messages": []}, run_id=root)
    await journal.aclose()
    events = await store.list_events(thread)
    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    assert len({event.event_id for event in events}) == len(events)
    assert [event.event_type for event in events] == [
        "run.start", "llm.human.input", *["context:memory"] * 20, "run.end"
    ]
    assert [event.content["content_sha256"] for event in events[2:-1]] == [
        f"{index:064x}" for index in range(20)
    ]
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.status == RunStatus.SUCCESS
