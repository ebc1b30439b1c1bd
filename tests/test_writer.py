"""The writer's guarantees: order, each event once, flush waits for what came before it, closes from
anywhere, cancellation, a store that is down and comes back, and a store that never answers."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from run_journal import JournalError, RetryPolicy, RunEventStore, RunJournal, open_store, status_of
from run_journal.envelope import NewEvent, RunEvent
from run_journal.runs import RunRow, RunStatus
from run_journal.stores.memory import MemoryRunEventStore
from run_journal.writer import EventWriter

FAST = RetryPolicy(attempts=2, initial_delay=0.001, max_delay=0.002)


def event(n: int, thread: str = "t") -> NewEvent:
    return NewEvent(thread_id=thread, run_id="r", event_type="workspace_changes", category="workspace",
                    content=f"change {n}", event_id=f"e{n}")


def memory_digest(n: int) -> dict[str, Any]:
    return {"content_sha256": f"{n:064x}"}


def one_node_graph(reply: str = "hello") -> Any:
    model = GenericFakeChatModel(messages=iter([AIMessage(reply)]))

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    return graph.compile()


class Gate:
    """A store proxy whose writes fail (``down``) or never answer (``hung``) until told otherwise."""

    def __init__(self, inner: RunEventStore) -> None:
        self.inner, self.down, self.hung = inner, False, False
        self.calls = 0

    async def _gate(self) -> None:
        self.calls += 1
        if self.down:
            raise ConnectionError("store down")
        if self.hung:
            await asyncio.Event().wait()  # never set: the network ate the request

    async def put_batch(self, events: Iterable[Any], *, bodies: Any = ()) -> list[RunEvent]:
        await self._gate()
        return await self.inner.put_batch(events, bodies=bodies)

    async def put_event_if_absent(self, event: NewEvent, **options: Any) -> tuple[RunEvent, bool]:
        await self._gate()
        return await self.inner.put_event_if_absent(event, **options)

    async def put_run_close(self, events: Any, terminal: NewEvent, row: RunRow, *, bodies: Any = ()) -> bool:
        await self._gate()
        return await self.inner.put_run_close(events, terminal, row, bodies=bodies)

    async def put_run(self, row: RunRow) -> RunRow:
        await self._gate()
        return await self.inner.put_run(row)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def run_events(store: RunEventStore, thread_id: str) -> list[RunEvent]:
    events = await store.list_events(thread_id, limit=10_000)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert len({e.event_id for e in events}) == len(events)
    return events


# -- order and once ----------------------------------------------------------------------------------
async def test_events_from_threads_and_the_loop_are_stored_once_in_submission_order(
    store: RunEventStore,
) -> None:
    journal = RunJournal(store, thread_id="producers", flush_interval=0.001, batch_size=7)
    root = uuid.uuid4()
    journal.on_chain_start({"name": "root"}, {"messages": [HumanMessage("hi")]}, run_id=root)

    def produce(worker: int) -> None:
        for n in range(40):
            journal.record("context:memory", content=memory_digest(worker * 1000 + n))

    await asyncio.gather(*(asyncio.to_thread(produce, worker) for worker in range(4)))
    journal.on_chain_end({"messages": []}, run_id=root)
    await journal.aclose()
    events = await run_events(store, "producers")
    digests = [int(e.content["content_sha256"], 16) for e in events if e.event_type == "context:memory"]
    assert sorted(digests) == sorted(w * 1000 + n for w in range(4) for n in range(40))
    for worker in range(4):
        mine = [d for d in digests if d // 1000 == worker]
        assert mine == sorted(mine)  # each producer's events in the order it recorded them
    assert status_of(events) == RunStatus.SUCCESS
    assert journal.stats.written == journal.stats.submitted == len(events)


async def test_flush_returns_once_everything_before_it_and_the_row_are_stored() -> None:
    class Slow(MemoryRunEventStore):
        async def put_batch(self, events: Any, *, bodies: Any = ()) -> Any:
            await asyncio.sleep(0.03)
            return await super().put_batch(events, bodies=bodies)

    store = Slow()
    journal = RunJournal(store, thread_id="flushing", flush_interval=5.0, batch_size=3)
    root = uuid.uuid4()
    journal.on_chain_start({"name": "root"}, {"messages": [HumanMessage("hi")]}, run_id=root)
    for n in range(10):
        journal.record("context:memory", content=memory_digest(n))
    await journal.flush()
    assert len(await store.list_events("flushing")) == 12
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert (row.status, row.message_count) == (RunStatus.RUNNING, 1)
    journal.on_chain_end({"messages": []}, run_id=root)
    await journal.aclose()


@pytest.mark.parametrize("yields", range(12))
async def test_a_flush_cancelled_inside_the_driver_loses_and_repeats_nothing(
    store: RunEventStore, yields: int
) -> None:
    """Cancelled after ``yields`` loop iterations: before the store call, while the driver writes
    (aiosqlite's thread, asyncpg's query, a Redis script), or after. The drain is not the flush's
    task: it goes on, and every event is stored once, in order."""
    thread = f"cancel-in-driver-{yields}"
    journal = RunJournal(store, thread_id=thread)
    root = uuid.uuid4()
    journal.on_chain_start({"name": "root"}, {"messages": [HumanMessage("hi")]}, run_id=root)
    for index in range(20):
        journal.record("context:memory", content=memory_digest(index))
    flushing = asyncio.create_task(journal.flush())
    for _ in range(yields):
        await asyncio.sleep(0)
    flushing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await flushing
    journal.on_chain_end({"messages": []}, run_id=root)
    await journal.aclose()
    events = await run_events(store, thread)
    assert [event.event_type for event in events] == [
        "run.start", "llm.human.input", *["context:memory"] * 20, "run.end"
    ]
    assert [event.content["content_sha256"] for event in events[2:-1]] == [
        f"{index:064x}" for index in range(20)
    ]
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.status == RunStatus.SUCCESS


# -- closes from anywhere ----------------------------------------------------------------------------
async def test_a_sync_close_from_another_thread_finishes_a_writer_on_the_running_loop() -> None:
    store = MemoryRunEventStore()
    journal = RunJournal(store, thread_id="closed-elsewhere")
    await one_node_graph().ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
    await asyncio.get_running_loop().run_in_executor(None, journal.close)
    assert status_of(await run_events(store, "closed-elsewhere")) == RunStatus.SUCCESS
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "run-journal-writer"]


def test_a_journal_built_outside_a_loop_runs_on_the_loop_that_enters_it(tmp_path: Any) -> None:
    threads_before = set(threading.enumerate())
    journal = RunJournal(f"sqlite:///{tmp_path / 'entered.db'}", thread_id="entered")

    async def main() -> threading.Thread:
        async with journal:
            await one_node_graph().ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
        return threading.current_thread()

    assert asyncio.run(main()) is threading.current_thread()
    started = set(threading.enumerate()) - threads_before  # the writer thread was never needed
    assert not [t for t in started if t.name == "run-journal-writer"]

    async def check() -> None:
        async with open_store(f"sqlite:///{tmp_path / 'entered.db'}") as store:
            assert status_of(await run_events(store, "entered")) == RunStatus.SUCCESS

    asyncio.run(check())


def test_two_sync_closes_at_once_both_return(tmp_path: Any) -> None:
    writer = EventWriter(f"sqlite:///{tmp_path / 'closes.db'}", flush_interval=0.02)
    writer.submit([event(n) for n in range(50)])  # no running loop: a private writer thread
    results: list[str] = []
    threads = [threading.Thread(target=lambda: (writer.close(), results.append("ok"))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert results == ["ok", "ok"]
    assert writer.stats().written == 50


def test_flushes_and_closes_racing_from_threads_all_return_and_start_no_thread_of_their_own() -> None:
    crashes: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: crashes.append(args.exc_value)  # type: ignore[assignment,return-value]  # collects
    try:
        for _ in range(40):
            writer = EventWriter(MemoryRunEventStore(), flush_interval=0.001)
            writer.submit([event(1)])
            barrier = threading.Barrier(4)

            def run(action: str, target: EventWriter = writer, gate: threading.Barrier = barrier) -> None:
                gate.wait()
                if action == "close":
                    target.close()
                elif action == "aclose":
                    asyncio.run(target.aclose())
                else:
                    with contextlib.suppress(JournalError):  # a flush after the close: the writer stopped
                        asyncio.run(target.flush())

            threads = [threading.Thread(target=run, args=(action,), daemon=True)
                       for action in ("aclose", "close", "flush", "flush")]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(5)
            assert not any(thread.is_alive() for thread in threads)
            assert writer.stats().written == 1
            # no thread per writer: at most the process's one writer thread
            assert len([t for t in threading.enumerate() if t.name == "run-journal-writer"]) <= 1
    finally:
        threading.excepthook = previous
    assert crashes == []


# -- backpressure ------------------------------------------------------------------------------------
async def test_a_producer_thread_over_the_limit_waits_for_an_early_drain() -> None:
    store = MemoryRunEventStore()
    writer = EventWriter(store, flush_interval=3.0, max_pending=5, batch_size=200)

    def produce() -> None:
        for n in range(300):
            assert not writer.submit([event(n)])  # another thread: it waits here instead

    began = time.monotonic()
    await asyncio.get_running_loop().run_in_executor(None, produce)
    assert time.monotonic() - began < 2.5  # not one batch timer (3 s) per wait
    assert writer.stats().pending <= 6
    await writer.aclose()
    assert writer.stats().written == 300


@pytest.mark.parametrize("options", [{"attempts": 0}, {"initial_delay": -1}, {"multiplier": 0.5}])
def test_a_retry_policy_that_cannot_work_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="RetryPolicy"):
        RetryPolicy(**options)


# -- a store that is down, then back -----------------------------------------------------------------
@pytest.mark.parametrize("closing", [False, True])
async def test_after_a_failed_flush_or_close_the_next_one_writes_everything(
    store: RunEventStore, closing: bool
) -> None:
    gate = Gate(store)
    thread = f"down-then-back-{closing}"
    journal = RunJournal(gate, thread_id=thread, retry=FAST)  # type: ignore[arg-type]  # a store proxy
    gate.down = True
    await one_node_graph().ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
    finish = journal.aclose if closing else journal.flush
    with pytest.raises(JournalError, match="store down"):
        await finish()
    unwritten = journal.unwritten_events()
    assert [e.event_type for e in unwritten] == ["run.start", "llm.human.input", "llm.request",
                                                 "llm.ai.response", "run.end"]
    (request,) = [e for e in unwritten if e.event_type == "llm.request"]
    named = {request.content[key] for key in ("messages_sha256", "params_sha256")}
    assert {body.digest for body in unwritten.bodies} >= named  # to write them by hand
    assert unwritten.run_row is not None
    assert unwritten.run_row.status == RunStatus.SUCCESS
    with pytest.raises(JournalError, match="store down"):  # still down: tried again, failed again
        await finish()
    gate.down = False
    await finish()
    await journal.aclose()
    events = await run_events(store, thread)
    assert [e.event_type for e in events] == ["run.start", "llm.human.input", "llm.request",
                                              "llm.ai.response", "run.end"]
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert (row.status, row.message_count) == (RunStatus.SUCCESS, 2)
    assert journal.unwritten_events() == []
    assert journal.unwritten_events().bodies == []
    assert journal.unwritten_events().run_row is None


async def test_what_could_not_be_written_can_be_finished_by_hand() -> None:
    store = MemoryRunEventStore()
    gate = Gate(store)
    gate.down = True
    journal = RunJournal(gate, thread_id="by-hand", retry=FAST)  # type: ignore[arg-type]  # a store proxy
    await one_node_graph().ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
    with pytest.raises(JournalError):
        await journal.aclose()
    unwritten = journal.unwritten_events()
    assert unwritten.run_row is not None
    await store.put_batch(unwritten)
    await store.put_run(unwritten.run_row)
    assert status_of(await run_events(store, "by-hand")) == RunStatus.SUCCESS
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.status == RunStatus.SUCCESS


class Deaf(Gate):
    """A driver that swallows the cancellation of a hung call and fails it late with an ordinary
    error (as some drivers turn a cancel into a connection error)."""

    def __init__(self, inner: RunEventStore) -> None:
        super().__init__(inner)
        self.late_answers = 0

    async def _gate(self) -> None:
        self.calls += 1
        if self.hung:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()
            await asyncio.sleep(0.3)  # once a fresh drain has taken over
            self.late_answers += 1
            raise ConnectionError("connection reset")


# -- a store that never answers ----------------------------------------------------------------------
async def test_a_store_that_never_answers_fails_the_flush_within_its_deadline(store: RunEventStore) -> None:
    gate = Gate(store)
    thread = "hung"
    journal = RunJournal(gate, thread_id=thread, retry=FAST, store_timeout=0.2)  # type: ignore[arg-type]  # a store proxy
    gate.hung = True
    await one_node_graph().ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
    began = time.monotonic()
    with pytest.raises(JournalError, match=r"did not answer within 0\.2 s"):
        await journal.flush()
    assert time.monotonic() - began < 2.0
    gate.hung = False
    await journal.aclose()
    assert status_of(await run_events(store, thread)) == RunStatus.SUCCESS


async def test_an_abandoned_call_that_answers_late_writes_nothing_more_and_steals_no_wake_up(
    store: RunEventStore,
) -> None:
    deaf = Deaf(store)
    thread = "deaf"
    journal = RunJournal(deaf, thread_id=thread, retry=FAST, store_timeout=0.2)  # type: ignore[arg-type]  # a store proxy
    deaf.hung = True
    await one_node_graph().ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
    with pytest.raises(JournalError, match=r"did not answer within 0\.2 s"):
        await journal.flush()
    deaf.hung = False
    calls = deaf.calls
    await asyncio.wait_for(journal.aclose(), 5)  # the fresh drain writes the run's end
    await asyncio.sleep(0.5)  # the abandoned call has failed by now
    assert deaf.late_answers == 1
    assert deaf.calls == calls + 1  # the fresh drain's put_run_close; the abandoned task tried nothing more
    events = await run_events(store, thread)
    assert status_of(events) == RunStatus.SUCCESS
    assert [e.event_type for e in events].count("run.end") == 1


async def test_a_concurrent_future_awaited_on_its_own_loop_or_from_another_thread() -> None:
    """``settled`` gives a concurrent future's outcome whether it is settled on the awaiting loop's
    thread or on another; cancelling the await cancels the future."""
    import concurrent.futures

    from run_journal.writer.loops import settled

    here: concurrent.futures.Future[int] = concurrent.futures.Future()
    asyncio.get_running_loop().call_soon(here.set_result, 1)
    assert await settled(here) == 1
    there: concurrent.futures.Future[int] = concurrent.futures.Future()
    threading.Timer(0.01, there.set_exception, (ValueError("from a thread"),)).start()
    with pytest.raises(ValueError, match="from a thread"):
        await settled(there)
    never: concurrent.futures.Future[int] = concurrent.futures.Future()
    waiting = asyncio.ensure_future(settled(never))
    await asyncio.sleep(0)
    other = asyncio.ensure_future(settled(never))  # a second waiter of the same future
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert never.cancelled()
    with pytest.raises(asyncio.CancelledError):  # as asyncio's, not concurrent.futures' CancelledError
        await other


async def test_a_coroutine_started_on_its_own_loop_reports_to_a_concurrent_future() -> None:
    """``start_on`` called on the target loop itself: the outcome reaches the future, and
    cancelling the future cancels the coroutine."""
    from run_journal.writer.loops import settled, start_on

    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    async def fail() -> None:
        raise LookupError("no")

    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    loop = asyncio.get_running_loop()
    assert await settled(start_on(loop, answer())) == 42
    with pytest.raises(LookupError):
        await settled(start_on(loop, fail()))
    pending = start_on(loop, forever())
    await started.wait()
    pending.cancel()
    await asyncio.sleep(0.01)
    assert not [task for task in asyncio.all_tasks() if getattr(task.get_coro(), "__name__", "") == "forever"]
