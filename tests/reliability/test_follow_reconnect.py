"""``follow`` survives a dropped connection: it reconnects and resumes after the last seq it yielded.

PostgreSQL: every server connection of the test database is terminated (``pg_terminate_backend``),
the follower's ``LISTEN`` connection and its pooled reading connection among them, three times while
a writer keeps writing. Redis: the follower's subscription and every other connection of the test's
two stores are killed (``CLIENT KILL ID``). The stores name their connections (redis-py's
``client_name`` URL parameter) and only connections of that name are killed: other clients of the
server, other test runs among them, keep theirs. The follower must yield every seq exactly once, in
order. When the server stays away (a stopped TCP proxy), ``follow`` raises ``FollowError`` after
``follow_attempts`` tries, naming the last seq it yielded.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis.asyncio as aioredis
from conftest import REDIS_URL, backend_url

from run_journal import RunEventStore, open_store
from run_journal.stores.base import StoreError

from ._support import TcpProxy
from .test_store_faults import terminate_connections

pytestmark = pytest.mark.reliability
GUARD = 120.0
EVENTS = 60
CUTS = (15, 30, 45)


async def put_retrying(store: RunEventStore, thread_id: str, n: int) -> None:
    """A writer of its own: the cut connections are its too, so it retries (same event_id)."""
    for _ in range(20):
        try:
            await store.put(thread_id=thread_id, run_id="w", event_type="tool.call", category="trace",
                            content={"n": n}, event_id=f"e{n}")
            return
        except Exception:
            await asyncio.sleep(0.05)
    raise AssertionError(f"the writer could not write event {n}")


async def follow_through_cuts(url: str, cut: Callable[[], Awaitable[object]]) -> list[int]:
    async with open_store(url) as writer, open_store(url) as follower:
        follower.follow_retry_delay = 0.05
        seqs: list[int] = []

        async def follow() -> None:
            async for event in follower.follow("f"):
                seqs.append(event.seq)
                if len(seqs) == EVENTS:
                    return

        following = asyncio.ensure_future(follow())
        async with asyncio.timeout(GUARD):
            for n in range(EVENTS):
                if n in CUTS:
                    while len(seqs) < n:  # noqa: ASYNC110 - the follower is waiting on its connection
                        await asyncio.sleep(0.01)
                    await cut()
                    await asyncio.sleep(0.2)
                await put_retrying(writer, "f", n)
            await following
    return seqs


async def test_follow_on_postgres_resumes_after_its_connections_are_terminated(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, postgres_database_url: str,
) -> None:
    url = backend_url("postgres", request, tmp_path_factory)
    terminated: list[int] = []

    async def cut() -> None:
        terminated.append(await terminate_connections(postgres_database_url))

    seqs = await follow_through_cuts(url, cut)
    assert seqs == list(range(1, EVENTS + 1))  # no gap, no repeat
    assert all(n >= 2 for n in terminated), terminated  # the LISTEN and a reading connection at least
    print(f"follow, PostgreSQL: {EVENTS} events, {len(CUTS)} cuts ({sum(terminated)} connections), "
          "0 missed, 0 repeated")


async def test_follow_on_redis_resumes_after_its_connections_are_killed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, redis_prefix_url: str,
) -> None:
    name = f"rjtest-follow-{uuid.uuid4().hex[:12]}"  # every connection of this test's two stores
    url = f"{backend_url('redis', request, tmp_path_factory)}&client_name={name}"
    killed: list[int] = []
    subscriptions: list[int] = []  # of the killed connections, those subscribed (the follower's)

    async def cut() -> None:
        admin = aioredis.Redis.from_url(REDIS_URL)
        try:
            ours = [client for client in await admin.client_list() if client.get("name") == name]
            killed.append(sum([int(await admin.client_kill_filter(_id=client["id"])) for client in ours]))
            subscriptions.append(sum(int(client.get("sub", 0)) > 0 for client in ours))
        finally:
            await admin.aclose()

    bystander = aioredis.Redis.from_url(REDIS_URL)  # another client of the server: must keep its connection
    try:
        before = await bystander.client_id()
        seqs = await follow_through_cuts(url, cut)
        after = await bystander.client_id()  # a killed connection would have reconnected with a new id
    finally:
        await bystander.aclose()
    assert seqs == list(range(1, EVENTS + 1))
    assert all(n >= 1 for n in killed), killed
    assert subscriptions == [1] * len(CUTS), subscriptions  # the follower's subscription, every time
    assert after == before
    print(f"follow, Redis: {EVENTS} events, {len(CUTS)} cuts ({sum(killed)} connections), "
          "0 missed, 0 repeated")


async def test_follow_gives_up_with_a_clear_error_when_the_server_stays_away(
    postgres_database_url: str,
) -> None:
    parts = urlsplit(postgres_database_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    await proxy.start()
    netloc = f"{parts.username}@127.0.0.1:{proxy.port}" if parts.username else f"127.0.0.1:{proxy.port}"
    url = urlunsplit(parts._replace(netloc=netloc, query="schema=follow_down"))
    try:
        async with open_store(url) as store:
            store.follow_retry_delay = 0.05
            await store.put_batch([{"thread_id": "f", "run_id": "r", "event_type": "tool.call",
                                    "category": "trace"} for _ in range(3)])
            seen: list[int] = []

            async def follow() -> None:
                async for event in store.follow("f"):
                    seen.append(event.seq)
                    if len(seen) == 3:
                        await proxy.stop()

            async with asyncio.timeout(GUARD):
                with pytest.raises(StoreError, match=r"failed 6 times in a row.*after_seq=3") as caught:
                    await follow()
            assert seen == [1, 2, 3]
            assert type(caught.value).__name__ == "FollowError"
    finally:
        await proxy.stop()
