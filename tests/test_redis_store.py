"""What only the Redis store does: key prefixes, atomic Lua writes, index paging, pubsub follow,
retention, and clean deletes. The shared contract is ``test_store_conformance.py`` (``-k redis``).

Every test works under a key prefix of its own inside the session prefix of ``conftest.py``, which
skips these tests when no Redis server is reachable (and fails them with RUN_JOURNAL_REQUIRE_SERVERS=1).
"""

from __future__ import annotations

import asyncio
import random
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from run_journal import RunEvent, RunRow, open_store
from run_journal.bodies import Body
from run_journal.envelope import NewEvent
from run_journal.stores.base import IncompatibleStoreError
from run_journal.stores.redis import DEFAULT_PREFIX, RedisRetention, RedisRunEventStore
from run_journal.stores.redis.store import LAYOUT_VERSION
from run_journal.testing import read_all

pytestmark = pytest.mark.redis
GUARD = 60.0


@pytest.fixture
def url(redis_prefix_url: str) -> str:
    """A store URL whose prefix is this test's own (the session prefix plus a fresh part)."""
    return f"{redis_prefix_url}{uuid.uuid4().hex[:8]}:"


@pytest.fixture
async def store(url: str) -> AsyncIterator[RedisRunEventStore]:
    async with open_store(url) as opened:
        assert isinstance(opened, RedisRunEventStore)
        yield opened


@pytest.fixture
async def raw(url: str) -> AsyncIterator[aioredis.Redis]:
    """A plain client on the same server, to look at the keys the store wrote."""
    client = aioredis.Redis.from_url(url.partition("?")[0], decode_responses=True)
    yield client
    await client.aclose()


async def keys_of(raw: aioredis.Redis, prefix: str) -> set[str]:
    return {key.removeprefix(prefix) async for key in raw.scan_iter(match=prefix + "*", count=1000)}


def event(thread_id: str = "t", run_id: str = "r", **fields: Any) -> NewEvent:
    fields.setdefault("event_type", "llm.ai.response")
    fields.setdefault("category", "message")
    return NewEvent(thread_id=thread_id, run_id=run_id, **fields)


async def test_the_prefix_namespaces_every_key_and_never_reaches_the_client(
    store: RedisRunEventStore, raw: aioredis.Redis, url: str
) -> None:
    await store.put_batch([event(user_id="u", metadata={"task_id": "k"}), event("t2", "r2")])
    await store.put_run(RunRow(run_id="r", thread_id="t"))
    prefix = store.prefix
    assert url.endswith("prefix=" + prefix)
    assert "prefix" not in store._client.connection_pool.connection_kwargs
    assert {"t/t/seq", "t/t/ev", "t/t/ids", "t/t/msg", "threads", "run/r", "runs"} <= await keys_of(
        raw, prefix
    )
    async with open_store(url + "other:") as neighbour:
        assert await neighbour.list_threads() == []
        assert await neighbour.get_run("r") is None
    assert RedisRunEventStore.from_url("redis://127.0.0.1:6379/0").prefix == DEFAULT_PREFIX


async def test_a_caller_owned_client_with_decoded_replies_works_and_stays_open(
    url: str, raw: aioredis.Redis
) -> None:
    prefix = url.partition("prefix=")[2]
    client = aioredis.Redis.from_url(url.partition("?")[0], decode_responses=True)
    async with RedisRunEventStore(client, prefix=prefix) as store:
        written = await store.put_batch([event(content=i, user_id="u") for i in range(3)])
        await store.put_run(RunRow(run_id="r", thread_id="t", status="running"))
        assert [e.to_dict() for e in await store.list_messages("t")] == [e.to_dict() for e in written]
        assert await store.list_threads(user_id="u") == ["t"]
        assert [row.run_id for row in await store.list_runs("t")] == ["r"]
    assert await client.ping()  # the store did not close what it does not own
    await client.aclose()


async def test_reads_through_indexes_match_a_full_scan(store: RedisRunEventStore) -> None:
    """Pages driven by one index (or a union of several) and filtered further are exact."""
    rng = random.Random(7)
    kinds = [("llm.ai.response", "message"), ("ai_message", "message"), ("tool.call", "trace"),
             ("subagent.step", "subagent"), ("llm.tool.result", "message")]
    batch = []
    for n in range(400):
        event_type, category = rng.choice(kinds)
        batch.append(event(
            "big", rng.choice(["a", "b", "c"]), event_type=event_type, category=category,
            user_id=rng.choice(["u1", "u2", None]), metadata={"task_id": rng.choice(["k1", "k2", "k3"])},
            content=n,
        ))
    for start in range(0, len(batch), 100):
        await store.put_batch(batch[start:start + 100])
    everything = await read_all(store, "big")
    assert [e.seq for e in everything] == list(range(1, 401))

    def expect(rows: list[RunEvent], limit: int, before: int | None, after: int | None) -> list[int]:
        if after is not None:
            return [e.seq for e in rows if e.seq > after and (before is None or e.seq < before)][:limit]
        return [e.seq for e in rows if before is None or e.seq < before][-limit:]

    for _ in range(60):
        run, user = rng.choice(["a", "b", None]), rng.choice(["u1", "u2", None])
        task = rng.choice(["k1", None])
        types = rng.choice([None, ["ai_message"], ["tool.call", "subagent.step"]])
        limit, after = rng.choice([1, 7, 50]), rng.choice([None, 0, 150])
        rows = [e for e in everything if (run is None or e.run_id == run)
                and (user is None or e.user_id == user)
                and (task is None or e.metadata["task_id"] == task)
                and (types is None or e.event_type in types or (types == ["ai_message"]
                                                                  and e.event_type == "llm.ai.response"))]
        got = await store.list_events("big", run, event_types=types, task_id=task, limit=limit,
                                      after_seq=after or 0, user_id=user)
        assert [e.seq for e in got] == expect(rows, limit, None, after or 0)
        before = rng.choice([None, 300])
        messages = [e for e in everything if e.category == "message" and (user is None or e.user_id == user)]
        by_run = [e for e in messages if e.run_id == (run or "a")]
        assert [e.seq for e in await store.list_messages(
            "big", limit=limit, before_seq=before, after_seq=after, user_id=user
        )] == expect(messages, limit, before, after)
        assert [e.seq for e in await store.list_messages_by_run(
            "big", run or "a", limit=limit, before_seq=before, after_seq=after, user_id=user
        )] == expect(by_run, limit, before, after)


async def test_a_script_that_fails_writes_nothing(store: RedisRunEventStore, raw: aioredis.Redis) -> None:
    """The append script decides before it writes: a failure in that phase leaves no trace."""
    await store.put_batch([event(content=i) for i in range(2)])
    ids_key = store.prefix + "t/t/ids"
    saved = await raw.hgetall(ids_key)
    await raw.delete(ids_key)
    await raw.set(ids_key, "not a hash")  # a corrupt key makes the decision phase fail
    with pytest.raises(ResponseError):
        await store.put_batch([event(content="lost"), event("t", "r2", content="lost")])
    assert await store.last_seq("t") == 2
    assert [e.content for e in await read_all(store, "t")] == [0, 1]
    assert "t/t/r/r2/all" not in await keys_of(raw, store.prefix)
    await raw.delete(ids_key)
    await raw.hset(ids_key, mapping=saved)
    assert (await store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")).seq == 3


async def test_deletes_leave_no_key_behind(store: RedisRunEventStore, raw: aioredis.Redis) -> None:
    for run in ("a", "b"):
        await store.put_batch([
            event(run_id=run, user_id="u", metadata={"task_id": "k"}),
            event(run_id=run, event_type="tool.call", category="trace", user_id="v"),
            event(run_id=run, event_type="subagent.step", category="subagent", metadata={"task_id": run}),
        ], bodies=[Body.of("t", run)])
        await store.put_run(RunRow(run_id=run, thread_id="t"))
    assert await store.delete_by_run("t", "a") == 3
    assert await store.list_threads(user_id="u") == ["t"]
    assert await store.delete_by_run("t", "b") == 3
    assert await store.list_threads() == []
    assert await store.list_threads(user_id="u") == []
    kept = {"contract", "layout", "t/t/seq", "t/t/bodies", "t/t/bodyix"}  # a run's delete keeps bodies
    assert await keys_of(raw, store.prefix) == kept
    assert await store.last_seq("t") == 6
    await store.put(thread_id="t", run_id="c", event_type="tool.call", category="trace", user_id="u")
    await store.put_run(RunRow(run_id="c", thread_id="t"))
    assert await store.delete_by_thread("t") == 1
    assert await keys_of(raw, store.prefix) == {"contract", "layout", "t/t/seq"}  # seq is never reused
    assert await store.last_seq("t") == 7


async def test_retention_sets_and_refreshes_a_ttl_on_every_key(url: str, raw: aioredis.Redis) -> None:
    async with open_store(url + "&ttl_seconds=3600") as store:
        assert isinstance(store, RedisRunEventStore)
        await store.put_batch([event(user_id="u", metadata={"task_id": "k"}), event(run_id="r2")],
                              bodies=[Body.of("t", "kept as long as the events")])
        await store.put_run(RunRow(run_id="r", thread_id="t"))
        await store.put_bodies([Body.of("alone", "expires too")])
        for key in ("t/alone/bodies", "t/alone/bodyix"):
            assert 0 < await raw.ttl(store.prefix + key) <= 3600, key
        thread_keys = {key for key in await keys_of(raw, store.prefix) if key.startswith("t/t/")}
        assert {"t/t/bodies", "t/t/bodyix"} <= thread_keys
        assert len(thread_keys) > 10
        for key in [*thread_keys, "run/r"]:
            assert 0 < await raw.ttl(store.prefix + key) <= 3600, key
        for key in thread_keys:
            await raw.expire(store.prefix + key, 100)
        await store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")
        for key in thread_keys:
            assert await raw.ttl(store.prefix + key) > 100, key
        # keys expire one by one: a counter gone first must not let seq restart over old records
        await raw.delete(store.prefix + "t/t/seq")
        fresh = await store.put(thread_id="t", run_id="r9", event_type="tool.call", category="trace")
        assert fresh.seq == 1
        assert [e.event_id for e in await read_all(store, "t")] == [fresh.event_id]
        # a thread whose keys all expired leaves the thread lists on the next read
        await store.put(thread_id="gone", run_id="r", event_type="tool.call", category="trace")
        for key in await keys_of(raw, store.prefix + "t/gone/"):
            await raw.delete(store.prefix + "t/gone/" + key)
        assert await store.list_threads() == ["t"]
        await raw.delete(store.prefix + "run/r")  # a run row whose TTL ran out
        assert await store.list_runs() == []
        assert await raw.zcard(store.prefix + "runs") == 0
    with pytest.raises(ValueError, match="ttl_seconds"):
        RedisRetention(ttl_seconds=0)


async def test_a_store_of_another_contract_major_is_refused(url: str, raw: aioredis.Redis) -> None:
    prefix = url.partition("prefix=")[2]
    await raw.set(prefix + "contract", "2.0.0")
    with pytest.raises(IncompatibleStoreError):
        async with open_store(url):
            pass


async def test_follow_waits_on_the_channel_not_by_polling(store: RedisRunEventStore, url: str) -> None:
    reads = 0
    list_events = store.list_events

    async def counting(*args: Any, **kwargs: Any) -> list[RunEvent]:
        nonlocal reads
        reads += 1
        return await list_events(*args, **kwargs)

    store.list_events = counting  # type: ignore[method-assign]  # count the follower's reads
    follower = store.follow("live")
    async with asyncio.timeout(GUARD), aclosing(follower), open_store(url) as writer:
        pending = asyncio.ensure_future(anext(follower))
        for _ in range(20):
            await asyncio.sleep(0.01)  # idle: a polling follower would read again and again
        assert reads == 1
        written = await writer.put(thread_id="live", run_id="r", event_type="tool.call", category="trace")
        assert (await pending).to_dict() == written.to_dict()
        assert reads == 2


WRITER = """
import asyncio, sys
from run_journal import open_store
async def main(url, worker):
    async with open_store(url) as store:
        for n in range(0, 300, 30):
            await store.put_batch([dict(thread_id="mp", run_id=f"w{worker}", event_type="tool.call",
                                        category="trace", event_id=f"{worker}-{n + i}") for i in range(30)])
            await store.put(thread_id="mp", run_id=f"w{worker}", event_type="tool.call", category="trace",
                            event_id=f"{worker}-{n}")  # a retry: must not write again
asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_processes_share_one_dense_thread(store: RedisRunEventStore, url: str) -> None:
    async with asyncio.timeout(GUARD):
        workers = [
            await asyncio.create_subprocess_exec(sys.executable, "-c", WRITER, url, str(w),
                                                 stderr=asyncio.subprocess.PIPE)
            for w in range(4)
        ]
        for worker in workers:
            _, stderr = await worker.communicate()
            assert worker.returncode == 0, stderr.decode()
    events = await read_all(store, "mp")
    assert [e.seq for e in events] == list(range(1, 1201))
    assert sorted(e.event_id for e in events) == sorted(f"{w}-{n}" for w in range(4) for n in range(300))


async def test_a_prefix_written_before_the_activity_order_gains_it_at_setup(
    url: str, raw: aioredis.Redis
) -> None:
    from run_journal.testing._activity import assert_history, write_history

    async with open_store(url) as store:
        assert isinstance(store, RedisRunEventStore)
        await write_history(store)
        prefix = store.prefix
    older = [key for key in await keys_of(raw, prefix)  # what layout 1 did not have
             if key == "layout" or key.endswith(("/at", "recent")) or key.startswith("st/")]
    assert sorted(older) == ["layout", "recent", "st/pending", "t/a/at", "t/a/u/alice/at", "t/a/u/bob/at",
                             "t/b/at", "t/b/u/alice/at", "u/alice/recent", "u/bob/recent"]
    await raw.delete(*(prefix + key for key in older))
    async with open_store(url) as store:
        assert await raw.get(prefix + "layout") == str(LAYOUT_VERSION)
        await assert_history(store)
        assert [row.run_id for row in await store.list_runs(statuses=["pending"])] == ["r1", "r2"]


async def test_a_prefix_written_before_the_search_sets_gains_them_at_setup(
    url: str, raw: aioredis.Redis
) -> None:
    from run_journal.testing._search import ids, run_row, sample

    async with open_store(url) as store:
        assert isinstance(store, RedisRunEventStore)
        await sample(store)
        prefix = store.prefix
    searched = [key for key in await keys_of(raw, prefix) if key.startswith("x/") or key == "err"
                or (key.startswith("u/") and key.endswith("/runs"))]
    assert "x/tool:search" in searched
    assert "u/alice/runs" in searched
    await raw.delete(*(prefix + key for key in searched))
    for key in await keys_of(raw, prefix):
        if key.startswith("run/"):
            await raw.hdel(prefix + key, "search")
    await raw.set(prefix + "layout", 3)
    async with open_store(url) as store:
        assert await raw.get(prefix + "layout") == str(LAYOUT_VERSION)
        assert await ids(store, tool="search") == ["r3", "r1"]
        assert await ids(store, has_error=True, user_id="alice") == ["r5"]
        await store.put_run(run_row("r3", thread_id="t1", minutes=3, status="success"))  # no tools now
        assert await ids(store, tool="search") == ["r1"]


async def connections_named(raw: aioredis.Redis, name: str) -> int:
    return sum(1 for client in await raw.client_list() if client.get("name") == name)


async def test_the_store_holds_a_bounded_pool_and_followers_do_not_take_from_it(
    url: str, raw: aioredis.Redis
) -> None:
    """40 concurrent writes through a store of 4 connections: they wait for a free one (a blocking
    pool) and never open more; a follower holds a subscription of its own, so even a pool of one
    connection leaves writers their connection while it follows."""
    name = f"rj-pool-{uuid.uuid4().hex[:8]}"
    async with open_store(f"{url}&client_name={name}", max_connections=4) as store:
        most = 0
        done = asyncio.Event()

        async def watch() -> None:  # stops on its own: a cancel can land inside the client and be lost
            nonlocal most
            while not done.is_set():
                most = max(most, await connections_named(raw, name))
                await asyncio.sleep(0.005)

        watcher = asyncio.ensure_future(watch())
        try:
            written = await asyncio.gather(*(store.put_batch([event(f"t{n}", content=i) for i in range(20)])
                                             for n in range(40)))
        finally:
            done.set()
            await asyncio.wait_for(watcher, GUARD)
        assert [len(batch) for batch in written] == [20] * 40
        assert 1 <= most <= 4
    async with open_store(f"{url}&client_name={name}-one", max_connections=1, connection_wait=2) as store:
        follower = store.follow("followed")
        async with asyncio.timeout(GUARD), aclosing(follower):
            pending = asyncio.ensure_future(anext(follower))
            await asyncio.sleep(0.2)
            for n in range(3):
                await store.put_batch([event("elsewhere", content=n)])
            first = await store.put(thread_id="followed", run_id="r", event_type="tool.call",
                                    category="trace")
            assert (await pending).event_id == first.event_id
