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
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from conftest import backend_url
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from run_journal import NewEvent, open_store
from run_journal.stores.base import CONTRACT_MAJOR, IncompatibleStoreError, StoreClosedError
from run_journal.stores.postgres import PostgresRunEventStore
from run_journal.stores.sql import SqlRunEventStore, engine_url
from run_journal.stores.sql_schema import SCHEMA_VERSION, meta
from run_journal.stores.sqlite import SqliteRunEventStore

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
from run_journal import NewEvent, open_store
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
            for name in ("run_journal_events", "run_journal_meta", "run_journal_run_starts",
                         "run_journal_runs", "run_journal_threads", "run_journal_user_threads")
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


async def test_a_v3_store_gains_the_activity_and_run_orders(sql_url: str) -> None:
    """Schema v4 adds the indexed orders (threads by their newest event, per user too; runs by
    start): filled from what a v3 store holds."""
    from sqlalchemy import text

    from run_journal.testing._activity import assert_history, write_history

    async with open_store(sql_url) as store:
        await write_history(store)
    schema = engine_url(sql_url)[1]
    prefix = f'"{schema}".' if schema else ""
    async with database(sql_url) as conn:  # make it look like a v3 store
        for statement in (
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
