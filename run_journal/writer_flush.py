"""Flushing and closing the journal's writer, from any loop or thread (a mixin of ``EventWriter``).

``flush()`` queues a waiter for everything submitted so far and wakes the writer; it runs on the
writer's loop, or is handed to it from another loop or a sync caller. Closing also stops a private
writer thread and closes a store the journal opened from a URL.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque

from run_journal.envelope import NewEvent
from run_journal.stores.base import RunEventStore
from run_journal.writer_types import DeferredEvent, JournalError, RetryPolicy


class WriterFlush:
    """``flush`` / ``close_blocking`` and the waiters they leave; state is ``EventWriter``'s."""

    retry: RetryPolicy
    _lock: threading.Lock
    _queue: deque[NewEvent | DeferredEvent]
    _counts: dict[str, int]
    _failure: BaseException | None
    _stalled: bool
    _urgent: bool
    _closing: bool
    _waiters: list[tuple[int, asyncio.Future[None]]]
    _wakeup: asyncio.Event
    _task: asyncio.Future[None] | None
    _owns_store: bool
    _store: RunEventStore | None
    _loop: asyncio.AbstractEventLoop | None
    _loop_thread: int | None
    _thread: threading.Thread | None

    def _wake_waiters(self) -> None:
        written = self._counts["written"] + self._counts["superseded"]  # every submission handled
        failure = self._failure
        keep: list[tuple[int, asyncio.Future[None]]] = []
        for target, waiter in self._waiters:
            if waiter.done():
                continue
            if failure is not None:
                waiter.set_exception(self._error(failure))
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
        with self._lock:
            target = self._counts["submitted"]
            self._failure = None  # every flush gives a failed store another chance
            self._stalled = False
            self._urgent = True
            self._closing = self._closing or closing
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((target, waiter))
        self._wakeup.set()
        if closing and self._task is not None:
            await asyncio.shield(self._task)
            self._wake_waiters()
        try:
            await waiter
        finally:
            if closing and self._owns_store and self._store is not None:
                await self._store.aclose()

    # -- flush / close (any loop or thread) -------------------------------------------------------
    async def flush(self, *, closing: bool = False) -> None:
        """Write everything queued so far and the run row; ``JournalError`` if the store refuses."""
        loop = self._live_loop()
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            await self._flush_here(closing)
        else:
            future = asyncio.run_coroutine_threadsafe(self._flush_here(closing), loop)
            try:
                await asyncio.wrap_future(future)
            finally:
                if closing and self._thread is not None:
                    loop.call_soon_threadsafe(loop.stop)
                    await asyncio.get_running_loop().run_in_executor(None, self._thread.join)

    def _live_loop(self) -> asyncio.AbstractEventLoop | None:
        """The writer's loop, to hand a flush to; None when there is nothing to flush (the writer
        never started, or stopped with nothing left). ``JournalError`` if events are stranded."""
        loop = self._loop
        if loop is None:
            return None
        if self._task is not None and self._task.done():
            self._check_finished_writer(self._task)
            return None
        if loop.is_closed():
            raise JournalError(f"the writer's event loop is gone; {len(self._queue)} event(s) unwritten")
        return loop

    def _check_finished_writer(self, task: asyncio.Future[None]) -> None:
        """After the writer stopped (closed, or crashed): nothing to do, or say what is unwritten."""
        crash = None if task.cancelled() else task.exception()
        if crash is not None:
            raise JournalError(
                f"the journal's writer stopped with {type(crash).__name__}: {crash}; "
                f"{len(self._queue)} event(s) unwritten"
            ) from crash
        if self._queue:
            raise self._error(self._failure) if self._failure else JournalError(
                f"the journal is closed; {len(self._queue)} event(s) unwritten"
            )

    def close_blocking(self) -> None:
        """``flush(closing=True)`` for sync code; refuses to block the writer's own loop."""
        if self._loop is not None and threading.get_ident() == self._loop_thread:
            raise JournalError(
                "the journal's writer runs on this thread's event loop: use 'async with' or "
                "'await journal.aclose()' instead of the sync form"
            )
        loop = self._live_loop()
        if loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._flush_here(True), loop).result()
        finally:
            if self._thread is not None:
                loop.call_soon_threadsafe(loop.stop)
                self._thread.join()
