"""``PostgresRunEventStore``: the SQL store on PostgreSQL, through SQLAlchemy Core and asyncpg.

A write of one thread, the common write (a batch, or a run's end: its last events, its terminal
event and its row), is one call of a server-side function (``stores/postgres_write.py``): one
statement, one round trip, one transaction, one counter bump. Anything else runs the statements of
``sql.SqlWork`` through ``AsyncConnection.run_sync`` (writes inside ``engine.begin()``), the same
statements as SQLite. Writers of one thread queue on the thread's counter row (locked by the upsert
that bumps it, until commit); writers of other threads do not wait. ``lock_timeout`` and
``statement_timeout`` turn a stuck writer into an error the journal retries instead of a hang.

Connections come from a bounded pool (``pool_size``, no overflow); while the server refuses new ones
(too many clients), a call waits for one, up to ``connection_wait`` seconds, instead of failing.

``follow`` wakes on ``NOTIFY``. One dedicated connection per store listens, and registers the threads
its followers follow in ``run_journal_followers`` (renewed while they follow); a write sends
``pg_notify(channel, "<thread_id>\\n<last_seq>")`` only when its thread has a registered follower,
once per thread and transaction, so a notification is delivered only if (and after) the events are
committed, and writes nobody follows never queue on the server's notification lock. Followers wait
on the listening connection with a fallback timeout, so a lost notification or connection costs
latency, never events.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, Literal, TypeVar

from sqlalchemy import Connection, TextClause, func, select, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import QueuePool
from sqlalchemy.schema import CreateSchema

from run_journal.bodies import Body
from run_journal.envelope import NewEvent, RunEvent, loads
from run_journal.runs import RunRow, stored_row
from run_journal.stores import postgres_write
from run_journal.stores.base import SearchQuery, StoreError, Waiter, poll_last_seq
from run_journal.stores.sql import (
    RUN_COLUMNS,
    SqlRunEventStore,
    check_schema_name,
    engine_url,
    markers,
    moved_run_error,
    run_values,
)
from run_journal.stores.sql_schema import followers, migrate, qualified
from run_journal.stores.urls import display_url

T = TypeVar("T")
ListenState = Literal["listening", "started", "unavailable"]
logger = logging.getLogger("run_journal")

POOL_SIZE: Final = 5
"""Connections per store by default (a listening store holds one of them while it follows)."""
CONNECTION_WAIT: Final = 30.0
"""Seconds a call waits for a connection (a free one of the pool, or one the server accepts)."""
UNIQUE_VIOLATION: Final = "23505"
REFUSED: Final = frozenset({"53300", "57P03"})
"""SQLSTATEs of a server that refuses a new connection for now: too many clients, starting up."""
FOLLOW_LEASE: Final = 30.0
"""Seconds a follower's registration lasts; the listener renews it every third of that."""


@functools.lru_cache(maxsize=512)
def _statement(sql: str) -> TextClause:
    """A ``text()`` construct per SQL string, built once (SQLAlchemy caches its compiled form)."""
    return text(sql)


class PostgresSession:
    """``SqlSession`` over a SQLAlchemy connection (inside ``run_sync``). Notifications are sent
    once per thread, at the end of the unit (``send_notifications``), to its followers only."""

    def __init__(self, connection: Connection, channel: str | None, notify_sql: str) -> None:
        self._connection = connection
        self._channel = channel
        self._notify_sql = notify_sql
        self._pending: dict[str, int] = {}

    def rows(self, sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self._connection.execute(_statement(sql), params)]

    def run(self, sql: str, params: Mapping[str, Any]) -> int:
        return self._connection.execute(_statement(sql), params).rowcount

    def run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        names = markers(sql)[1]
        self._connection.execute(_statement(sql), [dict(zip(names, row, strict=True)) for row in rows])

    def notify(self, thread_id: str, last_seq: int) -> None:
        if self._channel is not None:
            self._pending[thread_id] = last_seq

    def send_notifications(self) -> None:
        """One statement for every thread the unit wrote: a notification for each followed one."""
        if self._pending:
            self._connection.execute(_statement(self._notify_sql), {
                "channel": self._channel, "threads": list(self._pending),
                "seqs": list(self._pending.values())})
            self._pending.clear()


class PostgresRunEventStore(SqlRunEventStore):
    """The SQL store on PostgreSQL (``postgresql://user@host/db?schema=name``).

    Build it with ``from_url`` or around an ``AsyncEngine`` you own (``owns_engine=False``, the
    default: ``aclose`` leaves it open). Engines built by ``from_url`` hold at most ``pool_size``
    connections (default 5, no overflow), and set two PostgreSQL timeouts as server settings on every
    connection: ``lock_timeout`` (seconds a writer waits for a thread's counter row or another lock
    before failing; default 10) and ``statement_timeout`` (default 60). An engine you pass in keeps its
    own settings. ``connection_wait`` (default 30): seconds a call waits for a connection while the
    pool has none free or the server refuses new clients. ``follow`` wakes on ``NOTIFY`` and re-reads
    every ``follow_fallback_interval`` seconds in case a notification is lost; ``listen=False`` turns
    both sending and listening off (followers then poll).
    """

    dialect = "postgresql"
    duplicate = (IntegrityError,)
    prune_step = 5000
    pause_between_prune_steps = False
    lateral_joins = True
    follow_fallback_interval: float = 5.0
    one_call_writes: bool = True
    """Write one thread's batch or a run's end in one call of ``run_journal_write_v2``; False runs
    the statements of ``SqlWork`` instead (what a batch over several threads always does)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        schema_name: str | None = None,
        follow_poll_interval: float | None = None,
        listen: bool = True,
        owns_engine: bool = False,
        connection_wait: float = CONNECTION_WAIT,
    ) -> None:
        if engine.dialect.name != "postgresql":
            raise ValueError(f"PostgresRunEventStore needs a postgresql engine, not {engine.dialect.name!r}")
        if not connection_wait > 0:
            raise ValueError(f"connection_wait must be > 0 seconds, got {connection_wait!r}")
        self.schema_name = check_schema_name(schema_name) if schema_name else None
        super().__init__(self.schema_name)
        self._owned = engine if owns_engine else None
        # the translate map places the schema's Table objects (migrations); statements name it
        self._engine = (
            engine.execution_options(schema_translate_map={None: self.schema_name})
            if self.schema_name else engine
        )
        self._reading = self._engine.execution_options(isolation_level="AUTOCOMMIT")  # no BEGIN/ROLLBACK
        self.connection_wait = connection_wait
        self._channel = channel_name(self.schema_name) if listen else None
        followers_table = qualified(followers, self.schema_name)
        self._notify_sql = (
            "SELECT pg_notify(:channel, t.thread_id || E'\\n' || t.last_seq) "
            "FROM unnest(CAST(:threads AS text[]), CAST(:seqs AS bigint[])) AS t(thread_id, last_seq) "
            f"WHERE EXISTS (SELECT 1 FROM {followers_table} AS f WHERE f.thread_id = t.thread_id "
            "AND f.until > now())"
        )
        self._write_call = postgres_write.call(self.schema_name)
        self._listener = PgListener(self, self._channel, followers_table) if self._channel else None
        if follow_poll_interval is not None:
            self.follow_poll_interval = follow_poll_interval

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresRunEventStore:
        """``postgresql://user@host/db?schema=name``. Options: ``pool_size`` (connections of the
        store's pool; default 5), ``lock_timeout`` / ``statement_timeout`` (seconds),
        ``engine_options`` (passed to ``create_async_engine``: they win over the pool settings), and
        the constructor's keyword arguments (``connection_wait`` also bounds the pool's wait)."""
        driver_url, schema_name = engine_url(url)
        if driver_url.get_backend_name() != "postgresql":
            raise ValueError(f"{display_url(url)!r} is not a postgresql:// URL")
        pool_size = int(options.pop("pool_size", POOL_SIZE))
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, got {pool_size}")
        settings = engine_settings(
            driver_url,
            lock_timeout=float(options.pop("lock_timeout", 10.0)),
            statement_timeout=float(options.pop("statement_timeout", 60.0)),
            engine_options=options.pop("engine_options", None),
        )
        settings.setdefault("pool_size", pool_size)
        settings.setdefault("max_overflow", 0)
        settings.setdefault("pool_timeout", float(options.get("connection_wait", CONNECTION_WAIT)))
        engine = create_async_engine(driver_url, **settings)
        return cls(engine, schema_name=schema_name, owns_engine=True, **options)

    @property
    def pool_size(self) -> int | None:
        """The size of the store's pool (``QueuePool.size()``: with ``from_url``, no overflow, so the
        connections it holds at most); None for an engine whose pool has no size."""
        pool = self._engine.pool
        return pool.size() if isinstance(pool, QueuePool) else None

    @property
    def location(self) -> str:
        """``postgresql://user@host:port/database`` (no password), with ``?schema=`` when the store
        has a schema of its own."""
        where = self._engine.url.set(drivername="postgresql", password=None).render_as_string(False)
        return f"{where}?schema={self.schema_name}" if self.schema_name else where

    async def _setup(self) -> None:
        """Create the schema and tables or migrate them, one migrator at a time (an advisory lock
        keyed by the schema, held until commit); concurrent callers find the work done."""
        async with self._connection(self._engine) as conn, conn.begin():
            await conn.execute(select(func.pg_advisory_xact_lock(lock_key("setup", self.schema_name or ""))))
            if self.schema_name:
                await conn.execute(CreateSchema(self.schema_name, if_not_exists=True))
            await conn.run_sync(migrate, self.schema_name)

    async def _release(self) -> None:
        if self._listener is not None:
            await self._listener.close()
        if self._owned is not None:
            await self._owned.dispose()

    @contextlib.asynccontextmanager
    async def _connection(self, engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
        """A connection of the pool. While the server refuses new clients, the call waits for one
        (pauses from 0.05 s doubling to 1 s) up to ``connection_wait`` seconds, then fails with a
        ``StoreError`` that says so."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connection_wait
        pause = 0.05
        while True:
            try:
                connection = await engine.connect()
                break
            except DBAPIError as error:
                if getattr(error.orig, "sqlstate", None) not in REFUSED:
                    raise
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise StoreError(f"PostgreSQL refused new connections for {self.connection_wait} s: "
                                     f"{error.orig}") from error
                await asyncio.sleep(min(pause, remaining))
                pause = min(pause * 2, 1.0)
        try:
            yield connection
        finally:
            await connection.close()

    async def _write(self, unit: Callable[..., T], *args: Any) -> T:
        async with self._connection(self._engine) as conn, conn.begin():
            return await conn.run_sync(self._run, unit, args)

    async def _read(self, unit: Callable[..., T], *args: Any) -> T:
        async with self._connection(self._reading) as conn:
            return await conn.run_sync(self._run, unit, args)

    def _run(self, connection: Connection, unit: Callable[..., T], args: tuple[Any, ...]) -> T:
        session = PostgresSession(connection, self._channel, self._notify_sql)
        result = unit(session, *args)
        session.send_notifications()
        return result

    async def _search_runs(self, query: SearchQuery) -> list[tuple[str, RunRow]]:
        """The statement of ``SqlWork.search_sql`` straight on the driver, as the one-call write is
        sent: asyncpg prepares it once per connection and SQLAlchemy's layer is skipped, which took
        as long as the query itself on a page of 50 (``bench/bench_search.py``)."""
        sql, params = self._work.search_sql(query)
        text, names = markers(sql)
        async with self._connection(self._reading) as conn:
            driver: Any = (await conn.get_raw_connection()).driver_connection
            try:
                rows = await driver.fetch(dollar_markers(text), *(params[name] for name in names))
            except Exception as error:
                if getattr(error, "sqlstate", None) is None:
                    await conn.invalidate()  # a broken connection never goes back to the pool
                raise
        return [(str(moment), stored_row(loads(row))) for moment, row in rows]

    # -- one call per thread ------------------------------------------------------------------------
    def _one_call(self, events: Sequence[NewEvent], bodies: Sequence[Body]) -> bool:
        """Whether ``run_journal_write_v2`` can write ``events``: one thread (its bodies too), no
        event id twice."""
        thread_id = events[0].thread_id
        return self.one_call_writes and all(event.thread_id == thread_id for event in events) \
            and len({event.event_id for event in events}) == len(events) \
            and all(body.thread_id == thread_id for body in bodies)

    async def _call_write(
        self, events: Sequence[NewEvent], exclusive: Sequence[str] | None, row: Sequence[Any] | None,
        bodies: Sequence[Body] = (),
    ) -> tuple[int, bool, str | None, str | None] | None:
        """One call of the write function: (last seq, closed, row JSON, row's thread), or None when
        the general path must write instead (nothing is written then: an event id is stored already,
        a unique violation; or a run id is claimed, SQLSTATE ``RJ001``)."""
        arguments = postgres_write.arguments(events[0].thread_id, events, exclusive, row, self._channel,
                                             bodies)
        async with self._connection(self._engine) as conn:
            driver: Any = (await conn.get_raw_connection()).driver_connection
            try:  # straight on the driver: one round trip, no transaction around it
                found = await driver.fetchrow(self._write_call, *arguments)
            except Exception as error:
                state = getattr(error, "sqlstate", None)  # the server's answer (asyncpg's PostgresError)
                if state in (UNIQUE_VIOLATION, postgres_write.FALLBACK_STATE):
                    return None
                if state is None:
                    await conn.invalidate()  # a broken connection never goes back to the pool
                raise
        return int(found[0]), bool(found[1]), found[2], found[3]

    async def _append(self, batch: Sequence[NewEvent], bodies: Sequence[Body] = ()) -> list[RunEvent]:
        written = await self._call_write(batch, None, None, bodies) if self._one_call(batch, bodies) else None
        if written is None:
            return await super()._append(batch, bodies)
        start = written[0] - len(batch) + 1
        return [RunEvent.stored(event, start + n) for n, event in enumerate(batch)]

    async def _put_run_close(
        self, batch: Sequence[NewEvent], terminal: NewEvent, types: tuple[str, ...], row: RunRow,
        bodies: Sequence[Body] = (),
    ) -> bool:
        events = [*batch, terminal]
        values = run_values(row)
        columns = [values[name] for name in RUN_COLUMNS]
        one_call = self._one_call(events, bodies)
        written = await self._call_write(events, types, columns, bodies) if one_call else None
        if written is None:  # the statements of SqlWork look ids up, refuse or take claims over
            return await super()._put_run_close(batch, terminal, types, row, bodies)
        _, closed, _, owner = written
        if not closed:
            return False
        if owner != row.thread_id:  # the events are committed; the row was refused
            raise moved_run_error(row.run_id, str(owner), row.thread_id)
        return True

    def _watch(self, thread_id: str) -> AbstractAsyncContextManager[Waiter]:
        if self._listener is None:
            return super()._watch(thread_id)
        return self._notified(self._listener, thread_id)

    @contextlib.asynccontextmanager
    async def _notified(self, listener: PgListener, thread_id: str) -> AsyncIterator[Waiter]:
        """Waits for a notification of the thread (or ``follow_fallback_interval``); polls while no
        listening connection can be had. The listener listens, and registers the thread, before the
        follower's first read."""

        async def wait(after_seq: int) -> int | None:
            state = await listener.ensure()
            if state == "unavailable":
                return await poll_last_seq(self, thread_id, after_seq)
            if state == "listening":
                return await listener.wait(thread_id, after_seq, self.follow_fallback_interval)
            return None  # "started": read once more, a write may have slipped in before the LISTEN

        await listener.ensure()
        async with listener.following(thread_id):
            yield wait


def engine_settings(
    driver_url: URL, *, lock_timeout: float, statement_timeout: float, engine_options: Any
) -> dict[str, Any]:
    """``create_async_engine`` keywords; ``lock_timeout`` / ``statement_timeout`` become server
    settings of every connection (a stuck writer fails and is retried, never hangs)."""
    settings: dict[str, Any] = dict(engine_options or {})
    connect_args = dict(settings.pop("connect_args", {}))
    server = dict(connect_args.get("server_settings", {}))
    server.setdefault("lock_timeout", f"{int(lock_timeout * 1000)}ms")
    server.setdefault("statement_timeout", f"{int(statement_timeout * 1000)}ms")
    connect_args["server_settings"] = server
    settings["connect_args"] = connect_args
    return settings


def lock_key(*parts: str) -> int:
    """A stable signed 64-bit key for ``pg_advisory_xact_lock`` derived from names."""
    digest = hashlib.sha256("\x1f".join(("run_journal", *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def dollar_markers(text: str) -> str:
    """``?`` markers (``sql.markers``) as PostgreSQL's numbered ``$1, $2, ...`` (no statement of
    ``SqlWork`` holds a ``?`` of its own)."""
    parts = text.split("?")
    return "".join(part + (f"${n}" if n < len(parts) else "") for n, part in enumerate(parts, 1))


def channel_name(schema: str | None) -> str:
    """The LISTEN/NOTIFY channel of one store (a schema of its own gets a channel of its own)."""
    return "run_journal_" + hashlib.sha256((schema or "").encode()).hexdigest()[:20]


class PgListener:
    """One LISTEN connection per store: registers the threads its followers follow (so writers of
    those threads notify), tracks the highest seq notified per followed thread and wakes its
    waiters. Its statements run on the listening connection itself, one at a time."""

    def __init__(self, store: PostgresRunEventStore, channel: str, followers_table: str) -> None:
        self._store = store
        self._channel = channel
        self._followers = followers_table
        self._register = (  # the threads $1 followed by this listener ($2) for $3 seconds from now
            f"INSERT INTO {followers_table} (thread_id, listener, until) "
            "SELECT t, $2, now() + make_interval(secs => $3) FROM unnest($1::text[]) AS t "
            "ON CONFLICT (thread_id, listener) DO UPDATE SET until = excluded.until"
        )
        self._id = uuid.uuid4().hex
        self._connection: AsyncConnection | None = None
        self._driver: Any = None
        self._lock = asyncio.Lock()
        self._talking = asyncio.Lock()
        self._renewed = 0.0
        self._interest: Counter[str] = Counter()
        self._latest: dict[str, int] = {}
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._closed = False
        self._discarding: set[asyncio.Task[None]] = set()

    @property
    def listening(self) -> bool:
        return self._connection is not None

    @contextlib.asynccontextmanager
    async def following(self, thread_id: str) -> AsyncIterator[None]:
        """While a follower iterates ``thread_id``: the thread is registered (writers notify) and
        its notifications are recorded."""
        self._interest[thread_id] += 1
        try:
            if self._interest[thread_id] == 1:
                await self._say(self._register, [thread_id], self._id, FOLLOW_LEASE)
            yield
        finally:
            self._interest[thread_id] -= 1
            if self._interest[thread_id] <= 0:
                del self._interest[thread_id]
                self._latest.pop(thread_id, None)
                await self._say(f"DELETE FROM {self._followers} WHERE listener = $1 AND thread_id = $2",
                                self._id, thread_id)

    async def _say(self, sql: str, *args: Any) -> bool:
        """Run a statement on the listening connection (if there is one); False when it failed: the
        registration is then renewed on the next wait or connection, followers fall back to polls."""
        if self._driver is None:
            return False
        try:
            async with self._talking:
                await self._driver.execute(sql, *args)
        except Exception:  # a lost registration costs latency (the fallback), not events
            logger.debug("run-journal: the follower registry could not be updated", exc_info=True)
            return False
        return True

    async def _register_all(self) -> None:
        """Register every followed thread (after connecting) or renew them all, and drop the rows of
        followers gone (past their lease)."""
        if self._interest and await self._say(self._register, list(self._interest), self._id, FOLLOW_LEASE):
            await self._say(f"DELETE FROM {self._followers} WHERE until < now()")
        self._renewed = time.monotonic()

    async def ensure(self) -> ListenState:
        """Listen if not yet listening (and register the followed threads). ``started`` means: poll
        once more, a write may have slipped in between the caller's last read and the LISTEN."""
        if self._connection is not None:
            if time.monotonic() - self._renewed > FOLLOW_LEASE / 3:
                await self._register_all()
            return "listening"
        if self._closed:
            return "unavailable"
        async with self._lock:
            if self._connection is not None:
                return "listening"
            try:
                async with contextlib.AsyncExitStack() as failing:
                    connection = await self._store._engine.connect()
                    failing.push_async_callback(connection.close)
                    raw = await connection.get_raw_connection()
                    driver: Any = raw.driver_connection
                    await driver.add_listener(self._channel, self._on_notify)
                    driver.add_termination_listener(self._on_lost)
                    failing.pop_all()
            except Exception:  # noqa: BLE001 - no LISTEN just means followers poll instead
                return "unavailable"
            self._connection, self._driver = connection, driver
            await self._register_all()
            return "started"

    async def wait(self, thread_id: str, after_seq: int, fallback: float) -> int | None:
        """Return when a seq above ``after_seq`` was notified for the thread (that seq: a
        notification is delivered after its commit), or None after ``fallback`` seconds (or when the
        connection was lost)."""
        if (latest := self._latest.get(thread_id, 0)) > after_seq:
            return latest
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(thread_id, set())
        waiters.add(waiter)
        try:
            await asyncio.wait({waiter}, timeout=fallback)
        finally:
            waiters.discard(waiter)
            if not waiters:
                self._waiters.pop(thread_id, None)
        latest = self._latest.get(thread_id, 0)
        return latest if latest > after_seq and self._connection is not None else None

    def _on_notify(self, _connection: object, _pid: int, _channel: str, payload: str) -> None:
        thread_id, _, seq = payload.rpartition("\n")
        if thread_id in self._interest:
            self._latest[thread_id] = max(self._latest.get(thread_id, 0), int(seq or 0))
        self._wake(self._waiters.get(thread_id, ()))

    def _on_lost(self, _connection: object) -> None:
        lost, self._connection, self._driver = self._connection, None, None
        if lost is not None:  # hand the dead connection back to the pool as invalid (no leaked checkout)
            task = asyncio.get_running_loop().create_task(self._discard(lost))
            self._discarding.add(task)
            task.add_done_callback(self._discarding.discard)
        self._wake_all()

    @staticmethod
    async def _discard(connection: AsyncConnection) -> None:
        with contextlib.suppress(Exception):
            await connection.invalidate()
            await connection.close()

    def _wake_all(self) -> None:
        for waiters in list(self._waiters.values()):
            self._wake(waiters)

    @staticmethod
    def _wake(waiters: Iterable[asyncio.Future[None]]) -> None:
        for waiter in list(waiters):
            if not waiter.done():
                waiter.set_result(None)

    async def close(self) -> None:
        """Stop listening and drop the dedicated connection (it is not returned to the pool)."""
        self._closed = True
        self._wake_all()
        if self._driver is not None:
            await self._say(f"DELETE FROM {self._followers} WHERE listener = $1", self._id)
        connection, driver = self._connection, self._driver
        self._connection = self._driver = None
        if connection is None:
            return
        with contextlib.suppress(Exception):
            driver.remove_termination_listener(self._on_lost)
            await driver.remove_listener(self._channel, self._on_notify)
        with contextlib.suppress(Exception):
            await connection.invalidate()
            await connection.close()
