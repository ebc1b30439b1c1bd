"""Benchmark of the HTTP API (issue 19): what a page of the run viewer costs over the store call alone.

    .venv/bin/python bench/bench_http.py              # SQLite and PostgreSQL
    .venv/bin/python bench/bench_http.py --only sqlite

Two stores per backend, filled first: one run of 10,000 events (model calls, tool calls, outcomes), and
10,000 threads of one small run each (3 events and a run row). Then, median of ``--repeat`` timings
after a warm-up, for:

- the first timeline page of the 10,000-event run: ``GET /api/threads/T/runs/R/events?limit=200``
  against the store call it wraps, ``list_events(T, R, limit=201, after_seq=0)``;
- the first page of the thread list: ``GET /api/threads?limit=50`` against ``list_threads(limit=51)``
  alone, and against every store call the page makes (the threads, then each one's ``list_runs``:
  ``views.thread_page`` called directly).

Each HTTP figure is taken twice: in process (httpx's ASGI transport: routing, validation, JSON) and over
a real socket from ``run-journal URL serve`` (uvicorn on 127.0.0.1, one keep-alive client).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from run_journal import NewEvent, RunEventStore, RunRow, UsageTotals, open_store
from run_journal.http import create_app, views

POSTGRES_URL = os.environ.get("RUN_JOURNAL_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
RUN_JOURNAL = str(Path(sys.executable).with_name("run-journal"))
START = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
LONG_THREAD, LONG_RUN = "long-thread", "long-run"


def long_run(count: int) -> list[NewEvent]:
    events: list[NewEvent] = [NewEvent(LONG_THREAD, LONG_RUN, "run.start", "trace", {"run_name": "job"},
                                       {"caller": "lead_agent"}, START)]
    n = 0
    while len(events) < count:
        n += 1
        at = START + timedelta(milliseconds=len(events))
        call = f"call-{n}"
        events += [
            NewEvent(LONG_THREAD, LONG_RUN, "llm.ai.response", "message",
                     {"type": "ai", "content": f"step {n}: reading the next page of results",
                      "tool_calls": [{"name": "fetch", "args": {"page": n}, "id": call}]},
                     {"caller": "lead_agent", "model_name": "fake-gpt",
                      "usage": {"input_tokens": 50, "output_tokens": 10, "total_tokens": 60}}, at),
            NewEvent(LONG_THREAD, LONG_RUN, "tool.call", "trace",
                     {"tool_call_id": call, "tool_name": "fetch", "args_preview": f'{{"page":{n}}}'},
                     {"caller": "lead_agent", "tool_call_id": call}, at),
            NewEvent(LONG_THREAD, LONG_RUN, "tool.outcome", "trace",
                     {"tool_call_id": call, "tool_name": "fetch", "outcome": "success",
                      "result_size": 120, "duration_ms": 3}, {"caller": "lead_agent", "tool_call_id": call},
                     at),
        ]
    return events[:count]


async def fill(store: RunEventStore, events: int, threads: int) -> None:
    batch = long_run(events)
    for offset in range(0, len(batch), 1000):
        await store.put_batch(batch[offset: offset + 1000])
    await store.put_run(RunRow(run_id=LONG_RUN, thread_id=LONG_THREAD, status="success",
                               started_at=START, ended_at=START + timedelta(seconds=10)))
    totals = UsageTotals(input_tokens=100, output_tokens=20, total_tokens=120, llm_calls=1)
    pending: list[NewEvent] = []
    for n in range(threads):
        thread, run = f"thread-{n:05d}", f"run-{n:05d}"
        at = START + timedelta(seconds=n)
        pending += [
            NewEvent(thread, run, "run.start", "trace", {"run_name": "agent"}, {"caller": "lead_agent"}, at),
            NewEvent(thread, run, "llm.human.input", "message", {"type": "human", "content": f"hello {n}"},
                     {"caller": "lead_agent"}, at),
            NewEvent(thread, run, "run.end", "outputs", {}, {"caller": "lead_agent"}, at),
        ]
        if len(pending) >= 1500:
            await store.put_batch(pending)
            pending = []
    if pending:
        await store.put_batch(pending)
    rows = [RunRow(run_id=f"run-{n:05d}", thread_id=f"thread-{n:05d}", status="success",
                   started_at=START + timedelta(seconds=n), ended_at=START + timedelta(seconds=n + 1),
                   usage=totals, first_human_message=f"hello {n}") for n in range(threads)]
    for start in range(0, len(rows), 200):
        await asyncio.gather(*(store.put_run(row) for row in rows[start: start + 200]))


async def median_ms(call: Callable[[], Awaitable[Any]], repeat: int) -> float:
    for _ in range(3):
        await call()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def start_server(url: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([RUN_JOURNAL, url, "serve", "--port", "0"], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout is not None
    match = re.search(r"at (http://\S+/)", process.stdout.readline())
    assert match, "serve did not start"
    return process, match[1]


async def measure(name: str, url: str, repeat: int, events: int, threads: int) -> list[str]:
    lines = []
    async with open_store(url) as store:
        started = time.perf_counter()
        await fill(store, events, threads)
        print(f"{name}: filled {events} events in one run and {threads} threads in "
              f"{time.perf_counter() - started:.1f}s", flush=True)
        page_path = f"/api/threads/{LONG_THREAD}/runs/{LONG_RUN}/events"
        transport = httpx.ASGITransport(app=create_app(store))
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            async def page_http() -> None:
                response = await client.get(page_path, params={"limit": 200})
                assert response.status_code == 200
                assert response.content.count(b'"event_id"') == 200  # the client does not parse it

            async def threads_http() -> None:
                response = await client.get("/api/threads", params={"limit": 50})
                assert response.status_code == 200
                assert response.content.count(b'"run_count"') == 50

            page_store = await median_ms(
                lambda: store.list_events(LONG_THREAD, LONG_RUN, limit=201, after_seq=0), repeat)
            page_asgi = await median_ms(page_http, repeat)
            threads_store = await median_ms(lambda: store.list_threads(limit=51), repeat)
            threads_calls = await median_ms(
                lambda: views.thread_page(store, limit=50, after=None, user_id=None), repeat)
            threads_asgi = await median_ms(threads_http, repeat)
    process, base = await asyncio.to_thread(start_server, url)
    try:
        async with httpx.AsyncClient(base_url=base) as client:
            async def page_socket() -> None:
                response = await client.get(page_path.lstrip("/"), params={"limit": 200})
                assert response.status_code == 200

            async def threads_socket() -> None:
                response = await client.get("api/threads", params={"limit": 50})
                assert response.status_code == 200

            page_served = await median_ms(page_socket, repeat)
            threads_served = await median_ms(threads_socket, repeat)
    finally:
        process.terminate()
        await asyncio.to_thread(process.wait, 15)
    lines.append(f"{name:<10} timeline page (200 of {events}): store {page_store:6.2f} ms | "
                 f"in process {page_asgi:6.2f} ms ({page_asgi / page_store:4.1f}x) | "
                 f"served {page_served:6.2f} ms ({page_served / page_store:4.1f}x)")
    lines.append(f"{name:<10} thread list (50 of {threads}): list_threads {threads_store:6.2f} ms, "
                 f"all its store calls {threads_calls:6.2f} ms | in process {threads_asgi:6.2f} ms "
                 f"({threads_asgi / threads_store:4.1f}x; {threads_asgi / threads_calls:4.2f}x the calls) | "
                 f"served {threads_served:6.2f} ms ({threads_served / threads_store:4.1f}x; "
                 f"{threads_served / threads_calls:4.2f}x the calls)")
    return lines


async def postgres_url() -> tuple[str, Callable[[], Awaitable[None]]]:
    import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type information

    schema = f"bench_http_{uuid.uuid4().hex[:8]}"

    async def drop() -> None:
        connection = await asyncpg.connect(POSTGRES_URL)
        try:
            await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await connection.close()

    return f"{POSTGRES_URL}?schema={schema}", drop


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=10_000)
    args = parser.parse_args()
    results = []
    if args.only in (None, "sqlite"):
        with tempfile.TemporaryDirectory() as folder:
            results += await measure("sqlite", f"sqlite:///{folder}/bench.db", args.repeat, args.events,
                                     args.threads)
    if args.only in (None, "postgres"):
        url, drop = await postgres_url()
        try:
            results += await measure("postgresql", url, args.repeat, args.events, args.threads)
        finally:
            await drop()
    print(f"\nmedians of {args.repeat}; Python {sys.version.split()[0]}, {os.cpu_count()} cores")
    for line in results:
        print(line)


if __name__ == "__main__":
    asyncio.run(main())
