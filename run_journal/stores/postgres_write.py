"""PostgreSQL's write of one thread in one call: ``run_journal_write_v2``, a PL/pgSQL function.

A write of one thread (a ``put_batch`` of one thread, or a run's end: its last events, its terminal
event and its row) is one statement sent in one round trip, outside an explicit transaction, so the
server runs it as one transaction: no BEGIN, no COMMIT, no statement waiting on the client while the
thread's counter row is locked. The function does what ``sql.SqlWork`` does for the common case,
in the same order:

1. bump the thread's counter (``run_journal_threads``): that takes the thread's lock, until commit;
   then insert the bodies the thread does not hold yet (``run_journal_bodies``, by digest);
2. take the run ids of new ``run.start`` events (``run_journal_run_starts``);
3. insert the events; with ``p_exclusive``, the last one only if its run holds none of those types
   (its seq is given back otherwise): a run's one terminal event;
4. set the thread's newest event (``last_at``) and each user's (``run_journal_user_threads``);
5. upsert the run row under its guards (same thread; a finished run is never reopened);
6. ``pg_notify`` once, and only if a follower of the thread is registered (``run_journal_followers``).

Anything uncommon leaves the whole call undone and the caller takes the general path
(``SqlWork`` in a transaction): an event id stored already (a unique violation: a retry), a run id
held by another ``run.start`` (``RJ001``: the general path refuses it or takes a stale claim over).

Version 2 (schema version 6) adds the bodies (1.); version 1, the same write without them, stays in
the database for processes of the previous release.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from run_journal.bodies import Body
from run_journal.envelope import NewEvent
from run_journal.runs import TERMINAL_STATUSES
from run_journal.stores.queries import stamp

VERSION: Final = 3
"""The version of the function this library calls (3: the run row's search columns)."""
FALLBACK_STATE: Final = "RJ001"
"""The SQLSTATE the function raises to send the caller to the general path."""
FINISHED: Final = tuple(sorted(TERMINAL_STATUSES))


def function_name(schema: str | None, version: int = VERSION) -> str:
    name = f"run_journal_write_v{version}"
    return f'"{schema}".{name}' if schema else name


def create_function(schema: str | None, version: int) -> str:
    """``CREATE OR REPLACE FUNCTION`` of the write's ``version`` (1, 2 or 3: a migration creates the one
    of its schema version, always the same text), naming the tables of ``schema``. Version 2 writes
    bodies, version 3 also the run row's search columns (schema version 7)."""
    def table(name: str) -> str:
        return f'"{schema}".{name}' if schema else name

    events, threads = table("run_journal_events"), table("run_journal_threads")
    runs, starts = table("run_journal_runs"), table("run_journal_run_starts")
    users, followers = table("run_journal_user_threads"), table("run_journal_followers")
    body_parameters, write_bodies = "", ""
    search_columns, search_values, search_updates = "", "", ""
    if version >= 3:
        search_columns = ", tags, total_tokens, cost_usd, has_error"
        search_values = ", p_row[10], p_row[11]::bigint, p_row[12]::double precision, p_row[13]::boolean"
        search_updates = (", tags = excluded.tags, total_tokens = excluded.total_tokens, "
                          "cost_usd = excluded.cost_usd, has_error = excluded.has_error")
    if version >= 2:
        body_parameters = ", p_body_digest text[], p_body_data bytea[]"
        write_bodies = f"""
    IF cardinality(p_body_digest) > 0 THEN
        INSERT INTO {table("run_journal_bodies")} (thread_id, digest, data)
        SELECT p_thread, b.digest, b.data FROM unnest(p_body_digest, p_body_data) AS b(digest, data)
        ORDER BY b.digest
        ON CONFLICT (thread_id, digest) DO NOTHING;
    END IF;
"""
    return f"""
CREATE OR REPLACE FUNCTION {function_name(schema, version)}(
    p_thread text, p_event_id text[], p_run_id text[], p_event_type text[], p_category text[],
    p_content text[], p_metadata text[], p_task_id text[], p_created_at text[], p_user_id text[],
    p_exclusive text[], p_row text[], p_finished text[], p_channel text{body_parameters}
) RETURNS TABLE (last_seq bigint, closed boolean, row_json text, row_thread text)
LANGUAGE plpgsql AS $write$
DECLARE
    v_count int := cardinality(p_event_id);
    v_kept int := cardinality(p_event_id);
    v_last bigint;
    v_closed boolean := true;
    v_first text;
    v_owner text;
    v_owner_event text;
    v_row_json text;
    v_row_thread text;
BEGIN
    INSERT INTO {threads} AS c (thread_id, last_seq) VALUES (p_thread, v_count)
    ON CONFLICT (thread_id) DO UPDATE SET last_seq = c.last_seq + excluded.last_seq
    RETURNING c.last_seq INTO v_last;
{write_bodies}
    FOR i IN 1 .. v_count LOOP
        IF p_event_type[i] = 'run.start' THEN
            INSERT INTO {starts} (run_id, thread_id, event_id, has_row)
            VALUES (p_run_id[i], p_thread, p_event_id[i],
                    EXISTS (SELECT 1 FROM {runs} AS r WHERE r.run_id = p_run_id[i]))
            ON CONFLICT (run_id) DO NOTHING;
            IF NOT FOUND THEN
                SELECT s.thread_id, s.event_id INTO v_owner, v_owner_event
                FROM {starts} AS s WHERE s.run_id = p_run_id[i];
                IF v_owner IS DISTINCT FROM p_thread OR v_owner_event IS DISTINCT FROM p_event_id[i] THEN
                    RAISE EXCEPTION 'run id % is claimed', p_run_id[i] USING ERRCODE = '{FALLBACK_STATE}';
                END IF;
            END IF;
        END IF;
    END LOOP;

    IF p_exclusive IS NOT NULL THEN
        v_kept := v_count - 1;
    END IF;
    INSERT INTO {events} (thread_id, seq, run_id, event_type, category, content, metadata, task_id,
                          created_at, event_id, user_id)
    SELECT p_thread, v_last - v_count + i, p_run_id[i], p_event_type[i], p_category[i], p_content[i],
           p_metadata[i], p_task_id[i], p_created_at[i], p_event_id[i], p_user_id[i]
    FROM generate_series(1, v_kept) AS i;
    IF p_exclusive IS NOT NULL THEN
        SELECT e.event_id INTO v_first FROM {events} AS e
        WHERE e.thread_id = p_thread AND e.run_id = p_run_id[v_count] AND e.event_type = ANY (p_exclusive)
        ORDER BY e.seq LIMIT 1;
        IF v_first IS NULL THEN
            INSERT INTO {events} (thread_id, seq, run_id, event_type, category, content, metadata, task_id,
                                  created_at, event_id, user_id)
            VALUES (p_thread, v_last, p_run_id[v_count], p_event_type[v_count], p_category[v_count],
                    p_content[v_count], p_metadata[v_count], p_task_id[v_count], p_created_at[v_count],
                    p_event_id[v_count], p_user_id[v_count]);
            v_kept := v_count;
        ELSE
            v_last := v_last - 1;  -- the terminal's seq given back: the thread stays dense
            v_closed := v_first = p_event_id[v_count];
        END IF;
    END IF;

    UPDATE {threads} SET last_seq = v_last, last_at = coalesce(p_created_at[v_kept], last_at)
    WHERE thread_id = p_thread;
    INSERT INTO {users} AS u (user_id, thread_id, last_at)
    SELECT DISTINCT ON (x.user_id) x.user_id, p_thread, x.created_at
    FROM unnest(p_user_id[1:v_kept], p_created_at[1:v_kept]) WITH ORDINALITY AS x(user_id, created_at, n)
    WHERE x.user_id IS NOT NULL ORDER BY x.user_id, x.n DESC
    ON CONFLICT (user_id, thread_id) DO UPDATE SET last_at = excluded.last_at;

    IF p_row IS NOT NULL AND v_closed THEN
        INSERT INTO {runs} AS r (run_id, thread_id, user_id, status, started_at, updated_at, "row",
                                 first_put_at, ordered_at{search_columns})
        VALUES (p_row[1], p_row[2], p_row[3], p_row[4], p_row[5], p_row[6], p_row[7], p_row[8],
                p_row[9]{search_values})
        ON CONFLICT (run_id) DO UPDATE SET user_id = excluded.user_id, status = excluded.status,
            started_at = excluded.started_at, updated_at = excluded.updated_at, "row" = excluded."row",
            ordered_at = coalesce(excluded.started_at, r.first_put_at){search_updates}
        WHERE r.thread_id = excluded.thread_id
          AND (r.status <> ALL (p_finished) OR r.status = excluded.status)
        RETURNING r."row", r.thread_id INTO v_row_json, v_row_thread;
        IF v_row_thread IS NULL THEN  -- refused by a guard: the stored row, kept
            SELECT r."row", r.thread_id INTO v_row_json, v_row_thread FROM {runs} AS r
            WHERE r.run_id = p_row[1];
        END IF;
        UPDATE {starts} SET has_row = true WHERE run_id = p_row[1] AND NOT has_row;
    END IF;

    IF p_channel IS NOT NULL AND v_kept > 0 AND EXISTS (
        SELECT 1 FROM {followers} AS f WHERE f.thread_id = p_thread AND f.until > now()
    ) THEN
        PERFORM pg_notify(p_channel, p_thread || E'\\n' || v_last);
    END IF;
    RETURN QUERY SELECT v_last, v_closed, v_row_json, v_row_thread;
END
$write$
"""


def _text(value: Any) -> str:
    """A run column as the text of ``p_row`` (the function casts it back)."""
    return repr(value) if isinstance(value, float) else str(value)


def call(schema: str | None) -> str:
    """The statement of one write: asyncpg's ``$n`` parameters, in ``arguments`` order."""
    marks = ", ".join(f"${n}" for n in range(1, 17))
    return f"SELECT last_seq, closed, row_json, row_thread FROM {function_name(schema)}({marks})"


def arguments(
    thread_id: str, events: Sequence[NewEvent], exclusive: Sequence[str] | None,
    row: Sequence[Any] | None, channel: str | None, bodies: Sequence[Body] = (),
) -> tuple[Any, ...]:
    """The parameters of ``call`` for one thread's ``events`` (the last one exclusive among
    ``exclusive``, when given), the run row's columns (``sql.RUN_COLUMNS`` order), the channel and
    the thread's ``bodies``."""
    return (
        thread_id, [e.event_id for e in events], [e.run_id for e in events],
        [e.event_type for e in events], [e.category for e in events], [e.content_json for e in events],
        [e.metadata_json for e in events], [e.task_id for e in events],
        [stamp(e.created_at) for e in events], [e.user_id for e in events],
        list(exclusive) if exclusive is not None else None,
        [None if value is None else _text(value) for value in row] if row is not None else None,
        list(FINISHED), channel, [body.digest for body in bodies], [body.data for body in bodies],
    )
