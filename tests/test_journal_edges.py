"""Edge cases a reviewer found: nothing about a run may be lost or mislabelled without a word."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from run_journal import AsyncRunJournal, JournalError, RunEventStore, RunJournal, status_of
from run_journal.stores.memory import MemoryRunEventStore
from run_journal.testing import ScriptedChatModel, reply


def _two_step_graph() -> Any:
    model = ScriptedChatModel([reply("one"), reply("two")])

    async def first(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    async def second(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("first", first)
    graph.add_node("second", second)
    graph.add_edge(START, "first")
    graph.add_edge("first", "second")
    return graph.compile()


async def test_huge_config_metadata_is_digested_not_fatal(store: RunEventStore) -> None:
    journal = RunJournal(store, thread_id="big-meta")
    config = {"callbacks": [journal], "metadata": {"blob": "x" * 1_100_000, "tenant": "acme"}}
    await _two_step_graph().ainvoke({"messages": [HumanMessage("hi")]}, config)
    await journal.aclose()
    events = await store.list_events("big-meta")
    assert next(e.event_type for e in events) == "run.start"
    assert status_of(events) == "success"
    digest = events[0].metadata["run_metadata"]
    assert digest["truncated"] is True
    assert {"blob", "tenant"} <= set(digest["keys"])
    assert digest["bytes"] > 1_100_000


async def test_events_recorded_for_a_run_that_never_started_are_reported(store: RunEventStore) -> None:
    journal = RunJournal(store, thread_id="never")
    journal.record_memory_context(content="remember the tea")
    journal.record_middleware("guardrail", name="guard", hook="before_model", action="none", changes={})
    with pytest.raises(JournalError, match="2 recorded event"):
        await journal.aclose()
    assert [e.event_type for e in journal.unwritten_events()] == ["context:memory", "middleware:guardrail"]
    assert await store.list_events("never") == []


async def test_flush_after_close_returns_at_once(store: RunEventStore) -> None:
    journal = RunJournal(store, thread_id="closed")
    await _two_step_graph().ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
    await journal.aclose()
    await asyncio.wait_for(journal.flush(), 5)
    await asyncio.wait_for(journal.aclose(), 5)


async def test_a_consumer_leaving_astream_early_cancels_the_run(store: RunEventStore) -> None:
    journal = RunJournal(store, thread_id="left-early")
    stream = _two_step_graph().astream({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
    async for _ in stream:
        break
    await stream.aclose()
    await journal.aclose()
    events = await store.list_events("left-early")
    assert status_of(events) == "cancelled"
    assert [e.event_type for e in events if e.category == "error"] == ["run.cancel"]
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.status == "cancelled"


def chatty_graph(calls: int) -> Any:
    model = ScriptedChatModel([reply(f"reply {n}") for n in range(calls)])

    async def chatty(state: MessagesState) -> dict[str, Any]:
        replies = [await model.ainvoke(f"question {n}") for n in range(calls)]
        return {"messages": replies[-1:]}

    graph = StateGraph(MessagesState)
    graph.add_node("chatty", chatty)
    graph.add_edge(START, "chatty")
    return graph.compile()


class SlowMemoryStore(MemoryRunEventStore):
    async def _append(self, batch: Any, bodies: Any = ()) -> Any:
        await asyncio.sleep(0.02)
        return await super()._append(batch, bodies)


async def test_async_journal_callbacks_wait_for_room_when_the_store_is_slow() -> None:
    """Backpressure for async graphs: over ``max_pending``, AsyncRunJournal's callbacks await room
    (LangChain awaits coroutine callbacks) instead of growing the queue without bound."""
    store = SlowMemoryStore()
    calls = 40
    journal = AsyncRunJournal(store, thread_id="slow-store", max_pending=8, batch_size=4)
    peak = 0

    class Watching(BaseCallbackHandler):
        def on_llm_end(self, *args: Any, **kwargs: Any) -> None:
            nonlocal peak
            peak = max(peak, journal.stats.pending)

    callbacks = [journal, Watching()]
    await chatty_graph(calls).ainvoke({"messages": [HumanMessage("go")]}, {"callbacks": callbacks})
    await journal.aclose()
    events = await store.list_events("slow-store", limit=1000)
    assert sum(e.event_type == "llm.ai.response" for e in events) == calls
    assert status_of(events) == "success"
    assert peak <= 8 + 2  # a callback may queue a couple of events before it waits
    assert journal.stats.over_limit <= 2 * calls // 4


async def test_a_sync_callback_journal_on_an_event_loop_never_blocks_it_and_loses_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """RunJournal's callbacks cannot await: on an event loop, over ``max_pending``, they keep the
    events in memory (one warning names AsyncRunJournal) and the loop is never blocked."""
    store = SlowMemoryStore()
    calls = 40
    journal = RunJournal(store, thread_id="slow-sync", max_pending=8, batch_size=4)
    with caplog.at_level("WARNING", logger="run_journal"):
        await chatty_graph(calls).ainvoke({"messages": [HumanMessage("go")]}, {"callbacks": [journal]})
    await journal.aclose()
    events = await store.list_events("slow-sync", limit=1000)
    assert sum(e.event_type == "llm.ai.response" for e in events) == calls
    assert [r.message for r in caplog.records if "AsyncRunJournal" in r.message] != []
    assert len([r for r in caplog.records if "AsyncRunJournal" in r.message]) == 1
