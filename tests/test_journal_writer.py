"""The writer under failure, sync graphs without a loop, backpressure, and the recorders."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterable
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from run_journal import JournalError, RetryPolicy, RunEventStore, RunJournal, open_store, status_of
from run_journal.catalog import TERMINAL_RUN_EVENTS
from run_journal.contract import validate_record
from run_journal.envelope import RunEvent
from run_journal.runs import RunRow, RunStatus
from run_journal.stores.memory import MemoryRunEventStore

FAST = RetryPolicy(attempts=3, initial_delay=0.001, max_delay=0.002)


class FlakyStore:
    """A real store behind a proxy whose ``put_batch`` fails ``failures`` times (forever if None)."""

    def __init__(self, inner: RunEventStore, failures: int | None) -> None:
        self.inner, self.failures, self.calls = inner, failures, 0

    async def put_batch(self, events: Iterable[Any], *, bodies: Any = ()) -> list[RunEvent]:
        self.calls += 1
        if self.failures is None or self.calls <= self.failures:
            batch = list(events)
            if batch and self.calls % 2 == 0:  # half the failures happen after a partial write
                await self.inner.put_batch(batch[:1])
            raise ConnectionError("store unavailable")
        return await self.inner.put_batch(events, bodies=bodies)

    async def put_run_close(self, events: Any, terminal: Any, row: Any, *, bodies: Any = ()) -> bool:
        """A run's end in three steps, the first through the flaky ``put_batch``."""
        if events:
            await self.put_batch(events, bodies=bodies)
        stored, _ = await self.inner.put_event_if_absent(terminal, exclusive_types=TERMINAL_RUN_EVENTS)
        if stored.event_id != terminal.event_id:
            return False
        await self.inner.put_run(row)
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def one_node_graph(reply: str = "hello") -> Any:
    model = GenericFakeChatModel(messages=iter([AIMessage(reply)]))

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    return graph.compile()


async def stored(store: RunEventStore, journal: RunJournal) -> list[RunEvent]:
    assert journal.thread_id is not None
    events = await store.list_events(journal.thread_id, journal.run_id)
    assert all(validate_record(event.to_dict()) == [] for event in events)
    return events


async def test_a_row_the_store_refuses_does_not_count_stored_events_as_unwritten(
    store: RunEventStore,
) -> None:
    journal = RunJournal(store, thread_id="t1", run_id="taken", retry=FAST)
    await store.put_run(RunRow(run_id="taken", thread_id="elsewhere", status=RunStatus.RUNNING))
    await one_node_graph().ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
    with pytest.raises(JournalError, match="elsewhere"):
        await journal.aclose()
    events = await stored(store, journal)
    assert [e.event_type for e in events] == ["run.start", "llm.human.input", "llm.request",
                                              "llm.ai.response", "run.end"]
    assert journal.stats.written == 5
    assert journal.stats.pending == 0
    assert journal.unwritten_events() == []


async def test_store_that_fails_twice_then_recovers(store: RunEventStore) -> None:
    flaky = FlakyStore(store, failures=2)
    # the batch timer is far off: one batch at the run's end, however slow the machine
    journal = RunJournal(flaky, thread_id="t1", retry=FAST, flush_interval=60)  # type: ignore[arg-type]  # a duck-typed proxy
    await one_node_graph().ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
    await journal.aclose()
    events = await stored(store, journal)
    assert [e.event_type for e in events] == ["run.start", "llm.human.input", "llm.request",
                                              "llm.ai.response", "run.end"]
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]  # the partial write was not duplicated
    assert flaky.calls == 3  # both failures absorbed: put_run_close fell back to step-by-step writes,
    assert journal.stats.retried == 1  # whose own failure the writer retried
    assert journal.stats.written == 5
    assert journal.stats.pending == 0
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.status == status_of(events) == "success"


async def test_store_that_never_recovers(store: RunEventStore) -> None:
    journal = RunJournal(FlakyStore(store, None), thread_id="t1", retry=FAST)  # type: ignore[arg-type]  # proxy
    out = await one_node_graph("finished anyway").ainvoke({"messages": [HumanMessage("hi")]},
                                                          {"callbacks": [journal]})
    assert out["messages"][-1].content == "finished anyway"  # the graph itself completed
    with pytest.raises(JournalError, match="could not write 5 event"):
        await journal.flush()
    assert journal.stats.failed_batches >= 1
    assert [e.event_type for e in journal.unwritten_events()][-1] == "run.end"
    with pytest.raises(JournalError):
        await journal.aclose()


def test_sync_invoke_without_a_loop(store_url: str) -> None:
    if store_url == "memory://":
        pytest.skip("a memory store opened from a URL by the journal is gone when it closes")
    journal = RunJournal(store_url, thread_id="sync")
    with journal:
        one_node_graph().invoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
        assert threading.current_thread() is threading.main_thread()

    async def read() -> list[str]:
        async with open_store(store_url) as reopened:
            row = await reopened.get_run(journal.run_id)
            assert row is not None
            assert row.status == "success"
            return [e.event_type for e in await reopened.list_events("sync")]

    assert asyncio.run(read()) == ["run.start", "llm.human.input", "llm.request", "llm.ai.response",
                                   "run.end"]


async def test_backpressure_blocks_other_threads_but_loses_nothing(store: RunEventStore) -> None:
    journal = RunJournal(store, thread_id="bp", max_pending=5, batch_size=3, flush_interval=0.001)
    journal.on_chain_start({}, {"messages": []}, run_id=uuid.uuid4())

    def produce() -> None:
        for index in range(40):
            journal.record("context:memory", content={"content_sha256": f"{index:064x}"})

    await asyncio.get_running_loop().run_in_executor(None, produce)
    await journal.aclose()
    events = await stored(store, journal)
    recorded = [e.content["content_sha256"] for e in events if e.event_type == "context:memory"]
    assert recorded == [f"{index:064x}" for index in range(40)]
    assert events[-1].event_type == "run.cancel"


async def test_recorders(store: RunEventStore) -> None:
    journal = RunJournal(store, thread_id="rec")
    with pytest.raises(ValueError, match="middleware tag"):
        journal.record_middleware("x" * 22, name="guard", hook="before_model", action="block", changes={})
    journal.record_memory_context(content="remember: the user likes tea")  # held until run.start
    assert journal.record_memory_context(content_sha256="0" * 64) is False  # once per run
    root = uuid.uuid4()
    journal.on_chain_start({}, {"messages": [HumanMessage("hi")]}, run_id=root)
    journal.record_middleware("guardrail", name="guard", hook="before_model", action="redact",
                              changes={"api_key": "sk-secret", "removed": 1})
    chunks: list[Any] = [
        {"type": "task_started", "task_id": "k1", "description": "research", "subagent": "researcher"},
        {"type": "task_completed", "task_id": "k1", "result": "done", "model": "m-1",
         "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}},
        {"type": "task_completed", "task_id": "k1", "result": "again",
         "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}},
        {"type": "task_started", "task_id": "k2", "description": "never ends"},
        {"type": "task_bogus", "task_id": "k3"},
    ]
    mapped = [journal.record_subagent_chunk(chunk) for chunk in chunks]
    assert mapped == [True, True, True, True, False]
    journal.on_chain_end({"messages": []}, run_id=root)
    await journal.aclose()
    events = await stored(store, journal)
    names = [e.event_type for e in events]
    assert names == [
        "run.start", "context:memory", "llm.human.input", "middleware:guardrail", "subagent.start",
        "subagent.end", "subagent.end", "subagent.start", "subagent.end", "run.end",
    ]
    memory = events[1].content
    assert "tea" not in str(memory)
    assert len(memory["content_sha256"]) == 64
    assert events[3].content["changes"] == {"api_key": "[redacted]", "removed": 1}
    closed = events[8].content
    assert closed["task_id"] == "k2"
    assert closed["status"] == "cancelled"
    assert closed["closed_by_journal"] is True
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.usage_by_caller["subagent:researcher"].total_tokens == 15  # counted once per task
    assert row.usage_by_model["m-1"].llm_calls == 1
    with pytest.raises(JournalError):
        journal.record("context:memory", content={"content_sha256": "0" * 64})


async def test_in_process_subagent_usage_is_not_counted_twice() -> None:
    """A subagent graph run in-process inherits the journal: its model calls are counted by the
    callbacks, so the usage its terminal chunk repeats must not be added again."""
    store = open_store("memory://")
    journal = RunJournal(store, thread_id="t-sub")
    reply = AIMessage("found it", usage_metadata={"input_tokens": 7, "output_tokens": 3, "total_tokens": 10})
    model = GenericFakeChatModel(messages=iter([reply]))
    root = uuid.uuid4()
    journal.on_chain_start({}, {"messages": [HumanMessage("hi")]}, run_id=root)
    journal.record_subagent_chunk({"type": "task_started", "task_id": "k1", "description": "look",
                                   "subagent": "researcher"})
    await model.ainvoke("look it up", config={"callbacks": [journal], "tags": ["subagent:researcher"]})
    journal.record_subagent_chunk({"type": "task_completed", "task_id": "k1", "result": "found it",
                                   "usage": {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}})
    journal.on_chain_end({"messages": []}, run_id=root)
    await journal.aclose()
    row = await store.get_run(journal.run_id)
    assert row is not None
    bucket = row.usage_by_caller["subagent:researcher"]
    assert (bucket.llm_calls, bucket.total_tokens) == (1, 10)
    assert row.usage.total_tokens == 10


def _writer_tasks() -> list[asyncio.Task[Any]]:
    return [task for task in asyncio.all_tasks() if task.get_name() == "run-journal-writer"]


async def test_the_batch_timer_writes_a_running_run_and_no_task_waits_between_batches(
    store: RunEventStore,
) -> None:
    journal = RunJournal(store, thread_id="timer", flush_interval=0.01)
    journal.on_chain_start({"name": "root"}, {"messages": [HumanMessage("hi")]}, run_id=uuid.uuid4())
    for _ in range(200):
        await asyncio.sleep(0.01)
        if len(await store.list_events("timer")) == 2 and await store.get_run(journal.run_id):
            break
    assert [e.event_type for e in await stored(store, journal)] == ["run.start", "llm.human.input"]
    assert _writer_tasks() == []  # the drain task ended with the queue empty
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.status == RunStatus.RUNNING
    await journal.aclose()
    assert _writer_tasks() == []
    assert status_of(await stored(store, journal)) == RunStatus.CANCELLED


async def test_close_after_ainvoke_writes_the_end_and_leaves_no_writer_task(store: RunEventStore) -> None:
    journal = RunJournal(store, thread_id="in-place")
    await one_node_graph().ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
    await journal.aclose()
    assert _writer_tasks() == []
    assert status_of(await stored(store, journal)) == RunStatus.SUCCESS
    assert journal.stats.pending == 0
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.status == RunStatus.SUCCESS


async def test_the_end_of_a_run_is_written_soon_without_a_flush(store: RunEventStore) -> None:
    journal = RunJournal(store, thread_id="end-soon", flush_interval=60.0)  # the batch timer is far off
    await one_node_graph().ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
    for _ in range(200):
        await asyncio.sleep(0.005)
        if journal.stats.pending == 0 and not _writer_tasks():
            break
    assert status_of(await stored(store, journal)) == RunStatus.SUCCESS
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.status == RunStatus.SUCCESS
    await journal.aclose()


async def test_a_flush_cancelled_mid_write_leaves_the_rest_to_a_drain_task(store: RunEventStore) -> None:
    gate = asyncio.Event()

    class SlowStore(FlakyStore):
        async def put_batch(self, events: Iterable[Any], *, bodies: Any = ()) -> list[RunEvent]:
            await gate.wait()
            return await self.inner.put_batch(events, bodies=bodies)

    journal = RunJournal(SlowStore(store, 0), thread_id="cancelled-flush")  # type: ignore[arg-type]  # a proxy
    root = uuid.uuid4()
    journal.on_chain_start({"name": "root"}, {"messages": [HumanMessage("hi")]}, run_id=root)
    flushing = asyncio.create_task(journal.flush())
    await asyncio.sleep(0.01)  # the flush is waiting inside the store
    flushing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flushing
    gate.set()
    for _ in range(200):
        if journal.stats.pending == 0:
            break
        await asyncio.sleep(0.01)
    assert [e.event_type for e in await stored(store, journal)] == ["run.start", "llm.human.input"]
    journal.on_chain_end({"messages": []}, run_id=root)
    await journal.aclose()
    assert status_of(await stored(store, journal)) == RunStatus.SUCCESS


async def test_an_event_queued_after_a_drain_that_took_a_late_one_is_still_written() -> None:
    """A drain picks up events queued while it writes; the next event after it must start the
    batch timer again (found in review: it waited for a flush)."""
    from run_journal.envelope import NewEvent
    from run_journal.stores.memory import MemoryRunEventStore
    from run_journal.writer import EventWriter

    class SlowStore(MemoryRunEventStore):
        async def _append(self, batch: Any, bodies: Any = ()) -> Any:
            await asyncio.sleep(0.05)
            return await super()._append(batch, bodies)

    def event(n: int) -> NewEvent:
        return NewEvent(thread_id="t", run_id="r", event_type="workspace.file.write", category="trace",
                        content={"n": n}, event_id=f"e{n}")

    store = SlowStore()
    writer = EventWriter(store, flush_interval=0.02)
    writer.submit([event(1)])
    await asyncio.sleep(0.04)  # the batch timer fired: the drain is inside the store
    writer.submit([event(2)])  # taken by the same drain
    for _ in range(100):
        await asyncio.sleep(0.01)
        if writer.stats().written == 2:
            break
    writer.submit([event(3)])
    for _ in range(100):
        await asyncio.sleep(0.01)
        if writer.stats().written == 3:
            break
    assert [e.event_id for e in await store.list_events("t")] == ["e1", "e2", "e3"]
    await writer.aclose()


@pytest.mark.parametrize("slow_step", ["events", "row"])
@pytest.mark.parametrize("closing", [False, True])
async def test_a_flush_or_close_waiting_on_a_cancelled_flush_still_returns(
    slow_step: str, closing: bool
) -> None:
    """A flush is cancelled (a timeout) mid-write while a second flush or a close waits: the drain
    goes on, and the second call returns with everything written."""
    from run_journal.envelope import NewEvent
    from run_journal.stores.memory import MemoryRunEventStore
    from run_journal.writer import EventWriter

    class SlowStore(MemoryRunEventStore):
        async def _append(self, batch: Any, bodies: Any = ()) -> Any:
            if slow_step == "events":
                await asyncio.sleep(0.3)
            return await super()._append(batch, bodies)

        async def put_run(self, row: RunRow) -> RunRow:
            if slow_step == "row":
                await asyncio.sleep(0.3)
            return await super().put_run(row)

    store = SlowStore()
    writer = EventWriter(store)
    start = NewEvent(thread_id="t", run_id="r", event_type="run.start", category="trace", event_id="start")
    writer.submit([start], lambda: RunRow(run_id="r", thread_id="t", status=RunStatus.RUNNING))
    first = asyncio.create_task(asyncio.wait_for(writer.flush(), 0.1))
    await asyncio.sleep(0.05)  # the first flush is inside the store
    second = asyncio.create_task(writer.aclose() if closing else writer.flush())
    with pytest.raises(TimeoutError):
        await first
    await asyncio.wait_for(second, 3.0)
    assert [e.event_id for e in await store.list_events("t")] == ["start"]
    row = await store.get_run("r")
    assert row is not None
    assert row.status == RunStatus.RUNNING


class CountingStore:
    """A real store behind a proxy that counts the calls the writer makes and makes each one slow."""

    WRITES = ("put_batch", "put_event_if_absent", "put_run_close", "put_run")

    def __init__(self, inner: RunEventStore, delay: float) -> None:
        self.inner, self.delay, self.calls = inner, delay, 0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if name not in self.WRITES:
            return attribute

        async def slow(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            await asyncio.sleep(self.delay)
            return await attribute(*args, **kwargs)

        return slow


async def test_a_run_is_one_store_call_even_when_the_store_and_the_runs_are_slow(
    store: RunEventStore,
) -> None:
    """Under load runs take longer than the old 0.1 s batch timer: it must not split them."""
    counting = CountingStore(store, delay=0.05)

    def slow_graph() -> Any:
        model = GenericFakeChatModel(messages=iter([AIMessage("thinking"), AIMessage("done")]))

        async def agent(state: MessagesState) -> dict[str, Any]:
            await asyncio.sleep(0.2)  # a model that takes its time, and a busy machine
            return {"messages": [await model.ainvoke(state["messages"])]}

        graph = StateGraph(MessagesState)
        graph.add_node("agent", agent)
        graph.add_edge(START, "agent")
        return graph.compile()

    # a quiet second (the default flush_interval) can pass inside a run when CI starves the loop: the
    # timer is set well past the runs, so only a split that does not wait for it would fail here
    journals = [RunJournal(counting, thread_id=f"one-call-{n}", flush_interval=5.0, max_flush_delay=20.0)  # type: ignore[arg-type]  # a proxy
                for n in range(20)]
    await asyncio.gather(*(slow_graph().ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
                           for journal in journals))
    await asyncio.gather(*(journal.aclose() for journal in journals))
    assert counting.calls == len(journals)
    assert {journal.stats.store_calls for journal in journals} == {1}
    for journal in journals:
        assert status_of(await stored(store, journal)) == RunStatus.SUCCESS


def chatty_graph(steps: int, pause: float) -> Any:
    """A graph whose node calls the model ``steps`` times, ``pause`` seconds apart (each call is events)."""
    model = GenericFakeChatModel(messages=iter([AIMessage(f"step {n}") for n in range(steps)]))

    async def agent(state: MessagesState) -> dict[str, Any]:
        replies = []
        for _ in range(steps):
            await asyncio.sleep(pause)
            replies.append(await model.ainvoke(state["messages"]))
        return {"messages": replies}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    return graph.compile()


async def test_a_run_longer_than_flush_interval_whose_events_keep_coming_is_one_store_call(
    store: RunEventStore,
) -> None:
    """A busy machine stretches a short run past ``flush_interval``; while its events keep coming it is
    not split, so the run is one call (its row riding with its last events)."""
    counting = CountingStore(store, delay=0.0)
    journal = RunJournal(counting, thread_id="stretched", flush_interval=0.15, max_flush_delay=5.0)  # type: ignore[arg-type]  # a proxy
    began = asyncio.get_running_loop().time()
    graph = chatty_graph(steps=8, pause=0.06)
    await graph.ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
    assert asyncio.get_running_loop().time() - began > 3 * 0.15  # the run outlived flush_interval
    await journal.aclose()
    assert counting.calls == 1
    assert status_of(await stored(store, journal)) == RunStatus.SUCCESS


async def test_a_quiet_run_is_written_after_flush_interval_and_a_busy_one_after_max_flush_delay(
    store: RunEventStore,
) -> None:
    quiet = RunJournal(store, thread_id="quiet", flush_interval=0.05, max_flush_delay=5.0)
    quiet.on_chain_start({"name": "root"}, {"messages": [HumanMessage("hi")]}, run_id=uuid.uuid4())
    await asyncio.sleep(0.5)  # a model thinking: nothing new comes
    assert [e.event_type for e in await store.list_events("quiet")] == ["run.start", "llm.human.input"]
    await quiet.aclose()

    counting = CountingStore(store, delay=0.0)
    busy = RunJournal(counting, thread_id="busy", flush_interval=0.2, max_flush_delay=0.3)  # type: ignore[arg-type]  # a proxy
    graph = chatty_graph(steps=12, pause=0.05)
    await graph.ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [busy]})
    written_while_running = counting.calls
    await busy.aclose()
    assert written_while_running >= 1  # the oldest event never waited much longer than max_flush_delay
    assert status_of(await stored(store, busy)) == RunStatus.SUCCESS


def test_flush_delays_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="max_flush_delay"):
        RunJournal(MemoryRunEventStore(), max_flush_delay=-1)


def test_sync_journals_given_one_url_share_one_store_and_the_writer_thread(tmp_path: Any) -> None:
    from run_journal.writer import shared_store

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    threads = 0
    for n in range(10):
        with RunJournal(url, thread_id=f"shared-{n}") as journal:
            one_node_graph().invoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
        assert journal.stats.store_calls == 1
        threads = threads or threading.active_count()  # the first journal opened the store
    assert threading.active_count() <= threads  # no thread, connection or set-up per journal
    source = shared_store(url)
    first = asyncio.run(_read_back(url))
    assert first == [f"shared-{n}" for n in range(10)]
    assert not source.unavailable()


async def _read_back(url: str) -> list[str]:
    async with open_store(url) as reopened:
        return sorted(await reopened.list_threads(), key=lambda t: int(t.rsplit("-", 1)[1]))


def test_a_journal_collected_with_unwritten_events_warns() -> None:
    import gc

    async def start_a_run() -> None:
        journal = RunJournal(MemoryRunEventStore(), thread_id="left", flush_interval=60)
        journal.on_chain_start({"name": "root"}, {"messages": [HumanMessage("hi")]}, run_id=uuid.uuid4())

    asyncio.run(start_a_run())  # the loop ends a minute before the batch timer: nothing was written
    with pytest.warns(ResourceWarning, match=r"collected with 2 unwritten event"):
        gc.collect()
