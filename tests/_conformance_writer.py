"""Subprocess worker for the multi-process conformance tests: one writer process into one thread.

``python _conformance_writer.py URL THREAD WORKER COUNT`` writes COUNT events (batches of 10..50,
event ids ``p{WORKER}-{n}``) through its own ``open_store(URL)`` and prints one line per batch, so the
parent can kill it mid-batch. COUNT 0 means: write until killed. Every batch also puts three of the
eight bodies ``shared_body(THREAD, k)`` that every worker puts (the same digests from every process).
"""

from __future__ import annotations

import asyncio
import random
import sys

from run_journal import NewEvent, open_store
from run_journal.bodies import Body

SHARED_BODIES = 8


def shared_body(thread_id: str, k: int) -> Body:
    return Body.of(thread_id, {"role": "system", "content": f"shared instructions #{k}"})


async def main(url: str, thread_id: str, worker: int, count: int) -> None:
    rng = random.Random(worker)
    written = 0
    async with open_store(url) as store:
        while count == 0 or written < count:
            size = rng.randint(10, 50) if count == 0 else min(rng.randint(10, 50), count - written)
            batch_id = f"p{worker}-b{written}"
            await store.put_batch((
                NewEvent(
                    thread_id=thread_id, run_id=f"p{worker}", event_type="llm.ai.response",
                    category="message", content={"n": written + i},
                    metadata={"batch": batch_id, "batch_size": size},
                    event_id=f"p{worker}-{written + i}",
                )
                for i in range(size)
            ), bodies=[shared_body(thread_id, (written // 10 + k) % SHARED_BODIES) for k in range(3)])
            written += size
            print(written, flush=True)


if __name__ == "__main__":
    url, thread_id, worker, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    asyncio.run(main(url, thread_id, worker, count))
