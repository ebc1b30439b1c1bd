"""Reads that stay flat: what the pages of a chat UI cost as the store grows, on SQLite, PostgreSQL
and Redis, in one run.

    .venv/bin/python bench/bench_reads.py                 # 2,000 vs 20,000 threads; 5 vs 2,000 runs
    .venv/bin/python bench/bench_reads.py --quick         # 500 vs 5,000 threads; 5 vs 500 runs
    .venv/bin/python bench/bench_reads.py --only sqlite   # one backend (sqlite, postgres, redis)

For each backend it fills two stores: a small one and one ten times larger (threads of many users,
three of them the user's), each with a thread of a user holding 5 runs and one holding 2,000. Every
page is timed as the HTTP API reads it, the two sides timed alternately call by call, and the median
of each is printed with the ratio (the target: within 2x):

- scoped thread list: ``list_recent_threads(user_id=, limit=50)`` (and ``list_threads(user_id=)``);
- history page: ``thread_history(store, thread, limit=50, user_id=)`` after the visibility check
  ``list_runs(thread, user_id=, limit=1)``, on the thread of 5 runs and on the one of 2,000 (both
  hold more than a page of messages);
- runs page: ``list_runs(thread, limit=5, newest_first=True)`` (a page as long as the short
  thread's) and ``count_runs(thread)``, same two threads; and a page of 50 of the long thread, its
  newest against one a thousand runs back (``after=``).

The stores are analyzed after they are filled (PostgreSQL ``ANALYZE``, SQLite ``ANALYZE``), as a
store in use is.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from run_journal import NewEvent, RunEventStore, RunRow, RunStatus, open_store
from run_journal.projections import thread_history

POSTGRES_URL = os.environ.get("RUN_JOURNAL_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("RUN_JOURNAL_REDIS_URL", "redis://127.0.0.1:6379/0")
USER = "ada"
START = datetime(2024, 1, 1, tzinfo=UTC)
Read = Callable[[RunEventStore], Awaitable[Any]]


def store_url(backend: str, directory: str, name: str) -> str:
    if backend == "sqlite":
        return f"sqlite:///{directory}/{name}.db"
    if backend == "postgres":
        return f"{POSTGRES_URL}?schema=bench_reads_{name}"
    return f"{REDIS_URL}?prefix=bench_reads_{name}:"


async def fill(store: RunEventStore, threads: int, runs: int) -> None:
    """``threads`` threads of 2 events each (three of them the user's, the others of 500 users), and
    the user's threads ``few`` (5 runs) and ``many`` (``runs`` runs): per run 2 events and a row."""
    batch: list[NewEvent] = []
    for n in range(threads):
        user = USER if n % (threads // 3) == 0 else f"user-{n % 500}"
        at = START + timedelta(seconds=n)
        batch += [NewEvent(f"thread-{n}", f"thread-{n}-run", kind, "message", content="hello there",
                           user_id=user, created_at=at) for kind in ("llm.human.input", "llm.ai.response")]
    for thread_id, count, turns in (("few", 5, 6), ("many", runs, 1)):  # both fill a history page
        for n in range(count):
            at = START + timedelta(minutes=n)
            batch += [NewEvent(thread_id, f"{thread_id}-{n}", kind, "message", content=f"turn {n}.{turn}",
                               user_id=USER, created_at=at)
                      for turn in range(turns) for kind in ("llm.human.input", "llm.ai.response")]
    for first in range(0, len(batch), 1000):
        await store.put_batch(batch[first:first + 1000])
    for thread_id, count in (("few", 5), ("many", runs)):
        for n in range(count):
            await store.put_run(RunRow(run_id=f"{thread_id}-{n}", thread_id=thread_id, user_id=USER,
                                       status=RunStatus.SUCCESS, started_at=START + timedelta(minutes=n)))


async def medians_ms(first: tuple[Read, RunEventStore], second: tuple[Read, RunEventStore],
                     repeat: int) -> tuple[float, float]:
    """Median milliseconds of two reads timed alternately, call by call, so that a burst of load on
    the machine hits both alike."""
    timings: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for (read, store), into in zip((first, second), timings, strict=True):
            began = time.perf_counter()
            await read(store)
            into.append((time.perf_counter() - began) * 1000)
    return statistics.median(timings[0]), statistics.median(timings[1])


async def history_page(store: RunEventStore, thread_id: str) -> Any:
    await store.list_runs(thread_id, user_id=USER, limit=1)
    return await thread_history(store, thread_id, limit=50, user_id=USER)


async def runs_page(store: RunEventStore, thread_id: str, limit: int = 5, after: str | None = None) -> Any:
    page = await store.list_runs(thread_id, limit=limit, newest_first=True, after=after)
    return page, await store.count_runs(thread_id)


async def run_backend(backend: str, threads: int, runs: int, repeat: int) -> list[str]:
    directory = tempfile.mkdtemp(prefix="bench-reads-")
    tag = uuid.uuid4().hex[:6]
    small_url, large_url = (store_url(backend, directory, f"{tag}_{size}") for size in ("small", "large"))
    lines = []
    async with open_store(small_url) as small, open_store(large_url) as large:
        began = time.perf_counter()
        await fill(small, threads, runs)
        await fill(large, threads * 10, runs)
        await analyze(backend, small_url, large_url)
        lines.append(f"{backend}: filled in {time.perf_counter() - began:.0f} s "
                     f"({threads:,} and {threads * 10:,} threads; runs per thread 5 and {runs:,})")
        by_size: list[tuple[str, Read]] = [
            ("scoped thread list (recent)", lambda s: s.list_recent_threads(user_id=USER, limit=50)),
            ("scoped thread list (by id)", lambda s: s.list_threads(user_id=USER, limit=50)),
        ]
        for name, read in by_size:  # the same page in the small and the large store
            await read(small), await read(large)
            low, high = await medians_ms((read, small), (read, large), repeat)
            lines.append(f"  {name:<32} {low:7.2f} ms at {threads:>6,} threads, "
                         f"{high:7.2f} ms at {threads * 10:>6,}: {high / low:.2f}x")
        deep = f"many-{runs // 2}"
        by_runs: list[tuple[str, tuple[Read, Read], str]] = [  # the thread of 5 runs against the long one
            ("history page (50 messages)", (functools.partial(history_page, thread_id="few"),
                                            functools.partial(history_page, thread_id="many")),
             f"at 5 runs, {{}} ms at {runs:,} runs"),
            ("runs page (5 newest) + count", (functools.partial(runs_page, thread_id="few"),
                                              functools.partial(runs_page, thread_id="many")),
             f"at 5 runs, {{}} ms at {runs:,} runs"),
            ("runs page of 50, newest / deep", (functools.partial(runs_page, thread_id="many", limit=50),
                                                functools.partial(runs_page, thread_id="many", limit=50,
                                                                  after=deep)),
             f"newest, {{}} ms {runs // 2:,} runs back"),
        ]
        for name, (first, second), where in by_runs:
            await first(large), await second(large)
            low, high = await medians_ms((first, large), (second, large), repeat)
            lines.append(f"  {name:<32} {low:7.2f} ms " + where.format(f"{high:7.2f}")
                         + f": {high / low:.2f}x")
    await drop(backend, small_url, large_url)
    return lines


TABLES = ("run_journal_events", "run_journal_threads", "run_journal_user_threads", "run_journal_runs",
          "run_journal_run_starts")


async def analyze(backend: str, *urls: str) -> None:
    """Table statistics, as a store in use has them (the server gathers them as tables grow): a
    planner that has none may sort a thread's 2,000 run rows for a page of one instead of walking
    the index that holds them in order."""
    if backend == "postgres":
        import asyncpg

        connection = await asyncpg.connect(POSTGRES_URL)
        for url in urls:
            schema = url.rpartition("schema=")[2]
            await connection.execute(f"ANALYZE {', '.join(f'{schema}.{table}' for table in TABLES)}")
        await connection.close()
    elif backend == "sqlite":
        import sqlite3

        for url in urls:
            connection = sqlite3.connect(url.removeprefix("sqlite:///"))
            connection.execute("ANALYZE")
            connection.close()


async def drop(backend: str, *urls: str) -> None:
    """Remove what the benchmark wrote on the servers."""
    if backend == "postgres":
        import asyncpg

        connection = await asyncpg.connect(POSTGRES_URL)
        for url in urls:
            await connection.execute(f'DROP SCHEMA IF EXISTS "{url.rpartition("schema=")[2]}" CASCADE')
        await connection.close()
    elif backend == "redis":
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(REDIS_URL)
        for url in urls:
            prefix = url.rpartition("prefix=")[2]
            async for key in client.scan_iter(match=prefix + "*", count=1000):
                await client.delete(key)
        await client.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="500 vs 5,000 threads, 500 runs")
    parser.add_argument("--only", choices=("sqlite", "postgres", "redis"))
    parser.add_argument("--repeat", type=int, default=60, help="timed calls of each read per median")
    args = parser.parse_args()
    threads, runs = (500, 500) if args.quick else (2_000, 2_000)
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f}")
    for backend in [args.only] if args.only else ["sqlite", "postgres", "redis"]:
        for line in await run_backend(backend, threads, runs, args.repeat):
            print(line, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
