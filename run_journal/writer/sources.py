"""Where a writer's store comes from, and what closing the writer does to it.

* **Given**: a store object. The writer uses it and never closes it (its owner does).
* **Owned**: a URL, on the loop of async code. The writer opens it when it first writes and closes
  it when it closes.
* **Shared**: a URL, on the process's writer thread (sync code, ``RUN_JOURNAL_URL``). One store per
  URL for the whole process, opened once, closed at exit. A store that cannot be opened is tried
  again at most every :data:`REOPEN_INTERVAL` seconds, so a process whose store is down keeps running
  its agents (unjournaled) without paying for a connection attempt on every run.

Opening means ``open_store(url)`` and ``setup()``, within ``open_timeout`` seconds: a server that
accepts connections and never answers costs that long, once, not the driver's own minute.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
from typing import Final, Protocol

from run_journal.stores.base import RunEventStore
from run_journal.stores.urls import display_url, open_store
from run_journal.writer import loops

logger = logging.getLogger("run_journal")
OPEN_TIMEOUT: Final = 5.0
"""Default seconds a store may take to open and set up before a writer gives up on it."""
REOPEN_INTERVAL: Final = 30.0
"""Seconds a shared store that could not be opened is left alone before it is tried again."""
EXIT_TIMEOUT: Final = 10.0
"""Seconds the exit hook waits for each shared store to close."""


class StoreUnavailableError(ConnectionError):
    """The store could not be opened (``__cause__``: why); nothing was written."""

    def again(self) -> StoreUnavailableError:
        """The same failure, as a fresh exception for another writer to raise."""
        error = StoreUnavailableError(str(self))
        error.__cause__ = self.__cause__
        return error


class StoreSource(Protocol):
    """What a writer needs to know about its store: how to get it and what to do when done."""

    async def acquire(self) -> RunEventStore:
        """The open store (on the writer's loop); ``StoreUnavailableError`` if it cannot be opened."""

    async def release(self) -> None:
        """The writer is closing (on its loop)."""


class GivenStore:
    def __init__(self, store: RunEventStore) -> None:
        self.store = store

    async def acquire(self) -> RunEventStore:
        return self.store

    async def release(self) -> None:
        return None


async def open_within(url: str, seconds: float) -> RunEventStore:
    """``open_store(url)`` and ``setup()`` within ``seconds``. A setup that does not answer is
    abandoned (cancelled, not awaited: a driver cleaning up a dead connection may hang too)."""
    try:
        store = open_store(url)
    except (ValueError, ImportError) as error:
        raise StoreUnavailableError(f"{type(error).__name__}: {error}") from error
    setup = asyncio.ensure_future(store.setup())
    done, _ = await asyncio.wait({setup}, timeout=seconds)
    if not done:
        setup.cancel()
        setup.add_done_callback(lambda _: _close_quietly(store))
        raise StoreUnavailableError(f"no answer within {seconds:g} s")
    try:
        setup.result()
    except Exception as error:
        await _aclose_quietly(store)
        raise StoreUnavailableError(f"{type(error).__name__}: {error}") from error
    return store


_closing: set[asyncio.Future[None]] = set()
"""Stores abandoned while opening, closing in the background (referenced until they are closed)."""


def _close_quietly(store: RunEventStore) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closing: its tasks are cancelled anyway
        closing = asyncio.ensure_future(_aclose_quietly(store))
        _closing.add(closing)
        closing.add_done_callback(_closing.discard)


async def _aclose_quietly(store: RunEventStore) -> None:
    try:
        await store.aclose()
    except Exception:
        logger.debug("run-journal: closing a store that failed to open failed too", exc_info=True)


class OwnedStore:
    def __init__(self, url: str, open_timeout: float) -> None:
        self.url, self.open_timeout = url, open_timeout
        self._store: RunEventStore | None = None

    async def acquire(self) -> RunEventStore:
        if self._store is None:
            try:
                self._store = await open_within(self.url, self.open_timeout)
            except StoreUnavailableError as error:
                raise StoreUnavailableError(f"cannot open the store {display_url(self.url)}: {error}") \
                    from error.__cause__
        return self._store

    async def release(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            try:
                await store.aclose()
            except Exception:  # everything is written; a store that fails to close loses nothing
                logger.warning("run-journal: closing the store %s failed", display_url(self.url),
                               exc_info=True)


class SharedStore:
    """One store per URL for the process, on the writer thread (see the module docstring)."""

    def __init__(self, url: str, label: str | None, open_timeout: float) -> None:
        self.url, self.open_timeout = url, open_timeout
        self.label = label
        """How the URL reached us (``RUN_JOURNAL_URL``), for the warning when it cannot be opened."""
        self._store: RunEventStore | None = None
        self._opening: asyncio.Task[RunEventStore] | None = None
        self._failure: StoreUnavailableError | None = None
        self._failed_at = 0.0

    def unavailable(self) -> bool:
        """The store failed to open less than :data:`REOPEN_INTERVAL` seconds ago (any thread)."""
        return self._failure is not None and time.monotonic() - self._failed_at < REOPEN_INTERVAL

    async def acquire(self) -> RunEventStore:
        if self._store is not None:
            return self._store
        if self._failure is not None and self.unavailable():
            raise self._failure.again()
        if self._opening is None:
            self._opening = asyncio.ensure_future(open_within(self.url, self.open_timeout))
        opening = self._opening
        try:
            store = await asyncio.shield(opening)
        except StoreUnavailableError as error:
            if self._opening is opening:
                self._opening = None
                self._fail(error)
            raise (self._failure or error).again() from None
        if self._opening is opening:
            self._opening, self._store, self._failure = None, store, None
        return store

    async def release(self) -> None:
        return None  # shared: closed at exit

    def open_soon(self, wait: bool = False) -> None:
        """Start opening the store now (any thread but the writer thread), and with ``wait`` wait
        until it is open or has failed (at most ``open_timeout`` seconds and a little). A store must
        be opened before exit: by then the interpreter refuses new executor work, which drivers use
        (SQLite's set-up, host name lookups)."""
        if self._store is not None or self.unavailable():
            return
        opening = asyncio.run_coroutine_threadsafe(self._open_quietly(), loops.writer_thread().loop)
        if wait:
            with contextlib.suppress(concurrent.futures.TimeoutError):
                opening.result(self.open_timeout + 1.0)

    async def _open_quietly(self) -> None:
        with contextlib.suppress(StoreUnavailableError):  # warned about by acquire
            await self.acquire()

    def _fail(self, error: StoreUnavailableError) -> None:
        first = self._failure is None
        where = f"{self.label}={display_url(self.url)}" if self.label else display_url(self.url)
        self._failure = StoreUnavailableError(f"cannot open the store {where}: {error}")
        self._failure.__cause__ = error.__cause__
        self._failed_at = time.monotonic()
        log = logger.warning if first else logger.info
        log("run-journal: %s; runs are not journaled while it is unavailable (tried again at most "
            "every %g s)", self._failure, REOPEN_INTERVAL)

    async def aclose(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            await store.aclose()


_lock = threading.Lock()
_shared: dict[str, SharedStore] = {}
_shared_pid = os.getpid()


def shared_store(url: str, *, label: str | None = None, open_timeout: float = OPEN_TIMEOUT) -> SharedStore:
    """The process's store for ``url`` (created on first use; the first caller's options stay)."""
    global _shared_pid
    with _lock:
        if _shared_pid != os.getpid():  # a forked child: the parent's stores live on the parent's thread
            _shared.clear()
            _shared_pid = os.getpid()
        if not _shared:
            loops.at_exit(close_shared_stores, stage="close")
        source = _shared.get(url)
        if source is None:
            source = _shared[url] = SharedStore(url, label, open_timeout)
        elif label and source.label is None:
            source.label = label
        return source


def close_shared_stores(timeout: float = EXIT_TIMEOUT) -> None:
    """Close every shared store (at exit; from any thread but the writer thread)."""
    with _lock:
        stores = list(_shared.values()) if _shared_pid == os.getpid() else []  # a fork's are the parent's
        _shared.clear()
    if not stores:
        return
    loop = loops.writer_thread().loop
    for source in stores:
        try:
            asyncio.run_coroutine_threadsafe(source.aclose(), loop).result(timeout=timeout)
        except Exception:
            logger.warning("run-journal: closing the store %s failed", display_url(source.url),
                           exc_info=True)
