"""Where writers run: the caller's event loop, or the process's one writer thread.

Async store drivers bind their connections to the loop that opened them, so a writer and its store
share one loop for good. A journal created inside async code writes on that code's loop; one created
anywhere else writes on the process's writer thread: one daemon thread with an event loop of its own,
started on first use, shared by every such journal (and by ``RUN_JOURNAL_URL``'s), stopped at exit.
A forked child starts its own on first use: the parent's thread does not exist there.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_writer_thread: LoopThread | None = None
_at_exit: dict[str, list[Callable[[], None]]] = {"flush": [], "close": []}


class LoopThread:
    """An event loop running in a daemon thread of its own."""

    def __init__(self, name: str = "run-journal-writer") -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        started = threading.Event()
        self.thread = threading.Thread(target=self._main, args=(started,), name=name, daemon=True)
        self.thread.start()
        started.wait()

    @property
    def ident(self) -> int | None:
        return self.thread.ident

    def _main(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(started.set)
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


def writer_thread() -> LoopThread:
    """The process's writer thread, started on first use (again in a forked child)."""
    global _writer_thread
    with _lock:
        current = _writer_thread
        if current is None or current.pid != os.getpid() or not current.thread.is_alive():
            current = _writer_thread = LoopThread()
        return current


def at_exit(hook: Callable[[], None], stage: str = "flush") -> None:
    """Run ``hook`` at exit, before the writer thread stops: every ``flush`` hook (journals writing
    what they hold), then every ``close`` hook (the stores they wrote to)."""
    with _lock:
        _at_exit[stage].append(hook)


def running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def start_on(loop: asyncio.AbstractEventLoop,
             coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """``asyncio.run_coroutine_threadsafe``; called on ``loop`` itself, the task starts without a
    wake-up through the loop's self-pipe (a system call and a loop pass each way)."""
    if running_loop() is not loop:
        return asyncio.run_coroutine_threadsafe(coroutine, loop)
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    task = loop.create_task(coroutine)

    def copy_outcome(done: asyncio.Task[T]) -> None:
        if future.cancelled():
            return
        if done.cancelled():
            future.cancel()
        elif (error := done.exception()) is not None:
            future.set_exception(error)
        else:
            future.set_result(done.result())

    def cancel_task(settled: concurrent.futures.Future[T]) -> None:
        if settled.cancelled():
            with contextlib.suppress(RuntimeError):  # the loop is closed: the task is gone with it
                loop.call_soon_threadsafe(task.cancel)

    task.add_done_callback(copy_outcome)
    future.add_done_callback(cancel_task)
    return future


async def settled(future: concurrent.futures.Future[T]) -> T:
    """Await a concurrent future (``asyncio.wrap_future``), but when it is settled on this loop's own
    thread the loop learns at once instead of through its self-pipe. Cancelling the await cancels
    ``future``."""
    if not future.done():
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()

        def relay(_: concurrent.futures.Future[T]) -> None:
            if running_loop() is loop:
                _wake(waiter)
            else:
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits any more
                    loop.call_soon_threadsafe(_wake, waiter)

        future.add_done_callback(relay)
        try:
            await waiter
        except asyncio.CancelledError:
            future.cancel()
            raise
    if future.cancelled():  # by another of its waiters: as asyncio.wrap_future says it
        raise asyncio.CancelledError
    return future.result()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


@atexit.register
def _stop_writer_thread() -> None:
    with _lock:
        hooks = [*_at_exit["flush"], *_at_exit["close"]]
        thread = _writer_thread
        for stage in _at_exit.values():
            stage.clear()
    for hook in hooks:
        hook()
    if thread is not None and thread.pid == os.getpid():
        thread.stop()
