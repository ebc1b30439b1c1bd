"""A deepagents lead agent that delegates to a subagent, journaled as a subagent task.

``create_deep_agent`` runs each subagent as a graph nested inside the lead's ``task`` tool call. The
journal records it as a task: ``subagent.start`` (the tool call's id is the ``task_id``), one
``subagent.step`` per reply and tool result of the subagent, ``subagent.end`` with its result; the
subagent's tokens go to ``subagent:<name>`` and its replies stay out of thread history, while the
``task`` tool's result stays in, so a subtask card can be restored from the steps.

    python examples/deep_agent.py
"""

from __future__ import annotations

import asyncio
import uuid

from _models import chat_model, reply
from deepagents import create_deep_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from run_journal import RunJournal, open_store
from run_journal.projections import subtask_steps, thread_history


@tool
def search_flights(route: str) -> str:
    """Search flights on a route."""
    return f"{route}: 3 direct flights tomorrow, cheapest 420 EUR"


LEAD_SCRIPT = [
    reply("", tool_calls=[{"name": "task", "id": "call-research-1", "args": {
        "description": "Find the cheapest direct flight Paris to New York tomorrow",
        "subagent_type": "researcher"}}]),
    reply("The cheapest direct flight tomorrow costs 420 EUR.", output_tokens=14),
]
RESEARCHER_SCRIPT = [
    reply("", tool_calls=[{"name": "search_flights", "args": {"route": "CDG-JFK"}, "id": "sub-1"}],
          input_tokens=25),
    reply("Cheapest direct flight: 420 EUR.", input_tokens=30, output_tokens=8),
]


async def main() -> None:
    agent = create_deep_agent(
        model=chat_model(LEAD_SCRIPT),
        tools=[search_flights],
        subagents=[{"name": "researcher", "description": "Finds travel facts.",
                    "system_prompt": "You research travel.", "tools": [search_flights],
                    "model": chat_model(RESEARCHER_SCRIPT)}],
    )
    thread = f"deep-{uuid.uuid4().hex[:8]}"
    async with open_store("sqlite:///journal.db") as store:
        async with RunJournal(store, thread_id=thread) as journal:
            await agent.ainvoke({"messages": [HumanMessage("Cheapest flight to New York tomorrow?")]},
                                {"callbacks": [journal]})
        for event in await store.list_events(thread, event_types=["subagent.start", "subagent.end"]):
            print(event.event_type, event.content["task_id"], event.metadata["caller"],
                  event.content.get("status", event.content.get("description")))
        page = await subtask_steps(store, thread, journal.run_id, "call-research-1")
        for step in page.data:
            print(f"  step {step.content['message_index']}: {step.content['kind']} {step.content['text']!r}")
        row = await store.get_run(journal.run_id)
        assert row is not None
        for caller, totals in sorted(row.usage_by_caller.items()):
            print(f"tokens by {caller}: {totals.total_tokens}")
        history = await thread_history(store, thread)
        print("thread history:", [(e.event_type, e.content["content"]) for e in history.data])


if __name__ == "__main__":
    asyncio.run(main())
