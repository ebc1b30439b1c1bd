"""A slow worker whose run was reconciled as orphaned must not add a second terminal event."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from run_journal import RunEventStore, RunJournal
from run_journal.catalog import TERMINAL_RUN_EVENTS
from run_journal.projections import reconcile_orphans, status_of


class State(TypedDict):
    value: int


async def test_reconciled_run_keeps_one_terminal_event(store: RunEventStore) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(state: State) -> dict[str, Any]:
        entered.set()
        await release.wait()
        return {"value": state["value"] + 1}

    graph = StateGraph(State)
    graph.add_node("slow", slow)
    graph.add_edge(START, "slow")
    compiled = graph.compile()

    journal = RunJournal(store, thread_id="slow-worker")
    run = asyncio.create_task(compiled.ainvoke({"value": 1}, {"callbacks": [journal]}))
    await entered.wait()
    await journal.flush()
    closed = await reconcile_orphans(store, older_than=timedelta(0))
    assert [c.row.run_id for c in closed] == [journal.run_id]

    release.set()
    assert await run == {"value": 2}
    await journal.aclose()

    events = await store.list_events("slow-worker", journal.run_id)
    terminals = [e.event_type for e in events if e.event_type in TERMINAL_RUN_EVENTS]
    assert terminals == ["run.cancel"]
    assert journal.stats.superseded == 1
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.status == status_of(events) == "cancelled"


async def test_a_reconciler_racing_the_terminal_write_leaves_one_terminal_event() -> None:
    """The reconciler closes the run at the very moment the journal writes its terminal event."""
    from datetime import UTC, datetime

    from langchain_core.runnables import RunnableLambda

    from run_journal.stores.memory import MemoryRunEventStore

    class Racy(MemoryRunEventStore):
        raced = False

        async def race(self) -> None:
            if not self.raced:
                self.raced = True
                later = datetime.now(UTC) + timedelta(hours=1)
                await reconcile_orphans(self, older_than=timedelta(0), now=later)

        async def put_batch(self, events: Any) -> Any:
            events = list(events)
            if any(event.event_type == "run.end" for event in events):
                await self.race()
            return await super().put_batch(events)

        async def put_event_if_absent(self, event: Any, **options: Any) -> Any:
            if event.event_type == "run.end":
                await self.race()
            return await super().put_event_if_absent(event, **options)

        async def put_run_close(self, events: Any, terminal: Any, row: Any) -> Any:
            if terminal.event_type == "run.end":
                await self.race()
            return await super().put_run_close(events, terminal, row)

    store = Racy()
    journal = RunJournal(store, thread_id="race", flush_interval=0)

    async def slow(value: dict[str, int]) -> dict[str, int]:
        await asyncio.sleep(0.2)  # run.start and the running row reach the store first
        return value

    await RunnableLambda(slow).ainvoke({"a": 1}, config={"callbacks": [journal]})
    await journal.aclose()
    events = await store.list_events("race")
    assert store.raced
    assert [e.event_type for e in events if e.event_type in TERMINAL_RUN_EVENTS] == ["run.cancel"]
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.status == status_of(events) == "cancelled"
    assert journal.stats.superseded == 1
