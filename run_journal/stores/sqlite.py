"""``SqliteRunEventStore``: the SQL store on one SQLite file, safe for several processes.

The store keeps two ``sqlite3`` connections, a writer and a reader, each owned by a thread of its
own that opens, uses and closes it (as aiosqlite does). Every unit of work (``sql.SqlWork``) is one
hand-off to that thread: a write is ``BEGIN IMMEDIATE``, the counter bump, one ``executemany`` and
``COMMIT`` in a single trip (redone with an event_id lookup if an id was stored already), so the
event loop waits once per batch, never per statement. A thread hand-off costs ~0.15 ms on a busy
machine; through aiosqlite's per-statement API a write would pay it four times (a single ``put``
measured 0.66 ms instead of 0.23 ms). Only public ``sqlite3`` and ``asyncio`` API is used.

``BEGIN IMMEDIATE`` takes the database write lock before the counter is read, so two writers never
read the same ``last_seq``; writers of other processes wait in SQLite's busy handler up to
``busy_timeout``, in-process writers queue in the writer thread. The file is in WAL mode
(readers never block the writer) with ``synchronous=NORMAL``: a commit survives a killed process;
a power loss may lose the last commits. ``setup()`` creates and migrates the tables with SQLAlchemy
(``sql_schema``) under ``BEGIN IMMEDIATE``, which is also what serializes concurrent migrators.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from sqlalchemy import create_engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import NullPool

from run_journal.stores.base import StoreClosedError
from run_journal.stores.sql import SqlRunEventStore, engine_url, markers
from run_journal.stores.sql_schema import migrate
from run_journal.stores.urls import display_url

T = TypeVar("T")
_WAL_RETRY: Final = 0.01


class SqliteSession:
    """``SqlSession`` over a ``sqlite3`` connection (named ``:params`` are native to ``sqlite3``)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def rows(self, sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        text, names = markers(sql)  # positional binding: half of what named binding costs sqlite3
        return self._connection.execute(text, [params[name] for name in names]).fetchall()

    def run(self, sql: str, params: Mapping[str, Any]) -> int:
        return self._connection.execute(sql, params).rowcount

    def run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._connection.executemany(markers(sql)[0], rows)

    def notify(self, thread_id: str, last_seq: int) -> None:
        """Nothing to send: SQLite followers poll."""


class SqliteConnection:
    """One ``sqlite3`` connection and the one thread that opens, uses and closes it.

    Work is handed to the thread through a queue and answered on the caller's event loop (the
    pattern of aiosqlite; a ``ThreadPoolExecutor`` hand-off measured twice as slow). A connection
    that fails (other than on a constraint) is closed and dropped; the next call opens a fresh one,
    so a broken handle never poisons the store. A cancelled caller stops waiting; its work, once
    started, still runs to its end (a transaction commits or rolls back whole).
    """

    def __init__(self, path: Path, busy_ms: int, name: str) -> None:
        self._path = path
        self._busy_ms = busy_ms
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._starting = threading.Lock()
        self._connection: sqlite3.Connection | None = None  # touched only in the thread
        self._closed = False

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """``work(connection, *args)`` in the connection's thread."""
        if self._closed:
            raise StoreClosedError("the store is closed")
        if self._thread.ident is None:  # the first call starts the thread
            with self._starting:
                if self._thread.ident is None:
                    self._thread.start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put((loop, future, work, args))
        return await future

    def _serve(self) -> None:
        while True:
            loop, future, work, args = self._jobs.get()
            result: Any = None
            error: BaseException | None = None
            try:
                if work is None:  # close: the last job
                    self._drop()
                else:
                    result = self._call(work, args)
            except BaseException as caught:  # noqa: BLE001 - handed to the caller, whatever it is
                error = caught
            with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
                loop.call_soon_threadsafe(_deliver, future, result, error)
            if work is None:
                return

    def _call(self, work: Callable[..., T], args: tuple[Any, ...]) -> T:
        connection = self._connection or self._open()
        try:
            return work(connection, *args)
        except sqlite3.IntegrityError:
            raise
        except sqlite3.Error:
            self._drop()
            raise

    def _open(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self._path, timeout=self._busy_ms / 1000, isolation_level=None)
        try:
            connection.execute(f"PRAGMA busy_timeout = {int(self._busy_ms)}")
            connection.execute("PRAGMA synchronous = NORMAL")
        except BaseException:
            connection.close()
            raise
        self._connection = connection
        return connection

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(sqlite3.Error):  # it is being thrown away
                connection.close()

    async def close(self) -> None:
        """Close the connection in its thread, after the work queued before, and end the thread."""
        if self._closed:
            return
        self._closed = True
        if self._thread.ident is not None:
            loop = asyncio.get_running_loop()
            closed: asyncio.Future[None] = loop.create_future()
            self._jobs.put((loop, closed, None, ()))
            await closed


_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any] | None, tuple[Any, ...]]
"""The caller's loop, the future it awaits, ``work(connection, *args)`` (None: close the connection
and end the thread), the arguments."""


def _deliver(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def in_transaction(connection: sqlite3.Connection, unit: Callable[..., T], args: tuple[Any, ...]) -> T:
    """``BEGIN IMMEDIATE``; ``unit(session, *args)``; ``COMMIT`` (``ROLLBACK`` if anything fails)."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        result = unit(SqliteSession(connection), *args)
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    return result


def outside_transaction(connection: sqlite3.Connection, unit: Callable[..., T], args: tuple[Any, ...]) -> T:
    return unit(SqliteSession(connection), *args)


class SqliteRunEventStore(SqlRunEventStore):
    """The SQL store on a SQLite file (``sqlite:///rel.db``, ``sqlite:////abs.db``).

    ``database`` is the file's path, or a SQLAlchemy engine that names it (the store opens its own
    connections and leaves the engine to you). ``busy_timeout``: seconds a writer waits for the
    database lock held by another process before failing (the journal then retries).
    """

    dialect = "sqlite"
    duplicate = (sqlite3.IntegrityError,)
    prune_step = 500
    pause_between_prune_steps = True

    def __init__(
        self,
        database: str | os.PathLike[str] | AsyncEngine,
        *,
        busy_timeout: float = 30.0,
        follow_poll_interval: float | None = None,
    ) -> None:
        super().__init__()
        if isinstance(database, AsyncEngine):
            if database.dialect.name != "sqlite" or not database.url.database:
                raise ValueError(f"not an engine on a SQLite file: {database.url!r}")
            database = database.url.database
        self.path = Path(database)
        self._busy_ms = int(busy_timeout * 1000)
        self._writer = SqliteConnection(self.path, self._busy_ms, "run-journal-sqlite-writer")
        self._reader = SqliteConnection(self.path, self._busy_ms, "run-journal-sqlite-reader")
        if follow_poll_interval is not None:
            self.follow_poll_interval = follow_poll_interval

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SqliteRunEventStore:
        """``sqlite:///rel.db`` (relative path), ``sqlite:////abs.db`` (absolute); options are the
        constructor's keyword arguments."""
        driver_url, _ = engine_url(url)
        if driver_url.get_backend_name() != "sqlite" or driver_url.database is None:
            raise ValueError(f"{display_url(url)!r} is not a sqlite:// URL")
        return cls(driver_url.database, **options)

    @property
    def location(self) -> Path:
        return self.path

    async def _setup(self) -> None:
        """Create the file's directory, switch to WAL, create or migrate the tables (idempotent, and
        safe when several processes run it at once)."""
        await asyncio.to_thread(prepare_database, self.path, self._busy_ms)

    async def _release(self) -> None:
        await self._reader.close()
        await self._writer.close()

    async def _write(self, unit: Callable[..., T], *args: Any) -> T:
        return await self._writer.run(in_transaction, unit, args)

    async def _read(self, unit: Callable[..., T], *args: Any) -> T:
        return await self._reader.run(outside_transaction, unit, args)


def prepare_database(path: Path, busy_ms: int) -> None:
    """What ``setup()`` does, blocking (it runs in a worker thread)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path, timeout=busy_ms / 1000, isolation_level=None)
    try:
        switch_to_wal(connection, busy_ms)
    finally:
        connection.close()
    engine = create_engine(
        URL.create("sqlite", database=str(path)), poolclass=NullPool,
        connect_args={"timeout": busy_ms / 1000}, isolation_level="AUTOCOMMIT",
    )
    try:
        with engine.connect() as schema_connection:
            schema_connection.exec_driver_sql("BEGIN IMMEDIATE")  # the migration lock
            try:
                migrate(schema_connection, None)
                schema_connection.exec_driver_sql("COMMIT")
            except BaseException:
                with contextlib.suppress(DBAPIError):  # keep the first error; no transaction is fine
                    schema_connection.exec_driver_sql("ROLLBACK")
                raise
    finally:
        engine.dispose()


def switch_to_wal(connection: sqlite3.Connection, busy_ms: int) -> None:
    """``PRAGMA journal_mode = WAL``, retried: SQLite answers "database is locked" at once, without
    its busy handler, when another connection holds a lock while a fresh file switches to WAL (several
    processes opening a new store together). The mode is stored in the file, so every later
    connection finds it set."""
    if str(connection.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
        return
    for _ in range(max(1, int(busy_ms / 1000 / _WAL_RETRY))):
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error):
                raise
            time.sleep(_WAL_RETRY)
    connection.execute("PRAGMA journal_mode = WAL")
