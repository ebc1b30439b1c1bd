"""The tables of the SQL stores and their migrations, shared by SQLite and PostgreSQL.

The schema is portable SQLAlchemy Core: text columns for JSON (``content`` keeps the exact bytes
``NewEvent.content_json`` produced, NUL escapes included, which JSONB would rewrite) and for
timestamps (fixed-width ISO-8601 UTC, so text order is time order on both databases).

Migrations are an ordered list: a store at schema version ``n`` has run ``MIGRATIONS[:n]``. ``migrate``
runs what is missing inside the caller's transaction, which the caller has made the migration lock
(SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: an advisory lock), so concurrent ``setup()`` calls queue and
the later ones find the work done.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    bindparam,
    false,
    inspect,
    select,
    text,
)

from run_journal.runs import RunRow
from run_journal.stores.base import CONTRACT_MAJOR, CONTRACT_VERSION, IncompatibleStoreError
from run_journal.stores.postgres_write import create_function
from run_journal.stores.queries import run_tags as run_tags_of

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
    # a user's events of a thread: user-scoped pages and follows, and a user's newest event in a
    # thread after a delete (schema version 4)
    Index("ix_run_journal_events_user", "thread_id", "user_id", "seq"),
)

threads = Table(
    "run_journal_threads",
    metadata,
    Column("thread_id", ID, primary_key=True),
    # The highest seq ever assigned: the per-thread lock writers take, and why a deleted range is
    # never reused.
    Column("last_seq", BigInteger, nullable=False),
    # The created_at of the thread's newest event; NULL while it holds none (schema version 4).
    # list_threads lists the threads where it is set, list_recent_threads orders by it.
    Column("last_at", STAMP, nullable=True),
    Index("ix_run_journal_threads_recent", "last_at", "thread_id"),
)

user_threads = Table(
    "run_journal_user_threads",
    metadata,
    # One row per user and thread that holds events of the user: the created_at of the user's newest
    # event there (schema version 4), so a user's thread list reads that user's rows only.
    Column("user_id", ID, primary_key=True),
    Column("thread_id", ID, primary_key=True),
    Column("last_at", STAMP, nullable=False),
    Index("ix_run_journal_user_threads_recent", "user_id", "last_at", "thread_id"),
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
    # coalesce(started_at, first_put_at): the list_runs order as one indexed column (schema version 4).
    Column("ordered_at", STAMP, nullable=True),
    Index("ix_run_journal_runs_order", "thread_id", "ordered_at", "run_id"),
    Index("ix_run_journal_runs_all_order", "ordered_at", "run_id"),
    # runs by status in list order: reconcile's running and pending runs (schema version 5)
    Index("ix_run_journal_runs_status", "status", "ordered_at", "run_id"),
    # what search_runs filters on (schema version 7): the row's search tags (a JSON array of
    # "model:<name>", "tool:<name>", "caller:<name>", copied into run_journal_run_tags by a trigger),
    # its total tokens and cost, and whether anything in it failed
    Column("tags", Text, nullable=True),
    Column("total_tokens", BigInteger, nullable=True),
    Column("cost_usd", Float, nullable=True),
    Column("has_error", Boolean, nullable=True),
    Index("ix_run_journal_runs_user_order", "user_id", "ordered_at", "run_id"),
    Index("ix_run_journal_runs_errors", "ordered_at", "run_id", sqlite_where=text("has_error"),
          postgresql_where=text("has_error")),
)

run_tags = Table(
    "run_journal_run_tags",
    metadata,
    # One row per run and search tag (schema version 7), kept by triggers on run_journal_runs from its
    # tags column, with the run's place in the list order: runs of a tag, newest first, are one index
    # range (tag, ordered_at, run_id).
    Column("run_id", ID, primary_key=True),
    Column("tag", Text, primary_key=True),
    Column("ordered_at", STAMP, nullable=False),
    Index("ix_run_journal_run_tags_order", "tag", "ordered_at", "run_id"),
)

run_starts = Table(
    "run_journal_run_starts",
    metadata,
    # One row per run id: the run.start that took it (schema version 3). A second run.start of the
    # run id with another event_id is refused while that event is stored, in any thread.
    Column("run_id", ID, primary_key=True),
    Column("thread_id", ID, nullable=False),
    Column("event_id", ID, nullable=False),
    # Whether the run has a row (schema version 5): the runs without one (a worker that died before
    # its first put_run) are a partial index, not an anti-join over every run.
    Column("has_row", Boolean, nullable=False, server_default=false()),
    Index("ix_run_journal_run_starts_rowless", "run_id", sqlite_where=text("NOT has_row"),
          postgresql_where=text("NOT has_row")),
)

bodies = Table(
    "run_journal_bodies",
    metadata,
    # One row per distinct value a thread's events reference (schema version 6): its canonical JSON
    # under its sha256; written with the events, never updated, deleted with the thread.
    Column("thread_id", ID, primary_key=True),
    Column("digest", String(64), primary_key=True),
    Column("data", LargeBinary, nullable=False),
)

followers = Table(
    "run_journal_followers",
    metadata,
    # PostgreSQL only (schema version 5): the threads someone follows (a listening store registers
    # them and renews them; a row past ``until`` is a follower gone), so a write sends NOTIFY only
    # when it has a reader.
    Column("thread_id", ID, primary_key=True),
    Column("listener", String(32), primary_key=True),
    Column("until", DateTime(timezone=True), nullable=False),
)

meta = Table(
    "run_journal_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)


def qualified(table: Table, schema: str | None) -> str:
    """A table's name in SQL text, in ``schema`` if given (schema names are checked identifiers)."""
    return f'"{schema}".{table.name}' if schema else table.name


# -- migrations --------------------------------------------------------------------------------------
def _create_v1(connection: Connection, schema: str | None) -> None:
    for table in (events, threads, runs):
        table.create(connection, checkfirst=True)


def _add_first_put_at_v2(connection: Connection, schema: str | None) -> None:
    """``run_journal_runs.first_put_at`` (v1 stores backfill it from ``updated_at``, the best known)."""
    table = qualified(runs, schema)
    if "first_put_at" not in _columns(connection, runs, schema):  # a fresh store got it from the table
        connection.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN first_put_at VARCHAR(40)")
    connection.exec_driver_sql(f"UPDATE {table} SET first_put_at = updated_at WHERE first_put_at IS NULL")


def _add_run_starts_v3(connection: Connection, schema: str | None) -> None:
    """``run_journal_run_starts``, filled from the stored ``run.start`` events (the earliest written
    holds a run id that several runs share already)."""
    run_starts.create(connection, checkfirst=True)
    connection.exec_driver_sql(
        f"INSERT INTO {qualified(run_starts, schema)} (run_id, thread_id, event_id) "
        f"SELECT run_id, thread_id, event_id FROM {qualified(events, schema)} "
        "WHERE event_type = 'run.start' ORDER BY id ON CONFLICT (run_id) DO NOTHING"
    )


def _columns(connection: Connection, table: Table, schema: str | None) -> set[str]:
    return {column["name"] for column in inspect(connection).get_columns(table.name, schema=schema)}


def _create_indexes(connection: Connection, *indexes: Index) -> None:
    for index in indexes:
        index.create(connection, checkfirst=True)


def _add_activity_and_run_order_v4(connection: Connection, schema: str | None) -> None:
    """The indexed orders of schema version 4: ``run_journal_threads.last_at`` (the created_at of the
    thread's newest event, NULL for a thread with none), ``run_journal_user_threads`` (the same per
    user), ``run_journal_runs.ordered_at`` (the ``list_runs`` order) and their indexes, filled from
    what is stored; the index of runs by (thread, started_at) it replaces is dropped."""
    threads_table, events_table = qualified(threads, schema), qualified(events, schema)
    runs_table, users_table = qualified(runs, schema), qualified(user_threads, schema)
    if "last_at" not in _columns(connection, threads, schema):
        connection.exec_driver_sql(f"ALTER TABLE {threads_table} ADD COLUMN last_at VARCHAR(40)")
    connection.exec_driver_sql(
        f"UPDATE {threads_table} SET last_at = (SELECT e.created_at FROM {events_table} AS e "
        f"WHERE e.thread_id = {threads_table}.thread_id ORDER BY e.seq DESC LIMIT 1)"
    )
    user_threads.create(connection, checkfirst=True)
    _create_indexes(connection, *events.indexes, *threads.indexes)
    connection.exec_driver_sql(
        f"INSERT INTO {users_table} (user_id, thread_id, last_at) "
        f"SELECT e.user_id, e.thread_id, e.created_at FROM {events_table} AS e JOIN "
        f"(SELECT thread_id, user_id, max(seq) AS seq FROM {events_table} WHERE user_id IS NOT NULL "
        "GROUP BY thread_id, user_id) AS newest ON e.thread_id = newest.thread_id AND e.seq = newest.seq "
        "WHERE true ON CONFLICT (user_id, thread_id) DO UPDATE SET last_at = excluded.last_at"
    )
    if "ordered_at" not in _columns(connection, runs, schema):
        connection.exec_driver_sql(f"ALTER TABLE {runs_table} ADD COLUMN ordered_at VARCHAR(40)")
    connection.exec_driver_sql(
        f"UPDATE {runs_table} SET ordered_at = coalesce(started_at, first_put_at, updated_at) "
        "WHERE ordered_at IS NULL"
    )
    _create_indexes(connection, *_runs_indexes_before_v7())
    prefix = f'"{schema}".' if schema else ""
    connection.exec_driver_sql(f"DROP INDEX IF EXISTS {prefix}ix_run_journal_runs_thread")


def _add_reconcile_indexes_and_one_call_writes_v5(connection: Connection, schema: str | None) -> None:
    """Schema version 5: ``run_journal_run_starts.has_row`` (filled from the stored rows) with its
    partial index, an index of runs by status; on PostgreSQL also ``run_journal_followers`` and the
    one-call write function (``stores/postgres_write.py``)."""
    starts_table, runs_table = qualified(run_starts, schema), qualified(runs, schema)
    if "has_row" not in _columns(connection, run_starts, schema):
        connection.exec_driver_sql(
            f"ALTER TABLE {starts_table} ADD COLUMN has_row BOOLEAN NOT NULL DEFAULT FALSE")
    connection.exec_driver_sql(
        f"UPDATE {starts_table} SET has_row = EXISTS (SELECT 1 FROM {runs_table} AS r "
        f"WHERE r.run_id = {starts_table}.run_id)"
    )
    _create_indexes(connection, *run_starts.indexes, *_runs_indexes_before_v7())
    if connection.dialect.name == "postgresql":
        followers.create(connection, checkfirst=True)
        connection.exec_driver_sql(create_function(schema, 1))


def _add_bodies_v6(connection: Connection, schema: str | None) -> None:
    """Schema version 6: ``run_journal_bodies``; on PostgreSQL the one-call write that also writes
    a batch's bodies (``run_journal_write_v2``; v1 stays for processes that still call it)."""
    bodies.create(connection, checkfirst=True)
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(create_function(schema, 2))


SEARCH_INDEXES: Final = frozenset({"ix_run_journal_runs_user_order", "ix_run_journal_runs_errors"})
"""The indexes of ``run_journal_runs`` that schema version 7 adds (on its columns)."""


def _runs_indexes_before_v7() -> list[Index]:
    """What migrations 4 and 5 create: the runs indexes without those on version 7's columns."""
    return [index for index in runs.indexes if index.name not in SEARCH_INDEXES]


def _add_search_v7(connection: Connection, schema: str | None) -> None:
    """Schema version 7: what ``search_runs`` reads. ``run_journal_runs`` gains ``tags``,
    ``total_tokens``, ``cost_usd`` and ``has_error`` (filled from each stored row) and indexes of runs
    by user and of runs with an error; ``run_journal_run_tags`` holds one row per run and tag, kept
    by triggers on the runs table (``run_tag_triggers``); on PostgreSQL the one-call write that sets
    the new columns (``run_journal_write_v3``; v1 and v2 stay for processes that still call them)."""
    runs_table = qualified(runs, schema)
    present = _columns(connection, runs, schema)
    for name, kind in (("tags", "TEXT"), ("total_tokens", "BIGINT"), ("cost_usd", "DOUBLE PRECISION"),
                       ("has_error", "BOOLEAN")):
        if name not in present:
            connection.exec_driver_sql(f"ALTER TABLE {runs_table} ADD COLUMN {name} {kind}")
    run_tags.create(connection, checkfirst=True)
    for statement in run_tag_triggers(connection.dialect.name, schema):
        connection.exec_driver_sql(statement)
    _create_indexes(connection, *runs.indexes, *run_tags.indexes)
    _fill_search_columns(connection)
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(create_function(schema, 3))


def _fill_search_columns(connection: Connection) -> None:
    """The search columns of every stored row without them, a page at a time (the tags trigger
    fills the tags table as they are set)."""
    after = ""
    update = runs.update().where(runs.c.run_id == bindparam("key")).values(
        tags=bindparam("tags"), total_tokens=bindparam("total_tokens"), cost_usd=bindparam("cost_usd"),
        has_error=bindparam("has_error"))
    while page := connection.execute(
            select(runs.c.run_id, runs.c.row).where(runs.c.tags.is_(None), runs.c.run_id > after)
            .order_by(runs.c.run_id).limit(1000)).all():
        connection.execute(update, [{"key": run_id, **search_values(RunRow.from_dict(json.loads(row)))}
                                    for run_id, row in page])
        after = str(page[-1][0])


_TAGS_JSON: Final = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(tags, ensure_ascii=False)`` with its encoder built once (``dumps`` builds one per call)."""


def search_values(row: RunRow) -> dict[str, Any]:
    """The search columns of a run row."""
    return {"tags": _TAGS_JSON(run_tags_of(row)), "total_tokens": row.usage.total_tokens,
            "cost_usd": row.usage.cost_usd, "has_error": row.has_error}


def run_tag_triggers(dialect: str, schema: str | None) -> list[str]:
    """The triggers that keep ``run_journal_run_tags`` equal to each run row's ``tags``: on insert,
    on an update that changes its tags or its place (``ordered_at``), on delete."""
    runs_table, tags_table = qualified(runs, schema), qualified(run_tags, schema)
    changed = "OLD.tags IS DISTINCT FROM NEW.tags OR OLD.ordered_at IS DISTINCT FROM NEW.ordered_at"
    if dialect == "postgresql":
        prefix = f'"{schema}".' if schema else ""
        function = f"{prefix}run_journal_run_tags_v1"
        return [
            f"""CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $tags$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM {tags_table} WHERE run_id = OLD.run_id;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.tags IS NOT NULL THEN
        INSERT INTO {tags_table} (run_id, tag, ordered_at)
        SELECT DISTINCT NEW.run_id, t.tag, NEW.ordered_at
        FROM json_array_elements_text(NEW.tags::json) AS t(tag);
    END IF;
    RETURN NULL;
END
$tags$""",
            f"DROP TRIGGER IF EXISTS run_journal_run_tags_write ON {runs_table}",
            f"CREATE TRIGGER run_journal_run_tags_write AFTER INSERT OR DELETE ON {runs_table} "
            f"FOR EACH ROW EXECUTE FUNCTION {function}()",
            f"DROP TRIGGER IF EXISTS run_journal_run_tags_update ON {runs_table}",
            f"CREATE TRIGGER run_journal_run_tags_update AFTER UPDATE ON {runs_table} "
            f"FOR EACH ROW WHEN ({changed}) EXECUTE FUNCTION {function}()",
        ]
    insert = (f"INSERT OR IGNORE INTO {tags_table} (run_id, tag, ordered_at) "
              "SELECT NEW.run_id, value, NEW.ordered_at FROM json_each(NEW.tags) WHERE NEW.tags IS NOT NULL;")
    delete = f"DELETE FROM {tags_table} WHERE run_id = OLD.run_id;"
    return [
        f"CREATE TRIGGER IF NOT EXISTS run_journal_run_tags_insert AFTER INSERT ON {runs_table} "
        f"BEGIN {insert} END",
        f"CREATE TRIGGER IF NOT EXISTS run_journal_run_tags_update AFTER UPDATE ON {runs_table} "
        f"WHEN {changed} BEGIN {delete} {insert} END",
        f"CREATE TRIGGER IF NOT EXISTS run_journal_run_tags_delete AFTER DELETE ON {runs_table} "
        f"BEGIN {delete} END",
    ]


Migration = Callable[[Connection, str | None], None]
MIGRATIONS: Final[tuple[Migration, ...]] = (
    _create_v1, _add_first_put_at_v2, _add_run_starts_v3, _add_activity_and_run_order_v4,
    _add_reconcile_indexes_and_one_call_writes_v5, _add_bodies_v6, _add_search_v7,
)
"""Position + 1 is the schema version a migration brings the store to. Append only; never change
what one does to a store."""
SCHEMA_VERSION: Final = len(MIGRATIONS)


def migrate(connection: Connection, schema: str | None) -> None:
    """Bring the store to ``SCHEMA_VERSION`` inside the caller's (locked) write transaction.

    ``connection`` maps unqualified tables into ``schema`` (``schema_translate_map``) when one is
    given. A store written by another contract major, or by a newer schema than this library knows,
    is refused with ``IncompatibleStoreError`` naming both versions.
    """
    meta.create(connection, checkfirst=True)
    recorded = {str(key): str(value) for key, value in connection.execute(select(meta.c.key, meta.c.value))}
    version = check_compatible(recorded)
    for migration in MIGRATIONS[version:]:
        migration(connection, schema)
    if version < SCHEMA_VERSION or not recorded:
        versions = {
            "schema_version": str(SCHEMA_VERSION),
            "contract_major": str(CONTRACT_MAJOR),
            "contract_version": CONTRACT_VERSION,
        }
        connection.execute(meta.delete().where(meta.c.key.in_(versions)))
        connection.execute(meta.insert(), [{"key": key, "value": value} for key, value in versions.items()])


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
