"""When the journal's writer drains, and flushing and closing it from any loop or thread (a mixin
of ``EventWriter``, which owns the queue and the store calls).

A drain runs in a task that exists only while there is something to write: the batch timer starts
one ``flush_interval`` after the first queued event, a full batch or a run's end starts one at
once. ``flush()`` queues a waiter for everything submitted so far; on the writer's loop it drains in
its own task (no hand-off), from another loop or a sync caller it is handed to the writer's loop.
Closing also stops a private writer thread and closes a store the journal opened from a URL.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections import deque

from run_journal.envelope import NewEvent
from run_journal.runs import RunStatus
from run_journal.stores.base import RunEventStore
from run_journal.writer_types import DeferredEvent, JournalError, RetryPolicy

logger = logging.getLogger("run_journal")


class WriterFlush:
    """Drain scheduling, ``flush`` / ``close_blocking`` and their waiters; state is ``EventWriter``'s."""

    retry: RetryPolicy
    _lock: threading.Lock
    _queue: deque[NewEvent | DeferredEvent]
    _counts: dict[str, int]
    _failure: BaseException | None
    _stalled: bool
    _urgent: bool
    _closing: bool
    _waiters: list[tuple[int, asyncio.Future[None]]]
    _task: asyncio.Task[None] | None
    _crash: BaseException | None
    _finished: bool
    _row_dirty: bool
    _status: RunStatus
    _row_status: RunStatus | None
    _draining: bool
    _signalled: bool
    _wakeup: asyncio.Handle | None
    _owns_store: bool
    _store: RunEventStore | None
    _loop: asyncio.AbstractEventLoop | None
    _loop_thread: int | None
    _thread: threading.Thread | None
    _close_lock: threading.Lock
    _handover_lock: threading.Lock
    _handover_closed: bool
    _stop_requested: bool

    def _wake_waiters(self, error: JournalError | None = None) -> None:
        """Settle the flushes whose events are all handled; every one with ``error``, or with the
        store's failure if there is one."""
        written = self._counts["written"] + self._counts["superseded"]  # every submission handled
        if error is None and self._failure is not None:
            error = self._error(self._failure)
        keep: list[tuple[int, asyncio.Future[None]]] = []
        for target, waiter in self._waiters:
            if waiter.done():
                continue
            if error is not None:
                waiter.set_exception(error)
            elif written >= target:
                waiter.set_result(None)
            else:
                keep.append((target, waiter))
        self._waiters = keep

    def _error(self, failure: BaseException) -> JournalError:
        pending = len(self._queue)
        error = JournalError(
            f"run-journal could not write {pending} event(s) to the store after "
            f"{self.retry.attempts} attempts: {type(failure).__name__}: {failure}"
        )
        error.__cause__ = failure
        return error

    async def _flush_here(self, closing: bool) -> None:
        if self._finished:  # a flush handed over while a close finished the writer
            self._check_finished_writer()
            return
        with self._lock:
            target = self._submitted()
            self._failure = None  # every flush gives a failed store another chance
            self._stalled = False
            self._urgent = True
            self._closing = self._closing or closing
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((target, waiter))
        try:
            if self._draining:
                pass  # the drain in progress sees the flush (``_urgent``) and goes round again
            elif self._queue or self._row_dirty or not self._row_current():
                await self._drain_here()
            else:  # everything, the row included, is written: nothing to wait for
                self._urgent = False
                self._wake_waiters()
            try:
                await waiter
            except JournalError:
                if closing:
                    await self._stop_draining()
                raise
            if closing:
                await self._stop_draining()
                if self._failure is not None:  # what arrived during the close could not be written
                    raise self._error(self._failure)
        except asyncio.CancelledError:  # the drain goes on without this flush (and keeps the store)
            waiter.cancel()
            raise

    async def _stop_draining(self) -> None:
        """Closing, once its waiter is settled: let a drain still running finish (a task, shielded,
        or another flush's drain in place), write what arrived meanwhile, then no drain starts
        again and a store opened from a URL is closed (once)."""
        while self._task is not None or self._draining:
            if self._task is not None:
                await asyncio.shield(self._task)
            else:
                await asyncio.sleep(0.001)  # another flush drains in place; it ends on its own
        if self._queue and self._failure is None and self._crash is None:
            await self._drain_here()
        self._cancel_wakeup()
        self._finished = True
        self._wake_waiters()
        store = self._store if self._owns_store else None
        if store is not None:
            self._store = None
            await store.aclose()

    async def _drain_here(self) -> None:
        """The flush drains in its own task (it runs on the writer's loop): no hand-off to a writer
        task. A flush cancelled mid-write hands what is left to a drain task."""
        self._cancel_wakeup()
        self._draining = True
        try:
            await self._drain_all()
        finally:
            self._draining = False
            self._after_drain(reschedule=True)

    def _after_drain(self, *, reschedule: bool) -> None:
        """A drain ended (or its flush was cancelled mid-write): what it left, events queued while it
        ran or a flush still waiting for it, goes to the next drain (a poke or a flush during a drain
        finds it running, so nothing else would schedule it); with the queue empty, the next event
        must poke again."""
        with self._lock:
            pending = bool(self._queue)
            if not pending or not reschedule:
                self._signalled = False  # the next event pokes
        if not reschedule or self._failure is not None or self._crash is not None:
            return
        if any(not waiter.done() for _, waiter in self._waiters):
            self._urgent = True  # a flush waits: drain at once and write the row
        if pending or self._urgent:
            self._schedule()

    # EventWriter's (declared for the type checker)
    flush_interval: float
    batch_size: int

    async def _drain(self, *, force_row: bool) -> None:
        raise NotImplementedError

    def _submitted(self) -> int:
        raise NotImplementedError

    # -- which loop runs the writer ---------------------------------------------------------------
    def _start(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            if self._loop is not None:
                return
            if loop is not None:
                self._loop, self._loop_thread = loop, threading.get_ident()
                return
            self._loop = asyncio.new_event_loop()
            ready = threading.Event()
            self._thread = threading.Thread(
                target=self._thread_main, args=(ready,), name="run-journal-writer", daemon=True
            )
            self._thread.start()
        ready.wait()

    def _thread_main(self, ready: threading.Event) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        self._loop_thread = threading.get_ident()
        ready.set()
        try:
            self._loop.run_forever()  # stopped by a close once the writer is finished
            with self._handover_lock:
                self._handover_closed = True  # from now on a flush from another thread returns
            self._finish_handed_over(self._loop)
        finally:
            self._loop.close()

    @staticmethod
    def _finish_handed_over(loop: asyncio.AbstractEventLoop) -> None:
        """Flushes handed over from other threads while a close stopped the loop: let them return
        (the writer is finished: at once, or saying what is unwritten) instead of hanging."""
        for _ in range(10):  # bounded: a store that never answers must not keep the thread alive
            try:
                loop.run_until_complete(asyncio.sleep(0))  # callbacks queued as the loop stopped
                pending = asyncio.all_tasks(loop)
                if not pending:
                    return
                loop.run_until_complete(asyncio.wait(pending, timeout=5.0))
            except RuntimeError:  # a late stop from a concurrent close: go round again
                continue

    def _poke(self) -> None:
        loop = self._loop
        if loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._schedule()
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: flush/close will report it
            loop.call_soon_threadsafe(self._schedule)

    # -- writer side (the writer's loop) ----------------------------------------------------------
    def _schedule(self) -> None:
        """Something was queued: drain at once (the run ended, a flush, a full batch) or when the
        batch timer fires; a drain in progress picks it up. No task exists while nothing waits."""
        if self._draining or self._finished:
            return
        loop = self._loop
        assert loop is not None  # set before the first poke
        if self._urgent or self._closing or len(self._queue) >= self.batch_size:
            if isinstance(self._wakeup, asyncio.TimerHandle):
                self._cancel_wakeup()
            if self._wakeup is None:
                self._wakeup = loop.call_soon(self._drain_now)
        elif self._wakeup is None:
            self._wakeup = loop.call_later(self.flush_interval, self._drain_now)

    def _cancel_wakeup(self) -> None:
        if self._wakeup is not None:
            self._wakeup.cancel()
            self._wakeup = None

    def _drain_now(self) -> None:
        """Start the drain task (from the batch timer, a due drain, or a producer waiting for room)."""
        self._cancel_wakeup()
        if not (self._draining or self._finished or self._crash is not None):
            self._draining = True
            self._task = asyncio.get_running_loop().create_task(self._run(), name="run-journal-writer")

    async def _run(self) -> None:
        done = False
        try:
            await self._drain_all()
            done = True
        finally:
            self._draining, self._task = False, None
            self._after_drain(reschedule=done)  # a cancelled writer task (loop shutdown) stays down

    async def _drain_all(self) -> None:
        """Drain until the queue is empty or the store failed; again while flushes keep arriving."""
        try:
            while True:
                with self._lock:
                    self._signalled = False
                    urgent, self._urgent = self._urgent, False
                await self._drain(force_row=urgent or self._closing)
                if self._failure is not None or not self._urgent:
                    break
        except Exception as error:  # a writer bug: flush() reports it, the run goes on
            self._crash = error
            logger.exception("run-journal: the writer stopped")
            self._wake_waiters(self._crash_error())
        else:  # settled once the whole drain is done: a flush that came mid-pass gets its row too
            self._wake_waiters()

    def _row_current(self) -> bool:
        return self._status == self._row_status

    # -- flush / close (any loop or thread) -------------------------------------------------------
    async def flush(self, *, closing: bool = False) -> None:
        """Write everything queued so far and the run row; ``JournalError`` if the store refuses."""
        on_writer_loop = self._loop is not None and asyncio.get_running_loop() is self._loop
        try:
            loop = self._live_loop()
            if loop is not None and on_writer_loop:
                await self._flush_here(closing)
                return
            future = None if loop is None else self._hand_over(closing, loop)
            if future is not None:
                await asyncio.wrap_future(future)
        finally:  # a close cancelled before the writer finished leaves its thread running
            if closing and not on_writer_loop and self._finished and self._thread is not None:
                await asyncio.get_running_loop().run_in_executor(None, self._stop_thread)

    def _hand_over(
        self, closing: bool, loop: asyncio.AbstractEventLoop
    ) -> concurrent.futures.Future[None] | None:
        """``_flush_here`` on the writer's loop from another thread; None when a close on yet another
        thread closed that loop meanwhile (what it left unwritten, if anything, is raised)."""
        with self._handover_lock:
            if not self._handover_closed:
                return asyncio.run_coroutine_threadsafe(self._flush_here(closing), loop)
        self._check_finished_writer()
        return None

    def _stop_thread(self) -> None:
        """Stop the private writer thread's loop (once, whoever asks) and wait for the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with self._handover_lock:
            stop, self._stop_requested = not self._stop_requested, True
        if stop:
            with contextlib.suppress(RuntimeError):  # the loop is closed already
                loop.call_soon_threadsafe(loop.stop)
        thread.join()

    def _live_loop(self) -> asyncio.AbstractEventLoop | None:
        """The writer's loop, to hand a flush to; None when there is nothing to flush (the writer
        never started, or stopped with nothing left). ``JournalError`` if events are stranded."""
        loop = self._loop
        if loop is None:
            return None
        if self._finished or self._crash is not None:
            self._check_finished_writer()
            return None
        if loop.is_closed():
            raise JournalError(f"the writer's event loop is gone; {len(self._queue)} event(s) unwritten")
        return loop

    def _check_finished_writer(self) -> None:
        """After the writer stopped (closed, or crashed): nothing to do, or say what is unwritten."""
        if self._crash is not None:
            raise self._crash_error() from self._crash
        if self._queue:
            raise self._error(self._failure) if self._failure else JournalError(
                f"the journal is closed; {len(self._queue)} event(s) unwritten"
            )

    def _crash_error(self) -> JournalError:
        crash = self._crash
        return JournalError(
            f"the journal's writer stopped with {type(crash).__name__}: {crash}; "
            f"{len(self._queue)} event(s) unwritten"
        )

    def close_blocking(self) -> None:
        """``flush(closing=True)`` for sync code; refuses to block the writer's own loop."""
        if self._loop is not None and threading.get_ident() == self._loop_thread:
            raise JournalError(
                "the journal's writer runs on this thread's event loop: use 'async with' or "
                "'await journal.aclose()' instead of the sync form"
            )
        with self._close_lock:  # a second close waits for the first, then finds nothing to do
            try:
                loop = self._live_loop()
                future = None if loop is None else self._hand_over(True, loop)
                if future is not None:
                    future.result()
            finally:
                if self._finished:
                    self._stop_thread()
