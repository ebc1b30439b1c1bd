"""Conformance tests: ``follow``: existing then live events, and stopping on close."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import cast

import pytest

from run_journal.envelope import RunEvent
from run_journal.stores.base import RunEventStore, StoreClosedError
from run_journal.testing._support import GUARD, StoreFactory, StoreSuiteBase, new_event


class FollowTests(StoreSuiteBase):
    """``follow``: existing then live events, and stopping on close."""

    async def test_follow_yields_existing_then_new_events(self, store: RunEventStore) -> None:
        await store.put_batch([new_event("live", content=i) for i in range(3)])
        follower = cast("AsyncGenerator[RunEvent, None]", store.follow("live", after_seq=1))
        async with asyncio.timeout(GUARD), aclosing(follower):
            assert [(await anext(follower)).seq for _ in range(2)] == [2, 3]
            pending = asyncio.ensure_future(anext(follower))
            await asyncio.sleep(0.05)  # let the follower reach its wait before the write
            later = await store.put_batch([new_event("live", content=i) for i in (3, 4)])
            await store.put(thread_id="elsewhere", run_id="r", event_type="tool.call", category="trace")
            assert (await pending).to_dict() == later[0].to_dict()
            assert (await anext(follower)).to_dict() == later[1].to_dict()
        with pytest.raises(StopAsyncIteration):
            await anext(follower)
        written = await store.put(thread_id="live", run_id="r", event_type="tool.call", category="trace")
        assert written.seq == 6

    async def test_follow_stops_when_the_store_is_closed(self, store_factory: StoreFactory) -> None:
        async with store_factory() as other:
            other.follow_poll_interval = 0.01
            await other.put_batch([new_event("closing", content=i) for i in range(2)])
            seen: list[int] = []

            async def consume() -> None:
                async for event in other.follow("closing"):
                    seen.append(event.seq)

            consumer = asyncio.ensure_future(consume())
            async with asyncio.timeout(GUARD):
                while len(seen) < 2:  # noqa: ASYNC110 - polling a list the consumer fills is simplest
                    await asyncio.sleep(0.01)
                await other.aclose()
                await consumer
            assert seen == [1, 2]
            with pytest.raises(StoreClosedError):
                await other.put(thread_id="closing", run_id="r", event_type="tool.call", category="trace")

