"""One limit per indexed field on every backend, and the journal refuses the one event, never the batch.

A ``metadata["task_id"]`` of 8,000 characters used to be stored by four backends and make PostgreSQL
fail the journal's whole batch (an index row too large), so none of the run's events were stored. Now
``NewEvent`` refuses it when the event is built, so ``RunJournal.record()`` raises ``ValueError`` for
that one call (in the callback that made it) and every other event of the run is stored.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from run_journal import RunJournal, open_store
from run_journal.testing import read_all

from ._support import agent_graph, tool_call

pytestmark = pytest.mark.reliability


def long_task_id(length: int = 8000) -> str:
    rng = random.Random(length)  # incompressible: no database can shrink the index entry
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(length))


async def test_a_task_id_over_the_limit_fails_its_record_call_and_every_other_event_is_stored(
    store_url: str,
) -> None:
    refused: list[str] = []
    async with open_store(store_url) as store:
        journal = RunJournal(store, thread_id="limits")

        def record(task_id: str) -> None:
            journal.record("subagent.step", content={"task_id": task_id, "message_index": 0, "kind": "ai",
                                                     "text": "step"},
                           metadata={"task_id": task_id, "message_index": 0})

        @tool
        async def delegate(n: int) -> str:
            """Record a subagent's step (one with an id no store can index), then answer."""
            try:
                record(long_task_id())
            except ValueError as error:
                refused.append(str(error))
            record(f"task-{n}")
            return f"delegated {n}"

        with pytest.raises(ValueError, match=r"task_id is 8000 characters long; the limit is 255"):
            record(long_task_id())
        replies = [AIMessage(f"step {n}", tool_calls=[tool_call("delegate", f"d{n}", n=n)]) for n in range(2)]
        graph: Any = agent_graph([*replies, AIMessage("done")], [delegate])
        await graph.ainvoke({"messages": [("user", "go")]}, config={"callbacks": [journal]})
        await journal.aclose()
        events = await read_all(store, "limits")
        stats = journal.stats
    assert len(refused) == 2
    assert stats.failed_batches == 0
    assert stats.written == stats.submitted == len(events) >= 13
    steps = [e.metadata["task_id"] for e in events if e.event_type == "subagent.step"]
    assert steps == ["task-0", "task-1"]
    print(f"limits, {store_url.split(':', maxsplit=1)[0]}: 3 oversized task ids refused at record(), "
          f"{len(events)} of {stats.submitted} events stored")
