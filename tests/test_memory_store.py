"""What only the in-process store promises: isolation from callers, wake-ups, counters, exact pages.

The shared contract is checked by ``test_store_conformance.py``; these tests cover how
``MemoryRunEventStore`` keeps it (copies, per-thread futures, a lock that also holds across OS threads).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from blockbuster import blockbuster_ctx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from run_journal import NewEvent, RunEvent, RunRow
from run_journal.stores.memory import MemoryRunEventStore

GUARD = 30.0  # a hang guard, not a timing assertion


@pytest.fixture
async def store() -> AsyncIterator[MemoryRunEventStore]:
    async with MemoryRunEventStore() as opened:
        yield opened


async def test_mutating_a_returned_record_or_the_written_event_never_reaches_the_store(
    store: MemoryRunEventStore,
) -> None:
    event = NewEvent(
        thread_id="t", run_id="r", event_type="llm.ai.response", category="message",
        content={"text": "hello", "parts": [1, 2]}, metadata={"task_id": "a"},
    )
    (written,) = await store.put_batch([event])
    assert isinstance(written.content, dict)
    assert isinstance(written.content["parts"], list)
    written.content["text"] = "changed"
    written.content["parts"].append(3)
    written.metadata["task_id"] = "b"
    assert isinstance(event.content, dict)
    event.content["text"] = "changed too"
    event.metadata["task_id"] = "c"

    (read,) = await store.list_messages("t")
    assert read.content == {"text": "hello", "parts": [1, 2]}
    assert read.metadata == {"task_id": "a"}
    assert [e.seq for e in await store.list_events("t", task_id="a")] == [1]
    assert await store.list_events("t", task_id="c") == []


async def test_mutating_a_returned_run_row_never_reaches_the_store(store: MemoryRunEventStore) -> None:
    returned = await store.put_run(RunRow(run_id="r", thread_id="t", metadata={"k": [1]}))
    assert isinstance(returned.metadata["k"], list)
    returned.metadata["k"].append(2)
    fetched = await store.get_run("r")
    assert fetched is not None
    assert fetched.metadata == {"k": [1]}


async def test_follow_wakes_on_a_write_without_polling(store: MemoryRunEventStore) -> None:
    store.follow_poll_interval = 3600.0  # a poll would never come back within the guard
    received: list[RunEvent] = []
    started = asyncio.Event()

    async def tail() -> None:
        started.set()
        async for event in store.follow("t"):
            received.append(event)
            if len(received) == 2:
                return

    async with asyncio.timeout(GUARD):
        task = asyncio.create_task(tail())
        await started.wait()
        await asyncio.sleep(0)
        await store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")
        await store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")
        await task
    assert [e.seq for e in received] == [1, 2]


async def test_follow_wakes_on_a_write_from_another_os_thread(store: MemoryRunEventStore) -> None:
    store.follow_poll_interval = 3600.0
    iterator = store.follow("t")

    def write_elsewhere() -> None:
        asyncio.run(store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace"))

    async with asyncio.timeout(GUARD):
        waiting = asyncio.create_task(anext(iterator))
        await asyncio.sleep(0)
        await asyncio.to_thread(write_elsewhere)
        event = await waiting
    assert event.seq == 1
    await iterator.aclose()


async def test_closing_wakes_a_waiting_follower(store: MemoryRunEventStore) -> None:
    store.follow_poll_interval = 3600.0

    async def tail() -> list[RunEvent]:
        return [event async for event in store.follow("t")]

    async with asyncio.timeout(GUARD):
        task = asyncio.create_task(tail())
        await asyncio.sleep(0)
        await store.aclose()
        assert await task == []


async def test_counter_survives_delete_by_run_and_delete_by_thread(
    store: MemoryRunEventStore,
) -> None:
    for run_id in ("a", "b", "b"):
        await store.put(thread_id="t", run_id=run_id, event_type="tool.call", category="trace")
    assert await store.delete_by_run("t", "b") == 2
    assert await store.last_seq("t") == 3
    assert (await store.put(thread_id="t", run_id="c", event_type="tool.call", category="trace")).seq == 4
    assert await store.delete_by_run("t", "a") == 1
    assert await store.delete_by_run("t", "c") == 1
    assert await store.list_threads() == []  # no events left, although the counter is kept
    assert await store.last_seq("t") == 4
    assert await store.delete_by_thread("t") == 0
    assert await store.last_seq("t") == 4  # seq is never reused, not even after delete_by_thread
    assert (await store.put(thread_id="t", run_id="d", event_type="tool.call", category="trace")).seq == 5


async def test_an_event_id_is_unique_per_thread_not_per_store(store: MemoryRunEventStore) -> None:
    first = await store.put(thread_id="t1", run_id="r", event_type="tool.call", category="trace",
                            event_id="same")
    second = await store.put(thread_id="t2", run_id="r", event_type="tool.call", category="trace",
                             event_id="same")
    assert (first.thread_id, first.seq) == ("t1", 1)
    assert (second.thread_id, second.seq) == ("t2", 1)


async def test_every_operation_stays_off_blocking_calls(store: MemoryRunEventStore) -> None:
    with blockbuster_ctx("run_journal"):
        await store.put(thread_id="t", run_id="r", event_type="llm.human.input", category="message")
        await store.list_messages("t")
        await store.list_events("t", event_types=["llm.human.input"])
        await store.put_run(RunRow(run_id="r", thread_id="t"))
        await store.list_runs("t")
        await store.delete_by_thread("t")


# -- pages against a brute-force model -------------------------------------------------------------
rows = st.lists(st.tuples(st.booleans(), st.sampled_from(["u1", "u2", None]), st.sampled_from("ab")),
                max_size=60)
cursor = st.none() | st.integers(min_value=0, max_value=65)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=rows, before=cursor, after=cursor, limit=st.integers(1, 8),
       user=st.sampled_from(["u1", None]))
def test_message_pages_equal_a_brute_force_model(
    rows: list[tuple[bool, str | None, str]],
    before: int | None,
    after: int | None,
    limit: int,
    user: str | None,
) -> None:
    async def check() -> None:
        store = MemoryRunEventStore()
        await store.put_batch(
            NewEvent(thread_id="t", run_id=run_id, user_id=user_id,
                     event_type="llm.ai.response" if is_message else "tool.call",
                     category="message" if is_message else "trace")
            for is_message, user_id, run_id in rows
        )
        everything = await store.list_events("t", limit=1000)
        for run_id in (None, "a"):
            model = [
                e.seq for e in everything
                if e.category == "message" and (user is None or e.user_id == user)
                and (run_id is None or e.run_id == run_id)
                and (before is None or e.seq < before) and (after is None or e.seq > after)
            ]
            expected = model[:limit] if after is not None else model[-limit:]
            if run_id is None:
                page = await store.list_messages("t", limit=limit, before_seq=before, after_seq=after,
                                                 user_id=user)
            else:
                page = await store.list_messages_by_run("t", run_id, limit=limit, before_seq=before,
                                                        after_seq=after, user_id=user)
            assert [e.seq for e in page] == expected

    asyncio.run(check())


async def test_a_run_row_cannot_move_to_another_thread(store: MemoryRunEventStore) -> None:
    await store.put_run(RunRow(run_id="r", thread_id="t1"))
    with pytest.raises(ValueError, match="belongs to thread 't1'"):
        await store.put_run(RunRow(run_id="r", thread_id="t2"))


async def test_the_contract_default_lists_the_same_runs_without_a_row(store: MemoryRunEventStore) -> None:
    """``RunEventStore._select_starts_without_row`` (what a store without an index of run starts
    inherits) pages through the threads and agrees with the memory store's own index."""
    from run_journal.stores.base import RunEventStore, StartQuery

    for n in range(5):
        await store.put(thread_id=f"t{n % 2}", run_id=f"r{n}", event_type="run.start", category="trace")
    await store.put_run(RunRow(run_id="r2", thread_id="t0"))
    for query in (StartQuery(limit=10), StartQuery(limit=2), StartQuery(limit=10, after="r1")):
        own = await store._select_starts_without_row(query)
        default = await RunEventStore._select_starts_without_row(store, query)
        assert [e.to_dict() for e in default] == [e.to_dict() for e in own]
    assert [e.run_id for e in await store.list_runs_without_row()] == ["r0", "r1", "r3", "r4"]
