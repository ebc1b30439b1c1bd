"""Benchmark of the SQL store against raw driver calls measured in the same run (issue 3).

    .venv/bin/python bench/bench_sql.py            # full sizes (1M-row read table; a few minutes)
    .venv/bin/python bench/bench_sql.py --quick    # small sizes, for development
    .venv/bin/python bench/bench_sql.py --only write|read|postgres

Prints absolute figures and ratios (store / raw). The baselines use the same schema, indexes and
pragmas (the store's own ``setup()`` creates them), one transaction per batch, rows pre-serialized:
- write: ``put_batch`` of 100-event batches vs raw ``sqlite3`` ``BEGIN IMMEDIATE; executemany;
  COMMIT`` (target >= 0.5x); single ``put`` vs a raw one-row transaction.
- read: a ``list_events`` page of 500 from one thread vs the same indexed query through ``sqlite3``,
  timed back to back page by page, medians (target <= 2x, flat from 10k to 1M rows).
- postgres: 8 concurrent writers (tasks in one process; processes) into one thread, 100-event
  batches, events/s; one writer for comparison.
- close: a run's end on PostgreSQL through the one-call write against the general path's statements,
  interleaved on one store: time and client CPU per run end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from run_journal import NewEvent, RunEvent, RunRow, RunStatus, open_store
from run_journal.stores.postgres import PostgresRunEventStore
from run_journal.stores.queries import stamp
from run_journal.stores.sql import SqlRunEventStore

POSTGRES_URL = os.environ.get("RUN_JOURNAL_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
COLUMNS = (
    "thread_id, seq, run_id, event_type, category, content, metadata, task_id, created_at, event_id, "
    "user_id"
)
INSERT = f"INSERT INTO run_journal_events ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
PAGE = (
    "SELECT thread_id, run_id, seq, event_type, category, content, metadata, created_at, event_id, "
    "user_id FROM run_journal_events WHERE thread_id = ? AND seq > ? ORDER BY seq LIMIT ?"
)


def events(thread_id: str, count: int, run_id: str = "run") -> list[NewEvent]:
    return [
        NewEvent(
            thread_id=thread_id, run_id=run_id, event_type="llm.ai.response", category="message",
            content={"text": f"answer {n} " + "lorem ipsum " * 6, "tool_calls": []},
            metadata={"model": "fake", "n": n},
        )
        for n in range(count)
    ]


def raw_row(event: NewEvent, seq: int) -> tuple[Any, ...]:
    return (
        event.thread_id, seq, event.run_id, event.event_type, event.category, event.content_json,
        event.metadata_json, None, stamp(event.created_at), event.event_id, event.user_id,
    )


def raw_connection(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = NORMAL")
    connection.execute("PRAGMA busy_timeout = 30000")
    return connection


async def fresh_sqlite(directory: Path, name: str) -> Path:
    """A database file with the store's schema (its own setup), then closed."""
    path = directory / f"{name}.db"
    async with open_store(f"sqlite:///{path}"):
        pass
    return path


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:>10,.0f} events/s"


async def interleaved(
    repeats: int, *runs: Callable[[], Awaitable[float]]
) -> list[float]:
    """Best time of each run over ``repeats`` rounds, alternating them so load hits all alike."""
    best = [float("inf")] * len(runs)
    for _ in range(repeats):
        for index, run in enumerate(runs):
            best[index] = min(best[index], await run())
    return best


# -- SQLite writes ----------------------------------------------------------------------------------
async def bench_write(directory: Path, batches: int, singles: int) -> None:
    print(f"\nSQLite writes: {batches} batches of 100 events; {singles} single puts")
    prepared = [events(f"w{b % 4}", 100) for b in range(batches)]

    async def store_batches() -> float:
        path = await fresh_sqlite(directory, uuid.uuid4().hex)
        async with open_store(f"sqlite:///{path}") as store:
            started = time.perf_counter()
            for batch in prepared:
                await store.put_batch(batch)
            return time.perf_counter() - started

    async def raw_batches() -> float:
        path = await fresh_sqlite(directory, uuid.uuid4().hex)
        connection = raw_connection(path)
        seqs: dict[str, int] = {}
        started = time.perf_counter()
        for batch in prepared:
            thread_id = batch[0].thread_id
            first = seqs.get(thread_id, 0) + 1
            seqs[thread_id] = first + len(batch) - 1
            connection.execute("BEGIN IMMEDIATE")
            connection.executemany(INSERT, [raw_row(e, first + i) for i, e in enumerate(batch)])
            connection.execute("COMMIT")
        elapsed = time.perf_counter() - started
        connection.close()
        return elapsed

    total = batches * 100
    raw, ours = await interleaved(3, raw_batches, store_batches)
    print(f"  raw sqlite3 executemany      {rate(total, raw)}")
    print(f"  SqlRunEventStore.put_batch   {rate(total, ours)}   ratio {raw / ours:.2f}x (target >= 0.5x)")

    single = events("single", singles)

    async def store_singles() -> float:
        path = await fresh_sqlite(directory, uuid.uuid4().hex)
        async with open_store(f"sqlite:///{path}") as store:
            started = time.perf_counter()
            for event in single:
                await store.put_batch([event])
            return time.perf_counter() - started

    async def raw_singles() -> float:
        path = await fresh_sqlite(directory, uuid.uuid4().hex)
        connection = raw_connection(path)
        started = time.perf_counter()
        for seq, event in enumerate(single, 1):
            connection.execute("BEGIN IMMEDIATE")
            connection.execute(INSERT, raw_row(event, seq))
            connection.execute("COMMIT")
        elapsed = time.perf_counter() - started
        connection.close()
        return elapsed

    raw, ours = await interleaved(3, raw_singles, store_singles)
    print(f"  raw sqlite3 one-row commit   {rate(singles, raw)}")
    print(f"  SqlRunEventStore.put         {rate(singles, ours)}   ratio {raw / ours:.2f}x")


# -- SQLite reads -----------------------------------------------------------------------------------
def fill(path: Path, rows: int, target: str, target_rows: int) -> None:
    """``rows`` events over many threads, written in 100-event batches like the journal writes them;
    ``target`` holds ``target_rows`` of them, its batches spread evenly over the table."""
    template = events("x", 1)[0]
    connection = raw_connection(path)
    others = max(1, rows // 1000)
    seqs = [0] * others
    every = max(1, rows // target_rows)
    target_seq = 0
    chunk: list[tuple[Any, ...]] = []
    connection.execute("BEGIN")
    for n in range(rows):
        batch = n // 100
        if batch % every == 0 and target_seq < target_rows:
            target_seq += 1
            thread_id, seq = target, target_seq
        else:
            k = batch % others
            seqs[k] += 1
            thread_id, seq = f"thread-{k}", seqs[k]
        chunk.append(
            (thread_id, seq, "run", template.event_type, template.category, template.content_json,
             template.metadata_json, None, stamp(template.created_at), f"e{n}", None)
        )
        if len(chunk) == 10_000:
            connection.executemany(INSERT, chunk)
            chunk.clear()
    connection.executemany(INSERT, chunk)
    connection.execute(
        "INSERT INTO run_journal_threads (thread_id, last_seq, last_at) "
        "SELECT thread_id, max(seq), max(created_at) FROM run_journal_events GROUP BY thread_id"
    )
    connection.execute("COMMIT")
    connection.execute("ANALYZE")
    connection.close()


async def bench_read(directory: Path, sizes: list[int], pages: int) -> None:
    print(f"\nSQLite reads: list_events page of 500 from one thread of 5,000 events; {pages} pages each,")
    print("raw and store timed back to back per page (a load burst hits both); medians")
    for size in sizes:
        path = await fresh_sqlite(directory, f"read{size}")
        await asyncio.to_thread(fill, path, size, "target", 5000)
        connection = raw_connection(path)
        times: dict[str, list[float]] = {"raw": [], "store": [], "raw_decoded": [], "store_read": []}
        async with SqlRunEventStore.from_url(f"sqlite:///{path}") as store:
            await store.list_events("target", after_seq=0, limit=500)  # warm the kept connection
            for n in range(pages):
                after = (n * 500) % 4500
                started = time.perf_counter()
                rows = connection.execute(PAGE, ("target", after, 500)).fetchall()
                times["raw"].append(time.perf_counter() - started)
                started = time.perf_counter()
                page = await store.list_events("target", after_seq=after, limit=500)
                times["store"].append(time.perf_counter() - started)
                assert len(rows) == len(page) == 500
                started = time.perf_counter()
                decoded = [RunEvent(
                    thread_id=r[0], run_id=r[1], seq=r[2], event_type=r[3], category=r[4],
                    content=json.loads(r[5]), metadata=json.loads(r[6]),
                    created_at=datetime.fromisoformat(r[7]), event_id=r[8], user_id=r[9],
                ) for r in connection.execute(PAGE, ("target", after, 500)).fetchall()]
                times["raw_decoded"].append(time.perf_counter() - started)
                started = time.perf_counter()
                page = await store.list_events("target", after_seq=after, limit=500)
                assert all(e.content is not None and e.metadata is not None for e in page)
                times["store_read"].append(time.perf_counter() - started)
                assert len(decoded) == 500
        connection.close()
        raw, ours, decoded_ms, ours_read = (statistics.median(times[k]) for k in times)
        print(
            f"  {size:>9,} rows: raw query {raw * 1000:5.2f} ms, store page {ours * 1000:5.2f} ms "
            f"({ours / raw:.2f}x, target <= 2x);  with every payload decoded: raw + json.loads "
            f"{decoded_ms * 1000:5.2f} ms, store {ours_read * 1000:5.2f} ms ({ours_read / decoded_ms:.2f}x)"
        )


# -- PostgreSQL concurrent writers ------------------------------------------------------------------
async def pg_writer(url: str, thread_id: str, batches: int) -> None:
    async with open_store(url) as store:
        for batch in range(batches):
            await store.put_batch(events(thread_id, 100, run_id=f"b{batch}"))


async def bench_postgres(batches: int) -> None:
    print(f"\nPostgreSQL: writers into one thread, {batches} batches of 100 events each")
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    url = f"{POSTGRES_URL}?schema={schema}"
    try:
        async with open_store(url):
            pass
    except Exception as error:  # noqa: BLE001 - a benchmark without a server just says so
        print(f"  skipped: PostgreSQL at {POSTGRES_URL} is not reachable ({error})")
        return
    try:
        for label, writers in (("1 task", 1), ("8 tasks", 8)):
            started = time.perf_counter()
            await asyncio.gather(*(pg_writer(url, label, batches) for _ in range(writers)))
            print(f"  {label:<12} {rate(writers * batches * 100, time.perf_counter() - started)}")
        started = time.perf_counter()
        code = f"import asyncio, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); " \
               f"import bench_sql; asyncio.run(bench_sql.pg_writer({url!r}, 'procs', {batches}))"
        processes = [await asyncio.create_subprocess_exec(sys.executable, "-c", code) for _ in range(8)]
        codes = [await process.wait() for process in processes]
        elapsed = time.perf_counter() - started
        assert codes == [0] * 8, codes
        print(f"  8 processes  {rate(8 * batches * 100, elapsed)} (includes interpreter start-up)")
        async with open_store(url) as store:
            for thread_id, expected in (("8 tasks", 8), ("procs", 8)):
                count = await store.last_seq(thread_id)
                assert count == expected * batches * 100, (thread_id, count)
    finally:
        import asyncpg

        connection = await asyncpg.connect(POSTGRES_URL)
        await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await connection.close()


# -- a run's end on PostgreSQL ----------------------------------------------------------------------
def run_end(run_id: str) -> tuple[list[NewEvent], NewEvent, RunRow]:
    """What the journal hands ``put_run_close`` at the end of a short run: all its events."""
    body = [("run.start", "trace"), ("llm.human.input", "message"), ("llm.ai.response", "message"),
            ("tool.call", "trace"), ("tool.result", "trace"), ("llm.ai.response", "message"),
            ("llm.ai.response", "message")]
    batch = [NewEvent("closes", run_id, kind, category, content={"n": n}, user_id="u")
             for n, (kind, category) in enumerate(body)]
    terminal = NewEvent("closes", run_id, "run.end", "outputs", metadata={"status": "success"}, user_id="u")
    return batch, terminal, RunRow(run_id=run_id, thread_id="closes", user_id="u", status=RunStatus.SUCCESS)


async def bench_close(closes: int) -> None:
    """A run's end (8 events, the terminal one exclusive, and the row) through the one-call write
    against the statements of the general path, interleaved on one store: time and client CPU."""
    print(f"\nPostgreSQL: a run's end (8 events and the row), {closes} per round, 3 rounds interleaved")
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    try:
        store = open_store(f"{POSTGRES_URL}?schema={schema}")
        await store.setup()
    except Exception as error:  # noqa: BLE001 - a benchmark without a server just says so
        print(f"  skipped: PostgreSQL at {POSTGRES_URL} is not reachable ({error})")
        return
    assert isinstance(store, PostgresRunEventStore)
    results: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    try:
        for round_ in range(3):
            for one_call in (True, False):
                store.one_call_writes = one_call
                wall, cpu = time.perf_counter(), time.process_time()
                for n in range(closes):
                    assert await store.put_run_close(*run_end(f"r{round_}-{one_call}-{n}"))
                results[one_call].append(((time.perf_counter() - wall) / closes,
                                          (time.process_time() - cpu) / closes))
        (one_wall, one_cpu), (many_wall, many_cpu) = (min(results[key]) for key in (True, False))
        print(f"  one call:   {one_wall * 1000:5.2f} ms per run end, {one_cpu * 1000:5.2f} ms client CPU")
        print(f"  statements: {many_wall * 1000:5.2f} ms per run end, {many_cpu * 1000:5.2f} ms client CPU")
        print(f"  one call / statements: {one_wall / many_wall:.2f}x time, {one_cpu / many_cpu:.2f}x CPU")
    finally:
        await store.aclose()
        import asyncpg

        connection = await asyncpg.connect(POSTGRES_URL)
        await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await connection.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for development")
    parser.add_argument("--only", choices=("write", "read", "postgres", "close"))
    args = parser.parse_args()
    sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    with tempfile.TemporaryDirectory(prefix="bench_sql_") as directory:
        if args.only in (None, "write"):
            await bench_write(Path(directory), 50 if args.quick else 300, 200 if args.quick else 1000)
        if args.only in (None, "read"):
            await bench_read(Path(directory), sizes, 60 if args.quick else 300)
    if args.only in (None, "postgres"):
        await bench_postgres(5 if args.quick else 25)
    if args.only in (None, "close"):
        await bench_close(50 if args.quick else 300)
    versions = f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}"
    print(f"\n({versions}; each figure is the best of 3 interleaved rounds)")


if __name__ == "__main__":
    asyncio.run(main())
