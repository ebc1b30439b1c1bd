"""The read side of ``SqlRunEventStore``: every read is one indexed query.

Page reads build their SQL with ``sql_raw.Where`` (named parameters, native to ``sqlite3`` and
passed through ``text()`` on PostgreSQL); on SQLite they run in one hand-off to the driver thread.
The latest page is ``ORDER BY seq DESC LIMIT n`` reversed, so its cost does not grow with the thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy import Select, func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from run_journal.envelope import RunEvent, validate_id
from run_journal.stores import sql_raw as raw
from run_journal.stores import sql_schema as schema
from run_journal.stores.base import check_cursor, check_limit, expand_event_types

EVENTS = schema.events
COLUMNS: Final = tuple(EVENTS.c[name.strip()] for name in raw.EVENT_COLUMNS.split(","))


def check_ids(**ids: str | None) -> None:
    """Reads refuse the ids writes refuse (ValueError, as on every backend), before any SQL runs."""
    for name, value in ids.items():
        if value is not None:
            validate_id(name, value)


class SqlReads:
    """Mixed into ``SqlRunEventStore``, which provides the engine, the dialect and ``_ready``."""

    dialect: str
    _engine: AsyncEngine
    _reader: AsyncEngine
    _events_sql: str

    async def _ready(self) -> None:
        raise NotImplementedError

    _reader_conn: raw.KeptConnection

    # -- reads -----------------------------------------------------------------------------------
    async def _fetch(self, where: raw.Where, *, descending: bool, limit: int) -> list[RunEvent]:
        """One indexed page query; SQLite through the driver connection (one hand-off)."""
        sql, params = where.select(self._events_sql, descending=descending, limit=limit)
        await self._ready()
        if self.dialect == "sqlite":
            page: list[RunEvent] = await self._reader_conn.run(raw.fetch_events, sql, params)
            return page
        async with self._reader.connect() as conn:
            rows = (await conn.execute(text(sql), params)).all()
        return [raw.event_of(row) for row in rows]

    async def _page(
        self, where: raw.Where, limit: int, before_seq: int | None, after_seq: int | None
    ) -> list[RunEvent]:
        """Ascending page: the first ``limit`` above ``after_seq``, else the last below ``before_seq``."""
        check_limit(limit)
        before = check_cursor("before_seq", before_seq)
        after = check_cursor("after_seq", after_seq)
        if before is not None:
            where.compare("seq", "<", "before_seq", before)
        if after is not None:
            where.compare("seq", ">", "after_seq", after)
            return await self._fetch(where, descending=False, limit=limit)
        latest = await self._fetch(where, descending=True, limit=limit)
        latest.reverse()
        return latest

    @staticmethod
    def _scope(thread_id: str, user_id: str | None) -> list[Any]:
        conditions: list[Any] = [EVENTS.c.thread_id == thread_id]
        if user_id is not None:
            conditions.append(EVENTS.c.user_id == user_id)
        return conditions

    async def list_messages(
        self,
        thread_id: str,
        *,
        limit: int = 50,
        before_seq: int | None = None,
        after_seq: int | None = None,
        user_id: str | None = None,
    ) -> list[RunEvent]:
        check_ids(thread_id=thread_id, user_id=user_id)
        where = raw.Where(thread_id, user_id).equals("category", "message")
        return await self._page(where, limit, before_seq, after_seq)

    async def list_messages_by_run(
        self,
        thread_id: str,
        run_id: str,
        *,
        limit: int = 50,
        before_seq: int | None = None,
        after_seq: int | None = None,
        user_id: str | None = None,
    ) -> list[RunEvent]:
        check_ids(thread_id=thread_id, run_id=run_id, user_id=user_id)
        where = raw.Where(thread_id, user_id).equals("run_id", run_id).equals("category", "message")
        return await self._page(where, limit, before_seq, after_seq)

    async def list_events(
        self,
        thread_id: str,
        run_id: str | None = None,
        *,
        event_types: Sequence[str] | None = None,
        task_id: str | None = None,
        limit: int = 500,
        after_seq: int | None = None,
        user_id: str | None = None,
    ) -> list[RunEvent]:
        check_limit(limit)
        check_ids(thread_id=thread_id, run_id=run_id, user_id=user_id)
        where = raw.Where(thread_id, user_id)
        where.compare("seq", ">", "after_seq", check_cursor("after_seq", after_seq) or 0)
        if run_id is not None:
            where.equals("run_id", run_id)
        names = expand_event_types(event_types)
        if names is not None:
            where.one_of("event_type", names)
        if task_id is not None:
            where.equals("task_id", task_id)
        return await self._fetch(where, descending=False, limit=limit)

    async def _scalar(self, statement: Select[Any]) -> Any:
        await self._ready()
        async with self._reader.connect() as conn:
            return (await conn.execute(statement)).scalar()

    async def count_messages(self, thread_id: str, *, user_id: str | None = None) -> int:
        check_ids(thread_id=thread_id, user_id=user_id)
        conditions = [*self._scope(thread_id, user_id), EVENTS.c.category == "message"]
        return int(await self._scalar(select(func.count()).select_from(EVENTS).where(*conditions)))

    async def list_threads(
        self, *, user_id: str | None = None, limit: int = 1000, after: str | None = None
    ) -> list[str]:
        check_limit(limit)
        check_ids(user_id=user_id, after=after)
        counter = schema.threads
        holds = select(EVENTS.c.id).where(*self._scope(counter.c.thread_id, user_id)).exists()  # type: ignore[arg-type]  # a column, not a literal id
        statement = select(counter.c.thread_id).where(holds)
        if after is not None:
            statement = statement.where(counter.c.thread_id > after)
        statement = statement.order_by(counter.c.thread_id).limit(limit)
        await self._ready()
        async with self._reader.connect() as conn:
            return list((await conn.execute(statement)).scalars())

    async def last_seq(self, thread_id: str) -> int:
        check_ids(thread_id=thread_id)
        counter = schema.threads
        value = await self._scalar(select(counter.c.last_seq).where(counter.c.thread_id == thread_id))
        return int(value or 0)
