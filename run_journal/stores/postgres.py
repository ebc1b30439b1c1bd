"""``PostgresRunEventStore``: the SQL store on PostgreSQL, through SQLAlchemy Core and asyncpg.

Every unit of work (``sql.SqlWork``) runs through ``AsyncConnection.run_sync`` (writes inside
``engine.begin()``), so both SQL stores run the same statements. Writers of one thread queue on the
thread's counter row (locked by the upsert that bumps it, until commit); writers of other threads do
not wait. ``lock_timeout`` and ``statement_timeout`` turn a stuck writer into an error the journal
retries instead of a hang.

``follow`` wakes on ``NOTIFY``: writers send ``pg_notify(channel, "<thread_id>\\n<last_seq>")``
inside their transaction, so a notification is delivered only if (and after) the events are
committed. One dedicated asyncpg connection per store listens; followers of a thread wait on it
with a fallback timeout, so a lost notification or connection costs latency, never events.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, Literal, TypeVar

from sqlalchemy import Connection, TextClause, func, select, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.schema import CreateSchema

from run_journal.stores.base import Waiter, poll_last_seq
from run_journal.stores.sql import SqlRunEventStore, check_schema_name, engine_url, markers
from run_journal.stores.sql_schema import migrate

T = TypeVar("T")
ListenState = Literal["listening", "started", "unavailable"]
_NOTIFY: Final = "SELECT pg_notify(:channel, :payload)"


@functools.lru_cache(maxsize=512)
def _statement(sql: str) -> TextClause:
    """A ``text()`` construct per SQL string, built once (SQLAlchemy caches its compiled form)."""
    return text(sql)


class PostgresSession:
    """``SqlSession`` over a SQLAlchemy connection (inside ``run_sync``)."""

    def __init__(self, connection: Connection, channel: str | None) -> None:
        self._connection = connection
        self._channel = channel

    def rows(self, sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self._connection.execute(_statement(sql), params)]

    def run(self, sql: str, params: Mapping[str, Any]) -> int:
        return self._connection.execute(_statement(sql), params).rowcount

    def run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        names = markers(sql)[1]
        self._connection.execute(_statement(sql), [dict(zip(names, row, strict=True)) for row in rows])

    def notify(self, thread_id: str, last_seq: int) -> None:
        if self._channel is not None:
            self._connection.execute(
                _statement(_NOTIFY), {"channel": self._channel, "payload": f"{thread_id}\n{last_seq}"}
            )


class PostgresRunEventStore(SqlRunEventStore):
    """The SQL store on PostgreSQL (``postgresql://user@host/db?schema=name``).

    Build it with ``from_url`` or around an ``AsyncEngine`` you own (``owns_engine=False``, the
    default: ``aclose`` leaves it open). PostgreSQL timeouts of engines built by ``from_url``:
    ``lock_timeout`` (seconds a writer waits for a thread's counter row or another lock before
    failing; default 10) and ``statement_timeout`` (default 60) are set as server settings on every
    connection. An engine you pass in keeps its own settings. ``follow`` wakes on ``NOTIFY`` and
    re-reads every ``follow_fallback_interval`` seconds in case a notification is lost;
    ``listen=False`` turns both sending and listening off (followers then poll).
    """

    dialect = "postgresql"
    duplicate = (IntegrityError,)
    prune_step = 5000
    pause_between_prune_steps = False
    follow_fallback_interval: float = 5.0

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        schema_name: str | None = None,
        follow_poll_interval: float | None = None,
        listen: bool = True,
        owns_engine: bool = False,
    ) -> None:
        if engine.dialect.name != "postgresql":
            raise ValueError(f"PostgresRunEventStore needs a postgresql engine, not {engine.dialect.name!r}")
        self.schema_name = check_schema_name(schema_name) if schema_name else None
        super().__init__(self.schema_name)
        self._owned = engine if owns_engine else None
        # the translate map places the schema's Table objects (migrations); statements name it
        self._engine = (
            engine.execution_options(schema_translate_map={None: self.schema_name})
            if self.schema_name else engine
        )
        self._channel = channel_name(self.schema_name) if listen else None
        self._listener = PgListener(self._engine, self._channel) if self._channel else None
        if follow_poll_interval is not None:
            self.follow_poll_interval = follow_poll_interval

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresRunEventStore:
        """``postgresql://user@host/db?schema=name``. Options: ``lock_timeout`` /
        ``statement_timeout`` (seconds), ``engine_options`` (passed to ``create_async_engine``), and
        the constructor's keyword arguments."""
        driver_url, schema_name = engine_url(url)
        if driver_url.get_backend_name() != "postgresql":
            raise ValueError(f"{url!r} is not a postgresql:// URL")
        settings = engine_settings(
            driver_url,
            lock_timeout=float(options.pop("lock_timeout", 10.0)),
            statement_timeout=float(options.pop("statement_timeout", 60.0)),
            engine_options=options.pop("engine_options", None),
        )
        engine = create_async_engine(driver_url, **settings)
        return cls(engine, schema_name=schema_name, owns_engine=True, **options)

    @property
    def location(self) -> str:
        """``postgresql://user@host:port/database`` (no password), with ``?schema=`` when the store
        has a schema of its own."""
        where = self._engine.url.set(drivername="postgresql", password=None).render_as_string(False)
        return f"{where}?schema={self.schema_name}" if self.schema_name else where

    async def _setup(self) -> None:
        """Create the schema and tables or migrate them, one migrator at a time (an advisory lock
        keyed by the schema, held until commit); concurrent callers find the work done."""
        async with self._engine.begin() as conn:
            await conn.execute(select(func.pg_advisory_xact_lock(lock_key("setup", self.schema_name or ""))))
            if self.schema_name:
                await conn.execute(CreateSchema(self.schema_name, if_not_exists=True))
            await conn.run_sync(migrate, self.schema_name)

    async def _release(self) -> None:
        if self._listener is not None:
            await self._listener.close()
        if self._owned is not None:
            await self._owned.dispose()

    async def _write(self, unit: Callable[..., T], *args: Any) -> T:
        async with self._engine.begin() as conn:
            return await conn.run_sync(self._run, unit, args)

    async def _read(self, unit: Callable[..., T], *args: Any) -> T:
        async with self._engine.connect() as conn:
            return await conn.run_sync(self._run, unit, args)

    def _run(self, connection: Connection, unit: Callable[..., T], args: tuple[Any, ...]) -> T:
        return unit(PostgresSession(connection, self._channel), *args)

    def _watch(self, thread_id: str) -> AbstractAsyncContextManager[Waiter]:
        if self._listener is None:
            return super()._watch(thread_id)
        return self._notified(self._listener, thread_id)

    @contextlib.asynccontextmanager
    async def _notified(self, listener: PgListener, thread_id: str) -> AsyncIterator[Waiter]:
        """Waits for a notification of the thread (or ``follow_fallback_interval``); polls while no
        listening connection can be had."""

        async def wait(after_seq: int) -> int | None:
            state = await listener.ensure()
            if state == "unavailable":
                return await poll_last_seq(self, thread_id, after_seq)
            if state == "listening":
                return await listener.wait(thread_id, after_seq, self.follow_fallback_interval)
            return None  # "started": read once more, a write may have slipped in before the LISTEN

        with listener.interest(thread_id):
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


def channel_name(schema: str | None) -> str:
    """The LISTEN/NOTIFY channel of one store (a schema of its own gets a channel of its own)."""
    return "run_journal_" + hashlib.sha256((schema or "").encode()).hexdigest()[:20]


class PgListener:
    """One LISTEN connection per store: tracks the highest seq notified per followed thread and wakes
    its waiters."""

    def __init__(self, engine: AsyncEngine, channel: str) -> None:
        self._engine = engine
        self._channel = channel
        self._connection: AsyncConnection | None = None
        self._driver: Any = None
        self._lock = asyncio.Lock()
        self._interest: Counter[str] = Counter()
        self._latest: dict[str, int] = {}
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._closed = False
        self._discarding: set[asyncio.Task[None]] = set()

    @property
    def listening(self) -> bool:
        return self._connection is not None

    @contextlib.contextmanager
    def interest(self, thread_id: str) -> Iterator[None]:
        """Record notifications for ``thread_id`` while a follower is iterating it."""
        self._interest[thread_id] += 1
        try:
            yield
        finally:
            self._interest[thread_id] -= 1
            if self._interest[thread_id] <= 0:
                del self._interest[thread_id]
                self._latest.pop(thread_id, None)

    async def ensure(self) -> ListenState:
        """Listen if not yet listening. ``started`` means: poll once more, a write may have slipped
        in between the caller's last read and the LISTEN."""
        if self._connection is not None:
            return "listening"
        if self._closed:
            return "unavailable"
        async with self._lock:
            if self._connection is not None:
                return "listening"
            try:
                connection = await self._engine.connect()
                raw = await connection.get_raw_connection()
                driver: Any = raw.driver_connection
                await driver.add_listener(self._channel, self._on_notify)
                driver.add_termination_listener(self._on_lost)
            except Exception:  # noqa: BLE001 - no LISTEN just means followers poll instead
                return "unavailable"
            self._connection, self._driver = connection, driver
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
