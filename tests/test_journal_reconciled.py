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
