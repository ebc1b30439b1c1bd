"""Benchmark of the Redis store against a raw redis-py pipeline of the same commands (issue 9).

    .venv/bin/python bench/bench_redis.py            # full sizes (a 1M-event thread; a few minutes)
    .venv/bin/python bench/bench_redis.py --quick    # 100k-event thread, fewer appends
    .venv/bin/python bench/bench_redis.py --only write|read|concurrent

Every figure is measured in the same run against the limit the store could reach: a raw
``pipeline(transaction=False)`` that sends the very commands the store's Lua script runs (HSET record
and event_id, ZADD into each index, SET counter, SADD key registry, PUBLISH), with seqs assigned on the
client and records pre-encoded, so it does no dedupe and no atomic seq: it is an upper bound, not an
alternative. Reads: the store's page (one script: ZRANGEBYSCORE LIMIT + HMGET) plus decoding into
``RunEvent`` against raw ``HMGET`` of the same seqs (the thread is dense) plus ``json.loads``.
Ratios are store time / raw time (lower is better; 1.0 is the limit). redis-py builds each pipelined
command in Python, so for writes that "limit" is slower than the store's one script; a second
baseline (records only: one multi-field HSET per batch, no index) is the true floor. Keys live under
a prefix of their own, deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import redis.asyncio as aioredis

from run_journal import NewEvent, open_store
from run_journal.stores.redis import RedisRunEventStore
from run_journal.stores.redis.records import encode

REDIS_URL = os.environ.get("RUN_JOURNAL_REDIS_URL", "redis://127.0.0.1:6379/0")
WRITERS = 8


def make_events(thread_id: str, count: int, run_id: str = "run") -> list[NewEvent]:
    """Half messages, half trace rows, with payloads like a model response."""
    return [
        NewEvent(
            thread_id=thread_id, run_id=run_id,
            event_type="llm.ai.response" if n % 2 == 0 else "tool.call",
            category="message" if n % 2 == 0 else "trace",
            content={"text": f"answer {n} " + "lorem ipsum " * 6, "tool_calls": []},
            metadata={"model": "fake", "n": n},
        )
        for n in range(count)
    ]


def raw_append(pipe: Any, prefix: str, batch: list[NewEvent], first_seq: int) -> None:
    """Queue what the append script does for ``batch`` (no user_id / task_id in these events)."""
    thread = f"{prefix}t/{batch[0].thread_id}/"
    touched: set[str] = set()
    for seq, event in enumerate(batch, start=first_seq):
        run = f"{thread}r/{event.run_id}/"
        pipe.hset(thread + "ev", seq, encode(event))
        pipe.hset(thread + "ids", event.event_id, seq)
        indexes = [thread + "all", run + "all", f"{thread}ty/{event.event_type}",
                   f"{run}ty/{event.event_type}"]
        if event.category == "message":
            indexes += [thread + "msg", run + "msg"]
        for key in indexes:
            pipe.zadd(key, {str(seq): seq})
        touched.update(indexes[1:])
    last = first_seq + len(batch) - 1
    pipe.set(thread + "seq", last)
    pipe.zadd(prefix + "threads", {batch[0].thread_id: 0})
    pipe.sadd(thread + "keys", *touched)
    pipe.publish(thread + "new", last)


async def timed(work: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await work()
    return time.perf_counter() - started


def line(name: str, store_s: float, raw_s: float, unit: str, count: int) -> None:
    print(f"{name:<44} store {count / store_s:>10,.0f} {unit}/s   raw {count / raw_s:>10,.0f} {unit}/s"
          f"   ratio {store_s / raw_s:5.2f}x")


async def bench_appends(url: str, client: aioredis.Redis, prefix: str, quick: bool) -> None:
    single, batched = (300, 5_000) if quick else (2_000, 50_000)
    async with open_store(url) as store:
        one = make_events("single", single)
        store_s = await timed(lambda: _each(store, one, 1))
        raw_s = await timed(lambda: _raw_each(client, prefix + "raw:", make_events("single", single), 1))
        line(f"single put ({single} events, 1 per call)", store_s, raw_s, "events", single)
        many = make_events("batch", batched)
        store_s = await timed(lambda: _each(store, many, 100))
        raw_s = await timed(lambda: _raw_each(client, prefix + "raw:", make_events("batch", batched), 100))
        line(f"put_batch of 100 ({batched} events)", store_s, raw_s, "events", batched)
        floor_s = await timed(lambda: _floor_each(client, prefix + "floor:", make_events("batch", batched)))
        line("put_batch of 100 vs records only (no index)", store_s, floor_s, "events", batched)


async def _floor_each(client: aioredis.Redis, prefix: str, events: list[NewEvent]) -> None:
    """A floor below the limit: per batch, one HSET of the records and one of the event ids only."""
    for start in range(0, len(events), 100):
        batch = events[start:start + 100]
        async with client.pipeline(transaction=False) as pipe:
            pipe.hset(prefix + "ev", mapping={start + n: encode(e) for n, e in enumerate(batch, 1)})
            pipe.hset(prefix + "ids", mapping={e.event_id: start + n for n, e in enumerate(batch, 1)})
            pipe.set(prefix + "seq", start + len(batch))
            await pipe.execute()


async def _each(store: Any, events: list[NewEvent], size: int) -> None:
    for start in range(0, len(events), size):
        await store.put_batch(events[start:start + size])


async def _raw_each(client: aioredis.Redis, prefix: str, events: list[NewEvent], size: int,
                    first_seq: int = 1) -> None:
    for start in range(0, len(events), size):
        async with client.pipeline(transaction=False) as pipe:
            raw_append(pipe, prefix, events[start:start + size], first_seq + start)
            await pipe.execute()


async def bench_reads(url: str, client: aioredis.Redis, quick: bool, repeat: int) -> None:
    total = 100_000 if quick else 1_000_000
    async with open_store(url) as store:
        assert isinstance(store, RedisRunEventStore)
        started = time.perf_counter()
        for start in range(0, total, 10_000):
            size = min(10_000, total - start)
            await store.put_batch(make_events("big", size, run_id=f"r{start // 50_000}"))
        print(f"built a {total:,}-event thread through put_batch in {time.perf_counter() - started:.1f}s")
        records = store.prefix + "t/big/ev"
        for name, after in (("start", 0), ("middle", total // 2), ("end", total - 500)):
            seqs = list(range(after + 1, after + 501))
            store_s = await _median(repeat, partial(store.list_events, "big", limit=500, after_seq=after))
            raw_s = await _median(repeat, partial(_raw_page, client, records, seqs))
            line(f"list_events page of 500 at the {name}", store_s, raw_s, "pages", 1)
        latest = list(range(total - 99, total + 1, 2))
        store_s = await _median(repeat, lambda: store.list_messages("big", limit=50))
        raw_s = await _median(repeat, lambda: _raw_page(client, records, latest))
        line("list_messages latest 50", store_s, raw_s, "pages", 1)
        middle = list(range(total // 2 - 99, total // 2 + 1, 2))
        before = total // 2 + 1
        store_s = await _median(repeat, lambda: store.list_messages("big", limit=50, before_seq=before))
        raw_s = await _median(repeat, lambda: _raw_page(client, records, middle))
        line("list_messages 50 before the middle", store_s, raw_s, "pages", 1)


async def _raw_page(client: aioredis.Redis, records: str, seqs: list[int]) -> list[Any]:
    return [json.loads(raw) for raw in await client.hmget(records, seqs) if raw is not None]


async def _median(repeat: int, work: Callable[[], Awaitable[object]]) -> float:
    return statistics.median([await timed(work) for _ in range(repeat)])


async def bench_concurrent(url: str, prefix: str, quick: bool) -> None:
    """8 writer processes into one thread, 100-event batches; wall time from a common start."""
    per_writer = 1_000 if quick else 10_000
    results = {}
    for mode in ("store", "raw"):
        workers = [
            await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--worker", mode, url, prefix, str(w), str(per_writer),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            )
            for w in range(WRITERS)
        ]
        for worker in workers:  # each has built its events and connected
            assert worker.stdout is not None
            await worker.stdout.readline()
        started = time.perf_counter()
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write(b"go\n")
            await worker.stdin.drain()
        for worker in workers:
            await worker.communicate()
            assert worker.returncode == 0
        results[mode] = time.perf_counter() - started
    line(f"{WRITERS} writer processes, one thread, batches of 100", results["store"], results["raw"],
         "events", WRITERS * per_writer)
    async with open_store(url) as store:
        assert await store.last_seq("shared") == WRITERS * per_writer


async def worker(mode: str, url: str, prefix: str, index: int, count: int) -> None:
    events = make_events("shared", count, run_id=f"w{index}")
    client = aioredis.Redis.from_url(REDIS_URL)
    async with open_store(url) as store:
        await client.ping()
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        if mode == "store":
            await _each(store, events, 100)
        else:
            await _raw_each(client, prefix + "raw:", events, 100, first_seq=1 + index * count)
    await client.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=("write", "read", "concurrent"))
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    prefix = f"rjbench:{uuid.uuid4().hex[:8]}:"
    url = f"{REDIS_URL}?prefix={prefix}"
    client = aioredis.Redis.from_url(REDIS_URL)
    print(f"Redis {(await client.info('server'))['redis_version']} at {REDIS_URL}; ratio = store / raw")
    try:
        if args.only in (None, "write"):
            await bench_appends(url, client, prefix, args.quick)
        if args.only in (None, "read"):
            await bench_reads(url, client, args.quick, args.repeat)
        if args.only in (None, "concurrent"):
            await bench_concurrent(url, prefix, args.quick)
    finally:
        async for key in client.scan_iter(match=prefix + "*", count=10_000):
            await client.unlink(key)
        await client.aclose()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        mode, url, prefix, index, count = sys.argv[2:7]
        asyncio.run(worker(mode, url, prefix, int(index), int(count)))
    else:
        asyncio.run(main())
