"""What only the SQL store does: migrations, version refusal, URLs and schemas, locks, LISTEN/NOTIFY.

The shared behaviour (pagination, dedupe, runs, follow, 8 processes x 500 events into one thread on
SQLite and PostgreSQL, a killed writer) is the conformance kit in ``test_store_conformance.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from conftest import backend_url
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from run_journal import NewEvent, RunRow, RunStatus, open_store
from run_journal.bodies import Body
from run_journal.stores.base import CONTRACT_MAJOR, IncompatibleStoreError, StoreClosedError
from run_journal.stores.postgres import PostgresRunEventStore
from run_journal.stores.sql import SqlRunEventStore, engine_url
from run_journal.stores.sql_schema import SCHEMA_VERSION, meta
from run_journal.stores.sqlite import SqliteRunEventStore
from run_journal.testing import RunEventStoreConformance, StoreFactory

GUARD = 120.0


@pytest.fixture(params=("sqlite", "postgres"))
def sql_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return backend_url(request.param, request, tmp_path_factory)


@contextlib.asynccontextmanager
async def database(url: str) -> AsyncIterator[AsyncConnection]:
    """A transaction of the test's own on a store's database (the store's schema for tables)."""
    driver_url, schema = engine_url(url)
    engine = create_async_engine(driver_url)
    try:
        async with engine.begin() as conn:
            if schema:
                await conn.execution_options(schema_translate_map={None: schema})
            yield conn
    finally:
        await engine.dispose()


async def recorded_meta(url: str) -> dict[str, str]:
    async with database(url) as conn:
        return {str(k): str(v) for k, v in await conn.execute(select(meta.c.key, meta.c.value))}


async def set_meta(url: str, key: str, value: str) -> None:
    async with database(url) as conn:
        await conn.execute(update(meta).where(meta.c.key == key).values(value=value))


def open_handles(path: Path) -> int:
    """Descriptors of this process open on ``path`` (one per live SQLite connection to it)."""
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == str(path.resolve()))


def event(thread_id: str = "t", n: int = 0, **fields: object) -> NewEvent:
    return NewEvent(thread_id=thread_id, run_id="r", event_type="tool.call", category="trace",
                    content={"n": n}, **fields)  # type: ignore[arg-type]  # test helper passes ids


# -- URLs ----------------------------------------------------------------------------------------
def test_urls_map_to_async_drivers_and_strip_schema() -> None:
    url, schema = engine_url("sqlite:///rel/journal.db")
    assert (url.drivername, url.database, schema) == ("sqlite+aiosqlite", "rel/journal.db", None)
    url, _ = engine_url("sqlite:////abs/journal.db")
    assert url.database == "/abs/journal.db"
    url, schema = engine_url("postgres://u@h:5/db?schema=s_1&ssl=disable")
    assert (url.drivername, schema, dict(url.query)) == ("postgresql+asyncpg", "s_1", {"ssl": "disable"})
    for bad in ("sqlite://", "sqlite:///:memory:", "postgresql://h/db?schema=a;b", "mysql://h/db",
                "sqlite:///x.db?schema=s"):
        with pytest.raises(ValueError, match=r"sqlite|schema|PostgreSQL|postgresql"):
            engine_url(bad)


def test_missing_asyncpg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "asyncpg" else real(name)
    )
    with pytest.raises(ImportError, match=r"pip install 'run-journal\[postgres\]'"):
        SqlRunEventStore.from_url("postgresql://h/db")


# -- setup and versions --------------------------------------------------------------------------
async def test_setup_is_idempotent_and_records_versions(sql_url: str) -> None:
    async with open_store(sql_url) as store:
        assert isinstance(store, SqlRunEventStore)
        written = await store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")
        await store.setup()
        await store.setup()
        assert await recorded_meta(sql_url) == {
            "schema_version": str(SCHEMA_VERSION), "contract_major": str(CONTRACT_MAJOR),
            "contract_version": "1.0.0",
        }
    async with open_store(sql_url) as again:
        assert [e.event_id for e in await again.list_events("t")] == [written.event_id]


async def test_a_store_of_another_contract_major_is_refused_by_name(sql_url: str) -> None:
    async with open_store(sql_url) as store:
        assert isinstance(store, SqlRunEventStore)
    await set_meta(sql_url, "contract_major", str(CONTRACT_MAJOR + 1))
    refused = open_store(sql_url)
    named = rf"major version {CONTRACT_MAJOR + 1}.*major version {CONTRACT_MAJOR}"
    with pytest.raises(IncompatibleStoreError, match=named):
        await refused.setup()
    with pytest.raises(IncompatibleStoreError):
        await refused.list_events("t")  # a store never set up sets itself up first, and refuses too
    await refused.aclose()


async def test_a_newer_schema_version_is_refused_by_name(sql_url: str) -> None:
    async with open_store(sql_url) as store:
        assert isinstance(store, SqlRunEventStore)
    await set_meta(sql_url, "schema_version", str(SCHEMA_VERSION + 5))
    refused = open_store(sql_url)
    named = rf"version {SCHEMA_VERSION + 5}.*up to {SCHEMA_VERSION}"
    with pytest.raises(IncompatibleStoreError, match=named):
        await refused.setup()
    await refused.aclose()


SETUP_WORKER = """
import asyncio, sys
from run_journal import open_store
async def main():
    async with open_store(sys.argv[1]) as store:
        await store.put(thread_id="setup", run_id="r", event_type="tool.call", category="trace",
                        event_id=sys.argv[2])
asyncio.run(main())
"""


async def test_two_processes_set_up_a_fresh_store_at_once(sql_url: str) -> None:
    async with asyncio.timeout(GUARD):
        workers = [
            await asyncio.create_subprocess_exec(
                sys.executable, "-c", SETUP_WORKER, sql_url, f"w{n}", stderr=asyncio.subprocess.PIPE
            )
            for n in range(2)
        ]
        errors = [(await worker.communicate())[1].decode() for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], errors
    async with open_store(sql_url) as store:
        assert isinstance(store, SqlRunEventStore)
        assert sorted(e.event_id for e in await store.list_events("setup")) == ["w0", "w1"]
        assert [e.seq for e in await store.list_events("setup")] == [1, 2]
    assert (await recorded_meta(sql_url))["schema_version"] == str(SCHEMA_VERSION)


async def test_a_v1_store_gains_first_put_at_and_keeps_its_run_order(sql_url: str) -> None:
    """Schema v2 adds ``run_journal_runs.first_put_at`` (backfilled from ``updated_at``)."""
    from datetime import UTC, datetime

    from sqlalchemy import text

    from run_journal import RunRow

    async with open_store(sql_url) as store:
        assert isinstance(store, SqlRunEventStore)
        old = datetime(2020, 1, 1, tzinfo=UTC)
        await store.put_run(RunRow(run_id="b-old", thread_id="t", updated_at=old))
        await store.put_run(RunRow(run_id="a-new", thread_id="t"))
    schema = engine_url(sql_url)[1]
    table = f'"{schema}".run_journal_runs' if schema else "run_journal_runs"
    async with database(sql_url) as conn:  # make it look like a v1 store
        await conn.execute(text(f"ALTER TABLE {table} DROP COLUMN first_put_at"))
    await set_meta(sql_url, "schema_version", "1")
    async with open_store(sql_url) as store:
        assert isinstance(store, SqlRunEventStore)
        assert (await recorded_meta(sql_url))["schema_version"] == str(SCHEMA_VERSION)
        assert [row.run_id for row in await store.list_runs("t")] == ["b-old", "a-new"]
        await store.put_run(RunRow(run_id="b-old", thread_id="t"))  # an update does not move it
        assert [row.run_id for row in await store.list_runs("t")] == ["b-old", "a-new"]


async def test_a_v2_store_gains_the_run_id_claims_of_its_stored_runs(sql_url: str) -> None:
    """Schema v3 adds ``run_journal_run_starts`` (filled from the stored run.start events; of two
    runs that already share a run id, the first written keeps it), so a v2 store's runs are
    protected too; setup() stays idempotent."""
    from sqlalchemy import text

    from run_journal.stores.base import RunIdTakenError

    async with open_store(sql_url) as store:
        await store.put_batch([NewEvent("t", "old", "run.start", "trace", event_id="s1"),
                               NewEvent("u", "shared", "run.start", "trace", event_id="s2")])
    schema = engine_url(sql_url)[1]
    table = f'"{schema}".run_journal_run_starts' if schema else "run_journal_run_starts"
    events_table = f'"{schema}".run_journal_events' if schema else "run_journal_events"
    async with database(sql_url) as conn:  # make it look like a v2 store with a run id used twice
        await conn.execute(text(f"DROP TABLE {table}"))
        await conn.execute(text(
            f"INSERT INTO {events_table} (thread_id, seq, run_id, event_type, category, content, metadata, "
            "created_at, event_id) VALUES ('v', 1, 'shared', 'run.start', 'trace', '\"\"', '{}', "
            "'2030-01-01T00:00:00.000000+00:00', 's3')"))
    await set_meta(sql_url, "schema_version", "2")
    async with open_store(sql_url) as store:
        await store.setup()
        assert (await recorded_meta(sql_url))["schema_version"] == str(SCHEMA_VERSION)
        async with database(sql_url) as conn:
            rows = sorted(tuple(row) for row in await conn.execute(
                text(f"SELECT run_id, thread_id, event_id FROM {table}")))
        assert rows == [("old", "t", "s1"), ("shared", "u", "s2")]
        for thread_id, run_id in (("x", "old"), ("t", "old"), ("x", "shared")):
            with pytest.raises(RunIdTakenError, match=repr(run_id)):
                await store.put(thread_id=thread_id, run_id=run_id, event_type="run.start",
                                category="trace", event_id="again")
        assert [e.event_id for e in await store.list_runs_without_row()] == ["s1", "s2"]


async def test_concurrent_setup_in_one_process(sql_url: str) -> None:
    stores = [open_store(sql_url) for _ in range(4)]
    await asyncio.gather(*(store.setup() for store in stores))
    await asyncio.gather(*(store.aclose() for store in stores))


# -- writes --------------------------------------------------------------------------------------
RETRY_WORKER = """
import asyncio, sys
from run_journal import NewEvent, RunRow, RunStatus, open_store
async def main(url, worker):
    async with open_store(url) as store:
        for start in range(0, 200, 20):
            # every worker writes the same 200 ids (a retry storm): each must be stored once
            await store.put_batch(
                NewEvent(thread_id="storm", run_id=f"w{worker}", event_type="tool.call", category="trace",
                         event_id=f"e{n}")
                for n in range(start, start + 20)
            )
asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_processes_retrying_the_same_event_ids_store_each_once(sql_url: str) -> None:
    async with asyncio.timeout(GUARD):
        workers = [
            await asyncio.create_subprocess_exec(
                sys.executable, "-c", RETRY_WORKER, sql_url, str(n), stderr=asyncio.subprocess.PIPE
            )
            for n in range(4)
        ]
        errors = [(await worker.communicate())[1].decode() for worker in workers]
    assert [worker.returncode for worker in workers] == [0] * 4, errors
    async with open_store(sql_url) as store:
        stored = await store.list_events("storm", limit=1000)
        assert [e.seq for e in stored] == list(range(1, 201))
        assert Counter(e.event_id for e in stored) == Counter(f"e{n}" for n in range(200))
        assert await store.last_seq("storm") == 200


async def test_a_partly_stored_batch_writes_only_the_new_events(sql_url: str) -> None:
    async with open_store(sql_url) as store:
        first = await store.put_batch([event(n=0, event_id="a"), event(n=1, event_id="b")])
        again = await store.put_batch(
            [event(n=9, event_id="b"), event(n=2, event_id="c"), event(n=9, event_id="a"),
             event(n=3, event_id="c")]
        )
        assert [(e.event_id, e.seq, e.content) for e in again] == [
            ("b", 2, {"n": 1}), ("c", 3, {"n": 2}), ("a", 1, {"n": 0}), ("c", 3, {"n": 2}),
        ]
        assert again[2].to_dict() == first[0].to_dict()
        assert await store.last_seq("t") == 3


SQL_METACHARACTERS = (
    "x'; DROP TABLE run_journal_events; --", 'q"uote', "per%cent_under", "semi;colon:name", "$1",
)


async def test_sql_metacharacters_in_ids_are_stored_inertly(sql_url: str) -> None:
    async with open_store(sql_url) as store:
        for text in SQL_METACHARACTERS:
            written = await store.put(
                thread_id=text, run_id=text, event_type="subagent.step", category="subagent",
                content=text, metadata={"task_id": text}, event_id=text, user_id=text,
            )
            assert (written.thread_id, written.seq) == (text, 1)
            found = await store.list_events(text, text, task_id=text, user_id=text)
            assert [e.to_dict() for e in found] == [written.to_dict()]
            assert (await store.put_if_absent(
                thread_id=text, run_id=text, event_type="subagent.step", category="subagent"
            ))[1] is False
        assert await store.list_threads() == sorted(SQL_METACHARACTERS)
        assert await store.list_events("per%") == []
        assert await store.delete_by_run(SQL_METACHARACTERS[0], SQL_METACHARACTERS[0]) == 1
        assert await store.list_threads() == sorted(SQL_METACHARACTERS[1:])


async def test_content_text_is_kept_byte_for_byte(sql_url: str) -> None:
    async with open_store(sql_url) as store:
        content = {"nul": "a\x00b", "line": "x\u2028y", "emoji": "\U0001f600", "big": 2**62}
        written = await store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace",
                                  content=content)
        (read,) = await store.list_events("t")
        assert read.content == content == written.content


async def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "j.db"
    async with open_store(f"sqlite:///{path}") as store:
        await store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_sqlite_page_reads_replace_a_broken_kept_connection(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with SqlRunEventStore.from_url(f"sqlite:///{path}") as store:
        assert isinstance(store, SqliteRunEventStore)
        await store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")
        assert len(await store.list_events("t")) == 1
        kept = open_handles(path)  # the reader's connection and the writer's
        await store._reader.run(lambda connection: connection.close())  # the reader's connection dies
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            await store.list_events("t")
        assert [e.seq for e in await store.list_events("t")] == [1]  # a fresh connection took over
        assert open_handles(path) == kept  # the broken one went back to nobody
    assert open_handles(path) == 0
    with pytest.raises(StoreClosedError):
        await store.list_events("t")


async def test_sqlite_writes_replace_a_broken_kept_connection(tmp_path: Path) -> None:
    async with SqlRunEventStore.from_url(f"sqlite:///{tmp_path / 'j.db'}") as store:
        assert isinstance(store, SqliteRunEventStore)
        await store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")
        await store._writer.run(lambda connection: connection.close())  # the writer's connection dies
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            await store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")
        again = await store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")
        assert again.seq == 2  # a fresh connection took over; the failed write left no trace
        assert [e.seq for e in await store.list_events("t")] == [1, 2]


async def test_a_store_around_an_existing_engine_leaves_it_open(tmp_path: Path) -> None:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'own.db'}")
    async with SqlRunEventStore(engine) as store:
        assert isinstance(store, SqliteRunEventStore)
        await store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")
    async with SqlRunEventStore(engine) as again:  # a second store on the same engine
        assert await again.last_seq("t") == 1
        await again.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM run_journal_events"))).scalar() == 2
    await engine.dispose()


# -- PostgreSQL ------------------------------------------------------------------------------------
@pytest.fixture
def pg_database(request: pytest.FixtureRequest) -> str:
    database: str = request.getfixturevalue("postgres_database_url")
    return database


async def test_schema_parameter_isolates_stores(pg_database: str) -> None:
    async with (
        open_store(f"{pg_database}?schema=iso_a") as a,
        open_store(f"{pg_database}?schema=iso_b") as b,
    ):
        await a.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")
        assert await b.list_events("t") == []
        assert await b.list_threads() == []
        assert (await b.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")).seq == 1
        from sqlalchemy import text

        async with database(pg_database) as conn:
            found = await conn.execute(text(
                "SELECT table_schema, table_name FROM information_schema.tables "
                "WHERE table_name LIKE 'run_journal_%' AND table_schema IN ('iso_a', 'iso_b', 'public') "
                "ORDER BY 1, 2"
            ))
            tables = [tuple(row) for row in found]
        assert tables == [
            (schema, name) for schema in ("iso_a", "iso_b")
            for name in ("run_journal_bodies", "run_journal_events", "run_journal_followers",
                         "run_journal_meta", "run_journal_run_starts", "run_journal_run_tags",
                         "run_journal_runs",
                         "run_journal_threads", "run_journal_user_threads")
        ]


FOLLOW_WRITER = """
import asyncio, sys
from run_journal import open_store
async def main():
    async with open_store(sys.argv[1]) as store:
        await store.put(thread_id="live", run_id="other-process", event_type="tool.call", category="trace")
asyncio.run(main())
"""


async def test_postgres_follow_wakes_on_notify_from_another_process(pg_database: str) -> None:
    url = f"{pg_database}?schema=follow_notify"
    async with open_store(url) as store:
        assert isinstance(store, PostgresRunEventStore)
        # Polling would take an hour: only NOTIFY can deliver the event within the guard.
        store.follow_fallback_interval = 3600.0
        store.follow_poll_interval = 3600.0
        follower = store.follow("live")
        first = asyncio.ensure_future(anext(follower))

        while store._listener is None or not store._listener.listening:  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # the follower is listening
        async with asyncio.timeout(GUARD):
            writer = await asyncio.create_subprocess_exec(
                sys.executable, "-c", FOLLOW_WRITER, url, stderr=asyncio.subprocess.PIPE
            )
            _, stderr = await writer.communicate()
            assert writer.returncode == 0, stderr.decode()
            got = await first
        assert (got.seq, got.run_id) == (1, "other-process")
        await follower.aclose()


def search_gone(url: str) -> list[str]:
    """The statements that take schema version 7 (search) out of a store."""
    schema = engine_url(url)[1]
    prefix = f'"{schema}".' if schema else ""
    runs_table = f"{prefix}run_journal_runs"
    if url.startswith("postgresql"):
        triggers = [f"DROP TRIGGER run_journal_run_tags_write ON {runs_table}",
                    f"DROP TRIGGER run_journal_run_tags_update ON {runs_table}",
                    f"DROP FUNCTION {prefix}run_journal_run_tags_v1",
                    f"DROP FUNCTION {prefix}run_journal_write_v3"]
    else:
        triggers = [f"DROP TRIGGER run_journal_run_tags_{name}" for name in ("insert", "update", "delete")]
    return [
        *triggers, f"DROP TABLE {prefix}run_journal_run_tags",
        f"DROP INDEX {prefix}ix_run_journal_runs_user_order",
        f"DROP INDEX {prefix}ix_run_journal_runs_errors",
        *(f"ALTER TABLE {runs_table} DROP COLUMN {name}"
          for name in ("tags", "total_tokens", "cost_usd", "has_error")),
    ]


async def test_a_v3_store_gains_the_activity_and_run_orders(sql_url: str) -> None:
    """Schema v4 adds the indexed orders (threads by their newest event, per user too; runs by
    start), v5 the indexes of reconcile's reads (runs by status, runs without a row) and, on
    PostgreSQL, the one-call write: filled from what a v3 store holds."""
    from datetime import UTC, datetime

    from sqlalchemy import text

    from run_journal.testing._activity import assert_history, write_history

    async with open_store(sql_url) as store:
        await store.put(thread_id="a", run_id="rowless", event_type="run.start", category="trace",
                        event_id="rowless-start", created_at=datetime(2020, 1, 1, tzinfo=UTC))
        await write_history(store)
    schema = engine_url(sql_url)[1]
    prefix = f'"{schema}".' if schema else ""
    version_5 = [
        f"DROP INDEX {prefix}ix_run_journal_runs_status",
        f"DROP INDEX {prefix}ix_run_journal_run_starts_rowless",
        f"ALTER TABLE {prefix}run_journal_run_starts DROP COLUMN has_row",
    ]
    if schema:
        version_5 += [f"DROP TABLE {prefix}run_journal_followers",
                      f"DROP FUNCTION {prefix}run_journal_write_v1"]
    async with database(sql_url) as conn:  # make it look like a v3 store
        for statement in (
            *search_gone(sql_url),
            *version_5,
            f"DROP TABLE {prefix}run_journal_user_threads",
            f"DROP INDEX {prefix}ix_run_journal_threads_recent",
            f"ALTER TABLE {prefix}run_journal_threads DROP COLUMN last_at",
            f"DROP INDEX {prefix}ix_run_journal_runs_order",
            f"DROP INDEX {prefix}ix_run_journal_runs_all_order",
            f"ALTER TABLE {prefix}run_journal_runs DROP COLUMN ordered_at",
            f"DROP INDEX {prefix}ix_run_journal_events_user",
            f"CREATE INDEX ix_run_journal_runs_thread ON {prefix}run_journal_runs (thread_id, started_at)",
        ):
            await conn.execute(text(statement))
    await set_meta(sql_url, "schema_version", "3")
    async with open_store(sql_url) as store:
        assert (await recorded_meta(sql_url))["schema_version"] == str(SCHEMA_VERSION)
        await assert_history(store)
        assert [event.run_id for event in await store.list_runs_without_row()] == ["rowless"]


# -- a run's end, connections the server refuses, notifications, reads that stay flat ------------------
def closing_run(
    run_id: str, thread_id: str = "t", user_id: str = "u"
) -> tuple[list[NewEvent], NewEvent, RunRow]:
    """A short run's end as the journal writes it: every event, its terminal event and its row."""
    events = [NewEvent(thread_id, run_id, "run.start", "trace", user_id=user_id),
              NewEvent(thread_id, run_id, "llm.human.input", "message", content="hi", user_id=user_id),
              NewEvent(thread_id, run_id, "llm.ai.response", "message", content="hi!", user_id=user_id)]
    terminal = NewEvent(thread_id, run_id, "run.end", "outputs", metadata={"status": "success"},
                        user_id=user_id)
    return events, terminal, RunRow(run_id=run_id, thread_id=thread_id, user_id=user_id,
                                    status=RunStatus.SUCCESS)


async def test_a_run_end_is_one_statement_in_one_round_trip_on_postgres(postgres_database_url: str) -> None:
    """What the store sends, read off the wire: a run's end (its events, terminal event and row) is
    one statement, in one round trip, in no explicit transaction (the server runs it as one); so is
    a batch of one thread and a read."""
    from _pg_wire import PgWireCounter

    async with PgWireCounter(postgres_database_url) as wire, \
            open_store(f"{wire.url}?schema=w{uuid.uuid4().hex[:12]}") as store:
        for n in range(2):  # the first call of a connection prepares the statement
            wire.reset()
            assert await store.put_run_close(*closing_run(f"run-{n}"))
        assert (wire.statements, wire.round_trips) == (1, 1)
        wire.reset()
        await store.put_batch([NewEvent("t", "later", "tool.call", "trace") for _ in range(10)])
        assert (wire.statements, wire.round_trips) == (1, 1)
        wire.reset()
        events = await store.list_events("t")
        assert (wire.statements, wire.round_trips) == (1, 1)
        assert [e.seq for e in events] == list(range(1, 19))
        kinds = ["run.start", "llm.human.input", "llm.ai.response", "run.end"]
        assert [e.event_type for e in events[:4]] == kinds
        row = await store.get_run("run-1")
        assert row is not None
        assert row.status == RunStatus.SUCCESS
        assert await store.list_runs_without_row() == []
        assert [item.thread_id for item in await store.list_recent_threads(user_id="u")] == ["t"]


async def test_a_run_end_with_bodies_is_one_statement_on_postgres(postgres_database_url: str) -> None:
    """The bodies of a run's end travel in the same call of the write function: still one statement
    and one round trip, and a retry of it (its events stored already) writes nothing twice."""
    from _pg_wire import PgWireCounter

    bodies = [Body.of("t", {"role": "system", "content": "be brief"}), *(Body.of("t", n) for n in range(3))]
    async with PgWireCounter(postgres_database_url) as wire, \
            open_store(f"{wire.url}?schema=w{uuid.uuid4().hex[:12]}") as store:
        assert await store.put_run_close(*closing_run("warm-up"))  # the connection prepares the call
        wire.reset()
        events, terminal, row = closing_run("with-bodies")
        assert await store.put_run_close(events, terminal, row, bodies=bodies)
        assert (wire.statements, wire.round_trips) == (1, 1)
        assert await store.put_run_close(events, terminal, row, bodies=bodies)  # a retry
        assert await store.list_bodies("t") == sorted(bodies, key=lambda body: body.digest)
        assert [e.seq for e in await store.list_events("t")] == list(range(1, 9))


async def test_a_v5_store_gains_the_bodies_table(sql_url: str) -> None:
    """Schema v6 adds ``run_journal_bodies`` (and on PostgreSQL ``run_journal_write_v2``) to a v5
    store, whose events stay as they were."""
    from sqlalchemy import text

    async with open_store(sql_url) as store:
        written = await store.put_batch([event(n=n) for n in range(3)])
    schema = engine_url(sql_url)[1]
    prefix = f'"{schema}".' if schema else ""
    async with database(sql_url) as conn:  # make it look like a v5 store
        await conn.execute(text(f"DROP TABLE {prefix}run_journal_bodies"))
        if schema:
            await conn.execute(text(f"DROP FUNCTION {prefix}run_journal_write_v2"))
    await set_meta(sql_url, "schema_version", "5")
    body = Body.of("t", {"content": "stored once"})
    async with open_store(sql_url) as store:
        assert (await recorded_meta(sql_url))["schema_version"] == str(SCHEMA_VERSION)
        more = await store.put_batch([event(n=3)], bodies=[body])
        assert [e.to_dict() for e in await store.list_events("t")] == [e.to_dict() for e in [*written, *more]]
        assert await store.get_bodies("t", [body.digest]) == {body.digest: body.data}


async def test_a_run_end_is_one_transaction_with_one_counter_bump_on_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from run_journal.stores.sqlite import SqliteConnection

    statements: list[str] = []
    opened = SqliteConnection._open

    def traced(self: SqliteConnection) -> sqlite3.Connection:
        connection = opened(self)
        connection.set_trace_callback(statements.append)
        return connection

    monkeypatch.setattr(SqliteConnection, "_open", traced)
    async with open_store(f"sqlite:///{tmp_path / 'journal.db'}") as store:
        statements.clear()
        assert await store.put_run_close(*closing_run("r"))
        writes = [s for s in statements if not s.startswith("SELECT")]
        assert writes[0] == "BEGIN IMMEDIATE"
        assert writes[-1] == "COMMIT"
        assert sum(s.startswith(("BEGIN", "COMMIT")) for s in statements) == 2
        assert sum(s.startswith("INSERT INTO run_journal_threads") for s in statements) == 1
        statements.clear()  # with bodies: the same transaction, one more statement per body
        events, terminal, row = closing_run("with-bodies")
        bodies = [Body.of("t", n) for n in range(3)]
        assert await store.put_run_close(events, terminal, row, bodies=bodies)
        assert sum(s.startswith(("BEGIN", "COMMIT")) for s in statements) == 2
        assert sum(s.startswith("INSERT INTO run_journal_threads") for s in statements) == 1
        assert sum(s.startswith("INSERT INTO run_journal_bodies") for s in statements) == 3


@contextlib.asynccontextmanager
async def limited_role(database_url: str, connections: int) -> AsyncIterator[str]:
    """A role of this test's own that PostgreSQL lets hold at most ``connections`` connections (the
    server refuses one more with "too many connections", as it refuses one past max_connections),
    allowed to create schemas in the test database: the database URL as that role."""
    import asyncpg

    role = f"rj_limited_{uuid.uuid4().hex[:8]}"
    parts = urlsplit(database_url)
    database = parts.path.lstrip("/")
    admin = await asyncpg.connect(database_url)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT {connections}")
        await admin.execute(f'GRANT CREATE, CONNECT ON DATABASE "{database}" TO {role}')
        yield urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port or 5432}"))
    finally:
        await admin.execute(f"DROP OWNED BY {role} CASCADE")
        await admin.execute(f"DROP ROLE {role}")
        await admin.close()


async def hold_connections(url: str, count: int) -> list[Any]:
    import asyncpg

    return [await asyncpg.connect(url) for _ in range(count)]


def one_node_graph() -> Any:
    """agent -> end: one reply of an offline fake chat model, compiled."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, MessagesState, StateGraph

    model = GenericFakeChatModel(messages=iter([AIMessage("done")]))

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    return graph.compile()


@pytest.mark.slow  # holds the server's connections for 1.5 s
async def test_writes_wait_while_postgres_refuses_connections_then_succeed(
    postgres_database_url: str,
) -> None:
    """Every connection the server allows is taken (by this test) for 1.5 s: the store's set-up, four
    concurrent writes and a journaled agent run wait for a connection instead of failing, and all
    of them land once the connections are released."""
    from langchain_core.messages import HumanMessage

    from run_journal import RunJournal

    async with limited_role(postgres_database_url, connections=3) as role_url:
        held = await hold_connections(role_url, 3)
        store = open_store(f"{role_url}?schema=refused", pool_size=3)
        journal = RunJournal(store, thread_id="agent", flush_interval=60)
        loop = asyncio.get_running_loop()
        began = loop.time()

        async def release_later() -> None:
            await asyncio.sleep(1.5)
            for connection in held:
                await connection.close()

        releasing = asyncio.ensure_future(release_later())
        async with asyncio.timeout(GUARD):
            writes = [store.put_batch([event(f"w{n}", i) for i in range(5)]) for n in range(4)]
            results = await asyncio.gather(*writes)
            await one_node_graph().ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
            await journal.aclose()
            await releasing
        assert loop.time() - began >= 1.5
        assert [[e.seq for e in written] for written in results] == [[1, 2, 3, 4, 5]] * 4
        row = await store.get_run(journal.run_id)
        assert row is not None
        assert row.status == RunStatus.SUCCESS
        assert [e.event_type for e in await store.list_events("agent")][-1] == "run.end"
        await store.aclose()


@pytest.mark.slow  # waits out a connection deadline
async def test_a_write_waits_for_a_connection_no_longer_than_connection_wait(
    postgres_database_url: str,
) -> None:
    from run_journal.stores.base import StoreError

    async with limited_role(postgres_database_url, connections=2) as role_url:
        url = f"{role_url}?schema=bounded"
        async with open_store(url) as first:  # the schema, set up
            await first.put_batch([event("t")])
        held = await hold_connections(role_url, 2)  # every connection the role may have
        store = open_store(url, pool_size=1, connection_wait=0.5)
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(StoreError, match=r"refused new connections for 0\.5 s.*too many connections"):
            await store.put_batch([event("t", 1)])
        assert 0.4 <= loop.time() - began < 3
        for connection in held:
            await connection.close()
        await store.put_batch([event("t", 2)])
        assert [e.content for e in await store.list_events("t")] == [{"n": 0}, {"n": 2}]
        await store.aclose()


@pytest.mark.slow  # listens for notifications that must not come
async def test_a_write_notifies_a_followed_thread_only_and_once_per_transaction(
    postgres_database_url: str,
) -> None:
    """NOTIFY takes a server-wide lock at commit: a write sends one only for a thread someone
    follows (its listener registers it), one per transaction (a run's end included)."""
    import asyncpg

    from run_journal.stores.postgres import channel_name

    schema = f"n{uuid.uuid4().hex[:12]}"
    async with open_store(f"{postgres_database_url}?schema={schema}") as store:
        await store.put_batch([event("t"), event("other")])
        heard: list[str] = []
        listener = await asyncpg.connect(postgres_database_url)
        await listener.add_listener(channel_name(schema), lambda *args: heard.append(args[3]))
        try:
            await store.put_batch([event("t", n) for n in range(3)])
            assert await store.put_run_close(*closing_run("r0"))
            await asyncio.sleep(0.3)
            assert heard == []  # nobody follows

            follower = store.follow("t", after_seq=await store.last_seq("t"))
            next_event = asyncio.ensure_future(anext(follower))
            await asyncio.sleep(0.3)  # registered
            async with asyncio.timeout(GUARD):
                assert await store.put_run_close(*closing_run("r1"))
                await store.put_batch([event("other", 9)])
                assert (await next_event).event_type == "run.start"
                await asyncio.sleep(0.3)
            assert heard == [f"t\n{await store.last_seq('t')}"]
            await follower.aclose()
            await asyncio.sleep(0.2)
            await store.put_batch([event("t", 10)])
            await asyncio.sleep(0.3)
            assert len(heard) == 1  # the follower is gone: no more notifications
        finally:
            await listener.close()


class TestPostgresStatementPath(RunEventStoreConformance):
    """The conformance kit on PostgreSQL with every write through the statements of ``SqlWork``:
    what a batch over several threads, and every fallback of the one-call write, take."""

    @pytest.fixture
    def store_factory(self, postgres_database_url: str) -> StoreFactory:
        url = f"{postgres_database_url}?schema=s{uuid.uuid4().hex[:12]}"

        def make() -> PostgresRunEventStore:
            store = open_store(url)
            assert isinstance(store, PostgresRunEventStore)
            store.one_call_writes = False
            return store

        return make


# -- reads that stay flat: rows the database reads for a page -------------------------------------------
async def rows_read(url: str, unit: Any, *args: Any) -> tuple[Any, int]:
    """(result, work) of one of the store's read units run on a connection of this test's own: on
    PostgreSQL the rows read (table rows scanned plus rows fetched through an index, from the
    transaction's own statistics), on SQLite the virtual machine's instructions."""
    from sqlalchemy import text

    from run_journal.stores.postgres import PostgresSession
    from run_journal.stores.sqlite import SqliteSession

    driver_url, schema = engine_url(url)
    if schema is None:
        connection = sqlite3.connect(str(driver_url.database))
        steps = 0

        def step() -> int:
            nonlocal steps
            steps += 1
            return 0

        connection.set_progress_handler(step, 1)
        try:
            return unit(SqliteSession(connection), *args), steps
        finally:
            connection.close()
    engine = create_async_engine(driver_url)
    try:
        async with engine.begin() as conn:
            result = await conn.run_sync(lambda sync: unit(PostgresSession(sync, None, ""), *args))
            found = await conn.execute(text(
                "SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0) "
                "FROM pg_stat_xact_user_tables WHERE schemaname = :schema"), {"schema": schema})
            return result, int(found.scalar_one())
    finally:
        await engine.dispose()


async def fill(store: SqlRunEventStore, others: int, runs: int) -> None:
    """Three threads of ada among ``others`` threads of other users (each with its own events),
    and one thread of ``runs`` finished runs, two running ones and two without a row."""
    from datetime import UTC, datetime, timedelta

    start = datetime(2024, 1, 1, tzinfo=UTC)
    batch = [NewEvent(f"ada-{n}", f"ada-run-{n}", "llm.human.input", "message", content="hi", user_id="ada",
                      created_at=start + timedelta(minutes=n)) for n in range(3)]
    batch += [NewEvent(f"other-{n}", f"other-run-{n}", "llm.human.input", "message", content="hi",
                       user_id=f"user-{n % 97}", created_at=start + timedelta(seconds=n))
              for n in range(others)]
    for first in range(0, len(batch), 500):
        await store.put_batch(batch[first:first + 500])
    for n in range(runs):
        status = RunStatus.RUNNING if n < 2 else RunStatus.SUCCESS
        await store.put_run(RunRow(run_id=f"run-{n}", thread_id="runs", user_id="ada", status=status,
                                   started_at=start + timedelta(seconds=n)))
    await store.put_batch([NewEvent("runs", f"rowless-{n}", "run.start", "trace") for n in range(2)])


@pytest.mark.slow  # fills two stores of each database with a thousand threads and hundreds of runs
async def test_scoped_lists_runs_pages_and_reconcile_reads_read_a_bounded_number_of_rows(
    sql_url: str,
) -> None:
    from run_journal.stores.base import RecentThreadQuery, RunQuery, StartQuery, ThreadQuery

    reads = {
        "threads of a user": ("select_threads", ThreadQuery(limit=50, user_id="ada")),
        "recent threads of a user": ("select_recent_threads", RecentThreadQuery(limit=50, user_id="ada")),
        "recent threads": ("select_recent_threads", RecentThreadQuery(limit=20)),
        "runs page": ("select_runs", RunQuery(thread_id="runs", limit=20, newest_first=True)),
        "running runs": ("select_runs", RunQuery(statuses=("running", "pending"))),
        "runs without a row": ("select_starts_without_row", StartQuery(limit=100)),
    }
    work: dict[str, list[int]] = {name: [] for name in reads}
    for size, (others, runs) in enumerate(((40, 30), (1200, 600))):
        url = sql_url.replace(".db", f"-{size}.db") if sql_url.startswith("sqlite") else f"{sql_url}{size}"
        async with open_store(url) as store:
            assert isinstance(store, SqlRunEventStore)
            await fill(store, others, runs)
            for name, (unit, query) in reads.items():
                result, cost = await rows_read(url, getattr(store._work, unit), query)
                assert result, name
                work[name].append(cost)
    for name, (small, large) in work.items():
        print(f"{sql_url.split(':', 1)[0]} {name}: {small} -> {large}")
        assert large <= small * 1.5 + 50, f"{name}: {small} with the small store, {large} with the large one"
        if not sql_url.startswith("sqlite"):
            assert large <= 60, f"{name}: {large} rows read"
