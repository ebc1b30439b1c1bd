"""The journal's writer: moves queued events into a store in order, in batches, with retries.

Callbacks never touch the store. They append ``NewEvent`` objects to this writer's queue (in memory,
under a lock) and the writer, an asyncio task, drains the queue through ``store.put_batch`` in
submission order, one batch at a time, so a run's events are stored in the order they happened.

Which loop runs the writer matters because async drivers (aiosqlite, asyncpg) bind their objects to
the loop that created them:

* a callback that fires with a running event loop (``ainvoke``, ``astream``...) starts the writer as a
  task on *that* loop, the loop the caller most likely opened the store in;
* a callback that fires with no running loop (``invoke``, ``stream``) starts a private background
  thread with its own loop, and the store is only ever used there.

Batching: the first queued event wakes the writer, which waits up to ``flush_interval`` seconds for
more (or until ``batch_size`` events are queued, or a flush is requested) and writes them together,
so a slow run never holds events back for longer than that.

Failures: a failed write is retried with exponential backoff (safe, because the store ignores an
``event_id`` it already has). When the retry budget is spent the writer stops (later events must not
overtake earlier ones), keeps every event in memory and reports the error from ``flush()`` /
``aclose()``; each flush tries again. Nothing is dropped.

Backpressure: the queue is bounded by ``max_pending``. A callback on another thread (a sync tool in
an executor) waits in ``throttle()`` for the writer to make room. A callback on the writer's own loop
thread must not block it; ``throttle()`` tells the journal, whose next callbacks become coroutines that
``await wait_for_room()``. Events queued while the writer is failed or not making progress are
accepted and counted in ``stats.over_limit``: the agent's run always finishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final

from run_journal.catalog import TERMINAL_RUN_EVENTS
from run_journal.envelope import NewEvent
from run_journal.runs import STATUS_AFTER, RunRow, RunStatus
from run_journal.stores.base import RunEventStore
from run_journal.stores.urls import open_store
from run_journal.writer_flush import WriterFlush
from run_journal.writer_types import DeferredEvent, JournalError, JournalStats, RetryPolicy

__all__ = ["DeferredEvent", "EventWriter", "JournalError", "JournalStats", "RetryPolicy"]

logger = logging.getLogger("run_journal")
STALL_TIMEOUT: Final = 1.0
"""Seconds a blocked producer waits for the writer's progress before it stops waiting."""


QueueItem = NewEvent | DeferredEvent
RowSource = Callable[[RunStatus], RunRow | None]


class EventWriter(WriterFlush):
    """Owns the queue, the writer task and the loop it runs on (see the module docstring)."""

    def __init__(
        self,
        store: RunEventStore | str,
        row_source: RowSource,
        *,
        batch_size: int = 200,
        flush_interval: float = 0.1,
        row_interval: float = 2.0,
        max_pending: int = 10_000,
        retry: RetryPolicy | None = None,
    ) -> None:
        if batch_size < 1 or max_pending < 1 or flush_interval < 0 or row_interval < 0:
            raise ValueError("batch_size and max_pending must be >= 1, intervals >= 0")
        self._store: RunEventStore | None = None if isinstance(store, str) else store
        self._url = store if isinstance(store, str) else None
        self._owns_store = self._url is not None
        self._row_source = row_source
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.row_interval = row_interval
        self.max_pending = max_pending
        self.retry = retry or RetryPolicy()
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._queue: deque[QueueItem] = deque()
        self._counts = {"written": 0, "retried": 0, "failed_batches": 0,
                        "batches": 0, "row_writes": 0, "over_limit": 0, "superseded": 0}
        self.callback_errors = 0
        self._failure: BaseException | None = None
        self._stalled = False
        self._status = RunStatus.PENDING
        self._row_status: RunStatus | None = None
        self._row_dirty = False
        self._last_row_at = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._thread: threading.Thread | None = None
        self._close_lock = threading.Lock()  # sync closes, one at a time
        self._handover_lock = threading.Lock()  # flushes handed to the private thread's loop
        self._handover_closed = False
        self._stop_requested = False
        self._task: asyncio.Task[None] | None = None  # the drain task in progress, if any
        self._draining = False  # a drain runs (in that task, or in a flush on the writer's loop)
        self._wakeup: asyncio.Handle | None = None  # the batch timer, or a drain due at once
        self._crash: BaseException | None = None
        self._finished = False
        self._room_event = asyncio.Event()
        self._waiting_threads = 0  # producers blocked in throttle() (on _room)
        self._waiting_tasks = 0  # callbacks awaiting wait_for_room() (on _room_event)
        self.backlogged = False
        """More than ``max_pending`` events were queued (cleared by ``throttle`` once there is room):
        callbacks check it before paying for a ``throttle()`` call."""
        self._signalled = False
        self._urgent = False
        self._closing = False
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._row_in_batch = False  # the last batch wrote the run row too (put_run_close)

    # -- producer side (any thread, hot path) -----------------------------------------------------
    def submit(self, item: QueueItem) -> None:
        """Queue one event (in memory only). Called in event order, under the journal's lock."""
        with self._lock:
            queue = self._queue
            queue.append(item)
            size = len(queue)
            if size > self.max_pending:
                self._counts["over_limit"] += 1
                self.backlogged = True
            if self._signalled and size != self.batch_size:
                return  # the writer knows there is work; a full batch pokes it again
            self._signalled = True
        if self._loop is None:
            self._start()
        self._poke()

    def write_soon(self) -> None:
        """Start writing what is queued without waiting for ``flush_interval`` (the run ended:
        nothing will join the batch, and its end should be durable as soon as possible)."""
        with self._lock:
            self._urgent = True
        self._poke()

    def throttle(self) -> bool:
        """Backpressure, called outside the journal's lock when ``backlogged``. Another thread waits
        here for room; on the writer's own loop thread waiting would deadlock, so it returns True: the
        caller must wait with ``await wait_for_room()`` before its next event."""
        if len(self._queue) <= self.max_pending:
            with self._lock:  # a submit that goes over the limit meanwhile keeps the flag
                self.backlogged = len(self._queue) > self.max_pending
            return False
        if threading.get_ident() == self._loop_thread:
            return self.needs_room()
        loop = self._loop
        if loop is not None:  # ask for a drain now: the batch timer may be far off
            with contextlib.suppress(RuntimeError):  # the loop is closed: the stall check below ends this
                loop.call_soon_threadsafe(self._drain_now)
        with self._room:
            self._waiting_threads += 1
            try:
                while len(self._queue) > self.max_pending and not (self._failure or self._stalled):
                    before = self._counts["written"]
                    self._room.wait(STALL_TIMEOUT)
                    if self._counts["written"] == before:
                        self._stalled = True  # the writer's loop is blocked or gone: stop waiting
            finally:
                self._waiting_threads -= 1
        return False

    async def wait_for_room(self) -> None:
        """On the writer's loop: yield to it until the queue is back under ``max_pending`` (or the
        writer failed or made no progress for ``STALL_TIMEOUT`` s: the run must still finish)."""
        while self.needs_room():
            before = self._counts["written"]
            self._room_event.clear()
            self._drain_now()  # instead of waiting for the batch timer
            self._waiting_tasks += 1
            try:
                await asyncio.wait_for(self._room_event.wait(), STALL_TIMEOUT)
            except TimeoutError:
                if self._counts["written"] == before:
                    self._stalled = True
            finally:
                self._waiting_tasks -= 1

    def stats(self) -> JournalStats:
        with self._lock:
            return JournalStats(
                submitted=self._submitted(), pending=len(self._queue),
                callback_errors=self.callback_errors,
                last_error=repr(self._failure) if self._failure else None, **self._counts,
            )

    def _submitted(self) -> int:
        """Every queued item is pending until a batch pops it as written or superseded."""
        return self._counts["written"] + self._counts["superseded"] + len(self._queue)

    def unwritten(self) -> list[NewEvent]:
        """Queued events not yet stored (deferred ones not yet resolved are left out)."""
        with self._lock:
            known = (item if isinstance(item, NewEvent) else item.known_event() for item in self._queue)
            return [event for event in known if event is not None]

    @property
    def loop_thread(self) -> int | None:
        """The thread whose event loop runs the writer (None before the first event)."""
        return self._loop_thread

    def needs_room(self) -> bool:
        """Over ``max_pending`` while waiting could still help (the writer is neither failed nor stuck)."""
        return len(self._queue) > self.max_pending and not (self._failure or self._stalled)

    @property
    def started(self) -> bool:
        return self._loop is not None

    async def _drain(self, *, force_row: bool) -> None:
        store = await self._ready_store()
        while store is not None and self._failure is None:
            with self._lock:
                items = list(itertools.islice(self._queue, self.batch_size))
            if not items:
                break
            events: list[NewEvent] = []
            if not await self._attempt(functools.partial(self._write_batch, store, items, events)):
                break
            with self._room:
                for _ in items:
                    self._queue.popleft()
                self._counts["written"] += len(events)
                self._counts["superseded"] += len(items) - len(events)
                self._counts["batches"] += 1
                self._stalled = False
                if self._waiting_threads:
                    self._room.notify_all()
            if self._waiting_tasks:
                self._room_event.set()
            for event in events:
                self._status = STATUS_AFTER.get(event.event_type, self._status)
            if self._row_in_batch:
                self._row_written()
            else:
                self._row_dirty = True
                await self._write_row(store, force=False)
        if store is not None and self._failure is None and (force_row or self._row_dirty):
            await self._write_row(store, force=force_row)

    async def _write_batch(
        self, store: RunEventStore, items: list[QueueItem], events: list[NewEvent]
    ) -> None:
        """One attempt (every step is idempotent, so a retry repeats it whole): resolve deferred
        events, write runs of ordinary events with ``put_batch`` and each terminal event on its own
        with ``put_if_absent(exclusive_types=TERMINAL_RUN_EVENTS)``, so a run never gets a second
        terminal event, even when ``reconcile_orphans`` closed it meanwhile. A terminal event that
        ends the batch goes with the events before it and the final run row in one
        ``put_run_close`` (one commit for the end of a run)."""
        events.clear()
        self._row_in_batch = False
        pending: list[NewEvent] = []
        for index, item in enumerate(items):
            event = item if isinstance(item, NewEvent) else await item.event(store)
            if event is None:
                continue
            if event.event_type not in TERMINAL_RUN_EVENTS:
                pending.append(event)
                continue
            row = self._final_row(event) if index == len(items) - 1 else None
            closed = None if row is None else await self._close_run(store, pending, event, row)
            if closed is not None:
                events.extend(pending)
                if closed:
                    events.append(event)
                    self._row_in_batch = True
                else:
                    self._superseded(event)
                return
            if pending:
                await store.put_batch(pending)
                events.extend(pending)
                pending = []
            if await self._write_terminal(store, event):
                events.append(event)
        if pending:
            await store.put_batch(pending)
            events.extend(pending)

    @staticmethod
    async def _close_run(
        store: RunEventStore, pending: list[NewEvent], terminal: NewEvent, row: RunRow
    ) -> bool | None:
        """``put_run_close``, or None when it failed: the caller then writes the same events step
        by step (each step idempotent), so a failure that concerns only the row (a run row owned by
        another thread) is reported by the row's own write, not charged to events already stored."""
        try:
            return await store.put_run_close(pending, terminal, row)
        except Exception:
            logger.debug("run-journal: put_run_close failed; writing step by step", exc_info=True)
            return None

    def _final_row(self, terminal: NewEvent) -> RunRow | None:
        """The run row as it stands once ``terminal`` is written (None: write it the usual way)."""
        try:
            return self._row_source(STATUS_AFTER.get(terminal.event_type, self._status))
        except Exception:  # noqa: BLE001 - _write_row reports the failure when it asks again
            return None

    async def _write_terminal(self, store: RunEventStore, event: NewEvent) -> bool:
        stored, _ = await store.put_event_if_absent(event, exclusive_types=TERMINAL_RUN_EVENTS)
        if stored.event_id == event.event_id:
            return True
        self._superseded(event)
        return False

    @staticmethod
    def _superseded(event: NewEvent) -> None:
        logger.warning(
            "run-journal: run %s already has a terminal event (reconcile_orphans closed it?); "
            "its %s is not written", event.run_id, event.event_type,
        )

    async def _ready_store(self) -> RunEventStore | None:
        if self._store is None and self._url is not None and self._failure is None:
            store = open_store(self._url)
            if await self._attempt(store.setup):
                self._store = store
            else:
                with contextlib.suppress(Exception):  # the failure that matters is already recorded
                    await store.aclose()
        return self._store

    async def _write_row(self, store: RunEventStore, *, force: bool) -> None:
        due = (
            self._status != self._row_status
            or (self._row_dirty and time.monotonic() - self._last_row_at >= self.row_interval)
            or (force and self._row_dirty)
        )
        if not due:
            return
        try:
            row = self._row_source(self._status)
        except Exception as error:  # noqa: BLE001 - reported by flush(), like a store failure
            with self._lock:
                self._failure = error
                self._room.notify_all()
            return
        if row is None or not await self._attempt(lambda: store.put_run(row)):
            return
        self._row_written()

    def _row_written(self) -> None:
        self._row_status, self._row_dirty = self._status, False
        self._last_row_at = time.monotonic()
        self._counts["row_writes"] += 1

    async def _attempt(self, operation: Callable[[], Awaitable[object]]) -> bool:
        """Run a store call with the retry policy; on exhaustion record the failure and say no."""
        for attempt in range(self.retry.attempts):
            try:
                await operation()
            except Exception as error:  # noqa: BLE001 - any store failure is retried, then reported
                last = error
                if attempt + 1 < self.retry.attempts:
                    self._counts["retried"] += 1
                    await asyncio.sleep(self.retry.delay(attempt))
            else:
                return True
        with self._lock:
            self._failure = last
            self._counts["failed_batches"] += 1
            self._room.notify_all()
        return False
