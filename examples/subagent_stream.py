"""A subagent streamed through ``wrap_subagent_stream`` inside a tool; its steps read back by task_id.

The lead agent delegates research to a subagent (its own small LangGraph agent) through a ``research``
tool. The tool streams the subagent and turns its progress into ``task_*`` chunks (started, one
``task_running`` per message, completed); ``wrap_subagent_stream`` passes
each chunk through unchanged and journals it in the parent run, in order. A UI then rebuilds the
subtask card from ``subagent.step`` rows, page by page, with ``subtask_steps``.

    python examples/subagent_stream.py
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from _models import chat_model, reply
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from run_journal import RunJournal, open_store, wrap_subagent_stream
from run_journal.projections import subtask_steps


@tool
def search_papers(topic: str) -> str:
    """Search a paper index."""
    return f"3 papers on {topic}: 'Seq is all you need', 'Dense logs', 'Append-only at scale'"


def agent_graph(script: list[AIMessage], tools: list[Any]) -> Any:
    model = chat_model(script).bind_tools(tools)

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


RESEARCHER_SCRIPT = [
    reply("Searching the index.", tool_calls=[
        {"name": "search_papers", "args": {"topic": "event logs"}, "id": "sub-call-1"}]),
    reply("Found three relevant papers; 'Dense logs' is the closest match.", output_tokens=30),
]


async def researcher_chunks(task_id: str, question: str) -> AsyncIterator[dict[str, Any]]:
    """Run the subagent and describe its progress as ``task_*`` chunks."""
    researcher = agent_graph(RESEARCHER_SCRIPT, [search_papers])
    yield {"type": "task_started", "task_id": task_id, "description": question, "subagent": "researcher"}
    index, last = 0, ""
    # In-process, the subagent inherits the parent's callbacks (the journal among them): the tag makes
    # the journal attribute its model calls, tool calls and usage to ``subagent:researcher``.
    config: RunnableConfig = {"tags": ["subagent:researcher"]}
    async for update in researcher.astream({"messages": [("user", question)]}, config,
                                           stream_mode="updates"):
        for node_output in update.values():
            for message in node_output["messages"]:
                yield {"type": "task_running", "task_id": task_id, "message_index": index,
                       "message": message}
                index += 1
                if isinstance(message, AIMessage):
                    last = str(message.content)
    # No "usage" here: the journal already counted these calls. A subagent running elsewhere (another
    # process or service) reports {"usage": {...}, "model": ...} in its terminal chunk instead.
    yield {"type": "task_completed", "task_id": task_id, "result": last}


def build_lead_agent(journal: RunJournal) -> Any:
    @tool
    async def research(question: str) -> str:
        """Delegate a research question to the researcher subagent."""
        result = ""
        async for chunk in wrap_subagent_stream(researcher_chunks("task-1", question), journal):
            if chunk["type"] == "task_completed":
                result = chunk["result"]
        return result

    return agent_graph([
        reply("I'll ask the researcher.", tool_calls=[
            {"name": "research", "args": {"question": "Which papers cover event logs?"}, "id": "call-1"}]),
        reply("The researcher recommends 'Dense logs'."),
    ], [research])


async def main() -> None:
    async with open_store("sqlite:///journal.db") as store:
        async with RunJournal(store, thread_id="research-1") as journal:
            lead = build_lead_agent(journal)
            await lead.ainvoke({"messages": [("user", "Find me a paper on event logs.")]},
                               {"callbacks": [journal]})

        print(f"run {journal.run_id} timeline:")
        for event in await store.list_events("research-1", journal.run_id):
            task = event.metadata.get("task_id")
            print(f"  seq {event.seq:>2} {event.event_type:<16} {event.metadata.get('caller'):<20}"
                  + (f" task_id={task}" if task else ""))

        print("subtask card for task-1, two steps per page:")
        cursor, page_number = None, 1
        while True:
            page = await subtask_steps(store, "research-1", journal.run_id, "task-1", limit=2,
                                       after_seq=cursor)
            for step in page.data:
                print(f"  page {page_number}: seq {step.seq} #{step.content['message_index']} "
                      f"{step.content['kind']}: {step.content['text']}")
            if not page.has_more:
                break
            cursor, page_number = page.next_after_seq, page_number + 1

        row = await store.get_run(journal.run_id)
        assert row is not None
        for caller, totals in row.usage_by_caller.items():
            print(f"usage {caller}: {totals.llm_calls} call(s), {totals.total_tokens} tokens")


if __name__ == "__main__":
    asyncio.run(main())
