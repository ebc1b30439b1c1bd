"""``EventWriter``: moves a journal's events and run rows into a store.

The whole model, in five rules:

1. **One loop, decided when the writer is made.** The loop running then (async code), else the
   process's writer thread (:mod:`run_journal.writer.loops`). ``async with journal`` may move it to
   the entering loop, but only before the first event. The store is only ever used on that loop.
2. **Producers only append.** Callbacks, on any thread, add events to one queue under one lock and
   may leave a run-row snapshot beside them (built only if it is written). A producer thread over
   ``max_pending`` waits for room; a producer on an event loop never blocks: ``submit`` tells it to
   ``await room()`` if it can (``AsyncRunJournal`` does).
3. **One drain task at a time** takes the head of the queue in batches (at most ``batch_size``
   events; at once when a run ended, a batch is full or someone flushes; otherwise once the run has
   been quiet for ``flush_interval``, or its oldest queued event has waited ``max_flush_delay``),
   writes it, and only then removes it from the queue. It ends when the queue is empty. So a run whose
   events keep coming (a short run, however slow a busy machine makes it) is written in one store call:
   its events, its terminal event and its final row together (``put_run_close``). The bodies an event
   refers to (a model call's messages, tools, parameters) go in the same store call as the event.
4. **Every store call has a deadline and a retry budget.** A failure is retried with the same
   ``event_id``s (stores ignore what they have). A call past ``store_timeout`` is abandoned: the
   waiting flushes fail at once and the next flush starts a fresh drain task; the abandoned task,
   whatever its call later returns, stops there and touches nothing (:meth:`_attempt`).
5. **Flushes and closes are futures** (``concurrent.futures.Future``, awaitable from any loop and
   waitable from any thread) settled by the drain. When the retry budget is spent every waiting
   flush fails with ``JournalError`` and everything stays queued: the next flush tries again.
   Closing is one coroutine on the writer's loop (flush, finishers, release the store); ``aclose``,
   ``close`` and ``close_soon`` only wait for it in their own way.

Lock order: a journal's lock, then its writer's lock (never the other way round).
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
import time
import warnings
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Final, Protocol, TypeVar

from run_journal.bodies import Body
from run_journal.catalog import TERMINAL_RUN_EVENTS
from run_journal.envelope import NewEvent
from run_journal.runs import RowSnapshot, RunRow
from run_journal.stores.base import RunEventStore
from run_journal.writer.loops import running_loop, settled, start_on, writer_thread
from run_journal.writer.policy import (
    DEFAULT_RETRY,
    JournalError,
    JournalStats,
    RetryPolicy,
    StoreTimeoutError,
)
from run_journal.writer.sources import (
    OPEN_TIMEOUT,
    GivenStore,
    OwnedStore,
    SharedStore,
    StoreSource,
    StoreUnavailableError,
    shared_store,
)

logger = logging.getLogger("run_journal")
STALL_TIMEOUT: Final = 1.0
"""Seconds a producer waits for the writer's progress before it stops waiting."""
T = TypeVar("T")


class Deferred(Protocol):
    """An event that needs a store read before it can be written (a resumed run's origin); the
    drain resolves it in queue order."""

    @property
    def known_event(self) -> NewEvent:
        """The event as far as it is known before it is resolved (for ``unwritten()``)."""

    async def resolve(self, store: RunEventStore) -> NewEvent: ...


class WithBodies(NewEvent):
    """An event that brings the bodies it refers to which the store may not have yet: they are
    written in the same store call. ``stored`` is told their digests once they are. Everywhere else
    it is the ``NewEvent`` it was built as."""

    __slots__ = ("bodies", "stored")
    bodies: tuple[Body, ...]
    stored: Callable[[Sequence[str]], None] | None

    @classmethod
    def encoded(cls, bodies: Sequence[Body], stored: Callable[[Sequence[str]], None] | None,
                thread_id: str, run_id: str, event_type: str, category: str, content_json: str,
                metadata_json: str, created_at: datetime, user_id: str | None) -> WithBodies:
        """The event a producer encoded itself (as ``NewEvent._checked_by_producer`` takes it),
        carrying ``bodies``."""
        carrier = cls._checked_by_producer(thread_id, run_id, event_type, category, content_json,
                                           metadata_json, created_at, user_id)
        _SLOT_SETTERS["bodies"](carrier, tuple(bodies))
        _SLOT_SETTERS["stored"](carrier, stored)
        return carrier

    def delivered(self) -> None:
        """The bodies are stored: the event no longer carries them (nor its sender)."""
        _SLOT_SETTERS["bodies"](self, ())
        _SLOT_SETTERS["stored"](self, None)


_SLOT_SETTERS: Final = {name: WithBodies.__dict__[name].__set__ for name in WithBodies.__slots__}
Item = NewEvent | Deferred
RowStored = Callable[[RunEventStore, RunRow], None]
"""Told, on the writer's loop, of every run row once it is stored."""


class _Abandoned(BaseException):
    """This drain task was abandoned after a store call that did not answer: it stops here."""


class _Exhausted(Exception):
    """The retry budget of one store call is spent (every waiting flush was told)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Waiter:
    events: int
    row: int
    future: concurrent.futures.Future[None]


class EventWriter:
    """Moves a journal's events and run rows into a store (see the module docstring)."""

    def __init__(self, store: RunEventStore | str | SharedStore, *, batch_size: int = 200,
                 flush_interval: float = 1.0, max_flush_delay: float = 5.0, max_pending: int = 10_000,
                 retry: RetryPolicy | None = None,
                 store_timeout: float = 30.0, open_timeout: float = OPEN_TIMEOUT,
                 on_row_stored: RowStored | None = None,
                 finishers: Sequence[Callable[[], Awaitable[None]]] = ()) -> None:
        """``store``: a store, a store URL, or a process-wide :class:`SharedStore`. ``on_row_stored``
        and ``finishers`` (awaited when the writer closes, before its store is released) run on the
        writer's loop."""
        if batch_size < 1 or max_pending < 1 or flush_interval < 0 or max_flush_delay < 0 \
                or not store_timeout > 0 or not open_timeout > 0:
            raise ValueError("batch_size and max_pending must be >= 1, flush_interval and max_flush_delay "
                             ">= 0, store_timeout and open_timeout > 0")
        self.batch_size, self.flush_interval, self.max_pending = batch_size, flush_interval, max_pending
        self.max_flush_delay = max(max_flush_delay, flush_interval)
        self.retry, self.store_timeout = retry or DEFAULT_RETRY, store_timeout
        self._store_spec, self._open_timeout = store, open_timeout
        self._on_row_stored = on_row_stored
        self._finishers = tuple(finishers)
        self._lock = threading.Lock()
        self._queue: deque[Item] = deque()
        self._submitted = self._done = 0
        self._row: RowSnapshot | None = None
        self._row_after = self._row_version = self._row_stored = 0
        self._last_submit = self._oldest_queued = 0.0
        """Monotonic moments of the latest submit and of the first event queued after an empty queue."""
        self._waiters: list[_Waiter] = []
        self._room_waiters: list[concurrent.futures.Future[None]] = []
        self._failure: BaseException | None = None
        self._stalled = self._signalled = self._closed = self._dropped = self._acquired = False
        self._closing: concurrent.futures.Future[None] | None = None
        self._counts = dict.fromkeys(("written", "retried", "failed_batches", "batches", "row_writes",
                                      "over_limit", "superseded", "store_calls"), 0)
        # on the writer's loop only:
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._woken = False
        self._loop = None if isinstance(store, SharedStore) else running_loop()
        """None: the process's writer thread (started on first use)."""
        self._source = self._source_for(self._loop)

    def _source_for(self, loop: asyncio.AbstractEventLoop | None) -> StoreSource:
        spec = self._store_spec
        if isinstance(spec, SharedStore):
            return spec
        if isinstance(spec, str):
            return OwnedStore(spec, self._open_timeout) if loop is not None else \
                shared_store(spec, open_timeout=self._open_timeout)
        return GivenStore(spec)

    def bind_to_running_loop(self) -> None:
        """Write on the caller's running loop instead (``async with``): only before the first event."""
        loop = running_loop()
        with self._lock:
            given_shared = isinstance(self._store_spec, SharedStore)
            if loop is None or loop is self._loop or self._submitted or given_shared:
                return
            self._loop, self._source = loop, self._source_for(loop)

    # -- the loop ----------------------------------------------------------------------------------
    def _writer_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop if self._loop is not None else writer_thread().loop

    def _on_loop_thread(self) -> bool:
        running = running_loop()
        return running is not None and running is self._writer_loop()

    def _reachable(self) -> bool:
        """Work handed to the writer's loop will run: the writer thread (started on demand), or a
        loop that is running now."""
        return self._loop is None or (not self._loop.is_closed() and self._loop.is_running())

    def _poke(self, urgent: bool) -> None:
        loop = self._writer_loop()
        if running_loop() is loop:
            self._signal(urgent)
        else:
            with contextlib.suppress(RuntimeError):  # a closed loop: flush() says what is stranded
                loop.call_soon_threadsafe(self._signal, urgent)

    def _signal(self, urgent: bool) -> None:
        """On the writer's loop: wake the drain now, or when the timer says (:meth:`_on_timer`)."""
        if self._closed:
            return
        if urgent:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._wake()
        elif self._timer is None and not self._woken:
            self._timer = asyncio.get_running_loop().call_later(self.flush_interval, self._on_timer)

    def _on_timer(self) -> None:
        """Wake the drain once no event came for ``flush_interval`` or the oldest queued one has waited
        ``max_flush_delay``; until then the timer is set again (producers never touch it)."""
        due = min(self._last_submit + self.flush_interval, self._oldest_queued + self.max_flush_delay)
        left = due - time.monotonic()
        if left > 0.001 and not self._closed:
            self._timer = asyncio.get_running_loop().call_later(left, self._on_timer)
        else:
            self._timer = None
            self._wake()

    def _wake(self) -> None:
        if self._closed:
            return
        self._woken = True
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="run-journal-writer")

    # -- producers (any thread) --------------------------------------------------------------------
    def submit(self, items: Sequence[Item], row: RowSnapshot | None = None, *, urgent: bool = False) -> bool:
        """Queue events (and the run row as it stands after them). A producer thread over
        ``max_pending`` waits here for room. True: the caller runs on an event loop and the queue is
        over ``max_pending``; it should ``await room()`` (it must not block the loop)."""
        now = time.monotonic()
        if not self._submitted and isinstance(self._source, SharedStore):
            self._source.open_soon()  # while the run goes on, so its first write finds the store open
        with self._lock:
            if not self._queue:
                self._oldest_queued = now
            self._last_submit = now
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
        if not over:
            return False
        if running_loop() is not None:
            return True
        while (ticket := self._room_ticket()) is not None:
            before = self._done
            try:
                ticket.result(STALL_TIMEOUT)
            except concurrent.futures.TimeoutError:
                self._stalled = self._done == before
        return False

    async def room(self) -> None:
        """On an event loop: wait (without blocking it) until the queue is back under ``max_pending``,
        the writer failed, or it made no progress for ``STALL_TIMEOUT`` seconds."""
        while (ticket := self._room_ticket()) is not None:
            before = self._done
            self._poke(urgent=True)
            try:
                await asyncio.wait_for(settled(ticket), STALL_TIMEOUT)
            except TimeoutError:
                self._stalled = self._done == before

    def _room_ticket(self) -> concurrent.futures.Future[None] | None:
        """A future set at the drain's next progress, or None when nobody should wait."""
        with self._lock:
            if not self.needs_room():
                return None
            ticket = concurrent.futures.Future[None]()
            self._room_waiters.append(ticket)
            return ticket

    def needs_room(self) -> bool:
        return len(self._queue) > self.max_pending and not (self._failure or self._stalled or self._closed)

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
        return events, None if row is None else row()

    def unwritten_bodies(self) -> list[Body]:
        """The bodies the unwritten events bring with them (write them with those events)."""
        with self._lock:
            return [body for item in self._queue if isinstance(item, WithBodies) for body in item.bodies]

    # -- flush and close (any loop or thread) ------------------------------------------------------
    async def flush(self) -> None:
        """Wait until everything queued so far and the latest row are stored (``JournalError`` if
        the store refused them; a later flush tries again)."""
        pending = self._request_flush()
        if pending is not None:
            await settled(pending)

    def _request_flush(self) -> concurrent.futures.Future[None] | None:
        """A future for what is queued now, settled by the drain (None: it is all stored)."""
        with self._lock:
            if self._done == self._submitted and self._row_stored == self._row_version:
                return None
            if self._closed or not self._reachable():
                why = "is closed" if self._closed else "has stopped (its event loop is gone)"
                raise JournalError(f"the journal's writer {why}; {len(self._queue)} event(s) unwritten")
            waiter = _Waiter(self._submitted, self._row_version, concurrent.futures.Future())
            self._waiters.append(waiter)
            self._failure = None  # a flush tries the store again
            self._signalled = True
        self._poke(urgent=True)
        return waiter.future

    async def aclose(self) -> None:
        """Flush, run the finishers, release the store. After a failure nothing is closed: a later
        ``flush()`` / ``aclose()`` tries again."""
        await settled(self._request_close())

    def close(self, timeout: float | None = None) -> None:
        """``aclose()`` for sync code (not on the writer's own loop thread, which it would block);
        ``timeout``: seconds to wait at most (``TimeoutError`` past them)."""
        if self._on_loop_thread():
            raise JournalError("the journal's writer runs on this thread's event loop: use 'async with' "
                               "or 'await journal.aclose()' instead of the sync form")
        self._request_close().result(timeout)

    def close_soon(self) -> None:
        """Close with nobody waiting (a journal that closes itself once its run ended). If that fails,
        the failure is logged and what could not be written is dropped."""
        try:
            closing = self._request_close()
        except JournalError as error:
            self._drop(error)
            return
        closing.add_done_callback(self._dropped_if_failed)

    def _dropped_if_failed(self, closing: concurrent.futures.Future[None]) -> None:
        error = closing.exception()
        if error is not None:
            self._drop(error)

    def _drop(self, error: BaseException) -> None:
        self._dropped = True
        unavailable = isinstance(error.__cause__, StoreUnavailableError)  # said once, by the source
        log = logger.debug if unavailable else logger.warning
        log("run-journal: a run could not be written: %s", error)

    def _request_close(self) -> concurrent.futures.Future[None]:
        with self._lock:
            closing = self._closing
            if closing is not None and (not closing.done() or closing.exception() is None):
                return closing  # a close in progress, or done: wait for that one
            if not self._acquired and self._task is None and self._done == self._submitted \
                    and self._row_stored == self._row_version:
                self._closed = True  # nothing to write and no store to release
                closing = concurrent.futures.Future()
                closing.set_result(None)
            elif not self._reachable():
                raise JournalError(f"the journal's writer has stopped (its event loop is gone); "
                                   f"{len(self._queue)} event(s) unwritten")
            else:
                closing = start_on(self._writer_loop(), self._close())
            self._closing = closing
            return closing

    async def _close(self) -> None:
        """The one close path, on the writer's loop."""
        pending = self._request_flush()
        if pending is not None:
            await settled(pending)
        with self._lock:
            self._closed = self._signalled = True
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None and self._task is not asyncio.current_task():
            await asyncio.wait({self._task})  # a drain writing events that raced the close
        for finish in self._finishers:
            try:
                await finish()
            except Exception:  # a finisher (an exporter) never fails the journal
                logger.warning("run-journal: a finisher failed at close", exc_info=True)
        await self._source.release()
        with self._lock:
            waiters, self._waiters = self._waiters, []
            unwritten = len(self._queue)
        for waiter in waiters:  # flushes that raced the close
            if waiter.events <= self._done and waiter.row <= self._row_stored:
                _settle(waiter.future, None)
            else:
                _settle(waiter.future, JournalError(f"the journal is closed; {unwritten} event(s) unwritten"))

    def __del__(self) -> None:
        unwritten = getattr(self, "_submitted", 0) - getattr(self, "_done", 0)
        if unwritten > 0 and not getattr(self, "_dropped", True):
            warnings.warn(f"run-journal: a journal's writer was collected with {unwritten} unwritten "
                          "event(s) (close the journal, or flush it, before its event loop ends)",
                          ResourceWarning, stacklevel=1, source=self)

    # -- the drain task (the writer's loop) --------------------------------------------------------
    async def _drain(self) -> None:
        """Passes over the queue while someone woke it during the last pass, then ends."""
        me = asyncio.current_task()
        try:
            while self._woken and not self._closed:
                self._woken = False
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
                with self._lock:
                    self._signalled = False
                try:
                    await self._write_queue(me)
                except _Abandoned:
                    return
                except _Exhausted:
                    pass  # every waiting flush was told; nothing runs until the next one
                except Exception as error:  # a writer bug: reported like a store failure, never raised
                    logger.exception("run-journal: the writer failed")
                    self._fail(error)
                self._settle_flushes()
        finally:
            if self._task is me:
                self._task = None

    async def _write_queue(self, me: asyncio.Task[None] | None) -> None:
        while self._failure is None:
            try:
                store = await self._source.acquire()
            except StoreUnavailableError as error:
                self._fail(error)
                raise _Exhausted from error
            self._acquired = True
            with self._lock:
                items = list(itertools.islice(self._queue, self.batch_size))
            if items:
                await self._write_batch(me, store, items)
            await self._write_row(me, store)
            if not items:
                return

    async def _write_batch(self, me: asyncio.Task[None] | None, store: RunEventStore,
                           items: list[Item]) -> None:
        events = [item if isinstance(item, NewEvent) else
                  await self._store_call(me, functools.partial(item.resolve, store)) for item in items]
        carried = [item for item in items if isinstance(item, WithBodies)]
        with self._lock:
            follows = self._row_after == self._done + len(items)
            row, version = (self._row, self._row_version) if follows else (None, 0)
        terminal = events[-1] if events[-1].event_type in TERMINAL_RUN_EVENTS else None
        if row is not None and terminal is not None and version > self._row_stored:
            final = row()
            bodies = _bodies(carried)
            try:  # the run's end in one step: last events (and their bodies), terminal event, final row
                closed = await self._attempt(me, functools.partial(
                    store.put_run_close, events[:-1], terminal, final, bodies=bodies) if bodies else
                    functools.partial(store.put_run_close, events[:-1], terminal, final))
            except Exception:
                logger.debug("run-journal: put_run_close failed; writing step by step", exc_info=True)
            else:
                _acknowledge(carried)
                self._taken(items, superseded=0 if closed else 1)
                self._row_written(version, store, final)
                return
        superseded, run, with_run = 0, list[NewEvent](), list[WithBodies]()
        for event in events:
            if event.event_type not in TERMINAL_RUN_EVENTS:
                run.append(event)
                if isinstance(event, WithBodies):
                    with_run.append(event)
                continue
            if run:
                await self._put_batch(me, store, run, with_run)
                run, with_run = [], []
            stored, _ = await self._store_call(me, functools.partial(
                store.put_event_if_absent, event, exclusive_types=TERMINAL_RUN_EVENTS))
            if stored.event_id != event.event_id:
                superseded += 1
                logger.warning("run-journal: run %s already has a terminal event (reconcile_orphans "
                               "closed it?); its %s is not written", event.run_id, event.event_type)
        if run:
            await self._put_batch(me, store, run, with_run)
        self._taken(items, superseded)

    async def _put_batch(self, me: asyncio.Task[None] | None, store: RunEventStore, events: list[NewEvent],
                         carried: list[WithBodies]) -> None:
        bodies = _bodies(carried)
        await self._store_call(me, functools.partial(store.put_batch, events, bodies=bodies) if bodies
                               else functools.partial(store.put_batch, events))
        _acknowledge(carried)

    async def _write_row(self, me: asyncio.Task[None] | None, store: RunEventStore) -> None:
        """The latest row snapshot, once the events it follows are stored (rows coalesce)."""
        with self._lock:
            row, version = self._row, self._row_version
            if row is None or version <= self._row_stored or self._row_after > self._done:
                return
        stored = row()
        await self._store_call(me, functools.partial(store.put_run, stored))
        self._row_written(version, store, stored)

    async def _store_call(self, me: asyncio.Task[None] | None, operation: Callable[[], Awaitable[T]]) -> T:
        """One store call under the retry policy. A refusal (``ValueError``: a run row of another
        thread, a run id already used) is not retried: asking again cannot help."""
        for attempt in itertools.count():
            try:
                return await self._attempt(me, operation)
            except Exception as error:
                if attempt + 1 >= self.retry.attempts or isinstance(error, ValueError):
                    self._fail(error, attempts=attempt + 1)
                    raise _Exhausted from error
                with self._lock:
                    self._counts["retried"] += 1
                await asyncio.sleep(self.retry.delay(attempt))
        raise AssertionError("unreachable")

    async def _attempt(self, me: asyncio.Task[None] | None, operation: Callable[[], Awaitable[T]]) -> T:
        """One try of a store call, under the deadline. Past ``store_timeout`` the call is abandoned
        (:meth:`_abandon`). The abandoned-drain rule: whatever an abandoned call later returns or
        raises (its driver may swallow the cancellation), its task stops here and touches nothing."""
        assert me is not None
        with self._lock:
            self._counts["store_calls"] += 1
        watchdog = asyncio.get_running_loop().call_later(self.store_timeout, self._abandon, me)
        try:
            result = await operation()
        except BaseException:
            if self._task is not me:
                raise _Abandoned from None
            raise
        finally:
            watchdog.cancel()
        if self._task is not me:
            raise _Abandoned
        return result

    def _abandon(self, stuck: asyncio.Task[None]) -> None:
        """A store call has not answered within ``store_timeout``: the waiting flushes fail now and a
        new drain task takes over at the next flush. The stuck task is cancelled and left to its
        driver, whose cleanup after a dead connection may hang too."""
        if stuck is not self._task or stuck.done():
            return
        stuck.cancel()
        self._task = None
        self._fail(StoreTimeoutError(f"the store did not answer within {self.store_timeout} s"))

    # -- bookkeeping after a store call (the drain task) -------------------------------------------
    def _taken(self, items: list[Item], superseded: int) -> None:
        """The batch is stored: off the queue, and room for waiting producers."""
        with self._lock:
            for _ in items:
                self._queue.popleft()
            self._done += len(items)
            self._counts["written"] += len(items) - superseded
            self._counts["superseded"] += superseded
            self._counts["batches"] += 1
            self._stalled = False
            tickets, self._room_waiters = self._room_waiters, []
        for ticket in tickets:
            _settle(ticket, None)

    def _row_written(self, version: int, store: RunEventStore, row: RunRow) -> None:
        with self._lock:
            self._row_stored = max(self._row_stored, version)
            self._counts["row_writes"] += 1
        if self._on_row_stored is not None:
            self._on_row_stored(store, row)

    def _fail(self, error: BaseException, attempts: int = 1) -> None:
        """Writing stopped: every waiting flush learns why; nothing is written until a flush."""
        with self._lock:
            self._failure = error
            self._counts["failed_batches"] += 1
            waiters, self._waiters = self._waiters, []
            tickets, self._room_waiters = self._room_waiters, []
            unwritten = len(self._queue)
        what = f"{unwritten} event(s)" if unwritten else "the run row"
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        failure = JournalError(f"run-journal could not write {what} to the store{tries}: "
                               f"{type(error).__name__}: {error}")
        failure.__cause__ = error
        for waiter in waiters:
            _settle(waiter.future, failure)
        for ticket in tickets:
            _settle(ticket, None)

    def _settle_flushes(self) -> None:
        """Answer the flushes whose events and row are stored."""
        with self._lock:
            ready = [w for w in self._waiters if w.events <= self._done and w.row <= self._row_stored]
            if ready:
                self._waiters = [w for w in self._waiters if w not in ready]
        for waiter in ready:
            _settle(waiter.future, None)


def _bodies(carried: Sequence[WithBodies]) -> list[Body]:
    return [body for item in carried for body in item.bodies]


def _acknowledge(carried: Sequence[WithBodies]) -> None:
    """Tell the senders of the bodies just written that the store has them, and let go of the
    bodies and the sender: a store that keeps the event object (``memory://``) keeps only the event."""
    for item in carried:
        if item.stored is not None and item.bodies:
            item.stored([body.digest for body in item.bodies])
        item.delivered()


def _settle(future: concurrent.futures.Future[None], outcome: BaseException | None) -> None:
    with contextlib.suppress(concurrent.futures.InvalidStateError):  # cancelled by its caller
        if outcome is None:
            future.set_result(None)
        else:
            future.set_exception(outcome)
