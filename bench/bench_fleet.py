"""A fleet on one server store: several worker processes, many agent runs in flight in each.

Every worker process runs batches of ``--in-flight`` concurrent agent runs (bench_journal.py's turn: the
fake model awaits ``--latency`` ms, calls one tool, answers), alternating a batch with a no-op callback
handler and a batch journaled to the shared server store (one store per process, one ``RunJournal``
per run, closed when its run ends, as a service would). Both variants run in the same processes at the
same time of the benchmark, so the machine's noise hits them alike.

Printed per variant: the median batch wall time and its ratio to the no-op batch, client CPU per run
(process time of the worker, journaled minus no-op), store calls per run (``journal.stats``), failed
runs (an exception from the graph or from ``aclose``), and the run latency p50.

    .venv/bin/python bench/bench_fleet.py --url postgresql://postgres@127.0.0.1:5432/test
    .venv/bin/python bench/bench_fleet.py --url redis://127.0.0.1:6379/0 --processes 8 --batches 2

The benchmark works in a schema (PostgreSQL) or key prefix (Redis) of its own and removes it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage

from run_journal import RunJournal, open_store

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_journal import NoOp, build_graph


async def worker_main(url: str, worker: int, batches: int, in_flight: int, latency: float,
                      start_at: float) -> dict[str, Any]:
    graph = build_graph(latency)
    inputs = {"messages": [HumanMessage("what is 1+2?")]}
    result: dict[str, Any] = {"noop": [], "journal": [], "cpu": {"noop": 0.0, "journal": 0.0},
                              "latency": {"noop": [], "journal": []}, "calls": 0, "runs": 0, "failed": 0}
    async with open_store(url) as store:
        async def one(kind: str, batch: int, index: int) -> None:
            began = time.perf_counter()
            try:
                if kind == "noop":
                    await graph.ainvoke(inputs, {"callbacks": [NoOp()]})
                else:
                    journal = RunJournal(store, thread_id=f"w{worker}-b{batch}-r{index}")
                    try:
                        await graph.ainvoke(inputs, {"callbacks": [journal]})
                    finally:
                        await journal.aclose()
                        result["calls"] += journal.stats.store_calls
                        result["runs"] += 1
            except Exception:  # noqa: BLE001 - a failed run is what this benchmark counts
                result["failed"] += 1
            result["latency"][kind].append(time.perf_counter() - began)

        await asyncio.gather(*(one("journal", -1, i) for i in range(5)))  # warm-up: schema, pool
        result["calls"] = result["runs"] = 0
        result["latency"]["journal"].clear()
        await asyncio.sleep(max(0.0, start_at - time.time()))  # every worker starts together
        for batch in range(batches):
            for kind in ("noop", "journal") if batch % 2 == 0 else ("journal", "noop"):
                cpu, wall = time.process_time(), time.perf_counter()
                await asyncio.gather(*(one(kind, batch, index) for index in range(in_flight)))
                result[kind].append(time.perf_counter() - wall)
                result["cpu"][kind] += time.process_time() - cpu
    return result


def worker(args: tuple[str, int, int, int, float, float]) -> dict[str, Any]:
    return asyncio.run(worker_main(*args))


async def remove(url: str) -> None:
    if url.startswith("redis"):
        import redis.asyncio as aioredis

        base, prefix = url.split("?prefix=", 1)
        client = aioredis.from_url(base)
        async for key in client.scan_iter(match=prefix + "*", count=1000):
            await client.delete(key)
        await client.aclose()
    else:
        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import create_async_engine

        base, schema = url.split("?schema=", 1)
        engine = create_async_engine(base.replace("postgresql://", "postgresql+asyncpg://", 1))
        async with engine.begin() as connection:
            await connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="postgresql://... or redis://...")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--in-flight", type=int, default=50)
    parser.add_argument("--batches", type=int, default=6, help="batches per variant and process")
    parser.add_argument("--latency", type=float, default=20.0, help="ms the model awaits per call")
    args = parser.parse_args()
    tag = uuid.uuid4().hex[:8]
    sep = "&" if "?" in args.url else "?"
    if args.url.startswith("redis"):
        url = f"{args.url}{sep}prefix=benchfleet{tag}:"
    elif args.url.startswith("postgresql"):
        url = f"{args.url}{sep}schema=benchfleet{tag}"
    else:  # memory:// (one store per process): the journal's own cost, no server
        url = args.url
    start_at = time.time() + 8.0
    jobs = [(url, index, args.batches, args.in_flight, args.latency / 1000, start_at)
            for index in range(args.processes)]
    try:
        with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
            results = pool.map(worker, jobs)
    finally:
        if url != args.url:
            asyncio.run(remove(url))
    runs = args.processes * args.batches * args.in_flight
    print(f"{args.url.split(':', 1)[0]}: {args.processes} processes x {args.in_flight} runs in flight, "
          f"{args.batches} batches per variant, model latency {args.latency:.0f} ms, {runs} runs per variant")
    median = {kind: statistics.median(t for r in results for t in r[kind]) for kind in ("noop", "journal")}
    cpu = {kind: sum(r["cpu"][kind] for r in results) / runs for kind in ("noop", "journal")}
    p50 = {kind: statistics.median(t for r in results for t in r["latency"][kind]) for kind in median}
    calls = sum(r["calls"] for r in results) / max(1, sum(r["runs"] for r in results))
    failed = sum(r["failed"] for r in results)
    for kind in ("noop", "journal"):
        ratio = median[kind] / median["noop"]
        print(f"{kind:>8}: batch median {median[kind] * 1000:8.1f} ms  ratio {ratio:5.2f}x"
              f"  client CPU {cpu[kind] * 1000:6.2f} ms/run  run p50 {p50[kind] * 1000:7.1f} ms")
    print(f"journal: +{(cpu['journal'] - cpu['noop']) * 1000:.2f} ms client CPU per run, "
          f"{calls:.2f} store calls per run, {failed} failed runs")


if __name__ == "__main__":
    main()
