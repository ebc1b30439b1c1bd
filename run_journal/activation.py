"""Journal every LangChain / LangGraph run of a process without touching its code.

Set ``RUN_JOURNAL_URL`` (a store URL) and every root run gets an :class:`ActivatedJournal`, the way
``LANGSMITH_TRACING=true`` gets a tracer: the package installs a ``.pth`` line that, only when the
variable is set, registers a langchain-core configure hook. ``RUN_JOURNAL_USER_ID`` stamps a user on
every run. These journals share the process's one store for that URL and its writer thread, close
themselves when their run ends, and are flushed at exit (:func:`flush`). A ``RunJournal`` passed in
``callbacks`` explicitly takes precedence: the run is not journaled twice.

A store that cannot be opened (a mistyped URL, a server that is down or never answers, a read-only
directory) never fails a run: the process logs one warning naming the variable, the URL (password
hidden) and the cause, its runs go unjournaled, and the store is tried again at most every
``REOPEN_INTERVAL`` seconds; opening waits at most ``OPEN_TIMEOUT`` seconds.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from contextvars import ContextVar
from typing import Any, Final, Literal

from langchain_core.tracers.context import register_configure_hook

from run_journal.journal import RunJournal
from run_journal.writer import EventWriter, shared_store
from run_journal.writer.loops import at_exit, running_loop
from run_journal.writer.sources import StoreUnavailableError, close_shared_stores

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
_writers: weakref.WeakSet[EventWriter] = weakref.WeakSet()


class _AnyJournalCounts(type(RunJournal)):  # type: ignore[misc]  # a metaclass over the handler's own
    """LangChain adds the hook's journal to a run unless a handler already there is an instance of
    the hook's class; every ``RunJournal`` counts, so a journal passed explicitly is never doubled."""

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, RunJournal)


class ActivatedJournal(RunJournal, metaclass=_AnyJournalCounts):
    """The journal ``RUN_JOURNAL_URL`` gives each root run: the process's shared store for that URL,
    closed by itself once its run ended. While the store cannot be opened it records nothing."""

    closes_when_ended = True

    def __init__(self) -> None:
        url = os.environ.get(ENV_URL, "")
        source = shared_store(url, label=ENV_URL)
        if running_loop() is None:
            source.open_soon(wait=True)  # once per process, at most OPEN_TIMEOUT: see the module docstring
        super().__init__(source, user_id=default_user_id(), pricing=default_pricing())
        self._inert = source.unavailable()
        if not self._inert:
            _writers.add(self._writer)

    # LangChain skips a handler whose ignore_* is true: while the store is unavailable, nothing runs.
    @property
    def ignore_llm(self) -> bool:
        return self._inert

    @property
    def ignore_chain(self) -> bool:
        return self._inert

    @property
    def ignore_agent(self) -> bool:
        return self._inert

    @property
    def ignore_retriever(self) -> bool:
        return self._inert

    @property
    def ignore_chat_model(self) -> bool:
        return self._inert

    @property
    def ignore_retry(self) -> bool:
        return self._inert

    @property
    def ignore_custom_event(self) -> bool:
        return self._inert


def activate_from_env() -> bool:
    """Register the configure hook when ``RUN_JOURNAL_URL`` is set (once per process)."""
    global _registered
    if not os.environ.get(ENV_URL):
        return False
    with _lock:
        if not _registered:
            register_configure_hook(_journal_var, True, ActivatedJournal, ENV_URL)
            at_exit(flush)
            _registered = True
    return True


def default_user_id() -> str | None:
    return os.environ.get(ENV_USER_ID) or None


def default_pricing() -> Literal[False] | None:
    """``False`` when ``RUN_JOURNAL_PRICING`` turns prices off, else None (known prices)."""
    return False if os.environ.get(ENV_PRICING, "").strip().lower() in {"off", "0", "false", "no"} else None


def flush(timeout: float = EXIT_TIMEOUT) -> None:
    """Write what the activated journals still hold, then close the shared stores. Runs at exit;
    call it yourself before a process ends abruptly (``os._exit``, a killed worker)."""
    for writer in list(_writers):
        try:
            writer.close(timeout)
        except Exception as error:
            if not _already_warned(error):
                logger.warning("run-journal: a run could not be written at exit", exc_info=True)
    close_shared_stores(timeout)


def _already_warned(error: BaseException) -> bool:
    """A run begun while its store was still opening fails at exit with the store's failure, which
    the one warning about ``RUN_JOURNAL_URL`` already told ("runs are not journaled while ...")."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, StoreUnavailableError):
            return True
        cause = cause.__cause__
    return False


__all__ = ["ENV_PRICING", "ENV_URL", "ENV_USER_ID", "ActivatedJournal", "activate_from_env", "flush"]
