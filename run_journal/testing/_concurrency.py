"""Conformance tests: many concurrent writers on one thread."""

from __future__ import annotations

import asyncio
import random

from run_journal.stores.base import RunEventStore
from run_journal.testing._support import GUARD, StoreSuiteBase, new_event, read_all


class ConcurrencyTests(StoreSuiteBase):
    """Many concurrent writers on one thread."""

    async def test_concurrent_writers_give_dense_unique_seq(self, store: RunEventStore) -> None:
        writers, per_writer = self.concurrent_writers, self.events_per_writer
        total = writers * per_writer
        done = asyncio.Event()

        async def write(worker: int) -> None:
            rng, n = random.Random(worker), 0
            while n < per_writer:
                size = min(rng.choice((1, 1, 5, 10, 25)), per_writer - n)
                batch = [new_event("hot", f"w{worker}", content=n + i, event_id=f"w{worker}-{n + i}")
                         for i in range(size)]
                if size == 1:
                    await store.put(
                        thread_id="hot", run_id=f"w{worker}", event_type="llm.ai.response",
                        category="message", content=n, event_id=f"w{worker}-{n}",
                    )
                else:
                    await store.put_batch(batch)
                n += size

        async def poll() -> list[int]:
            seen: list[int] = []
            while len(seen) < total:
                finished = done.is_set()
                page = await store.list_events("hot", limit=500, after_seq=seen[-1] if seen else 0)
                expected = list(range(len(seen) + 1, len(seen) + 1 + len(page)))
                assert [e.seq for e in page] == expected, "a seq appeared below one already seen"
                seen.extend(e.seq for e in page)
                if not page:
                    assert not finished, f"events were lost: {len(seen)} of {total} readable"
                    await asyncio.sleep(0.005)
            return seen

        async def run_writers() -> None:
            await asyncio.gather(*(write(w) for w in range(writers)))
            done.set()

        async with asyncio.timeout(GUARD * 4):
            _, seen = await asyncio.gather(run_writers(), poll())
        events = await read_all(store, "hot")
        assert seen == [e.seq for e in events] == list(range(1, total + 1))
        assert sorted(e.event_id for e in events) == sorted(
            f"w{w}-{n}" for w in range(writers) for n in range(per_writer)
        )
        for worker in range(writers):
            assert [e.content for e in events if e.run_id == f"w{worker}"] == list(range(per_writer))
