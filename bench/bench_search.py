"""Searching runs at scale: a filtered page of 50 from ``search_runs`` against the raw indexed SQL query
it sends, on 1,000,000 runs in SQLite and PostgreSQL, in one run; Redis, JSONL and memory at a size
that finishes in about a minute, with what a page costs there.

    .venv/bin/python bench/bench_search.py                    # 1,000,000 runs on SQLite and PostgreSQL
    .venv/bin/python bench/bench_search.py --runs 100000      # smaller SQL stores
    .venv/bin/python bench/bench_search.py --only sqlite      # sqlite, postgres, redis, jsonl, memory

The SQL stores are created by ``open_store`` (the real schema, version 7), then filled straight through
the driver (SQLite ``executemany``, PostgreSQL ``COPY``) with rows as ``put_run`` writes them: the run
table's columns and JSON row, and one ``run_journal_run_tags`` row per model, tool and caller (the
tag triggers are set aside while the rows are copied in, and put back after), then analyzed. The
runs: 100,000 threads of 10 runs over 90 days, 2,000 users, 5 models, 20 tools (``search`` in 30% of
runs, ``rare_tool`` in 0.1%), 90% success, 5% error, 8% with an error of some kind.

Each filtered page is timed both ways, alternately call by call, the median of ``--repeat`` calls each:

- store: ``store.search_runs(**filters, limit=50)``: validation, the query, 50 ``RunRow`` objects;
- raw: the statement ``search_runs`` sends (``SqlWork.search_sql``, same parameters), run on a plain
  driver connection of the same process, every row fetched and its JSON parsed (``json.loads``): the
  least a reader of those rows does. On SQLite the ``sqlite3`` call runs in a worker thread
  (``asyncio.to_thread``), as an async program must run it to keep its event loop free (the store does
  the same in its reader thread); on PostgreSQL ``asyncpg`` is asynchronous itself.

The ratio store / raw is the target (within 1.5x). ``EXPLAIN`` of each statement is checked for
reading an index in its order (no sort step).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from run_journal import RunEventStore, RunRow, UsageTotals, open_store
from run_journal.stores.postgres import dollar_markers
from run_journal.stores.queries import SearchQuery, run_tags, stamp
from run_journal.stores.sql import SqlWork, markers
from run_journal.stores.sql_schema import run_tag_triggers

POSTGRES_URL = os.environ.get("RUN_JOURNAL_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("RUN_JOURNAL_REDIS_URL", "redis://127.0.0.1:6379/0")
NOW: Final = datetime(2024, 6, 1, tzinfo=UTC)
DAYS: Final = 90
MODELS: Final = ("gpt-4o", "gpt-4o-mini", "claude-sonnet", "claude-haiku", "gemini-flash")
TOOLS: Final = ("search", *(f"tool_{n}" for n in range(18)), "rare_tool")
STATUSES: Final = ("success",) * 18 + ("error",) + ("interrupted", "cancelled")[: 1]
PAGES: Final[dict[str, dict[str, Any]]] = {
    "every run": {},
    "tool=search": {"tool": "search"},
    "model=gpt-4o tool=search": {"model": "gpt-4o", "tool": "search"},
    "caller=subagent:researcher": {"caller": "subagent:researcher"},
    "status=error since=30d": {"statuses": ["error"], "since": NOW - timedelta(days=30)},
    "user=user-42": {"user_id": "user-42"},
    "has_error": {"has_error": True},
    "tool=rare_tool": {"tool": "rare_tool"},
    "tool=search min_cost=0.01": {"tool": "search", "min_cost_usd": 0.01},
    "thread=thread-777": {"thread_id": "thread-777"},
}


def make_row(n: int, rng: random.Random) -> RunRow:
    """Run ``n`` of the benchmark store (10 per thread, older as ``n`` grows)."""
    started = NOW - timedelta(seconds=n * DAYS * 86_400 / 1_000_000 + rng.random())
    models = (rng.choice(MODELS[:2]) if rng.random() < 0.6 else rng.choice(MODELS),)
    tools = {"search"} if rng.random() < 0.3 else set()
    tools |= set(rng.sample(TOOLS[1:-1], rng.randint(0, 2)))
    if rng.random() < 0.001:
        tools.add("rare_tool")
    callers = ("lead_agent", "subagent:researcher") if rng.random() < 0.2 else ("lead_agent",)
    status = rng.choice(STATUSES)
    tokens = rng.randint(200, 40_000)
    usage = UsageTotals(input_tokens=tokens * 4 // 5, output_tokens=tokens // 5, total_tokens=tokens,
                        llm_calls=rng.randint(1, 8), cost_usd=round(tokens * 1e-6 * rng.uniform(0.5, 3), 6))
    return RunRow(
        run_id=f"run-{n:07}", thread_id=f"thread-{n // 10}", user_id=f"user-{n % 2000}", status=status,
        started_at=started, ended_at=started + timedelta(seconds=rng.randint(1, 120)), updated_at=started,
        error="ValueError: bad input" if status == "error" else None, usage=usage,
        usage_by_model={models[0]: usage}, usage_by_caller={callers[0]: usage},
        tool_call_count=len(tools) * 2, tool_error_count=1 if rng.random() < 0.03 else 0, message_count=6,
        first_human_message=f"question number {n} about the weather in a city far away",
        last_ai_message="It is 18 C and sunny there; anything else?",
        metadata={"run_name": "agent", "caller": "lead_agent"}, models=models, tools=tuple(tools),
        callers=callers,
    )


def columns_of(row: RunRow) -> tuple[Any, ...]:
    """The runs table's columns (``sql.RUN_COLUMNS`` order) as ``put_run`` writes them."""
    moment = stamp(row.started_at) if row.started_at else None
    return (row.run_id, row.thread_id, row.user_id, str(row.status), moment, stamp(row.updated_at),
            json.dumps(row.to_dict(), ensure_ascii=False, separators=(",", ":")), moment, moment,
            json.dumps(run_tags(row)), row.usage.total_tokens, row.usage.cost_usd, row.has_error)


def batches(total: int, size: int = 20_000) -> Any:
    rng = random.Random(7)
    for start in range(0, total, size):
        rows = [make_row(n, rng) for n in range(start, min(start + size, total))]
        yield ([columns_of(row) for row in rows],
               [(row.run_id, tag, stamp(row.started_at)) for row in rows for tag in run_tags(row)
                if row.started_at])


RUN_INSERT: Final = (
    'INSERT INTO run_journal_runs (run_id, thread_id, user_id, status, started_at, updated_at, "row", '
    "first_put_at, ordered_at, tags, total_tokens, cost_usd, has_error) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


# -- filling the SQL stores ------------------------------------------------------------------------
def fill_sqlite(path: str, total: int) -> None:
    connection = sqlite3.connect(path, isolation_level=None)
    names = [row[0] for row in connection.execute(
        "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'run_journal_run_tags%'")]
    for name in names:
        connection.execute(f"DROP TRIGGER {name}")
    connection.execute("PRAGMA synchronous = OFF")
    for runs, tags in batches(total):
        connection.execute("BEGIN")
        connection.executemany(RUN_INSERT, runs)
        connection.executemany("INSERT INTO run_journal_run_tags (run_id, tag, ordered_at) VALUES (?, ?, ?)",
                               tags)
        connection.execute("COMMIT")
    for statement in run_tag_triggers("sqlite", None):
        connection.execute(statement)
    connection.execute("ANALYZE")
    connection.close()


async def fill_postgres(schema: str, total: int) -> None:
    import asyncpg

    connection = await asyncpg.connect(POSTGRES_URL)
    runs_columns = ("run_id", "thread_id", "user_id", "status", "started_at", "updated_at", "row",
                    "first_put_at", "ordered_at", "tags", "total_tokens", "cost_usd", "has_error")
    await connection.execute(f'ALTER TABLE "{schema}".run_journal_runs DISABLE TRIGGER USER')
    for runs, tags in batches(total):
        await connection.copy_records_to_table("run_journal_runs", schema_name=schema, records=runs,
                                               columns=runs_columns)
        await connection.copy_records_to_table("run_journal_run_tags", schema_name=schema, records=tags,
                                               columns=("run_id", "tag", "ordered_at"))
    await connection.execute(f'ALTER TABLE "{schema}".run_journal_runs ENABLE TRIGGER USER')
    await connection.execute(f'VACUUM ANALYZE "{schema}".run_journal_runs')
    await connection.execute(f'VACUUM ANALYZE "{schema}".run_journal_run_tags')
    await connection.close()


# -- timing ------------------------------------------------------------------------------------------
async def medians_ms(store_call: Callable[[], Awaitable[Any]], raw_call: Callable[[], Awaitable[Any]],
                     repeat: int) -> tuple[float, float, Any]:
    """Median ms of each call, timed alternately; and how many rows a page holds."""
    rows = await store_call()  # both warmed first
    await raw_call()
    store_times, raw_times = [], []
    for _ in range(repeat):
        began = time.perf_counter()
        rows = await store_call()
        store_times.append(time.perf_counter() - began)
        began = time.perf_counter()
        await raw_call()
        raw_times.append(time.perf_counter() - began)
    return statistics.median(store_times) * 1000, statistics.median(raw_times) * 1000, rows


def query_of(filters: dict[str, Any], limit: int = 50) -> SearchQuery:
    """The frozen query ``search_runs(**filters, limit=limit)`` hands the backend."""
    return SearchQuery(
        limit=limit + 1, statuses=tuple(filters["statuses"]) if "statuses" in filters else None,
        since=stamp(filters["since"]) if "since" in filters else None,
        **{key: value for key, value in filters.items() if key not in ("statuses", "since")},
    )


def plan_is_ordered(steps: str) -> bool:
    return "TEMP B-TREE" not in steps and "Sort" not in steps


async def bench_sql(backend: str, total: int, repeat: int) -> list[str]:
    directory = tempfile.mkdtemp(prefix="bench_search_")
    schema = f"bench_search_{os.getpid()}"
    url = f"sqlite:///{directory}/runs.db" if backend == "sqlite" else f"{POSTGRES_URL}?schema={schema}"
    async with open_store(url):
        pass  # the schema, as setup() makes it
    began = time.perf_counter()
    if backend == "sqlite":
        await asyncio.to_thread(fill_sqlite, f"{directory}/runs.db", total)
    else:
        await fill_postgres(schema, total)
    lines = [f"{backend}: {total:,} runs written in {time.perf_counter() - began:.0f} s"]
    work = SqlWork(schema if backend == "postgres" else None, lateral_joins=backend == "postgres")
    raw_connection: Any
    if backend == "sqlite":
        raw_connection = sqlite3.connect(f"{directory}/runs.db", check_same_thread=False)
    else:
        import asyncpg

        raw_connection = await asyncpg.connect(POSTGRES_URL)
    try:
        async with open_store(url) as store:
            for name, filters in PAGES.items():
                sql, params = work.search_sql(query_of(filters))
                text, names = markers(sql)
                values = [params[key] for key in names]
                if backend == "sqlite":
                    plan = " ".join(str(row[3]) for row in raw_connection.execute(
                        f"EXPLAIN QUERY PLAN {text}", values))

                    def fetch(text: str = text, values: list[Any] = values) -> Any:
                        return [json.loads(row[1]) for row in raw_connection.execute(text, values).fetchall()]

                    async def raw(fetch: Callable[[], Any] = fetch) -> Any:  # off the loop, as the store
                        return await asyncio.to_thread(fetch)
                else:
                    numbered = dollar_markers(text)
                    plan = " ".join(str(row[0]) for row in await raw_connection.fetch(
                        f"EXPLAIN {numbered}", *values))

                    async def raw(text: str = numbered, values: list[Any] = values) -> Any:
                        return [json.loads(row[1]) for row in await raw_connection.fetch(text, *values)]

                async def searched(store: RunEventStore = store, filters: dict[str, Any] = filters) -> Any:
                    return (await store.search_runs(**filters, limit=50)).rows

                store_ms, raw_ms, rows = await medians_ms(searched, raw, repeat)
                ordered = "index in order" if plan_is_ordered(plan) else "SORTS"
                lines.append(f"  {name:30} {len(rows):3} rows  store {store_ms:7.3f} ms  "
                             f"raw {raw_ms:7.3f} ms  ratio {store_ms / raw_ms:4.2f}  ({ordered})")
    finally:
        if backend == "sqlite":
            raw_connection.close()
            shutil.rmtree(directory)
        else:
            await raw_connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            await raw_connection.close()
    return lines


# -- the stores without SQL indexes ----------------------------------------------------------------
async def bench_other(backend: str, total: int, repeat: int) -> list[str]:
    directory = tempfile.mkdtemp(prefix="bench_search_")
    prefix = f"bench_search_{os.getpid()}:"
    url = {"redis": f"{REDIS_URL}?prefix={prefix}", "jsonl": f"jsonl:///{directory}/journal",
           "memory": "memory://"}[backend]
    rng = random.Random(7)
    lines: list[str] = []
    async with open_store(url) as store:
        began = time.perf_counter()
        for start in range(0, total, 200):
            chunk = range(start, min(start + 200, total))
            await asyncio.gather(*(store.put_run(make_row(n, rng)) for n in chunk))
        lines.append(f"{backend}: {total:,} runs written (put_run) in {time.perf_counter() - began:.0f} s")
        try:
            for name, filters in PAGES.items():
                times = []
                rows: tuple[RunRow, ...] = ()
                for _ in range(repeat):
                    began = time.perf_counter()
                    rows = (await store.search_runs(**filters, limit=50)).rows
                    times.append(time.perf_counter() - began)
                ms = statistics.median(times) * 1000
                lines.append(f"  {name:30} {len(rows):3} rows  {ms:8.2f} ms  "
                             f"({ms * 1000 / total:.2f} us per run in the store)")
        finally:
            if backend == "redis":
                import redis.asyncio as aioredis

                client = aioredis.Redis.from_url(REDIS_URL)
                async for key in client.scan_iter(match=prefix + "*", count=1000):
                    await client.delete(key)
                await client.aclose()
    return lines


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1_000_000, help="runs in each SQL store")
    parser.add_argument("--other-runs", type=int, default=20_000,
                        help="runs in the Redis, JSONL and memory stores")
    parser.add_argument("--only", choices=("sqlite", "postgres", "redis", "jsonl", "memory"))
    parser.add_argument("--repeat", type=int, default=40, help="timed calls of each page per median")
    args = parser.parse_args()
    for backend in ("sqlite", "postgres", "redis", "jsonl", "memory"):
        if args.only not in (None, backend):
            continue
        if backend in ("sqlite", "postgres"):
            lines = await bench_sql(backend, args.runs, args.repeat)
        else:
            lines = await bench_other(backend, args.other_runs, max(3, args.repeat // 8))
        print("\n".join(lines), flush=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
