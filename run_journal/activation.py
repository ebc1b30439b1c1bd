"""Journal every LangChain / LangGraph run of a process without touching its code.

Set ``RUN_JOURNAL_URL`` (a store URL) and every root run gets a ``RunJournal``, the way
``LANGSMITH_TRACING=true`` gets a tracer: the package installs a ``.pth`` line that, only when the
variable is set, registers a langchain-core configure hook. ``RUN_JOURNAL_USER_ID`` stamps a user on
every run. Those journals share one store and one writer thread for the whole process, close
themselves when their run ends, and are flushed at exit (:func:`flush`). A ``RunJournal`` passed in
``callbacks`` explicitly takes precedence: the run is not journaled twice.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import weakref
from contextvars import ContextVar
from typing import Any, Final, Literal

from run_journal.stores.base import RunEventStore
from run_journal.stores.urls import open_store
from run_journal.writer import EventWriter, LoopThread

logger = logging.getLogger("run_journal")
ENV_URL: Final = "RUN_JOURNAL_URL"
ENV_USER_ID: Final = "RUN_JOURNAL_USER_ID"
ENV_PRICING: Final = "RUN_JOURNAL_PRICING"
"""``off`` (or ``0``, ``false``): no costs; otherwise known model prices are used."""
EXIT_TIMEOUT: Final = 10.0
"""Seconds :func:`flush` waits for each journal at exit."""

_journal_var: ContextVar[Any] = ContextVar("run_journal_activated", default=None)
_lock = threading.Lock()
_registered = False
_shared: tuple[RunEventStore, LoopThread] | None = None
_writers: weakref.WeakSet[EventWriter] = weakref.WeakSet()


def activate_from_env() -> bool:
    """Register the configure hook when ``RUN_JOURNAL_URL`` is set (once per process)."""
    global _registered
    if not os.environ.get(ENV_URL):
        return False
    with _lock:
        if not _registered:
            from langchain_core.tracers.context import register_configure_hook

            from run_journal.journal import RunJournal

            register_configure_hook(_journal_var, True, RunJournal, ENV_URL)
            _registered = True
    return True


def shared_store() -> tuple[RunEventStore, LoopThread]:
    """The process's store from ``RUN_JOURNAL_URL``, set up on a writer thread of its own."""
    global _shared
    with _lock:
        if _shared is None:
            url = os.environ.get(ENV_URL)
            if not url:
                raise ValueError(f"RunJournal() without a store needs {ENV_URL} (a store URL)")
            worker = LoopThread("run-journal-shared")
            store = open_store(url)
            asyncio.run_coroutine_threadsafe(store.setup(), worker.loop).result(timeout=60)
            _shared = (store, worker)
            atexit.register(flush)
        return _shared


def default_user_id() -> str | None:
    return os.environ.get(ENV_USER_ID) or None


def default_pricing() -> Literal[False] | None:
    """``False`` when ``RUN_JOURNAL_PRICING`` turns prices off, else None (known prices)."""
    return False if os.environ.get(ENV_PRICING, "").strip().lower() in {"off", "0", "false", "no"} else None


def track(writer: EventWriter) -> None:
    """A writer of the shared store, for :func:`flush`."""
    _writers.add(writer)


def flush(timeout: float = EXIT_TIMEOUT) -> None:
    """Write what the activated journals still hold, then close the shared store. Registered to
    run at exit; call it yourself before a process ends abruptly (``os._exit``, a killed worker)."""
    global _shared
    for writer in list(_writers):
        try:
            writer.close()
        except Exception:
            logger.warning("run-journal: a run could not be written at exit", exc_info=True)
    with _lock:
        shared, _shared = _shared, None
    if shared is not None:
        store, worker = shared
        try:
            asyncio.run_coroutine_threadsafe(store.aclose(), worker.loop).result(timeout=timeout)
        except Exception:
            logger.warning("run-journal: closing the store failed", exc_info=True)
        worker.stop()


__all__ = ["ENV_PRICING", "ENV_URL", "ENV_USER_ID", "activate_from_env", "flush", "shared_store"]
