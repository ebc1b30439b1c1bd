"""JSONL page reads against reading the whole thread file, measured in the same run.

A thread of N events (100,000; 20,000 with ``--quick``), every 4th a message. For each page (50
messages: latest, before the middle, after the middle) it times ``JsonlRunEventStore`` and the
naive baseline a store without an index would need: read the whole file, decode every line, pick the
page. Prints median times and the ratio baseline / store (higher is better), plus bytes read.

    .venv/bin/python bench/bench_jsonl.py [--quick] [--events N] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO

from run_journal import NewEvent
from run_journal.stores.jsonl import JsonlRunEventStore
from run_journal.stores.jsonl import log as jsonl_log
from run_journal.stores.jsonl.layout import file_name

LIMIT = 50


async def build(store: JsonlRunEventStore, events: int) -> None:
    for start in range(0, events, 5000):
        await store.put_batch(
            NewEvent(thread_id="bench", run_id=f"r{n // 1000}",
                     event_type="llm.ai.response" if n % 4 == 0 else "tool.call",
                     category="message" if n % 4 == 0 else "trace",
                     content={"n": n, "text": "lorem ipsum " * 10})
            for n in range(start, min(events, start + 5000))
        )


def whole_file_page(path: Path, before: int | None, after: int | None) -> list[int]:
    """The baseline: what answering the same page costs when every line must be read and decoded."""
    messages = [
        record["seq"]
        for record in map(json.loads, path.read_bytes().split(b"\n")[:-1])
        if record["category"] == "message"
        and (before is None or record["seq"] < before)
        and (after is None or record["seq"] > after)
    ]
    return messages[:LIMIT] if after is not None else messages[-LIMIT:]


def median_seconds(repeat: int, work: Callable[[], object]) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


async def median_seconds_async(repeat: int, work: Callable[[], Awaitable[object]]) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        await work()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20,000 events, 3 repeats")
    parser.add_argument("--events", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args()
    events = args.events or (20_000 if args.quick else 100_000)
    repeat = args.repeat or (3 if args.quick else 7)

    counted: list[int] = []
    real_read = jsonl_log.read_at

    def counting_read(handle: IO[bytes], offset: int, size: int) -> bytes:
        data = real_read(handle, offset, size)
        counted.append(len(data))
        return data

    jsonl_log.read_at = counting_read  # count what the store reads (benchmark only)
    with tempfile.TemporaryDirectory() as folder:
        async with JsonlRunEventStore(Path(folder) / "journal") as store:
            started = time.perf_counter()
            await build(store, events)
            print(f"built a thread of {events:,} events in {time.perf_counter() - started:.1f}s")
            thread_dir = store.root / "threads" / file_name("bench")
            generation = json.loads((thread_dir / "meta.json").read_text())["generation"]
            path = thread_dir / f"events-{generation}.jsonl"
            size = path.stat().st_size
            middle = events // 2
            cases = {
                "latest": (None, None),
                "before_seq=middle": (middle + 1, None),
                "after_seq=middle": (None, middle),
            }
            print(f"thread file: {size / 1e6:.1f} MB; page = {LIMIT} messages; median of {repeat}")
            print(f"{'page':<20}{'store ms':>10}{'whole file ms':>15}{'ratio':>9}{'store bytes':>14}")
            for name, (before, after) in cases.items():
                page = await store.list_messages("bench", limit=LIMIT, before_seq=before, after_seq=after)
                assert [e.seq for e in page] == whole_file_page(path, before, after), name
                counted.clear()
                ours = await median_seconds_async(
                    repeat,
                    lambda b=before, a=after: store.list_messages(  # type: ignore[misc]  # bound defaults
                        "bench", limit=LIMIT, before_seq=b, after_seq=a
                    ),
                )
                read_bytes = sum(counted) // repeat
                naive = median_seconds(repeat, lambda b=before, a=after: whole_file_page(path, b, a))  # type: ignore[misc]  # bound defaults
                print(f"{name:<20}{ours * 1e3:>10.2f}{naive * 1e3:>15.1f}{naive / ours:>8.0f}x"
                      f"{read_bytes:>14,}")
    jsonl_log.read_at = real_read


if __name__ == "__main__":
    asyncio.run(main())
