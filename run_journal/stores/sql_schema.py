"""Tables, migrations and URLs of the SQL store (SQLite through aiosqlite, PostgreSQL through asyncpg).

The schema is portable SQLAlchemy Core: text columns for JSON (``content`` keeps the exact bytes
``NewEvent.content_json`` produced, NUL escapes included, which JSONB would rewrite) and for
timestamps (fixed-width ISO-8601 UTC, so text order is time order on both databases).
Migrations are an ordered list: a store at version ``n`` has run ``MIGRATIONS[:n]``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    func,
    or_,
    select,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.schema import CreateSchema

from run_journal.envelope import dumps, utc_now
from run_journal.runs import TERMINAL_STATUSES, RunRow
from run_journal.stores.base import CONTRACT_MAJOR, CONTRACT_VERSION, IncompatibleStoreError

ID = String(255)
"""Thread, run, user and event ids (``envelope.validate_id`` caps them at 255 characters)."""
STAMP = String(40)
"""``YYYY-MM-DDTHH:MM:SS.ffffff+00:00``: fixed width, so text order is time order."""

metadata = MetaData()

events = Table(
    "run_journal_events",
    metadata,
    # INTEGER (not BIGINT) on SQLite so the column is the rowid alias and needs no second b-tree.
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("thread_id", ID, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("run_id", ID, nullable=False),
    Column("event_type", String(32), nullable=False),
    Column("category", String(16), nullable=False),
    Column("content", Text, nullable=False),
    Column("metadata", Text, nullable=False),
    Column("task_id", Text, nullable=True),
    Column("created_at", STAMP, nullable=False),
    Column("event_id", ID, nullable=False),
    Column("user_id", ID, nullable=True),
    UniqueConstraint("thread_id", "seq", name="uq_run_journal_events_thread_seq"),
    UniqueConstraint("thread_id", "event_id", name="uq_run_journal_events_thread_event_id"),
    Index("ix_run_journal_events_category", "thread_id", "category", "seq"),
    Index("ix_run_journal_events_run", "thread_id", "run_id", "seq"),
    Index("ix_run_journal_events_task", "thread_id", "task_id", "seq"),
)

threads = Table(
    "run_journal_threads",
    metadata,
    Column("thread_id", ID, primary_key=True),
    # The highest seq ever assigned: the per-thread lock writers take, and why a deleted range is
    # never reused.
    Column("last_seq", BigInteger, nullable=False),
)

runs = Table(
    "run_journal_runs",
    metadata,
    Column("run_id", ID, primary_key=True),
    Column("thread_id", ID, nullable=False),
    Column("user_id", ID, nullable=True),
    Column("status", String(16), nullable=False),
    Column("started_at", STAMP, nullable=True),
    Column("updated_at", STAMP, nullable=False),
    Column("row", Text, nullable=False),
    # When the run's first put_run happened (store clock); never updated. list_runs orders by
    # started_at, falling back to this (schema version 2).
    Column("first_put_at", STAMP, nullable=True),
    Index("ix_run_journal_runs_thread", "thread_id", "started_at"),
)

meta = Table(
    "run_journal_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)


def _create_v1(connection: Connection) -> None:
    for table in (events, threads, runs):
        table.create(connection, checkfirst=True)


def _add_first_put_at_v2(connection: Connection) -> None:
    """``run_journal_runs.first_put_at`` (v1 stores backfill it from ``updated_at``, the best known)."""
    schema_name = (connection.get_execution_options().get("schema_translate_map") or {}).get(None)
    table = f'"{schema_name}".{runs.name}' if schema_name else runs.name
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS first_put_at VARCHAR(40)")
    else:
        present = {row[1] for row in connection.exec_driver_sql(f"PRAGMA table_info({runs.name})")}
        if "first_put_at" not in present:  # a fresh store got it from the current table definition
            connection.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN first_put_at VARCHAR(40)")
    connection.exec_driver_sql(f"UPDATE {table} SET first_put_at = updated_at WHERE first_put_at IS NULL")


Migration = Callable[[Connection], None]
MIGRATIONS: Final[tuple[Migration, ...]] = (_create_v1, _add_first_put_at_v2)
"""Position + 1 is the schema version a migration brings the store to. Append only; never edit."""
SCHEMA_VERSION: Final = len(MIGRATIONS)


def stamp(moment: datetime) -> str:
    """Fixed-width UTC text for a timestamp (``datetime.fromisoformat`` reads it back exactly)."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


# -- URLs --------------------------------------------------------------------------------------------
_SCHEMA_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
POSTGRES_EXTRA: Final = "pip install 'run-journal[postgres]'"


def engine_url(url: str) -> tuple[URL, str | None]:
    """Map a store URL to the async driver URL and the PostgreSQL schema its ``?schema=`` names.

    ``sqlite:///rel.db`` / ``sqlite:////abs.db`` -> ``sqlite+aiosqlite``; ``postgresql://`` and
    ``postgres://`` -> ``postgresql+asyncpg``. ``schema`` is removed from the query, so the
    driver never sees it.
    """
    parsed = make_url(url)
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "sqlite":
        if driver not in ("", "aiosqlite"):
            raise ValueError(f"{url!r}: SQLite stores use the aiosqlite driver, not {driver!r}")
        if not parsed.database or parsed.database == ":memory:":
            raise ValueError(
                f"{url!r}: a SQLite store needs a file (sqlite:///journal.db); use memory:// for an "
                "in-process store"
            )
        if "schema" in parsed.query:
            raise ValueError(f"{url!r}: ?schema= is for PostgreSQL URLs only")
        return parsed.set(drivername="sqlite+aiosqlite"), None
    if backend in ("postgresql", "postgres"):
        if driver not in ("", "asyncpg"):
            raise ValueError(f"{url!r}: PostgreSQL stores use the asyncpg driver, not {driver!r}")
        if importlib.util.find_spec("asyncpg") is None:
            raise ImportError(f"PostgreSQL stores need the asyncpg driver: {POSTGRES_EXTRA}")
        schema = parsed.query.get("schema")
        if isinstance(schema, tuple):
            raise ValueError(f"{url!r}: ?schema= given more than once")
        if schema is not None:
            check_schema_name(schema)
        return parsed.difference_update_query(["schema"]).set(drivername="postgresql+asyncpg"), schema
    raise ValueError(f"{url!r} is not a sqlite:// or postgresql:// URL")


def engine_settings(
    driver_url: URL, *, lock_timeout: float, statement_timeout: float, engine_options: Any
) -> dict[str, Any]:
    """``create_async_engine`` keywords; PostgreSQL gets ``lock_timeout`` / ``statement_timeout``
    as server settings of every connection (a stuck writer fails and is retried, never hangs)."""
    settings: dict[str, Any] = dict(engine_options or {})
    if driver_url.drivername.startswith("postgresql"):
        connect_args = dict(settings.pop("connect_args", {}))
        server = dict(connect_args.get("server_settings", {}))
        server.setdefault("lock_timeout", f"{int(lock_timeout * 1000)}ms")
        server.setdefault("statement_timeout", f"{int(statement_timeout * 1000)}ms")
        connect_args["server_settings"] = server
        settings["connect_args"] = connect_args
    return settings


KEPT_ON_UPDATE: Final = frozenset({"run_id", "thread_id", "first_put_at"})
"""Run columns an update never changes (a run never moves to another thread)."""


def run_values(row: RunRow) -> dict[str, Any]:
    """The runs table's columns for ``row``; ``first_put_at`` is now (kept only by an insert)."""
    data = row.to_dict()
    return {
        "run_id": row.run_id, "thread_id": row.thread_id, "user_id": row.user_id,
        "status": data["status"], "updated_at": stamp(row.updated_at),
        "started_at": stamp(row.started_at) if row.started_at else None, "row": dumps(data),
        "first_put_at": stamp(utc_now()),
    }


def upsert_run(insert: Any, row: RunRow) -> Any:
    """Insert or update a run row, unless it belongs to another thread or the stored status is
    terminal and differs (``runs.may_replace``), as one atomic statement; returns the written
    row's JSON, or nothing (the caller then reads the stored row and its thread)."""
    values = run_values(row)
    statement = insert.values(values)
    terminal = sorted(str(status) for status in TERMINAL_STATUSES)
    return statement.on_conflict_do_update(
        index_elements=[runs.c.run_id],
        set_={name: statement.excluded[name] for name in values if name not in KEPT_ON_UPDATE},
        where=and_(
            runs.c.thread_id == statement.excluded.thread_id,
            or_(runs.c.status.not_in(terminal), runs.c.status == statement.excluded.status),
        ),
    ).returning(runs.c.row)


def moved_run_error(run_id: str, owner: str, thread_id: str) -> ValueError:
    return ValueError(f"run {run_id!r} belongs to thread {owner!r}, not {thread_id!r}")


def check_schema_name(schema: str) -> str:
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(
            f"schema {schema!r} is invalid: 1-63 letters, digits or '_', not starting with a digit"
        )
    return schema


def lock_key(*parts: str) -> int:
    """A stable signed 64-bit key for ``pg_advisory_xact_lock`` derived from names."""
    digest = hashlib.sha256("\x1f".join(("run_journal", *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def channel_name(schema: str | None) -> str:
    """The LISTEN/NOTIFY channel of one store (a schema of its own gets a channel of its own)."""
    return "run_journal_" + hashlib.sha256((schema or "").encode()).hexdigest()[:20]


# -- setup -------------------------------------------------------------------------------------------
async def migrate(conn: AsyncConnection, schema_name: str | None) -> None:
    """Bring the store to ``SCHEMA_VERSION`` inside the caller's write transaction.

    The caller's transaction is the migration lock on SQLite (``BEGIN IMMEDIATE``); on PostgreSQL an
    advisory lock keyed by the schema is taken first, so concurrent ``setup()`` calls queue and the
    second finds the work done.
    """
    postgres = conn.dialect.name == "postgresql"
    if postgres:
        await conn.execute(select(func.pg_advisory_xact_lock(lock_key("setup", schema_name or ""))))
        if schema_name:
            await conn.execute(CreateSchema(schema_name, if_not_exists=True))
    await conn.run_sync(meta.create, checkfirst=True)
    found = await conn.execute(select(meta.c.key, meta.c.value))
    recorded = {str(row[0]): str(row[1]) for row in found}
    version = check_compatible(recorded)
    for migration in MIGRATIONS[version:]:
        await conn.run_sync(migration)
    if version < SCHEMA_VERSION or not recorded:
        insert = (pg_insert if postgres else sqlite_insert)(meta)
        await conn.execute(
            insert.on_conflict_do_update(index_elements=[meta.c.key], set_={"value": insert.excluded.value}),
            [
                {"key": "schema_version", "value": str(SCHEMA_VERSION)},
                {"key": "contract_major", "value": str(CONTRACT_MAJOR)},
                {"key": "contract_version", "value": CONTRACT_VERSION},
            ],
        )


def check_compatible(recorded: Mapping[str, str]) -> int:
    """The recorded schema version, after refusing a store this library must not touch."""
    major = recorded.get("contract_major")
    if major is not None and int(major) != CONTRACT_MAJOR:
        raise IncompatibleStoreError(
            f"this store was written with run-journal contract major version {major}; this library "
            f"reads and writes major version {CONTRACT_MAJOR} ({CONTRACT_VERSION}); "
            "use a run-journal release of the store's major version, or migrate the store"
        )
    version = int(recorded.get("schema_version", 0))
    if version > SCHEMA_VERSION:
        raise IncompatibleStoreError(
            f"this store has SQL schema version {version}; this library knows versions up to "
            f"{SCHEMA_VERSION}; upgrade run-journal"
        )
    return version
