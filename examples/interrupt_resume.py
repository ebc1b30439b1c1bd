"""Interrupt and resume: two runs on one thread, ``interrupted`` then ``success``.

The graph asks a human to approve a refund with LangGraph's ``interrupt()``; the checkpointer
(``InMemorySaver``) keeps the paused state. Each invocation is its own run with its own journal. The
resumed run's ``run.start`` names the interrupted run in ``resumed_from``: the journal looks up the
thread's latest interrupted run (pass ``resumed_from=`` to say it yourself).

The runs are journaled into ``sqlite:///journal.db`` in the current directory, on a thread of their
own each time, so the interrupted run can be browsed afterwards with the command it prints.

    python examples/interrupt_resume.py
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from _models import chat_model, reply
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from run_journal import RunJournal, open_store


def build_graph() -> Any:
    model = chat_model([reply("Refund of $40 approved and sent.")])

    def approval(state: MessagesState) -> dict[str, Any]:
        answer = interrupt({"question": "Approve a $40 refund?"})
        return {"messages": [("user", f"manager says: {answer}")]}

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("approval", approval)
    builder.add_node("agent", agent)
    builder.add_edge(START, "approval")
    builder.add_edge("approval", "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=InMemorySaver())


STORE = "sqlite:///journal.db"


async def main() -> None:
    graph = build_graph()
    thread_id = f"refund-{uuid.uuid4().hex[:8]}"  # a thread of its own at each invocation
    thread = {"thread_id": thread_id}
    async with open_store(STORE) as store:
        async with RunJournal(store) as first:
            out = await graph.ainvoke({"messages": [("user", "Please refund my $40 order.")]},
                                      {"callbacks": [first], "configurable": thread})
        print("paused with:", out["__interrupt__"][0].value)

        async with RunJournal(store) as second:
            await graph.ainvoke(Command(resume="yes"), {"callbacks": [second], "configurable": thread})

        for row in await store.list_runs(thread_id):
            print(f"run {row.run_id}: status {row.status}, resumed_from {row.resumed_from}")
        for event in await store.list_events(thread_id):
            extra = ""
            if event.event_type == "run.start":
                extra = f" resumed_from={event.content['resumed_from']}"
            elif event.event_type == "run.interrupt":
                extra = f" value={event.content['interrupts'][0]['value']}"
            print(f"  seq {event.seq:>2} {event.run_id[:8]} {event.event_type}{extra}")
        start = (await store.list_events(thread_id, second.run_id, event_types=["run.start"]))[0]
        print("second run resumes the first:", start.content["resumed_from"] == first.run_id)
    print(f"browse the interrupted run: run-journal {STORE} show {first.run_id}")


if __name__ == "__main__":
    asyncio.run(main())
