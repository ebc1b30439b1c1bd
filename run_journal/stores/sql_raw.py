"""The SQL store's hot paths below SQLAlchemy's statement layer, and the row <-> record codec.

Why: through SQLAlchemy's aiosqlite adapter every statement costs about four hand-offs to the
driver's thread (cursor, execute, fetch, close); on a busy machine each hand-off is a thread wake-up.
The common SQLite write (bump the thread counter, insert the batch) and every page read therefore
talk to the aiosqlite connection directly (one hand-off per statement), as SQLAlchemy documents
for driver-level access. Read SQL is built here once for both databases: named ``:params`` are
native to ``sqlite3`` and go through ``text()`` on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Collection, Sequence
from typing import Any, Final

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.util import await_only

from run_journal.envelope import NewEvent, RunEvent
from run_journal.stores.base import StoreClosedError
from run_journal.stores.sql_schema import stamp

READY: Final = "run_journal_ready"
WRITE: Final = "run_journal_write"
BUSY_MS: Final = "run_journal_busy_ms"

EVENT_COLUMNS: Final = ", ".join(RunEvent.COLUMNS)
INSERT_COLUMNS: Final = (
    "thread_id", "seq", "run_id", "event_type", "category", "content", "metadata", "task_id",
    "created_at", "event_id", "user_id",
)


def event_of(row: Sequence[Any]) -> RunEvent:
    """A fresh record from a row in ``EVENT_COLUMNS`` order (each call decodes its own copies)."""
    return RunEvent.from_row(tuple(row))


def insert_values(event: NewEvent, seq: int) -> tuple[Any, ...]:
    """The row of ``event`` at ``seq`` in ``INSERT_COLUMNS`` order."""
    return (
        event.thread_id, seq, event.run_id, event.event_type, event.category, event.content_json,
        event.metadata_json, event.task_id, stamp(event.created_at),
        event.event_id, event.user_id,
    )


def insert_sql(events_table: str, style: str = "qmark") -> str:
    marks = ", ".join("?" if style == "qmark" else f":{name}" for name in INSERT_COLUMNS)
    return f"INSERT INTO {events_table} ({', '.join(INSERT_COLUMNS)}) VALUES ({marks})"


def bump_sql(threads_table: str) -> str:
    """Lock the thread's counter (insert it at 0 if new), add ``?`` to it, return the new value."""
    return (
        f"INSERT INTO {threads_table} (thread_id, last_seq) VALUES (?, ?) ON CONFLICT (thread_id) "
        "DO UPDATE SET last_seq = last_seq + excluded.last_seq RETURNING last_seq"
    )


class Where:
    """Builds the WHERE clause of a page read: fragments with named parameters, in order."""

    def __init__(self, thread_id: str, user_id: str | None) -> None:
        self.parts = ["thread_id = :thread_id"]
        self.params: dict[str, Any] = {"thread_id": thread_id}
        if user_id is not None:
            self.equals("user_id", user_id)

    def equals(self, column: str, value: Any) -> Where:
        self.parts.append(f"{column} = :{column}")
        self.params[column] = value
        return self

    def compare(self, column: str, operator: str, name: str, value: Any) -> Where:
        self.parts.append(f"{column} {operator} :{name}")
        self.params[name] = value
        return self

    def one_of(self, column: str, values: Sequence[Any]) -> Where:
        names = [f"{column}_{n}" for n in range(len(values))]
        self.parts.append(f"{column} IN ({', '.join(':' + name for name in names)})")
        self.params.update(zip(names, values, strict=True))
        return self

    def select(self, events_table: str, *, descending: bool, limit: int) -> tuple[str, dict[str, Any]]:
        order = "DESC" if descending else "ASC"
        sql = (
            f"SELECT {EVENT_COLUMNS} FROM {events_table} WHERE {' AND '.join(self.parts)} "
            f"ORDER BY seq {order} LIMIT :limit"
        )
        return sql, {**self.params, "limit": limit}


def prepare_sqlite(pooled: Any, busy_ms: int) -> None:
    """Once per pooled connection: our own BEGIN (the driver's is off), WAL, NORMAL sync, busy wait.

    ``pooled`` is SQLAlchemy's pooled connection (sync facade); its ``info`` outlives checkouts.
    """
    if pooled.info.get(READY):
        return
    raw: Any = pooled.dbapi_connection
    raw.isolation_level = None
    cursor = raw.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
    _switch_to_wal(cursor, busy_ms)
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.close()
    pooled.info[READY] = True


def _switch_to_wal(cursor: Any, busy_ms: int) -> None:
    """``PRAGMA journal_mode = WAL``, retried: SQLite answers "database is locked" at once, without
    its busy handler, when another connection holds a lock while a fresh file switches to WAL (several
    processes opening a new store together). Waits on the event loop (this runs inside SQLAlchemy's
    greenlet), never blocks it. The mode is stored in the file, so later connections find it set."""
    cursor.execute("PRAGMA journal_mode")
    if str(cursor.fetchone()[0]).lower() == "wal":
        return
    for _ in range(max(1, busy_ms // 10)):
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error):
                raise
            await_only(asyncio.sleep(0.01))
    cursor.execute("PRAGMA journal_mode = WAL")


def sqlite_begin(connection: Connection) -> None:
    """SQLAlchemy's documented aiosqlite recipe (a ``begin`` event emitting BEGIN itself).

    Writes get ``BEGIN IMMEDIATE``: the write lock is taken before the counter is read, so two
    writers never read the same ``last_seq``. Reads run without a transaction (one statement each).
    """
    options = connection.get_execution_options()
    prepare_sqlite(connection.connection, options.get(BUSY_MS, 30_000))
    if options.get(WRITE):
        connection.exec_driver_sql("BEGIN IMMEDIATE")


# -- work done in the aiosqlite thread, one hand-off per store operation -----------------------------
class KeptConnection:
    """A pooled SQLite connection checked out once and kept until ``close``: a pool checkout (with
    its reset on return, itself a hand-off) costs more than a page read or a batch write."""

    def __init__(self, engine: AsyncEngine, busy_ms: int) -> None:
        self._engine = engine
        self._busy_ms = busy_ms
        self._conn: AsyncConnection | None = None
        self._driver: Any = None
        self._opening = asyncio.Lock()
        self._closed = False

    async def driver(self) -> Any:
        """The aiosqlite connection (opened and configured on first use)."""
        if self._conn is not None and not self._conn.closed and not self._conn.invalidated:
            return self._driver
        async with self._opening:
            if self._conn is None or self._conn.closed or self._conn.invalidated:
                conn = await self._engine.connect()
                try:
                    driver = await driver_of(conn, self._busy_ms)
                except BaseException:
                    await conn.close()
                    raise
                if self._closed:  # the store closed while this connection was being opened
                    await conn.close()
                    raise StoreClosedError("the store is closed")
                self._conn, self._driver = conn, driver
        return self._driver

    async def run(self, work: Any, *args: Any) -> Any:
        """``work(sqlite3_connection, *args)`` in the driver's thread. A connection that fails (other
        than on a constraint, such as an event_id already stored) is dropped; the next use opens a
        fresh one."""
        try:
            return await in_driver_thread(await self.driver(), work, *args)
        except sqlite3.IntegrityError:
            raise
        except (sqlite3.Error, ValueError):  # ValueError: aiosqlite's connection is closed
            await self._discard()
            raise

    async def _discard(self) -> None:
        conn, self._conn, self._driver = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):  # it is being thrown away because it failed
                await conn.invalidate()

    async def close(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


async def driver_of(conn: AsyncConnection, busy_ms: int) -> Any:
    """The aiosqlite connection under a pooled SQLAlchemy connection, configured once."""
    pooled = await conn.get_raw_connection()
    if not pooled.info.get(READY):
        await conn.run_sync(lambda sync: prepare_sqlite(sync.connection, busy_ms))
    return pooled.driver_connection


async def in_driver_thread(driver: Any, work: Any, *args: Any) -> Any:
    """Run ``work(sqlite3_connection, *args)`` on the aiosqlite connection's own thread.

    ``Connection._execute`` is aiosqlite's queue into that thread (SQLAlchemy's aiosqlite dialect
    feeds the same queue for the same reason); it turns a statement's four thread hand-offs into one
    per operation, which is what brings ``put_batch`` close to raw ``sqlite3``.
    """
    return await driver._execute(work, driver._conn, *args)


def write_new(
    connection: sqlite3.Connection, bump: str, insert: str, thread_id: str, rows: list[tuple[Any, ...]]
) -> int:
    """``BEGIN IMMEDIATE``; bump the counter by ``len(rows)``; insert with seq filled in; commit.

    ``rows`` are ``insert_values`` with a placeholder seq. Returns the new ``last_seq``. Raises
    ``sqlite3.IntegrityError`` (after rolling back) when an event_id is already stored.
    """
    connection.execute("BEGIN IMMEDIATE")
    try:
        last = _insert_rows(connection, bump, insert, thread_id, rows)
        connection.execute("COMMIT")
    except BaseException:
        _rollback(connection)
        raise
    return last


def _insert_rows(
    connection: sqlite3.Connection, bump: str, insert: str, thread_id: str, rows: list[tuple[Any, ...]]
) -> int:
    (last,) = connection.execute(bump, (thread_id, len(rows))).fetchone()
    first = last - len(rows) + 1
    connection.executemany(insert, [(row[0], first + n, *row[2:]) for n, row in enumerate(rows)])
    return int(last)


def _rollback(connection: sqlite3.Connection) -> None:
    if connection.in_transaction:
        connection.execute("ROLLBACK")


def if_absent_sql(events_table: str, type_count: int) -> str:
    """A retry's own record first, else the run's first event of the exclusive types."""
    marks = ", ".join("?" for _ in range(type_count))
    return (
        f"SELECT {EVENT_COLUMNS} FROM {events_table} WHERE thread_id = ? "
        f"AND ((run_id = ? AND event_type IN ({marks})) OR event_id = ?) "
        "ORDER BY CASE WHEN event_id = ? THEN 0 ELSE 1 END, seq LIMIT 1"
    )


def write_if_absent(
    connection: sqlite3.Connection, lookup: str, params: tuple[Any, ...], bump: str, insert: str,
    row: tuple[Any, ...],
) -> tuple[int, Any]:
    """``BEGIN IMMEDIATE``; return ``(0, found)`` if ``lookup`` finds a row, else insert ``row`` at
    the next seq and return ``(seq, None)``. The write lock makes the check and the write one step."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        found = connection.execute(lookup, params).fetchone()
        if found is not None:
            connection.execute("ROLLBACK")
            return 0, found
        last = _insert_rows(connection, bump, insert, row[0], [row])
        connection.execute("COMMIT")
    except BaseException:
        _rollback(connection)
        raise
    return last, None


def upsert_run_sql(
    runs_table: str, columns: Sequence[str], terminal: Sequence[str], kept: Collection[str]
) -> str:
    """``schema.upsert_run`` as SQLite text: the guards (same thread, ``runs.may_replace``) are the
    WHERE clause; ``kept`` columns are set by the insert only."""
    updates = ", ".join(f"{name} = excluded.{name}" for name in columns if name not in kept)
    finished = ", ".join(f"'{status}'" for status in terminal)
    return (
        f"INSERT INTO {runs_table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)}) "
        f"ON CONFLICT (run_id) DO UPDATE SET {updates} "
        f"WHERE {runs_table}.thread_id = excluded.thread_id AND "
        f"({runs_table}.status NOT IN ({finished}) OR {runs_table}.status = excluded.status) "
        "RETURNING row, thread_id"
    )


def write_run(
    connection: sqlite3.Connection, upsert: str, runs_table: str, values: tuple[Any, ...]
) -> tuple[str, str]:
    """``BEGIN IMMEDIATE``; upsert the row; the stored row's JSON and thread (the old ones if a
    guard refused: the caller raises when that thread is not the row's)."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        written = _upsert_run(connection, upsert, runs_table, values)
        connection.execute("COMMIT")
    except BaseException:
        _rollback(connection)
        raise
    return written


def _upsert_run(
    connection: sqlite3.Connection, upsert: str, runs_table: str, values: tuple[Any, ...]
) -> tuple[str, str]:
    written = connection.execute(upsert, values).fetchone()
    if written is None:
        written = connection.execute(
            f"SELECT row, thread_id FROM {runs_table} WHERE run_id = ?", (values[0],)
        ).fetchone()
    return str(written[0]), str(written[1])


def write_run_close(
    connection: sqlite3.Connection, events: tuple[str, str, list[tuple[Any, ...]]],
    terminal: tuple[str, tuple[Any, ...], tuple[Any, ...]], run: tuple[str, str, tuple[Any, ...]],
) -> tuple[str, str] | None:
    """``put_run_close`` in one ``BEGIN IMMEDIATE`` transaction: insert the events and, unless the
    run has another terminal event (then commit the events alone and return None), the terminal
    event after them, then upsert the run row and return it as ``write_run`` does. ``events`` is
    ``(bump, insert, rows)``, ``terminal`` ``(lookup, params, row)``, ``run`` ``(upsert, runs_table,
    values)``. An event_id already stored raises ``sqlite3.IntegrityError`` after rolling back."""
    bump, insert, rows = events
    lookup, params, terminal_row = terminal
    connection.execute("BEGIN IMMEDIATE")
    try:
        found = connection.execute(lookup, params).fetchone()  # the events are not terminal ones
        if found is None:
            rows = [*rows, terminal_row]  # one seq range, one executemany
        if rows:
            _insert_rows(connection, bump, insert, terminal_row[0], rows)
        if found is not None and found[8] != terminal_row[9]:
            connection.execute("COMMIT")
            return None
        written = _upsert_run(connection, *run)
        connection.execute("COMMIT")
    except BaseException:
        _rollback(connection)
        raise
    return written


def fetch_events(connection: sqlite3.Connection, sql: str, params: dict[str, Any]) -> list[RunEvent]:
    """A page of records; built in the driver thread, so the event loop only receives the list."""
    return RunEvent.from_rows(connection.execute(sql, params))
