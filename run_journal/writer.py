"""The journal's writer: one queue, one drain task, one loop.

* **One loop, fixed at open.** The writer runs on the event loop that was running when it was created
  (or re-bound by ``async with journal`` before anything was queued). With no running loop it starts a
  private thread with a loop of its own, and the store is only ever used there: async drivers bind
  their connections to one loop.
* **One queue.** Producers (callbacks, on any thread) append events under one lock and may leave a run
  row snapshot beside them, tagged with how many events it follows. That is all they do.
* **One drain task at a time** on that loop takes the head of the queue in batches (at most
  ``batch_size`` events, after at most ``flush_interval`` seconds, at once when the run ended, a batch
  is full or someone flushes), writes it, and only then removes it from the queue. It runs while there
  is something to write and ends when the queue is empty; the next wake-up starts another. Every store
  call has a deadline (``store_timeout``) and a failed one is retried with backoff; a retry sends the
  same ``event_id``s, which stores ignore when they already have them. So events are stored once, in
  submission order, whatever fails. A call past its deadline is not retried: it fails the waiting
  flushes at once, and the next flush starts a fresh drain task while the stuck one is left to its
  driver.
* **Flushes** are (how many events, which row, future) waiters that the drain settles once that much is
  stored. When the retry budget is spent the drain fails every waiting flush with ``JournalError`` and
  stops, keeping everything; the next ``flush()`` / ``aclose()`` tries again.
* **Backpressure.** Above ``max_pending`` queued events a producer on another thread waits for room; a
  producer on the writer's own loop cannot block it, so ``submit`` tells it to ``await room()``. Nobody
  waits on a writer that failed or made no progress for ``STALL_TIMEOUT`` seconds: the run must finish.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import itertools
import logging
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Protocol, TypeVar

from run_journal.catalog import TERMINAL_RUN_EVENTS
from run_journal.envelope import NewEvent
from run_journal.runs import TERMINAL_STATUSES, RunRow
from run_journal.stores.base import RunEventStore
from run_journal.stores.urls import open_store

logger = logging.getLogger("run_journal")
STALL_TIMEOUT: Final = 1.0
"""Seconds a producer waits for the writer's progress before it stops waiting."""
T = TypeVar("T")


class JournalError(RuntimeError):
    """Events or the run row could not be written (the message says how many and why)."""


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a failed write is retried before the writer reports failure."""

    attempts: int = 5
    initial_delay: float = 0.05
    max_delay: float = 2.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.initial_delay < 0 or self.max_delay < 0 or self.multiplier < 1:
            raise ValueError("RetryPolicy needs attempts >= 1, delays >= 0 and multiplier >= 1")

    def delay(self, attempt: int) -> float:
        return float(min(self.max_delay, self.initial_delay * self.multiplier**attempt))


@dataclasses.dataclass(frozen=True, slots=True)
class JournalStats:
    """A snapshot of the writer's counters (``journal.stats``)."""

    submitted: int = 0
    written: int = 0
    pending: int = 0
    retried: int = 0
    failed_batches: int = 0
    batches: int = 0
    row_writes: int = 0
    over_limit: int = 0
    superseded: int = 0
    """Terminal events not written because the run was already closed (by ``reconcile_orphans``)."""
    callback_errors: int = 0
    last_error: str | None = None


class DeferredEvent(Protocol):
    """An event whose payload needs a store read, done by the drain in queue order (once)."""

    @property
    def known_event(self) -> NewEvent:
        """The event as far as it is known before it is resolved (for ``unwritten()``)."""

    async def resolve(self, store: RunEventStore) -> NewEvent: ...

    def patch_row(self, row: RunRow) -> RunRow:
        """A row snapshot completed with what the resolution found."""


Item = NewEvent | DeferredEvent
RowSnapshot = Callable[[], RunRow]
"""The run row as it stood when submitted, built only if the writer writes it."""


class RunExporter(Protocol):
    """Something that sends a run elsewhere once its end is stored (``otel.OtlpExporter``)."""

    async def run_ended(self, store: RunEventStore, thread_id: str, run_id: str) -> None:
        """Called once per run, on the writer's loop, off the agent's path; must not raise."""


EXPORT_WAIT: Final = 30.0
"""Seconds a close waits for the run's exporters to finish."""


class StoreTimeoutError(TimeoutError):
    """A store call did not answer within ``store_timeout`` seconds."""


class _Exhausted(Exception):
    """The retry budget of one store call is spent (``__cause__``: the last failure)."""


@dataclasses.dataclass(slots=True)
class _Waiter:
    events: int
    row: int
    future: asyncio.Future[None] | concurrent.futures.Future[None]
    """An asyncio future for a flush on the writer's loop, a thread-safe one for anyone else."""
    closing: bool = False
    """A close: once it is answered the drain task ends."""


class LoopThread:
    """An event loop running in a daemon thread of its own, for writers with no running loop: the
    store they write to lives on this loop only."""

    def __init__(self, name: str = "run-journal-writer") -> None:
        self.loop = asyncio.new_event_loop()
        self.ident: int | None = None
        started = threading.Event()
        self.thread = threading.Thread(target=self._main, args=(started,), name=name, daemon=True)
        self.thread.start()
        started.wait()

    def _main(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.ident = threading.get_ident()
        started.set()
        try:
            self.loop.run_forever()  # until stop()
            leftovers = asyncio.all_tasks(self.loop)  # store calls abandoned after their deadline
            for task in leftovers:
                task.cancel()
            if leftovers:
                self.loop.run_until_complete(asyncio.wait(leftovers, timeout=1.0))
        finally:
            self.loop.close()

    def stop(self) -> None:
        """Stop the loop and wait for the thread (from any other thread; a second call is harmless)."""
        if self.thread is threading.current_thread():
            return
        with contextlib.suppress(RuntimeError):  # closed already
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


class EventWriter:
    """Moves a journal's events and run rows into a store (see the module docstring)."""

    def __init__(self, store: RunEventStore | str, *, batch_size: int = 200, flush_interval: float = 0.1,
                 max_pending: int = 10_000, retry: RetryPolicy | None = None,
                 store_timeout: float = 30.0, worker: LoopThread | None = None,
                 exporters: Sequence[RunExporter] = ()) -> None:
        """``worker``: a loop thread shared with other writers (the store lives on it); the writer
        uses it and leaves it running when it closes."""
        if batch_size < 1 or max_pending < 1 or flush_interval < 0 or not store_timeout > 0:
            raise ValueError(
                "batch_size and max_pending must be >= 1, flush_interval >= 0, store_timeout > 0")
        self._store = None if isinstance(store, str) else store
        self._url = store if isinstance(store, str) else None
        self.batch_size, self.flush_interval, self.max_pending = batch_size, flush_interval, max_pending
        self.retry, self.store_timeout = retry or RetryPolicy(), store_timeout
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._queue: deque[Item] = deque()
        self._submitted = self._done = 0
        self._row: RowSnapshot | None = None
        self._row_after = self._row_version = self._row_stored = 0
        self._waiters: list[_Waiter] = []
        self._failure: BaseException | None = None
        self._signalled = self._stalled = self._finished = False
        self._stopped: concurrent.futures.Future[None] | None = None
        self._counts = dict.fromkeys(
            ("written", "retried", "failed_batches", "batches", "row_writes", "over_limit", "superseded"), 0)
        self._resolved: list[DeferredEvent] = []
        self._exporters = tuple(exporters)
        self._exports: set[asyncio.Task[None]] = set()
        self._exported = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._worker = worker
        self._owns_worker = False
        if worker is not None:
            self._loop, self._loop_thread = worker.loop, worker.ident
        self._task: asyncio.Task[None] | None = None
        self._woken = False
        self._timer: asyncio.TimerHandle | None = None
        self._room_free = asyncio.Event()
        self.bind_to_running_loop()

    # -- the loop ----------------------------------------------------------------------------------
    def bind_to_running_loop(self) -> None:
        """Run on the caller's running loop (if any), unless the writer has started already."""
        with contextlib.suppress(RuntimeError):
            loop = asyncio.get_running_loop()
            if self._task is None and self._worker is None and not self._submitted:
                self._loop, self._loop_thread = loop, threading.get_ident()

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._worker, self._owns_worker = LoopThread(), True
                self._loop, self._loop_thread = self._worker.loop, self._worker.ident
            return self._loop

    def _on_loop_thread(self) -> bool:
        return threading.get_ident() == self._loop_thread

    def _poke(self, urgent: bool) -> None:
        loop = self._ensure_loop()
        if self._on_loop_thread():
            self._signal(urgent)
        else:
            with contextlib.suppress(RuntimeError):  # a closed loop: flush() says what is stranded
                loop.call_soon_threadsafe(self._signal, urgent)

    def _signal(self, urgent: bool) -> None:
        """On the writer's loop: wake the drain task (started on first need) now or after the batch
        timer."""
        loop = self._loop
        assert loop is not None
        if self._finished:
            return
        if urgent:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._wake_drain()
        elif self._timer is None and not self._woken:
            self._timer = loop.call_later(self.flush_interval, self._wake_drain)

    def _wake_drain(self) -> None:
        if self._finished:
            return
        self._woken = True
        if self._task is None:
            assert self._loop is not None
            self._task = self._loop.create_task(self._drain(), name="run-journal-writer")

    # -- producers (any thread) --------------------------------------------------------------------
    def submit(self, items: Sequence[Item], row: RowSnapshot | None = None, *, urgent: bool = False) -> bool:
        """Queue events (and the run row as it stands after them). True: the caller runs on the
        writer's loop and the queue is over ``max_pending``; it should ``await room()``."""
        with self._lock:
            self._queue.extend(items)
            self._submitted += len(items)
            if row is not None:
                self._row, self._row_after, self._row_version = row, self._submitted, self._row_version + 1
            over = len(self._queue) > self.max_pending
            if over:
                self._counts["over_limit"] += len(items)
            urgent = urgent or over or len(self._queue) >= self.batch_size
            poke = urgent or not self._signalled
            self._signalled = True
        if poke:
            self._poke(urgent)
        return over and self._wait_for_room()

    def _wait_for_room(self) -> bool:
        if self._on_loop_thread():
            return True
        with self._room:
            while self.needs_room():
                before = self._done
                self._room.wait(STALL_TIMEOUT)
                self._stalled = self._done == before
        return False

    def needs_room(self) -> bool:
        return len(self._queue) > self.max_pending and not (self._failure or self._stalled)

    async def room(self) -> None:
        """On the writer's loop: yield to the drain until the queue is back under ``max_pending``."""
        while self.needs_room():
            before = self._done
            self._room_free.clear()
            self._signal(urgent=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._room_free.wait(), STALL_TIMEOUT)
            self._stalled = self._done == before

    def stats(self, callback_errors: int = 0) -> JournalStats:
        with self._lock:
            return JournalStats(submitted=self._submitted, pending=len(self._queue),
                                callback_errors=callback_errors,
                                last_error=repr(self._failure) if self._failure else None, **self._counts)

    def unwritten(self) -> tuple[list[NewEvent], RunRow | None]:
        """Events not yet stored, in order, and the run row if its latest snapshot is not stored."""
        with self._lock:
            events = [item if isinstance(item, NewEvent) else item.known_event for item in self._queue]
            row = self._row if self._row_version > self._row_stored else None
        return events, None if row is None else self._patched(row())

    # -- flush and close (any loop or thread) ------------------------------------------------------
    async def flush(self, *, closing: bool = False) -> None:
        running = asyncio.get_running_loop()
        future = self._request_flush(running if running is self._loop else None, closing=closing)
        if isinstance(future, asyncio.Future):
            await future
        elif future is not None:
            await asyncio.wrap_future(future)

    async def aclose(self) -> None:
        """Flush, then stop the drain and close a store opened from a URL. After a failure nothing
        is stopped: a later ``flush()`` / ``aclose()`` tries again."""
        await self.flush(closing=True)
        first, stopped = self._begin_stop()
        if not first:
            await asyncio.wrap_future(stopped)
            return
        try:
            loop = self._loop
            if loop is not None and asyncio.get_running_loop() is loop:
                await self._shutdown()
            elif loop is not None and self._reachable(loop):
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._shutdown(), loop))
            if self._owns_worker:
                await asyncio.get_running_loop().run_in_executor(None, self._stop_thread)
        finally:
            self._finished = True
            stopped.set_result(None)

    def close(self) -> None:
        """``aclose()`` for sync code (not on the writer's own loop thread, which it would block)."""
        loop = self._loop
        if loop is not None and self._on_loop_thread() and loop.is_running():
            raise JournalError("the journal's writer runs on this thread's event loop: use 'async with' "
                               "or 'await journal.aclose()' instead of the sync form")
        future = self._request_flush(None, closing=True)
        if future is not None:
            future.result()
        first, stopped = self._begin_stop()
        if not first:
            stopped.result()
            return
        try:
            if loop is not None and self._reachable(loop):
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result()
            self._stop_thread()
        finally:
            self._finished = True
            stopped.set_result(None)

    def close_soon(self) -> None:
        """Write what is queued, then let the drain task end, with nobody waiting (a journal that
        closes itself once its run ended). A failure is logged here and reported by a later flush."""
        try:
            future = self._request_flush(None, closing=True)
        except JournalError:
            logger.warning("run-journal: could not finish writing a run", exc_info=True)
            return
        if future is not None:
            future.add_done_callback(_log_failure)

    def _begin_stop(self) -> tuple[bool, concurrent.futures.Future[None]]:
        """Closes race from several threads: the first one stops the writer, the others wait for it."""
        with self._lock:
            first = self._stopped is None
            if self._stopped is None:
                self._stopped = concurrent.futures.Future()
            return first, self._stopped

    def _reachable(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Work handed to the writer's loop from here will run."""
        if loop.is_closed():
            return False
        if self._worker is not None:
            return True
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        return running is loop or (loop.is_running() and not self._on_loop_thread())

    def _request_flush(
        self, on_loop: asyncio.AbstractEventLoop | None, *, closing: bool = False
    ) -> asyncio.Future[None] | concurrent.futures.Future[None] | None:
        """A waiter for what is queued now (None: it is all stored), settled by the drain;
        ``on_loop`` is the writer's loop when the caller runs on it."""
        with self._lock:
            if self._done == self._submitted and self._row_stored == self._row_version:
                return None
            loop = self._loop
            if self._finished or (loop is not None and not self._reachable(loop)):
                raise JournalError(f"the journal's writer has stopped (its event loop is gone); "
                                   f"{len(self._queue)} event(s) unwritten")
            future = concurrent.futures.Future[None]() if on_loop is None else on_loop.create_future()
            waiter = _Waiter(self._submitted, self._row_version, future, closing)
            self._waiters.append(waiter)
            self._failure = None  # a flush tries the store again
            self._signalled = True
        self._poke(urgent=True)
        return waiter.future

    async def _shutdown(self) -> None:
        """On the writer's loop, once everything is written: let the drain end, close a URL store,
        and answer flushes that raced the close."""
        with self._lock:
            self._finished = True
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None and not self._task.done():
            await self._task  # a drain still answering racing flushes: nothing is left behind
        if self._exports:
            await asyncio.wait(set(self._exports), timeout=EXPORT_WAIT)
        if self._url is not None and self._store is not None:
            store, self._store = self._store, None
            try:
                await store.aclose()
            except Exception:  # everything is written; a store that fails to close loses nothing
                logger.warning("run-journal: closing the store failed", exc_info=True)
        with self._lock:
            waiters, self._waiters = self._waiters, []
            unwritten = len(self._queue)
        for waiter in waiters:
            if waiter.future.done():  # cancelled by its caller
                continue
            if waiter.events <= self._done and waiter.row <= self._row_stored:
                waiter.future.set_result(None)
            else:
                waiter.future.set_exception(
                    JournalError(f"the journal is closed; {unwritten} event(s) unwritten"))

    def _stop_thread(self) -> None:
        if self._worker is not None and self._owns_worker:
            self._worker.stop()

    # -- the drain task (the writer's loop) --------------------------------------------------------
    async def _drain(self) -> None:
        """Runs while there is something to write: passes over the queue until nobody woke it
        during the last one, then ends (the next wake-up starts a new task)."""
        try:
            while self._woken and not self._finished:
                self._woken = False
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                with self._lock:
                    self._signalled = False
                try:
                    await self._write_queue()
                except _Exhausted:
                    pass  # every waiting flush was told; nothing runs until the next one
                except Exception as error:  # a writer bug: reported like a store failure, never raised
                    logger.exception("run-journal: the writer failed")
                    self._fail(error)
                if self._settle():
                    return
        finally:
            if self._current():
                self._task = None

    async def _write_queue(self) -> None:
        while self._failure is None and self._current():
            store = self._store or await self._open_store()
            with self._lock:
                items = list(itertools.islice(self._queue, self.batch_size))
            if items:
                await self._write_batch(store, items)
            await self._write_row(store)
            if not items:
                return

    async def _open_store(self) -> RunEventStore:
        assert self._url is not None
        store = open_store(self._url)
        try:
            await self._call(store.setup)
        except BaseException:
            with contextlib.suppress(Exception):  # the failure that matters is being reported
                await store.aclose()
            raise
        self._store = store
        return store

    async def _write_batch(self, store: RunEventStore, items: list[Item]) -> None:
        events = [item if isinstance(item, NewEvent) else await self._resolve(store, item) for item in items]
        end = self._done + len(items)
        with self._lock:
            row, version = (self._row, self._row_version) if self._row_after == end else (None, 0)
        terminal = events[-1] if events[-1].event_type in TERMINAL_RUN_EVENTS else None
        if row is not None and terminal is not None and version > self._row_stored:
            try:  # the run's end in one step: last events, terminal event, final row
                final = self._patched(row())
                closed = await self._deadline(store.put_run_close(events[:-1], terminal, final))
                self._export(store, final)  # superseded too: the run ended, closed by reconciliation
            except Exception:
                logger.debug("run-journal: put_run_close failed; writing step by step", exc_info=True)
            else:
                self._taken(items, superseded=0 if closed else 1)
                self._row_written(version)
                return
        superseded, run = 0, list[NewEvent]()
        for event in events:
            if event.event_type not in TERMINAL_RUN_EVENTS:
                run.append(event)
                continue
            if run:
                await self._call(functools.partial(store.put_batch, run))
                run = []
            stored, _ = await self._call(
                functools.partial(store.put_event_if_absent, event, exclusive_types=TERMINAL_RUN_EVENTS))
            if stored.event_id != event.event_id:
                superseded += 1
                logger.warning("run-journal: run %s already has a terminal event (reconcile_orphans "
                               "closed it?); its %s is not written", event.run_id, event.event_type)
        if run:
            await self._call(functools.partial(store.put_batch, run))
        self._taken(items, superseded)

    async def _resolve(self, store: RunEventStore, item: DeferredEvent) -> NewEvent:
        event = await self._call(functools.partial(item.resolve, store))
        if item not in self._resolved:
            self._resolved.append(item)
        return event

    async def _write_row(self, store: RunEventStore) -> None:
        """The latest row snapshot, once the events it follows are stored (rows coalesce)."""
        with self._lock:
            row, version = self._row, self._row_version
            if row is None or version <= self._row_stored or self._row_after > self._done:
                return
        stored = self._patched(row())
        await self._call(functools.partial(store.put_run, stored))
        self._row_written(version)
        self._export(store, stored)

    def _export(self, store: RunEventStore, row: RunRow) -> None:
        """The run's final row is stored: hand the run to the exporters, once, in tasks of their own."""
        if self._exported or not self._exporters or row.status not in TERMINAL_STATUSES:
            return
        self._exported = True
        loop = asyncio.get_running_loop()
        for exporter in self._exporters:
            task = loop.create_task(exporter.run_ended(store, row.thread_id, row.run_id))
            self._exports.add(task)
            task.add_done_callback(self._exports.discard)

    def _patched(self, row: RunRow) -> RunRow:
        for item in self._resolved:
            row = item.patch_row(row)
        return row

    def _current(self) -> bool:
        """This is the drain task (not one abandoned after a store call that did not answer)."""
        return asyncio.current_task() is self._task

    def _taken(self, items: list[Item], superseded: int) -> None:
        """The batch is stored: off the queue, and room for waiting producers."""
        if not self._current():
            return  # an abandoned task's late write: the drain task writes the batch again
        with self._room:
            for _ in items:
                self._queue.popleft()
            self._done += len(items)
            self._counts["written"] += len(items) - superseded
            self._counts["superseded"] += superseded
            self._counts["batches"] += 1
            self._stalled = False
            self._room.notify_all()
        self._room_free.set()

    def _row_written(self, version: int) -> None:
        if not self._current():
            return
        with self._lock:
            self._row_stored = max(self._row_stored, version)
            self._counts["row_writes"] += 1

    async def _call(self, operation: Callable[[], Awaitable[T]]) -> T:
        """One store call under the retry policy, each attempt under the deadline. A refusal
        (``ValueError``: a run row of another thread, a run id already used) is not retried."""
        for attempt in itertools.count():
            try:
                return await self._deadline(operation())
            except Exception as error:
                if attempt + 1 >= self.retry.attempts or isinstance(error, ValueError):
                    # a ValueError is the store refusing what it was given: asking again cannot help
                    self._fail(error, attempts=attempt + 1)
                    raise _Exhausted from error
                with self._lock:
                    self._counts["retried"] += 1
                await asyncio.sleep(self.retry.delay(attempt))
        raise AssertionError("unreachable")

    async def _deadline(self, call: Awaitable[T]) -> T:
        """Await ``call`` with a watchdog: past ``store_timeout`` seconds, :meth:`_abandon`. A call
        that comes back (answered, failed, or its driver swallowed the cancellation) to a task that
        was abandoned meanwhile ends that task there: it writes nothing more."""
        assert self._loop is not None
        watchdog = self._loop.call_later(self.store_timeout, self._abandon, asyncio.current_task())
        try:
            result = await call
        except Exception:
            if not self._current():
                raise asyncio.CancelledError from None
            raise
        finally:
            watchdog.cancel()
        if not self._current():
            raise asyncio.CancelledError
        return result

    def _abandon(self, stuck: asyncio.Task[None] | None) -> None:
        """A store call has not answered within ``store_timeout``: the waiting flushes fail now and a
        new drain task takes over at the next flush. The stuck task is cancelled and
        left to its driver, whose cleanup after a dead connection may hang too (with PostgreSQL's
        packets dropped, asyncpg's alone takes seconds); it touches nothing of the writer again."""
        if stuck is None or stuck is not self._task or stuck.done():
            return
        stuck.cancel()
        self._task = None
        self._fail(StoreTimeoutError(f"the store did not answer within {self.store_timeout} s"))

    def _fail(self, error: BaseException, attempts: int = 1) -> None:
        """Writing stopped: every waiting flush learns why; nothing is written until a flush."""
        with self._room:
            self._failure = error
            self._counts["failed_batches"] += 1
            waiters, self._waiters = self._waiters, []
            unwritten = len(self._queue)
            self._room.notify_all()
        self._room_free.set()
        what = f"{unwritten} event(s)" if unwritten else "the run row"
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        failure = JournalError(f"run-journal could not write {what} to the store{tries}: "
                               f"{type(error).__name__}: {error}")
        failure.__cause__ = error
        for waiter in waiters:
            if not waiter.future.done():
                waiter.future.set_exception(failure)

    def _settle(self) -> bool:
        """Answer the flushes whose events and row are stored. True: a close was answered, so the
        drain task ends (and ``_finished`` keeps anything from starting it again)."""
        with self._lock:
            ready = [w for w in self._waiters if w.events <= self._done and w.row <= self._row_stored]
            if not ready:
                return False
            self._waiters = [w for w in self._waiters if w not in ready]
            closed = any(w.closing and not w.future.done() for w in ready)
            if closed:
                self._finished = True
        for waiter in ready:
            if not waiter.future.done():
                waiter.future.set_result(None)
        return closed


def _log_failure(future: concurrent.futures.Future[None] | asyncio.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.warning("run-journal: a run could not be written: %s", future.exception())
