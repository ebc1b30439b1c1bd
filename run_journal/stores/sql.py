"""``SqlRunEventStore``: one SQLAlchemy 2 async Core implementation for SQLite and PostgreSQL.

How seq stays dense under concurrent writers (tasks, processes, hosts): every write transaction
first takes the thread's row in ``run_journal_threads`` (an upsert that bumps ``last_seq`` and
returns it) and only then inserts. On PostgreSQL the upsert holds that row's lock until commit, so
writers of one thread queue while writers of other threads do not; on SQLite the transaction is
``BEGIN IMMEDIATE`` (the database write lock, taken before anything is read) in WAL mode with
``synchronous=NORMAL`` and a ``busy_timeout``. The counter is never decremented or deleted, so a
deleted range is never reused (``delete_by_thread`` and ``delete_by_run`` leave it in place).

Event ids are unique per thread. The common write (no id seen before) costs one bump, one
``executemany`` and the commit; a batch that collides with a stored id is rolled back and redone
with a lookup, which returns the stored records and writes only the new events.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from pathlib import Path
from typing import Any, Final

from sqlalchemy import and_, case, event, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from run_journal.catalog import TERMINAL_RUN_EVENTS
from run_journal.envelope import NewEvent, RunEvent, loads
from run_journal.runs import TERMINAL_STATUSES, RunRow
from run_journal.stores import sql_raw as raw
from run_journal.stores import sql_schema as schema
from run_journal.stores.base import (
    RunEventStore,
    StoreClosedError,
    check_statuses,
    exclusive_set,
)
from run_journal.stores.sql_pg import PgListener
from run_journal.stores.sql_reads import COLUMNS, EVENTS, SqlReads, check_ids

_DUPLICATE: Final = (IntegrityError, sqlite3.IntegrityError)


class SqlRunEventStore(SqlReads, RunEventStore):
    """The run event store on SQLite (aiosqlite) or PostgreSQL (asyncpg), through SQLAlchemy Core.

    Build it with ``from_url`` or around an ``AsyncEngine`` you own (it is then not disposed by
    ``aclose``). PostgreSQL timeouts of engines built by ``from_url``: ``lock_timeout`` (seconds a
    writer waits for a thread's counter row or another lock before failing; default 10) and
    ``statement_timeout`` (default 60) are set as server settings on every connection, so a stuck
    writer surfaces as an error the journal retries instead of a hang. An engine you pass in keeps
    its own settings. ``follow`` on PostgreSQL wakes on ``NOTIFY`` (sent inside the write
    transaction, so only committed events wake anyone) and polls every ``follow_fallback_interval``
    seconds in case a notification is lost; on SQLite it polls every ``follow_poll_interval``.
    """

    follow_fallback_interval: float = 5.0

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        schema_name: str | None = None,
        busy_timeout: float = 30.0,
        follow_poll_interval: float | None = None,
        listen: bool = True,
        _owns_engine: bool = False,
    ) -> None:
        dialect = engine.dialect.name
        if dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"SqlRunEventStore supports sqlite and postgresql, not {dialect!r}")
        if schema_name is not None and dialect != "postgresql":
            raise ValueError("schema_name is for PostgreSQL only")
        self.dialect = dialect
        self.schema_name = schema.check_schema_name(schema_name) if schema_name else None
        self._owns_engine = _owns_engine
        self._engine = engine
        self._busy_ms = int(busy_timeout * 1000)
        options: dict[str, Any] = {raw.BUSY_MS: self._busy_ms}
        if self.schema_name:
            options["schema_translate_map"] = {None: self.schema_name}
        self._reader = engine.execution_options(**options)
        self._writer = engine.execution_options(**options, **{raw.WRITE: True})
        if dialect == "sqlite" and not event.contains(engine.sync_engine, "begin", raw.sqlite_begin):
            event.listen(engine.sync_engine, "begin", raw.sqlite_begin)
        prefix = f'"{self.schema_name}".' if self.schema_name else ""
        self._events_sql = f"{prefix}{EVENTS.name}"
        self._bump_sql = raw.bump_sql(f"{prefix}{schema.threads.name}")
        self._insert_sql = raw.insert_sql(self._events_sql)
        self._runs_sql = f"{prefix}{schema.runs.name}"
        self._run_columns = [column.name for column in schema.runs.columns]
        self._upsert_run_sql = raw.upsert_run_sql(
            self._runs_sql, self._run_columns, sorted(TERMINAL_STATUSES), schema.KEPT_ON_UPDATE
        )
        if follow_poll_interval is not None:
            self.follow_poll_interval = follow_poll_interval
        # SQLite has one writer at a time anyway: queueing in-process writers here is cheaper than
        # letting them spin in SQLite's busy handler.
        self._local_write_lock = asyncio.Lock() if dialect == "sqlite" else None
        self._writer_conn = raw.KeptConnection(engine, self._busy_ms)  # used under _write_lock
        self._reader_conn = raw.KeptConnection(engine, self._busy_ms)
        self._insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
        self._setup_done = False
        self._channel = schema.channel_name(self.schema_name)
        use_listen = dialect == "postgresql" and listen
        self._listener = PgListener(self._reader, self._channel) if use_listen else None

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SqlRunEventStore:
        """``sqlite:///rel.db``, ``sqlite:////abs.db``, ``postgresql://user@host/db?schema=name``.

        Options: ``lock_timeout`` / ``statement_timeout`` (PostgreSQL, seconds), ``engine_options``
        (passed to ``create_async_engine``), and the constructor's keyword arguments.
        """
        driver_url, schema_name = schema.engine_url(url)
        settings = schema.engine_settings(
            driver_url,
            lock_timeout=float(options.pop("lock_timeout", 10.0)),
            statement_timeout=float(options.pop("statement_timeout", 60.0)),
            engine_options=options.pop("engine_options", None),
        )
        engine = create_async_engine(driver_url, **settings)
        return cls(engine, schema_name=schema_name, _owns_engine=True, **options)

    # -- lifecycle -------------------------------------------------------------------------------
    async def setup(self) -> None:
        """Create or migrate the tables; idempotent, and safe when several processes run it at once.

        PostgreSQL serializes migrators with ``pg_advisory_xact_lock`` (keyed by schema); SQLite with
        ``BEGIN IMMEDIATE``. A store written by another contract major, or by a newer schema than
        this library knows, is refused with ``IncompatibleStoreError`` naming both versions.
        """
        self._check_open()
        database = self._engine.url.database
        if self.dialect == "sqlite" and database:
            await asyncio.to_thread(Path(database).parent.mkdir, parents=True, exist_ok=True)
        async with self._writer.begin() as conn:
            await schema.migrate(conn, self.schema_name)
        self._setup_done = True

    async def aclose(self) -> None:
        if self._closed:
            return
        await super().aclose()
        await self._reader_conn.close()
        async with self._write_lock():
            await self._writer_conn.close()
        if self._listener is not None:
            await self._listener.close()
        if self._owns_engine:
            await self._engine.dispose()

    async def _ready(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{type(self).__name__} is closed")
        if not self._setup_done:
            await self.setup()

    # -- writes ----------------------------------------------------------------------------------
    async def _append(self, batch: Sequence[NewEvent]) -> list[RunEvent]:
        await self._ready()
        positions: dict[str, list[int]] = {}
        for index, item in enumerate(batch):
            positions.setdefault(item.thread_id, []).append(index)
        results: list[RunEvent | None] = [None] * len(batch)
        for thread_id, indexes in positions.items():
            stored = await self._append_thread(thread_id, [batch[i] for i in indexes])
            for index, record in zip(indexes, stored, strict=True):
                results[index] = record
        return [record for record in results if record is not None]

    async def _append_thread(self, thread_id: str, batch: list[NewEvent]) -> list[RunEvent]:
        first_of: dict[str, NewEvent] = {}
        for item in batch:
            first_of.setdefault(item.event_id, item)
        unique = list(first_of.values())
        existing: dict[str, Sequence[Any]] = {}
        try:
            seqs = await self._insert_new(thread_id, unique)
        except _DUPLICATE:
            # Some event_id is already stored (a retry): redo with a lookup, under the same lock.
            seqs, existing = await self._insert_checked(thread_id, unique)
        return [
            raw.event_of(existing[item.event_id])
            if item.event_id in existing
            else RunEvent.stored(first_of[item.event_id], seqs[item.event_id],
                                 copy=item is not first_of[item.event_id])  # a repeat: its own copy
            for item in batch
        ]

    async def _bump(self, conn: AsyncConnection, thread_id: str, count: int) -> int:
        """Lock the thread's counter row and add ``count``; returns the new ``last_seq``."""
        counter = schema.threads
        insert = self._insert(counter).values(thread_id=thread_id, last_seq=count)
        bump = insert.on_conflict_do_update(
            index_elements=[counter.c.thread_id],
            set_={"last_seq": counter.c.last_seq + insert.excluded.last_seq},
        ).returning(counter.c.last_seq)
        return int((await conn.execute(bump)).scalar_one())

    async def _write(
        self, conn: AsyncConnection, thread_id: str, fresh: list[NewEvent], last: int
    ) -> dict[str, int]:
        """Insert ``fresh`` as seq ``last - len + 1 .. last``; PostgreSQL also notifies followers."""
        first = last - len(fresh) + 1
        rows = [dict(zip(raw.INSERT_COLUMNS, raw.insert_values(item, first + n), strict=True))
                for n, item in enumerate(fresh)]
        await conn.execute(EVENTS.insert(), rows)
        if self._listener is not None:
            await conn.execute(select(func.pg_notify(self._channel, f"{thread_id}\n{last}")))
        return {item.event_id: first + n for n, item in enumerate(fresh)}

    async def _insert_new(self, thread_id: str, fresh: list[NewEvent]) -> dict[str, int]:
        """The common write: no event_id seen before. Fails with an IntegrityError otherwise."""
        if self.dialect == "postgresql":
            async with self._writer.begin() as conn:
                last = await self._bump(conn, thread_id, len(fresh))
                return await self._write(conn, thread_id, fresh, last)
        rows = [raw.insert_values(item, 0) for item in fresh]
        last = await self._in_writer_thread(raw.write_new, self._bump_sql, self._insert_sql, thread_id, rows)
        first = last - len(fresh) + 1
        return {item.event_id: first + n for n, item in enumerate(fresh)}

    async def _in_writer_thread(self, work: Any, *args: Any) -> Any:
        """``work(sqlite3_connection, *args)`` on the kept writer connection, one writer at a time."""
        async with self._write_lock():
            return await self._writer_conn.run(work, *args)

    async def _insert_checked(
        self, thread_id: str, unique: list[NewEvent]
    ) -> tuple[dict[str, int], dict[str, Sequence[Any]]]:
        ids = [item.event_id for item in unique]
        async with self._write_lock(), self._writer.begin() as conn:
            last = await self._bump(conn, thread_id, 0)
            found = await conn.execute(
                select(*COLUMNS).where(EVENTS.c.thread_id == thread_id, EVENTS.c.event_id.in_(ids))
            )
            existing: dict[str, Sequence[Any]] = {row[8]: row for row in found}
            fresh = [item for item in unique if item.event_id not in existing]
            if not fresh:
                return {}, existing
            await self._set_last(conn, thread_id, last + len(fresh))
            return await self._write(conn, thread_id, fresh, last + len(fresh)), existing

    async def _set_last(self, conn: AsyncConnection, thread_id: str, last: int) -> None:
        counter = schema.threads
        await conn.execute(update(counter).where(counter.c.thread_id == thread_id).values(last_seq=last))

    async def _put_if_absent(self, event: NewEvent, types: tuple[str, ...]) -> tuple[RunEvent, bool]:
        await self._ready()
        if self.dialect == "sqlite":  # one hand-off to the driver thread, as for event writes
            params = (event.thread_id, event.run_id, *types, event.event_id, event.event_id)
            seq, found = await self._in_writer_thread(
                raw.write_if_absent, raw.if_absent_sql(self._events_sql, len(types)),
                params, self._bump_sql, self._insert_sql, raw.insert_values(event, 0),
            )
            return (raw.event_of(found), False) if found is not None else (RunEvent.stored(event, seq), True)
        same_id = EVENTS.c.event_id == event.event_id
        exclusive = and_(EVENTS.c.run_id == event.run_id, EVENTS.c.event_type.in_(types))
        lookup = (  # under the thread's counter lock: a retry's own record first, else the first of types
            select(*COLUMNS)
            .where(EVENTS.c.thread_id == event.thread_id)
            .where(or_(exclusive, same_id))
            .order_by(case((same_id, 0), else_=1), EVENTS.c.seq)
            .limit(1)
        )
        async with self._write_lock(), self._writer.begin() as conn:
            last = await self._bump(conn, event.thread_id, 0)
            found = (await conn.execute(lookup)).first()
            if found is not None:
                return raw.event_of(found), False
            await self._set_last(conn, event.thread_id, last + 1)
            await self._write(conn, event.thread_id, [event], last + 1)
        return RunEvent.stored(event, last + 1), True

    def _write_lock(self) -> AbstractAsyncContextManager[Any]:
        """In-process queue for SQLite writers (cheaper than spinning in SQLite's busy handler)."""
        return self._local_write_lock or nullcontext()

    async def follow(
        self, thread_id: str, *, after_seq: int = 0, user_id: str | None = None
    ) -> AsyncIterator[RunEvent]:
        if self._listener is None:
            async for item in super().follow(thread_id, after_seq=after_seq, user_id=user_id):
                yield item
            return
        with self._listener.interest(thread_id):
            async for item in super().follow(thread_id, after_seq=after_seq, user_id=user_id):
                yield item

    async def _wait_for_events(self, thread_id: str, after_seq: int) -> None:
        state = "unavailable" if self._listener is None else await self._listener.ensure()
        if state == "unavailable":
            await super()._wait_for_events(thread_id, after_seq)
        elif state == "listening":
            assert self._listener is not None
            await self._listener.wait(thread_id, after_seq, self.follow_fallback_interval)

    # -- runs ------------------------------------------------------------------------------------
    async def put_run(self, row: RunRow) -> RunRow:
        await self._ready()
        runs = schema.runs
        if self.dialect == "sqlite":  # one hand-off to the driver thread, as for event writes
            values = schema.run_values(row)
            ordered = tuple(values[name] for name in self._run_columns)
            written, owner = await self._in_writer_thread(
                raw.write_run, self._upsert_run_sql, self._runs_sql, ordered
            )
        else:
            statement = schema.upsert_run(self._insert(runs), row)
            async with self._writer.begin() as conn:
                written, owner = (await conn.execute(statement)).scalar(), row.thread_id
                if written is None:  # a guard refused: the stored row stays as it is
                    kept = await conn.execute(
                        select(runs.c.row, runs.c.thread_id).where(runs.c.run_id == row.run_id)
                    )
                    written, owner = kept.one()
        if owner != row.thread_id:
            raise schema.moved_run_error(row.run_id, owner, row.thread_id)
        if self.dialect == "sqlite" and written == values["row"]:
            return row  # stored as given (RunRow normalizes its metadata): nothing to decode
        return RunRow.from_dict(loads(written))

    async def put_run_close(self, events: Sequence[NewEvent], terminal: NewEvent, row: RunRow) -> bool:
        types = exclusive_set(terminal.event_type, TERMINAL_RUN_EVENTS)
        if self.dialect != "sqlite" or len({e.event_id for e in events}) != len(events) or any(
            e.thread_id != terminal.thread_id or e.event_type in types for e in events
        ):  # the one-transaction path checks for a terminal event before inserting the events
            return await super().put_run_close(events, terminal, row)
        self._check_open()
        await self._ready()
        lookup = raw.if_absent_sql(self._events_sql, len(types))
        params = (terminal.thread_id, terminal.run_id, *types, terminal.event_id, terminal.event_id)
        values = schema.run_values(row)
        try:
            written = await self._in_writer_thread(
                raw.write_run_close,
                (self._bump_sql, self._insert_sql, [raw.insert_values(e, 0) for e in events]),
                (lookup, params, raw.insert_values(terminal, 0)),
                (self._upsert_run_sql, self._runs_sql, tuple(values[n] for n in self._run_columns)),
            )
        except sqlite3.IntegrityError:  # a retry: some event is stored already; the parts sort it out
            return await super().put_run_close(events, terminal, row)
        if written is None:
            return False
        if written[1] != row.thread_id:
            raise schema.moved_run_error(row.run_id, written[1], row.thread_id)
        return True

    async def get_run(self, run_id: str) -> RunRow | None:
        check_ids(run_id=run_id)
        runs = schema.runs
        stored = await self._scalar(select(runs.c.row).where(runs.c.run_id == run_id))
        return None if stored is None else RunRow.from_dict(loads(stored))

    async def list_runs(
        self, thread_id: str | None = None, *, statuses: Sequence[str] | None = None
    ) -> list[RunRow]:
        check_ids(thread_id=thread_id)
        statuses = check_statuses(statuses)
        runs = schema.runs
        statement = select(runs.c.row).order_by(
            func.coalesce(runs.c.started_at, runs.c.first_put_at, runs.c.updated_at), runs.c.run_id
        )
        if thread_id is not None:
            statement = statement.where(runs.c.thread_id == thread_id)
        if statuses is not None:
            statement = statement.where(runs.c.status.in_(statuses))
        await self._ready()
        async with self._reader.connect() as conn:
            return [RunRow.from_dict(loads(text)) for text in (await conn.execute(statement)).scalars()]

    # -- deletes ---------------------------------------------------------------------------------
    async def delete_by_thread(self, thread_id: str) -> int:
        check_ids(thread_id=thread_id)
        return await self._delete([EVENTS.c.thread_id == thread_id], [schema.runs.c.thread_id == thread_id])

    async def delete_by_run(self, thread_id: str, run_id: str) -> int:
        check_ids(thread_id=thread_id, run_id=run_id)
        runs = schema.runs
        return await self._delete(
            [EVENTS.c.thread_id == thread_id, EVENTS.c.run_id == run_id],
            [runs.c.thread_id == thread_id, runs.c.run_id == run_id],
        )

    async def _delete(self, event_conditions: list[Any], run_conditions: list[Any]) -> int:
        await self._ready()
        async with self._write_lock(), self._writer.begin() as conn:
            deleted = await conn.execute(EVENTS.delete().where(*event_conditions))
            await conn.execute(schema.runs.delete().where(*run_conditions))
        return int(deleted.rowcount)
