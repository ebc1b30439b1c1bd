"""Benchmark of ``store.prune`` on a store of 1,000,000 events (issue 20, retention).

    .venv/bin/python bench/bench_prune.py                          # SQLite and PostgreSQL, 1M events
    .venv/bin/python bench/bench_prune.py --backend sqlite --shape big-runs
    .venv/bin/python bench/bench_prune.py --events 100000          # smaller, for development

The store is filled through ``put_batch`` with old threads (``created_at`` 60 days back) of finished
runs, each with its run row:
- ``many-runs``: 2,000 threads x 5 runs x 100 events (what a chat service accumulates);
- ``big-runs``: 5 threads x 1 run x 200,000 events (long agent runs: the worst case for a
  one-run-at-a-time delete);
- ``long-threads``: 10 threads x 200 runs x 500 events (a thread that lived for months).

Prune figures: events removed per second (``result.events`` / wall time of ``prune``). Writer
latency: another process writes one event every 10 ms to a young thread of the same store
(``put``, its own connection), first for ``--baseline`` seconds with nothing else running, then for
as long as ``prune`` runs; p50 / p99 / max latency of both, and the ratios during / baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from run_journal import NewEvent, RunRow, RunStatus, open_store

POSTGRES_URL = os.environ.get("RUN_JOURNAL_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("RUN_JOURNAL_REDIS_URL", "redis://127.0.0.1:6379/0")
OLD = datetime.now(UTC) - timedelta(days=60)
SHAPES = {"many-runs": (2000, 5), "big-runs": (5, 1), "long-threads": (10, 200)}
"""Shape -> (threads, runs per thread) for 1,000,000 events; events per run follow from --events."""
WRITE_EVERY = 0.010


def run_batch(thread_id: str, run_id: str, first: int, count: int, last: int) -> list[NewEvent]:
    """Events ``first .. first + count - 1`` of a run of ``last + 1`` events: run.start, model
    answers, run.end."""
    batch = []
    for n in range(first, first + count):
        content: dict[str, Any]
        if n == 0:
            kind, category, content = "run.start", "trace", {"run_name": "agent"}
        elif n == last:
            kind, category, content = "run.end", "outputs", {"output": None}
        else:
            kind, category = "llm.ai.response", "message"
            content = {"type": "ai", "content": f"answer {n} " + "lorem ipsum " * 6}
        batch.append(NewEvent(thread_id=thread_id, run_id=run_id, event_type=kind, category=category,
                              content=content, metadata={"n": n}, created_at=OLD))
    return batch


async def fill(url: str, events: int, shape: str, writers: int) -> None:
    threads, runs = SHAPES[shape]
    threads = max(1, threads * events // 1_000_000)
    per_run = events // (threads * runs)
    started = time.perf_counter()
    work = [(f"old-{t:05}", f"old-{t:05}-r{r}") for t in range(threads) for r in range(runs)]

    async def writer(part: list[tuple[str, str]]) -> None:
        async with open_store(url) as store:
            for thread_id, run_id in part:
                for first in range(0, per_run, 1000):
                    await store.put_batch(run_batch(thread_id, run_id, first,
                                                    min(1000, per_run - first), per_run - 1))
                await store.put_run(RunRow(run_id=run_id, thread_id=thread_id, status=RunStatus.SUCCESS,
                                           started_at=OLD, ended_at=OLD, updated_at=OLD))

    await asyncio.gather(*(writer(work[n::writers]) for n in range(writers)))
    took = time.perf_counter() - started
    total = per_run * len(work)
    print(f"  filled {total:,} events ({threads:,} threads x {runs} runs x {per_run:,} events) "
          f"in {took:.0f} s ({total / took:,.0f} events/s)")


# -- the writer process ---------------------------------------------------------------------------
async def write_until_stopped(url: str, seconds: float, out: str) -> None:
    """One event every ``WRITE_EVERY`` s to a young thread until SIGTERM (or ``seconds``)."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    latencies: list[float] = []
    thread_id = f"young-{uuid.uuid4().hex[:8]}"
    async with open_store(url) as store:
        await store.put(thread_id=thread_id, run_id="w", event_type="tool.call", category="trace")
        print("ready", flush=True)
        deadline = time.perf_counter() + seconds
        while not stop.is_set() and time.perf_counter() < deadline:
            began = time.perf_counter()
            await store.put(thread_id=thread_id, run_id="w", event_type="tool.call", category="trace",
                            content={"n": len(latencies)})
            latencies.append(time.perf_counter() - began)
            await asyncio.sleep(max(0.0, WRITE_EVERY - (time.perf_counter() - began)))
        seqs: list[int] = []
        while page := await store.list_events(thread_id, limit=10_000, after_seq=seqs[-1] if seqs else 0):
            seqs += [event.seq for event in page]
    dense = seqs == list(range(1, len(seqs) + 1))
    await asyncio.to_thread(Path(out).write_text, json.dumps({"latencies": latencies, "dense": dense}))


async def spawn_writer(url: str, seconds: float, out: Path) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--writer", url, "--seconds", str(seconds), "--out", str(out),
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    await process.stdout.readline()
    return process


def summary(path: Path) -> dict[str, float]:
    data = json.loads(path.read_text())
    values = sorted(data["latencies"])
    assert data["dense"], "the writer's thread is not dense"
    return {
        "n": len(values), "p50": statistics.median(values) * 1000,
        "p99": values[min(len(values) - 1, int(len(values) * 0.99))] * 1000, "max": values[-1] * 1000,
    }


def show(name: str, figures: dict[str, float]) -> str:
    return (f"{name:<22} {figures['n']:>6.0f} writes  p50 {figures['p50']:7.2f} ms  "
            f"p99 {figures['p99']:8.2f} ms  max {figures['max']:8.1f} ms")


# -- one benchmark ----------------------------------------------------------------------------------
async def bench(url: str, label: str, events: int, shape: str, baseline: float, writers: int,
                directory: Path) -> None:
    print(f"\n{label}, {shape}:")
    await fill(url, events, shape, writers)
    quiet = directory / f"{label}-{shape}-baseline.json"
    await (await spawn_writer(url, baseline, quiet)).wait()
    busy = directory / f"{label}-{shape}-prune.json"
    writer = await spawn_writer(url, 3600, busy)
    try:
        async with open_store(url) as store:
            started = time.perf_counter()
            result = await store.prune(older_than=timedelta(days=30))
            took = time.perf_counter() - started
            left = await store.list_threads(limit=10)
    finally:
        writer.send_signal(signal.SIGTERM)
        await writer.wait()
    assert all(name.startswith("young-") for name in left), left
    assert len(result.kept) == 0, result.kept
    print(f"  prune: {result.events:,} events, {result.runs:,} runs, {len(result.pruned):,} threads "
          f"in {took:.1f} s = {result.events / took:,.0f} events/s")
    before, during = summary(quiet), summary(busy)
    print("  " + show("writer, nothing else", before))
    print("  " + show("writer, during prune", during))
    print(f"  ratio during / baseline: p50 {during['p50'] / before['p50']:.2f}x, "
          f"p99 {during['p99'] / before['p99']:.2f}x, max {during['max'] / before['max']:.2f}x")


def machine() -> str:
    return (f"{platform.machine()}, {os.cpu_count()} CPUs, Linux {platform.release()}, "
            f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}")


async def main(args: argparse.Namespace) -> None:
    print(f"bench_prune: {args.events:,} events per store; {machine()}")
    with tempfile.TemporaryDirectory(prefix="bench-prune-") as temp:
        directory = Path(temp)
        for backend in args.backend:
            for shape in args.shape:
                tag = uuid.uuid4().hex[:8]
                if backend == "sqlite":
                    url, writers = f"sqlite:///{directory}/{tag}.db", 1
                elif backend == "postgres":
                    url, writers = f"{POSTGRES_URL}?schema=bench_prune_{tag}", 4
                elif backend == "jsonl":
                    url, writers = f"jsonl:///{directory}/{tag}", 2
                else:
                    url, writers = f"{REDIS_URL}?prefix=bench_prune:{tag}:", 4
                try:
                    await bench(url, backend, args.events, shape, args.baseline, writers, directory)
                finally:
                    await drop(backend, url, tag)


async def drop(backend: str, url: str, tag: str) -> None:
    """Remove a server store (file stores go with the temporary directory)."""
    if backend == "postgres":
        import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type information

        connection = await asyncpg.connect(POSTGRES_URL)
        try:
            await connection.execute(f"DROP SCHEMA IF EXISTS bench_prune_{tag} CASCADE")
        finally:
            await connection.close()
    elif backend == "redis":
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(REDIS_URL)
        async for key in client.scan_iter(match=f"bench_prune:{tag}:*", count=1000):
            await client.delete(key)
        await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", action="append", choices=("sqlite", "postgres", "jsonl", "redis"))
    parser.add_argument("--shape", action="append", choices=tuple(SHAPES))
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--baseline", type=float, default=10.0, help="seconds of writer baseline")
    parser.add_argument("--writer", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.writer:
        asyncio.run(write_until_stopped(arguments.writer, arguments.seconds, arguments.out))
    else:
        arguments.backend = arguments.backend or ["sqlite", "postgres"]
        arguments.shape = arguments.shape or ["many-runs"]
        asyncio.run(main(arguments))
