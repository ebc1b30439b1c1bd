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
import contextlib
import os
import threading
from collections.abc import Callable

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
