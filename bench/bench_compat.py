"""Benchmark of the DeerFlow-compatible read API: what its pages cost against our own API's page of
the same rows (in process, httpx's ASGI transport), per backend.

    .venv/bin/python bench/bench_compat.py                 # every backend
    .venv/bin/python bench/bench_compat.py --only sqlite --runs 200

One thread of ``--runs`` runs, each a ``run.start``, 20 model replies and 40 tool calls, a
``run.end`` and a run row, with feedback (a ``run.score``) on one run in ten. Median of ``--repeat``
timings after a warm-up, of:

- the newest history page: ``GET /api/threads/T/messages/page?limit=50`` (the gateway's: with its
  feedback, durations and superseded runs) against ours, ``GET /journal/api/threads/T/messages/page``;
- the thread's token usage: ``GET /api/threads/T/token-usage`` against ours.

PostgreSQL and Redis are read from ``RUN_JOURNAL_POSTGRES_URL`` / ``RUN_JOURNAL_REDIS_URL`` (a schema
and a key prefix of the benchmark's own, removed afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from run_journal import RunEventStore, RunRow, UsageTotals, open_store
from run_journal.checks import record_score
from run_journal.http import create_deerflow_app

START = datetime(2026, 1, 1, tzinfo=UTC)
THREAD = "bench-thread"
PAGES = (
    ("history page", "/api/threads/{t}/messages/page?limit=50",
     "/journal/api/threads/{t}/messages/page?limit=50"),
    ("token usage", "/api/threads/{t}/token-usage", "/journal/api/threads/{t}/token-usage"),
)


def urls(only: str | None) -> dict[str, str]:
    tag = uuid.uuid4().hex[:8]
    folder = tempfile.mkdtemp(prefix="bench-compat-")
    found = {
        "memory": "memory://",
        "jsonl": f"jsonl:///{folder}/journal",
        "sqlite": f"sqlite:///{folder}/journal.db",
        "postgres": os.environ.get("RUN_JOURNAL_POSTGRES_URL",
                                   "postgresql://postgres@127.0.0.1:5432/test") + f"?schema=bench_{tag}",
        "redis": os.environ.get("RUN_JOURNAL_REDIS_URL", "redis://127.0.0.1:6379/0")
        + f"?prefix=bench-compat-{tag}:",
    }
    return {name: url for name, url in found.items() if only in (None, name)}


async def fill(store: RunEventStore, runs: int) -> None:
    for index in range(runs):
        run = f"run-{index:05d}"
        events: list[dict[str, Any]] = [{"event_type": "run.start", "category": "trace",
                                         "metadata": {"caller": "lead_agent", "run_metadata": {}}}]
        for step in range(20):
            events.append({"event_type": "llm.ai.response", "category": "message",
                           "content": {"type": "ai", "content": f"step {step}"},
                           "metadata": {"caller": "lead_agent", "model_name": "m",
                                        "usage": {"input_tokens": 50, "output_tokens": 10}}})
            events += [{"event_type": "tool.call", "category": "trace",
                        "content": {"tool_call_id": f"c{step}-{k}", "tool_name": "search",
                                    "args_preview": "{}"},
                        "metadata": {"caller": "lead_agent", "tool_call_id": f"c{step}-{k}"}}
                       for k in range(2)]
        events.append({"event_type": "run.end", "category": "outputs", "metadata": {}})
        await store.put_batch([{"thread_id": THREAD, "run_id": run, **event} for event in events])
        usage = UsageTotals(input_tokens=1000, output_tokens=200, total_tokens=1200, llm_calls=20)
        await store.put_run(RunRow(run_id=run, thread_id=THREAD, status="success",
                                   started_at=START + timedelta(minutes=index),
                                   ended_at=START + timedelta(minutes=index, seconds=30),
                                   usage=usage, usage_by_model={"m": usage},
                                   usage_by_caller={"lead_agent": usage}))
        if index % 10 == 0:
            await record_score(store, THREAD, run, "feedback", 1, source="human")


async def timed(client: httpx.AsyncClient, path: str, repeat: int) -> float:
    assert (await client.get(path)).status_code == 200
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        response = await client.get(path)
        times.append(time.perf_counter() - began)
        assert response.status_code == 200, response.text
    return statistics.median(times) * 1000


async def bench(name: str, url: str, runs: int, repeat: int) -> None:
    async with open_store(url) as store:
        await fill(store, runs)
        app = create_deerflow_app(store)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            for label, theirs, ours in PAGES:
                gateway = await timed(client, theirs.format(t=THREAD), repeat)
                own = await timed(client, ours.format(t=THREAD), repeat)
                print(f"| {name} | {label} | {own:.1f} ms | {gateway:.1f} ms | {gateway / own:.1f}x |",
                      flush=True)
        await store.delete_by_thread(THREAD)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["memory", "jsonl", "sqlite", "postgres", "redis"])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print(f"{args.runs} runs of 62 events in one thread; medians of {args.repeat}")
    print("| backend | page | our API | the gateway's | ratio |\n| --- | --- | --- | --- | --- |")
    for name, url in urls(args.only).items():
        asyncio.run(bench(name, url, args.runs, args.repeat))


if __name__ == "__main__":
    main()
