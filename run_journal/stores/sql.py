"""``SqlRunEventStore``: what the SQLite and PostgreSQL stores share, and the URLs that pick one.

Both databases run the same SQL: every read and write is one synchronous unit of work
(``SqlWork``), written once against ``SqlSession`` (run a statement, many rows, notify followers)
with portable text and named ``:params``. A backend only says how it runs a unit: SQLite in the
thread that owns its ``sqlite3`` connection, inside ``BEGIN IMMEDIATE`` (``stores/sqlite.py``);
PostgreSQL through SQLAlchemy's ``run_sync`` on an asyncpg connection (``stores/postgres.py``).

How seq stays dense under concurrent writers (tasks, processes, hosts): a write transaction first
bumps the thread's row in ``run_journal_threads`` (an upsert that returns the new ``last_seq``) and
only then reads and inserts. On PostgreSQL the upsert holds that row's lock until commit, so writers
of one thread queue while writers of other threads do not (a batch takes its threads in sorted order,
so two writers never wait on each other crosswise); on SQLite ``BEGIN IMMEDIATE`` takes the database
write lock before anything is read. The counter holds the highest seq ever assigned and deletes
leave it alone, so a deleted range is never reused.
"""

from __future__ import annotations

import abc
import asyncio
import functools
import importlib
import importlib.util
import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar, Final, Protocol, TypeVar

from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from run_journal.bodies import Body
from run_journal.envelope import NewEvent, RunEvent, dumps, loads, utc_now
from run_journal.runs import TERMINAL_STATUSES, RunRow, stored_row
from run_journal.stores.base import (
    MESSAGE,
    RUN_START,
    EventQuery,
    RecentThreadQuery,
    RunEventStore,
    RunIdTakenError,
    RunQuery,
    SearchQuery,
    StartQuery,
    ThreadActivity,
    ThreadQuery,
    after_error,
)
from run_journal.stores.queries import stamp
from run_journal.stores.sql_schema import (
    bodies,
    events,
    qualified,
    run_starts,
    run_tags,
    runs,
    search_values,
    threads,
    user_threads,
)

T = TypeVar("T")
POSTGRES_EXTRA: Final = "pip install 'run-journal[postgres]'"
_CHUNK: Final = 500
"""Event ids looked up per statement (both databases cap the parameters of one statement)."""


class SqlSession(Protocol):
    """What a unit of work may do inside its backend's connection (and, for writes, transaction)."""

    def rows(self, sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """Run a statement; its rows as tuples."""

    def run(self, sql: str, params: Mapping[str, Any]) -> int:
        """Run a statement; the number of rows it changed."""

    def run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement once per row (``executemany``); a row holds the values of the
        statement's ``:params`` in the order they appear (see ``markers``)."""

    def notify(self, thread_id: str, last_seq: int) -> None:
        """Tell followers the thread now holds events up to ``last_seq`` (delivered on commit)."""


def _names(prefix: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """``:prefix_0, :prefix_1, ...`` for an IN list, and their parameters."""
    params = {f"{prefix}_{n}": value for n, value in enumerate(values)}
    return ", ".join(f":{name}" for name in params), params


def _row_columns(table_alias: str = "") -> str:
    return ", ".join(table_alias + name for name in RunEvent.COLUMNS)


INSERT_COLUMNS: Final = (
    "thread_id", "seq", "run_id", "event_type", "category", "content", "metadata", "task_id",
    "created_at", "event_id", "user_id",
)
RUN_COLUMNS: Final = ("run_id", "thread_id", "user_id", "status", "started_at", "updated_at", "row",
                      "first_put_at", "ordered_at", "tags", "total_tokens", "cost_usd", "has_error")
_KEPT_ON_UPDATE: Final = frozenset({"run_id", "thread_id", "first_put_at", "ordered_at"})
"""Run columns an update never sets from the new row (a run never moves to another thread; its
place in the order is its start, else its first put, as stored)."""


def insert_values(event: NewEvent, seq: int) -> tuple[Any, ...]:
    """The row of ``SqlWork.insert`` for ``event`` at ``seq`` (``INSERT_COLUMNS`` order)."""
    return (
        event.thread_id, seq, event.run_id, event.event_type, event.category, event.content_json,
        event.metadata_json, event.task_id, stamp(event.created_at), event.event_id, event.user_id,
    )


_MARKER: Final = re.compile(r"(?<![:\w]):(\w+)")


@functools.lru_cache(maxsize=64)
def markers(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with each ``:name`` replaced by ``?``, and the names in order (for a row of values
    in that order: positional binding costs ``sqlite3`` half of what named binding does)."""
    return _MARKER.sub("?", sql), tuple(_MARKER.findall(sql))


def run_values(row: RunRow) -> dict[str, Any]:
    """The runs table's columns for ``row``; ``first_put_at`` is now (kept only by an insert)."""
    data = row.to_dict()
    now = stamp(utc_now())
    return {
        "run_id": row.run_id, "thread_id": row.thread_id, "user_id": row.user_id,
        "status": data["status"], "updated_at": stamp(row.updated_at),
        "started_at": stamp(row.started_at) if row.started_at else None, "row": dumps(data),
        "first_put_at": now, "ordered_at": stamp(row.started_at) if row.started_at else now,
        **search_values(row),
    }


def moved_run_error(run_id: str, owner: str, thread_id: str) -> ValueError:
    return ValueError(f"run {run_id!r} belongs to thread {owner!r}, not {thread_id!r}")


def bodies_by_thread(bodies: Sequence[Body]) -> dict[str, list[Body]]:
    grouped: dict[str, list[Body]] = {}
    for body in bodies:
        grouped.setdefault(body.thread_id, []).append(body)
    return grouped


def by_thread(batch: Sequence[NewEvent]) -> dict[str, list[int]]:
    """Positions of each thread's events in ``batch``, in input order."""
    positions: dict[str, list[int]] = {}
    for index, event in enumerate(batch):
        positions.setdefault(event.thread_id, []).append(index)
    return positions


class SqlWork:
    """Every read and write of a SQL store as one synchronous unit of work over a ``SqlSession``.

    The statements name their tables in ``schema`` (PostgreSQL) or unqualified. Units that write
    expect to run inside one write transaction; read units need none.
    """

    def __init__(self, schema: str | None = None, *, lateral_joins: bool = False) -> None:
        self.lateral_joins = lateral_joins
        """Whether the database joins ``LATERAL`` (PostgreSQL): a join it must run as an index lookup
        per row whatever its statistics say (SQLite's planner does that unasked)."""
        self.events = qualified(events, schema)
        self.threads = qualified(threads, schema)
        self.runs = qualified(runs, schema)
        self.run_starts = qualified(run_starts, schema)
        self.run_tags = qualified(run_tags, schema)
        self.select = f"SELECT {_row_columns()} FROM {self.events}"
        # the claim of a run id: inserted, or the stored one returned (locked until commit)
        has_row = f"EXISTS (SELECT 1 FROM {self.runs} AS r WHERE r.run_id = :row_run_id)"
        self.claim_start = (
            f"INSERT INTO {self.run_starts} AS s (run_id, thread_id, event_id, has_row) "
            f"VALUES (:run_id, :thread_id, :event_id, {has_row}) "
            "ON CONFLICT (run_id) DO UPDATE SET run_id = excluded.run_id RETURNING thread_id, event_id"
        )
        self.reclaim_start = (f"UPDATE {self.run_starts} SET thread_id = :thread_id, event_id = :event_id, "
                              f"has_row = {has_row} WHERE run_id = :run_id")
        self.mark_row = f"UPDATE {self.run_starts} SET has_row = TRUE WHERE run_id = :run_id AND NOT has_row"
        self.event_stored = (f"SELECT 1 FROM {self.events} "
                             "WHERE thread_id = :thread_id AND event_id = :event_id")
        self.user_threads = qualified(user_threads, schema)
        # last_at (the created_at of the newest event) is set here when every event is known to be
        # new, else (NULL) by set_last once the lookups have said which are
        self.bump = (
            f"INSERT INTO {self.threads} AS c (thread_id, last_seq, last_at) "
            "VALUES (:thread_id, :count, :last_at) "
            "ON CONFLICT (thread_id) DO UPDATE SET last_seq = c.last_seq + excluded.last_seq, "
            "last_at = coalesce(excluded.last_at, c.last_at) RETURNING last_seq"
        )
        self.set_last = (f"UPDATE {self.threads} SET last_seq = :last_seq, "
                         "last_at = coalesce(:last_at, last_at) WHERE thread_id = :thread_id")
        self.touch_user = (
            f"INSERT INTO {self.user_threads} (user_id, thread_id, last_at) "
            "VALUES (:user_id, :thread_id, :last_at) "
            "ON CONFLICT (user_id, thread_id) DO UPDATE SET last_at = excluded.last_at"
        )
        newest = f"SELECT e.created_at FROM {self.events} AS e WHERE e.thread_id = :thread_id"
        self.reset_activity = (  # after a delete: the newest remaining event (NULL: none)
            f"UPDATE {self.threads} SET last_at = ({newest} ORDER BY e.seq DESC LIMIT 1) "
            "WHERE thread_id = :thread_id"
        )
        self.drop_users_gone = (
            f"DELETE FROM {self.user_threads} WHERE thread_id = :thread_id AND NOT EXISTS "
            f"({newest} AND e.user_id = {self.user_threads}.user_id)"
        )
        self.reset_users = (
            f"UPDATE {self.user_threads} SET last_at = ({newest} AND e.user_id = "
            f"{self.user_threads}.user_id ORDER BY e.seq DESC LIMIT 1) WHERE thread_id = :thread_id"
        )
        self.insert = (
            f"INSERT INTO {self.events} ({', '.join(INSERT_COLUMNS)}) "
            f"VALUES ({', '.join(':' + name for name in INSERT_COLUMNS)})"
        )
        updates = ", ".join(
            f'"{name}" = excluded."{name}"' for name in RUN_COLUMNS if name not in _KEPT_ON_UPDATE
        ) + ', "ordered_at" = coalesce(excluded."started_at", r."first_put_at")'
        finished = ", ".join(f"'{status}'" for status in sorted(TERMINAL_STATUSES))
        columns = ", ".join(f'"{name}"' for name in RUN_COLUMNS)
        self.upsert_run = (  # the guards (same thread, runs.may_replace) are the update's WHERE
            f"INSERT INTO {self.runs} AS r ({columns}) "
            f"VALUES ({', '.join(':' + name for name in RUN_COLUMNS)}) "
            f"ON CONFLICT (run_id) DO UPDATE SET {updates} "
            f"WHERE r.thread_id = excluded.thread_id AND "
            f"(r.status NOT IN ({finished}) OR r.status = excluded.status) "
            'RETURNING "row", thread_id'
        )
        self.stored_run = f'SELECT "row", thread_id FROM {self.runs} WHERE run_id = :run_id'
        self.bodies = qualified(bodies, schema)
        self.insert_body = (f"INSERT INTO {self.bodies} (thread_id, digest, data) "
                            "VALUES (:thread_id, :digest, :data) ON CONFLICT (thread_id, digest) DO NOTHING")

    # -- writes ----------------------------------------------------------------------------------
    def append(
        self, db: SqlSession, batch: Sequence[NewEvent], look_up: bool, bodies: Sequence[Body] = ()
    ) -> list[RunEvent]:
        """``put_batch``: each thread's events and bodies in one go, threads in sorted order."""
        results: list[RunEvent] = [None] * len(batch)  # type: ignore[list-item]  # every slot is filled below
        positions = by_thread(batch)
        held = bodies_by_thread(bodies)
        for thread_id in sorted(positions.keys() | held.keys()):
            if thread_id not in positions:
                self.put_bodies(db, held[thread_id])
                continue
            events = [batch[index] for index in positions[thread_id]]
            mine = held.get(thread_id, ())
            written = self.write_thread(db, thread_id, events, look_up=look_up, bodies=mine)
            for index, (event, _) in zip(positions[thread_id], written, strict=True):
                results[index] = event
        return results

    def put_if_absent(self, db: SqlSession, event: NewEvent, types: tuple[str, ...]) -> tuple[RunEvent, bool]:
        return self.write_thread(db, event.thread_id, [event], exclusive=types)[0]

    def write_thread(
        self, db: SqlSession, thread_id: str, batch: Sequence[NewEvent], *,
        look_up: bool = True, exclusive: tuple[str, ...] = (), bodies: Sequence[Body] = (),
    ) -> list[tuple[RunEvent, bool]]:
        """Write one thread's events, each unless its event_id is stored; per event, its stored
        record and whether this wrote it. With ``exclusive``, the last event is a singleton of its
        run among those types: not written when the run holds one (stored, or earlier in the batch),
        whose record it gets instead.

        The counter is bumped first, once: that takes the thread's write lock, so the lookups below
        and the insert are one step for every other writer. ``look_up=False`` skips the event_id
        lookup: a stored id then fails the insert (a unique violation) and the caller redoes the
        transaction with the lookup (see ``SqlRunEventStore._append``). The thread's ``bodies``
        are inserted right after the bump, under the thread's lock, so a prune that deletes the
        thread's bodies (``drop_bodies``, which takes that lock) never leaves these events without
        theirs.
        """
        first: dict[str, NewEvent] = {}
        for event in batch:
            first.setdefault(event.event_id, event)
        sure = not look_up and not exclusive  # every event is new; else the lookups below say which
        # without lookups only the singleton may stay unwritten: the bump takes the batch's newest
        # moment when an earlier event would stand in for it (set_last corrects it if it must)
        likely = not look_up and len(first) > 1
        newest = stamp(next(reversed(first.values())).created_at) if likely or sure else None
        last = int(db.rows(self.bump, {"thread_id": thread_id, "count": len(first), "last_at": newest})[0][0])
        self.put_bodies(db, bodies)
        found = self._stored_ids(db, thread_id, list(first)) if look_up else {}
        single = first[batch[-1].event_id] if exclusive else None
        held: NewEvent | None = None  # an earlier event of the batch the singleton yields to
        if single is not None and single.event_id not in found:
            if (row := self._first_of(db, single, exclusive)) is not None:
                found[single.event_id] = row
            else:
                held = next((event for event in first.values() if event is not single
                             and event.event_id not in found and event.run_id == single.run_id
                             and event.event_type in exclusive), None)
        fresh = [event for event in first.values()
                 if event.event_id not in found and (held is None or event is not single)]
        if not sure and not (likely and len(fresh) == len(first)):
            last -= len(first) - len(fresh)  # give back the seqs of what is not written
            db.run(self.set_last, {"thread_id": thread_id, "last_seq": last,
                                   "last_at": stamp(fresh[-1].created_at) if fresh else None})
        for event in fresh:
            if event.event_type == RUN_START:
                self._claim_run_id(db, event)
        start = last - len(fresh) + 1
        seqs = {event.event_id: start + n for n, event in enumerate(fresh)}
        if fresh:
            db.run_many(self.insert, [insert_values(event, seqs[event.event_id]) for event in fresh])
            users = {event.user_id: stamp(event.created_at) for event in fresh if event.user_id is not None}
            if users:
                db.run_many(self.touch_user, [(user, thread_id, moment) for user, moment in users.items()])
            db.notify(thread_id, last)
        results: list[tuple[RunEvent, bool]] = []
        returned: set[str] = set()
        for event in batch:
            event_id = event.event_id
            if event_id in found:
                results.append((RunEvent.from_row(found[event_id]), False))
            elif held is not None and single is not None and event_id == single.event_id:
                results.append((RunEvent.stored(held, seqs[held.event_id], copy=True), False))
            elif event_id in returned:  # repeated in the batch: its own copy of the first one
                results.append((RunEvent.stored(first[event_id], seqs[event_id], copy=True), False))
            else:
                returned.add(event_id)
                results.append((RunEvent.stored(event, seqs[event_id]), True))
        return results

    def _claim_run_id(self, db: SqlSession, event: NewEvent) -> None:
        """Take the run id for ``event`` (a new run.start), or raise ``RunIdTakenError`` (the
        transaction is then rolled back whole). A claim whose run.start is no longer stored (a
        deleted run) is taken over."""
        params = {"run_id": event.run_id, "thread_id": event.thread_id, "event_id": event.event_id,
                  "row_run_id": event.run_id}
        owner, owner_event = db.rows(self.claim_start, params)[0]
        if (owner, owner_event) == (event.thread_id, event.event_id):
            return
        if db.rows(self.event_stored, {"thread_id": owner, "event_id": owner_event}):
            raise RunIdTakenError(event.run_id, str(owner), str(owner_event))
        db.run(self.reclaim_start, params)

    def _stored_ids(self, db: SqlSession, thread_id: str, event_ids: list[str]) -> dict[str, tuple[Any, ...]]:
        found: dict[str, tuple[Any, ...]] = {}
        for start in range(0, len(event_ids), _CHUNK):
            marks, params = _names("id", event_ids[start : start + _CHUNK])
            sql = f"{self.select} WHERE thread_id = :thread_id AND event_id IN ({marks})"
            found.update((row[8], row) for row in db.rows(sql, {"thread_id": thread_id, **params}))
        return found

    def _first_of(self, db: SqlSession, event: NewEvent, types: tuple[str, ...]) -> tuple[Any, ...] | None:
        """The run's first event (lowest seq) of any of ``types``."""
        marks, params = _names("type", types)
        sql = (f"{self.select} WHERE thread_id = :thread_id AND run_id = :run_id "
               f"AND event_type IN ({marks}) ORDER BY seq LIMIT 1")
        rows = db.rows(sql, {"thread_id": event.thread_id, "run_id": event.run_id, **params})
        return rows[0] if rows else None

    def put_run(self, db: SqlSession, values: Mapping[str, Any]) -> tuple[str, str]:
        """Upsert a run row under its guards; the stored row's JSON and thread (the old ones when a
        guard refused: the caller raises when that thread is not the row's)."""
        found = db.rows(self.upsert_run, values) or db.rows(self.stored_run, {"run_id": values["run_id"]})
        row_json, owner = found[0]
        db.run(self.mark_row, values)
        return str(row_json), str(owner)

    def close_run(
        self, db: SqlSession, batch: Sequence[NewEvent], terminal: NewEvent, types: tuple[str, ...],
        values: Mapping[str, Any], look_up: bool, bodies: Sequence[Body] = (),
    ) -> tuple[str, str] | None:
        """``put_run_close`` in one transaction: the bodies, each thread's events, the terminal event
        after its thread's (exclusive among ``types``) in the same step, then the row. None, having
        written only the bodies and events, when the run already had another terminal event."""
        positions = by_thread(batch)
        positions.setdefault(terminal.thread_id, [])
        held = bodies_by_thread(bodies)
        stored: RunEvent | None = None
        for thread_id in sorted(positions.keys() | held.keys()):  # one counter bump per thread
            if thread_id not in positions:
                self.put_bodies(db, held[thread_id])
                continue
            events = [batch[index] for index in positions[thread_id]]
            mine = held.get(thread_id, ())
            if thread_id == terminal.thread_id:
                ended = self.write_thread(db, thread_id, [*events, terminal], look_up=look_up,
                                          exclusive=types, bodies=mine)
                stored = ended[-1][0]
            else:
                self.write_thread(db, thread_id, events, look_up=look_up, bodies=mine)
        if stored is None or stored.event_id != terminal.event_id:
            return None
        return self.put_run(db, values)

    def put_bodies(self, db: SqlSession, bodies: Sequence[Body]) -> None:
        """Insert the bodies a thread does not hold yet, in (thread, digest) order. Every writer
        takes its locks thread by thread in sorted order (a thread's counter, then its bodies by
        digest), so two writers never wait on each other crosswise (PostgreSQL)."""
        if bodies:
            ordered = sorted(bodies, key=lambda body: (body.thread_id, body.digest))
            db.run_many(self.insert_body, [(body.thread_id, body.digest, body.data) for body in ordered])

    def get_bodies(self, db: SqlSession, thread_id: str, digests: Sequence[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for start in range(0, len(digests), _CHUNK):
            marks, params = _names("digest", digests[start : start + _CHUNK])
            sql = (f"SELECT digest, data FROM {self.bodies} "
                   f"WHERE thread_id = :thread_id AND digest IN ({marks})")
            rows = db.rows(sql, {"thread_id": thread_id, **params})
            found.update((str(digest), bytes(data)) for digest, data in rows)
        return found

    def list_bodies(self, db: SqlSession, thread_id: str, after: str | None, limit: int) -> list[Body]:
        sql = f"SELECT digest, data FROM {self.bodies} WHERE thread_id = :thread_id"
        if after is not None:
            sql += " AND digest > :after"
        sql += " ORDER BY digest LIMIT :limit"
        rows = db.rows(sql, {"thread_id": thread_id, "after": after, "limit": limit})
        return [Body(thread_id, str(digest), bytes(data)) for digest, data in rows]

    # -- reads -----------------------------------------------------------------------------------
    def select_events(self, db: SqlSession, query: EventQuery) -> list[RunEvent]:
        """One indexed range: the newest page is ``ORDER BY seq DESC LIMIT n``, reversed."""
        where = ["thread_id = :thread_id"]
        params: dict[str, Any] = {"thread_id": query.thread_id, "limit": query.limit}
        for column in ("run_id", "task_id", "user_id"):
            if (value := getattr(query, column)) is not None:
                where.append(f"{column} = :{column}")
                params[column] = value
        if query.messages_only:
            where.append("category = :category")
            params["category"] = MESSAGE
        if query.event_types is not None:
            marks, names = _names("type", query.event_types)
            where.append(f"event_type IN ({marks})")
            params.update(names)
        if query.after_seq is not None:
            where.append("seq > :after_seq")
            params["after_seq"] = query.after_seq
        if query.before_seq is not None:
            where.append("seq < :before_seq")
            params["before_seq"] = query.before_seq
        order = "DESC" if query.newest_first else "ASC"
        sql = f"{self.select} WHERE {' AND '.join(where)} ORDER BY seq {order} LIMIT :limit"
        page = RunEvent.from_rows(db.rows(sql, params))
        if query.newest_first:
            page.reverse()
        return page

    def count_messages(self, db: SqlSession, thread_id: str, user_id: str | None) -> int:
        sql = f"SELECT count(*) FROM {self.events} WHERE thread_id = :thread_id AND category = :category"
        if user_id is not None:
            sql += " AND user_id = :user_id"
        params = {"thread_id": thread_id, "category": MESSAGE, "user_id": user_id}
        return int(db.rows(sql, params)[0][0])

    def select_threads(self, db: SqlSession, query: ThreadQuery) -> list[str]:
        """One index range: the thread counters that hold events (``last_at`` set) or, for a user,
        that user's rows of ``run_journal_user_threads``."""
        if query.user_id is None:
            sql = f"SELECT thread_id FROM {self.threads} WHERE last_at IS NOT NULL"
        else:
            sql = f"SELECT thread_id FROM {self.user_threads} WHERE user_id = :user_id"
        if query.after is not None:
            sql += " AND thread_id > :after"
        sql += " ORDER BY thread_id LIMIT :limit"
        params = {"user_id": query.user_id, "after": query.after, "limit": query.limit}
        return [str(row[0]) for row in db.rows(sql, params)]

    def select_recent_threads(self, db: SqlSession, query: RecentThreadQuery) -> list[ThreadActivity]:
        """One index range, read backwards: (``last_at``, ``thread_id``) below the cursor."""
        if query.user_id is None:
            sql = f"SELECT thread_id, last_at FROM {self.threads} WHERE last_at IS NOT NULL"
        else:
            sql = f"SELECT thread_id, last_at FROM {self.user_threads} WHERE user_id = :user_id"
        params: dict[str, Any] = {"user_id": query.user_id, "limit": query.limit}
        if query.before is not None:
            sql += " AND (last_at, thread_id) < (:before_at, :before_id)"
            params["before_at"], params["before_id"] = query.before
        sql += " ORDER BY last_at DESC, thread_id DESC LIMIT :limit"
        return [ThreadActivity(str(thread_id), datetime.fromisoformat(str(moment)))
                for thread_id, moment in db.rows(sql, params)]

    def last_seq(self, db: SqlSession, thread_id: str) -> int:
        found = db.rows(f"SELECT last_seq FROM {self.threads} WHERE thread_id = :thread_id",
                        {"thread_id": thread_id})
        return int(found[0][0]) if found else 0

    def get_run(self, db: SqlSession, run_id: str) -> RunRow | None:
        found = db.rows(self.stored_run, {"run_id": run_id})
        return stored_row(loads(found[0][0])) if found else None

    def select_starts_without_row(self, db: SqlSession, query: StartQuery) -> list[RunEvent]:
        """The rowless claims of the partial index (``has_row``), each joined to its run.start by
        the events' (thread, event id) key. ``has_row`` is set by ``put_run`` and by the claim; a
        row and a claim committed at once leave it unset, which the check of the runs table covers."""
        match = (f"e.thread_id = s.thread_id AND e.event_id = s.event_id "
                 f"AND NOT EXISTS (SELECT 1 FROM {self.runs} AS r WHERE r.run_id = s.run_id)")
        if self.lateral_joins:
            joined = (f"CROSS JOIN LATERAL (SELECT {_row_columns()} FROM {self.events} AS e WHERE {match} "
                      "LIMIT 1) AS e")
        else:
            joined = f"JOIN {self.events} AS e ON {match}"
        sql = f"SELECT {_row_columns('e.')} FROM {self.run_starts} AS s {joined} WHERE NOT s.has_row"
        if query.after is not None:
            sql += " AND s.run_id > :after"
        sql += " ORDER BY s.run_id LIMIT :limit"
        return RunEvent.from_rows(db.rows(sql, {"after": query.after, "limit": query.limit}))

    def _run_filters(self, query: RunQuery) -> tuple[list[str], dict[str, Any]]:
        where, params = [], {}
        for column in ("thread_id", "user_id"):
            if (value := getattr(query, column)) is not None:
                where.append(f"{column} = :{column}")
                params[column] = value
        if query.statuses is not None:
            marks, names = _names("status", query.statuses)
            where.append(f"status IN ({marks})" if query.statuses else "1 = 0")
            params.update(names)
        return where, params

    def select_runs(self, db: SqlSession, query: RunQuery) -> list[RunRow]:
        """One index range of (``thread_id``,) ``ordered_at``, ``run_id``; the cursor's place is
        read first, in the same unit."""
        where, params = self._run_filters(query)
        if query.after is not None:
            found = db.rows(f"SELECT ordered_at, thread_id FROM {self.runs} WHERE run_id = :run_id",
                            {"run_id": query.after})
            if not found or query.thread_id not in (None, found[0][1]):
                raise after_error(query.after)
            where.append(f"(ordered_at, run_id) {'<' if query.newest_first else '>'} (:after_at, :after_id)")
            params["after_at"], params["after_id"] = found[0][0], query.after
        sql = f'SELECT "row" FROM {self.runs}'
        if where:
            sql += f" WHERE {' AND '.join(where)}"
        order = "DESC" if query.newest_first else "ASC"
        sql += f" ORDER BY ordered_at {order}, run_id {order}"
        if query.limit is not None:
            sql += " LIMIT :limit"
            params["limit"] = query.limit
        return [stored_row(loads(row[0])) for row in db.rows(sql, params)]

    def search_runs(self, db: SqlSession, query: SearchQuery) -> list[tuple[str, RunRow]]:
        sql, params = self.search_sql(query)
        return [(str(moment), stored_row(loads(row))) for moment, row in db.rows(sql, params)]

    def search_sql(self, query: SearchQuery) -> tuple[str, dict[str, Any]]:
        """``search_runs``' statement and its parameters. One index range read backwards, filtered:
        with a model, tool or caller, the range of its first tag in ``run_journal_run_tags`` (tag,
        ordered_at, run_id) joined to the rows, the other tags checked by their key; otherwise the
        runs table in list order, by the index the planner picks for the equalities (thread, user,
        status, errors)."""
        params: dict[str, Any] = {"limit": query.limit}
        where: list[str] = []
        tags = query.tags
        if tags:
            source = f"{self.run_tags} AS t JOIN {self.runs} AS r ON r.run_id = t.run_id"
            place, key = "t.ordered_at", "t.run_id"
            where.append("t.tag = :tag_0")
            params["tag_0"] = tags[0]
            for n, tag in enumerate(tags[1:], 1):
                where.append(f"EXISTS (SELECT 1 FROM {self.run_tags} AS t{n} "
                             f"WHERE t{n}.run_id = r.run_id AND t{n}.tag = :tag_{n})")
                params[f"tag_{n}"] = tag
        else:
            source, place, key = f"{self.runs} AS r", "r.ordered_at", "r.run_id"
        if query.before is not None:
            where.append(f"({place}, {key}) < (:before_at, :before_id)")
            params["before_at"], params["before_id"] = query.before
        if query.since is not None or query.until is not None:
            where.append("r.started_at IS NOT NULL")  # then ordered_at is started_at
        if query.since is not None:
            where.append(f"{place} >= :since")
            params["since"] = query.since
        if query.until is not None:
            where.append(f"{place} < :until")
            params["until"] = query.until
        for column in ("thread_id", "user_id"):
            if (value := getattr(query, column)) is not None:
                where.append(f"r.{column} = :{column}")
                params[column] = value
        if query.statuses is not None:
            marks, names = _names("status", query.statuses)
            where.append(f"r.status IN ({marks})" if len(names) > 1 else f"r.status = {marks}")
            params.update(names)
        if query.min_cost_usd is not None:
            where.append("r.cost_usd >= :min_cost")
            params["min_cost"] = query.min_cost_usd
        if query.min_tokens is not None:
            where.append("r.total_tokens >= :min_tokens")
            params["min_tokens"] = query.min_tokens
        if query.has_error is not None:
            where.append("r.has_error" if query.has_error else "NOT r.has_error")
        sql = f'SELECT {place}, r."row" FROM {source}'
        if where:
            sql += f" WHERE {' AND '.join(where)}"
        sql += f" ORDER BY {place} DESC, {key} DESC LIMIT :limit"
        return sql, params

    def count_runs(self, db: SqlSession, query: RunQuery) -> int:
        where, params = self._run_filters(query)
        sql = f"SELECT count(*) FROM {self.runs}" + (f" WHERE {' AND '.join(where)}" if where else "")
        return int(db.rows(sql, params)[0][0])

    # -- deletes ---------------------------------------------------------------------------------
    def delete(self, db: SqlSession, thread_id: str, run_id: str | None = None) -> int:
        """A thread's (or one run's) events and run rows; the number of events deleted."""
        where = "thread_id = :thread_id" + (" AND run_id = :run_id" if run_id is not None else "")
        params = {"thread_id": thread_id, "run_id": run_id}
        deleted = db.run(f"DELETE FROM {self.events} WHERE {where}", params)
        db.run(f"DELETE FROM {self.runs} WHERE {where}", params)
        db.run(f"DELETE FROM {self.run_starts} WHERE {where}", params)  # the run ids are free again
        if run_id is None:  # a run's deletion keeps the bodies: the thread's other runs share them
            db.run(f"DELETE FROM {self.bodies} WHERE thread_id = :thread_id", params)
        if deleted:
            self._reset_activity(db, thread_id, whole=run_id is None)
        return deleted

    def drop_bodies(self, db: SqlSession, thread_id: str, through_seq: int) -> bool:
        """``prune``'s last step: the thread's bodies, if its counter still says ``through_seq``
        (read and locked by a no-op update: writers of the thread wait, on PostgreSQL as on
        SQLite). Whether they were deleted."""
        found = db.rows(f"UPDATE {self.threads} SET last_seq = last_seq WHERE thread_id = :thread_id "
                        "RETURNING last_seq", {"thread_id": thread_id})
        if (int(found[0][0]) if found else 0) != through_seq:
            return False
        db.run(f"DELETE FROM {self.bodies} WHERE thread_id = :thread_id", {"thread_id": thread_id})
        return True

    def _reset_activity(self, db: SqlSession, thread_id: str, *, whole: bool = False) -> None:
        """After a delete: the thread's (and its users') newest remaining event, or none."""
        params = {"thread_id": thread_id}
        if whole:
            db.run(f"UPDATE {self.threads} SET last_at = NULL WHERE thread_id = :thread_id", params)
            db.run(f"DELETE FROM {self.user_threads} WHERE thread_id = :thread_id", params)
            return
        db.run(self.reset_activity, params)
        db.run(self.drop_users_gone, params)
        db.run(self.reset_users, params)

    def delete_through(
        self, db: SqlSession, thread_id: str, run_id: str, through_seq: int, limit: int
    ) -> int:
        """``prune``'s step: at most ``limit`` of a run's events with seq <= ``through_seq``, the
        oldest first; with the last of them, the run's row and its run id claim (as ``delete``).
        The number of events deleted."""
        params = {"thread_id": thread_id, "run_id": run_id, "through": through_seq, "limit": limit}
        deleted = db.run(
            f"DELETE FROM {self.events} WHERE id IN (SELECT id FROM {self.events} WHERE thread_id = "
            ":thread_id AND run_id = :run_id AND seq <= :through ORDER BY seq LIMIT :limit)", params)
        if deleted < limit:
            for table in (self.runs, self.run_starts):
                db.run(f"DELETE FROM {table} WHERE thread_id = :thread_id AND run_id = :run_id", params)
        if deleted:
            self._reset_activity(db, thread_id)
        return deleted


class SqlRunEventStore(RunEventStore):
    """The run event store on a SQL database: SQLite or PostgreSQL, one schema, one set of statements.

    ``SqlRunEventStore.from_url(url)`` (and ``open_store``) build the backend the URL names:
    ``SqliteRunEventStore`` (``stores/sqlite.py``) or ``PostgresRunEventStore`` (``stores/postgres.py``),
    both subclasses of this class. ``SqlRunEventStore(engine, **options)`` does the same for a
    SQLAlchemy ``AsyncEngine`` you own (the store never disposes it).
    """

    dialect: ClassVar[str]
    """``"sqlite"`` or ``"postgresql"``."""
    duplicate: ClassVar[tuple[type[Exception], ...]]
    """What the driver raises for a unique violation (an event_id stored already)."""
    prune_step: ClassVar[int]
    """Events ``prune`` deletes per transaction (``_delete_run_through``)."""
    pause_between_prune_steps: ClassVar[bool]
    """Whether ``prune`` rests after each step as long as the step took, so writers of other
    processes, whose busy handler polls for the database lock, find it free half of the time."""
    schema_name: str | None = None
    """The PostgreSQL schema that holds the tables (None: the connection's default; always on SQLite)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> SqlRunEventStore:  # noqa: PYI034 - returns a backend subclass
        if cls is SqlRunEventStore:  # SqlRunEventStore(engine, ...): the engine's backend
            engine = args[0] if args else kwargs.get("engine")
            if not isinstance(engine, AsyncEngine):
                raise TypeError(f"SqlRunEventStore takes a SQLAlchemy AsyncEngine, got {engine!r}")
            cls = backend_class(engine.dialect.name)  # noqa: PLW0642 - the engine's backend class
        return super().__new__(cls)

    lateral_joins: ClassVar[bool] = False
    """See ``SqlWork.lateral_joins``."""

    def __init__(self, schema: str | None = None) -> None:
        self._work = SqlWork(schema, lateral_joins=self.lateral_joins)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SqlRunEventStore:
        """``sqlite:///rel.db``, ``sqlite:////abs.db``, ``postgresql://user@host/db?schema=name``;
        options go to the backend's ``from_url``."""
        driver_url, _ = engine_url(url)
        return backend_class(driver_url.get_backend_name()).from_url(url, **options)

    # -- how a backend runs a unit of work -------------------------------------------------------
    @abc.abstractmethod
    async def _write(self, unit: Callable[..., T], *args: Any) -> T:
        """``unit(session, *args)`` in one write transaction (committed when it returns)."""

    @abc.abstractmethod
    async def _read(self, unit: Callable[..., T], *args: Any) -> T:
        """``unit(session, *args)`` on a reading connection."""

    # -- the contract ----------------------------------------------------------------------------
    async def _append(self, batch: Sequence[NewEvent], bodies: Sequence[Body] = ()) -> list[RunEvent]:
        """The common write (no event_id seen before) does not look ids up: a lookup inside the
        locked transaction cut PostgreSQL's throughput with 8 writers on one thread from ~9,000 to
        ~3,500 events/s (``bench/bench_sql.py``). A stored id fails the insert, which rolls the
        transaction back whole; it is then redone with the lookup. The bodies are inserted first,
        in the same transaction."""
        try:
            return await self._write(self._work.append, batch, False, bodies)
        except self.duplicate:
            return await self._write(self._work.append, batch, True, bodies)

    async def _put_if_absent(self, event: NewEvent, types: tuple[str, ...]) -> tuple[RunEvent, bool]:
        return await self._write(self._work.put_if_absent, event, types)

    async def _put_run(self, row: RunRow) -> RunRow:
        row_json, owner = await self._write(self._work.put_run, run_values(row))
        if owner != row.thread_id:
            raise moved_run_error(row.run_id, owner, row.thread_id)
        return stored_row(loads(row_json))

    async def _put_run_close(
        self, batch: Sequence[NewEvent], terminal: NewEvent, types: tuple[str, ...], row: RunRow,
        bodies: Sequence[Body] = (),
    ) -> bool:
        """The run's bodies, last events, terminal event and row in one transaction."""
        values = run_values(row)
        try:  # as in _append: the lookup only when an event_id is stored already
            stored = await self._write(self._work.close_run, batch, terminal, types, values, False, bodies)
        except self.duplicate:
            stored = await self._write(self._work.close_run, batch, terminal, types, values, True, bodies)
        if stored is None:
            return False
        if stored[1] != row.thread_id:  # the events are committed; the row was refused
            raise moved_run_error(row.run_id, stored[1], row.thread_id)
        return True

    async def _put_bodies(self, bodies: Sequence[Body]) -> None:
        await self._write(self._work.put_bodies, bodies)

    async def _get_bodies(self, thread_id: str, digests: tuple[str, ...]) -> dict[str, bytes]:
        return await self._read(self._work.get_bodies, thread_id, digests)

    async def _drop_bodies(self, thread_id: str, through_seq: int) -> bool:
        return await self._write(self._work.drop_bodies, thread_id, through_seq)

    async def _list_bodies(self, thread_id: str, after: str | None, limit: int) -> list[Body]:
        return await self._read(self._work.list_bodies, thread_id, after, limit)

    async def _select_events(self, query: EventQuery) -> list[RunEvent]:
        return await self._read(self._work.select_events, query)

    async def _count_messages(self, thread_id: str, user_id: str | None) -> int:
        return await self._read(self._work.count_messages, thread_id, user_id)

    async def _select_threads(self, query: ThreadQuery) -> list[str]:
        return await self._read(self._work.select_threads, query)

    async def _last_seq(self, thread_id: str) -> int:
        return await self._read(self._work.last_seq, thread_id)

    async def _get_run(self, run_id: str) -> RunRow | None:
        return await self._read(self._work.get_run, run_id)

    async def _select_runs(self, query: RunQuery) -> list[RunRow]:
        return await self._read(self._work.select_runs, query)

    async def _count_runs(self, query: RunQuery) -> int:
        return await self._read(self._work.count_runs, query)

    async def _search_runs(self, query: SearchQuery) -> list[tuple[str, RunRow]]:
        return await self._read(self._work.search_runs, query)

    async def _select_recent_threads(self, query: RecentThreadQuery) -> list[ThreadActivity]:
        return await self._read(self._work.select_recent_threads, query)

    async def _select_starts_without_row(self, query: StartQuery) -> list[RunEvent]:
        return await self._read(self._work.select_starts_without_row, query)

    async def _delete_thread(self, thread_id: str) -> int:
        return await self._write(self._work.delete, thread_id)

    async def _delete_run(self, thread_id: str, run_id: str) -> int:
        return await self._write(self._work.delete, thread_id, run_id)

    async def _delete_run_through(self, thread_id: str, run_id: str, through_seq: int) -> int:
        """``prune``'s delete of a run, ``prune_step`` events per transaction: one DELETE of a
        300,000-event run held SQLite's write lock, and so every other writer, for 8 s
        (``bench/bench_prune.py --shape big-runs``)."""
        limit = self.prune_step
        deleted = 0
        while True:
            began = time.perf_counter()
            step = await self._write(self._work.delete_through, thread_id, run_id, through_seq, limit)
            deleted += step
            if self.pause_between_prune_steps:
                await asyncio.sleep(time.perf_counter() - began)
            if step < limit:
                return deleted


# -- URLs --------------------------------------------------------------------------------------------
def engine_url(url: str | URL) -> tuple[URL, str | None]:
    """Map a store URL to the async driver URL and the PostgreSQL schema its ``?schema=`` names.

    ``sqlite:///rel.db`` / ``sqlite:////abs.db`` -> ``sqlite+aiosqlite``; ``postgresql://`` and
    ``postgres://`` -> ``postgresql+asyncpg``. ``schema`` is removed from the query, so the
    driver never sees it.
    """
    parsed = make_url(url)
    shown = parsed.render_as_string(hide_password=True)
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "sqlite":
        if driver not in ("", "aiosqlite"):
            raise ValueError(f"{shown!r}: SQLite stores use the aiosqlite driver, not {driver!r}")
        if not parsed.database or parsed.database == ":memory:":
            raise ValueError(
                f"{shown!r}: a SQLite store needs a file (sqlite:///journal.db); use memory:// "
                "for an in-process store"
            )
        if "schema" in parsed.query:
            raise ValueError(f"{shown!r}: ?schema= is for PostgreSQL URLs only")
        return parsed.set(drivername="sqlite+aiosqlite"), None
    if backend in ("postgresql", "postgres"):
        if driver not in ("", "asyncpg"):
            raise ValueError(f"{shown!r}: PostgreSQL stores use the asyncpg driver, "
                             f"not {driver!r}")
        if importlib.util.find_spec("asyncpg") is None:
            raise ImportError(f"PostgreSQL stores need the asyncpg driver: {POSTGRES_EXTRA}")
        schema = parsed.query.get("schema")
        if isinstance(schema, tuple):
            raise ValueError(f"{shown!r}: ?schema= given more than once")
        if schema is not None:
            check_schema_name(schema)
        return parsed.difference_update_query(["schema"]).set(drivername="postgresql+asyncpg"), schema
    raise ValueError(f"{shown!r} is not a sqlite:// or postgresql:// URL")


def check_schema_name(schema: str) -> str:
    """A PostgreSQL schema name is an identifier this library may quote into SQL text."""
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(
            f"schema {schema!r} is invalid: 1-63 letters, digits or '_', not starting with a digit"
        )
    return schema


_SCHEMA_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_BACKENDS: Final = {
    "sqlite": ("run_journal.stores.sqlite", "SqliteRunEventStore"),
    "postgresql": ("run_journal.stores.postgres", "PostgresRunEventStore"),
}


def backend_class(dialect: str) -> type[SqlRunEventStore]:
    """The store class of a SQLAlchemy dialect name (imported on first use)."""
    if dialect not in _BACKENDS:
        raise ValueError(f"SqlRunEventStore supports sqlite and postgresql, not {dialect!r}")
    module, name = _BACKENDS[dialect]
    backend: type[SqlRunEventStore] = getattr(importlib.import_module(module), name)
    return backend

