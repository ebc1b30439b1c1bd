"""Real journaled LangGraph runs for the viewer tests: an offline fake chat model, real callbacks.

``record_all(url)`` fills a store with what a person would look at: a tool turn with costs, an
interrupted and resumed run, a run with a subagent streamed through ``wrap_subagent_stream``, a run
that changed files (``WorkspaceSnapshot`` / ``arecord_workspace_changes``), a failed run with its
traceback, a supervisor handing off to two named agents, scores on a run, a second run of a thread
that goes differently, and one long run of 10,000 events. ``live_writer.py`` is the run that is
still going while the browser watches.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _agent_tools import add, web_search
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, SystemMessage
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt
from langgraph_supervisor import create_supervisor

from run_journal import (
    NewEvent,
    RunEventStore,
    RunJournal,
    RunRow,
    UsageTotals,
    WorkspaceSnapshot,
    arecord_workspace_changes,
    open_store,
    record_score,
    wrap_subagent_stream,
)

MODEL = "fake-gpt"
PRICING = {MODEL: {"input": 2.50, "output": 10.00}}
BIG_EVENTS = 10_000


class ScriptedModel(GenericFakeChatModel):
    """The fake answers from its script; binding tools changes nothing (the script holds the calls)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self


class OfferingModel(ScriptedModel):
    """A scripted model that is sent its tools, as a provider's chat model is (so the request holds them)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(item) for item in tools], **kwargs)


def reply(
    text: str, *calls: tuple[str, dict[str, Any], str], tokens: tuple[int, int] = (400, 40)
) -> AIMessage:
    return AIMessage(
        content=text,
        tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}
                    for name, args, call_id in calls],
        usage_metadata={"input_tokens": tokens[0], "output_tokens": tokens[1],
                        "total_tokens": sum(tokens)},
        response_metadata={"model_name": MODEL},
    )


def tool_loop(script: list[AIMessage], tools: list[Any], checkpointer: Any = None,
              system: str | None = None) -> Any:
    model = (OfferingModel if system else ScriptedModel)(messages=iter(script)).bind_tools(tools)
    prompt = [SystemMessage(system)] if system else []

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke([*prompt, *state["messages"]])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


# -- a tool turn ---------------------------------------------------------------------------------------
@tool
def lookup_order(order_id: str) -> str:
    """Find an order's status."""
    return f"order {order_id}: shipped on 2026-05-02, arriving Friday"


@tool
def refund_policy(days: int) -> str:
    """Whether an order is still refundable after this many days."""
    return "refundable" if days <= 30 else "not refundable"


SUPPORT_PROMPT = ("You are the order desk of a small shop.\nLook orders up before you answer, and say "
                  "whether an order can still be returned.")


async def tool_turn(store: RunEventStore) -> str:
    graph = tool_loop([
        reply("Let me look that up.", ("lookup_order", {"order_id": "A-1001"}, "call-1"),
              ("refund_policy", {"days": 12}, "call-2"), tokens=(1200, 40)),
        reply("Order A-1001 shipped on 2026-05-02 and arrives Friday; it is still refundable.",
              tokens=(1350, 60)),
    ], [lookup_order, refund_policy], system=SUPPORT_PROMPT)
    async with RunJournal(store, thread_id="support-42", run_id="tool-turn", pricing=PRICING) as journal:
        await graph.ainvoke({"messages": [("user", "Where is order A-1001, and can I still return it?")]},
                            {"callbacks": [journal]})
    return journal.run_id


async def tool_turn_again(store: RunEventStore) -> str:
    """The same question in the same thread, answered without the refund policy: the second run of
    the thread goes differently (the compare view's pair)."""
    graph = tool_loop([
        reply("Let me look that up.", ("lookup_order", {"order_id": "A-1001"}, "call-1"), tokens=(1100, 30)),
        reply("Order A-1001 shipped on 2026-05-02 and arrives Friday.", tokens=(1250, 50)),
    ], [lookup_order, refund_policy])
    async with RunJournal(store, thread_id="support-42", run_id="tool-turn-again",
                          pricing=PRICING) as journal:
        await graph.ainvoke({"messages": [("user", "Where is order A-1001, and can I still return it?")]},
                            {"callbacks": [journal]})
    return journal.run_id


async def scored(store: RunEventStore, run_id: str) -> None:
    await record_score(store, "support-42", run_id, "refund_policy_called", True, source="check",
                       comment="refund_policy was called once")
    await record_score(store, "support-42", run_id, "feedback", "up", source="human",
                       comment="clear and complete")


# -- a failed run ----------------------------------------------------------------------------------------
class InventoryDown(RuntimeError):
    pass


def check_stock(sku: str) -> int:
    raise InventoryDown(f"the inventory service refused {sku}: 503")


async def failed(store: RunEventStore) -> str:
    async def agent(state: MessagesState) -> dict[str, Any]:
        check_stock("SKU-9")
        return {}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    graph = builder.compile()
    async with RunJournal(store, thread_id="broken-1", run_id="fails", pricing=PRICING) as journal:
        with contextlib.suppress(InventoryDown):  # the run fails; the journal keeps its traceback
            await graph.ainvoke({"messages": [("user", "Is SKU-9 in stock?")]}, {"callbacks": [journal]})
    return journal.run_id


# -- a supervisor and two named agents -------------------------------------------------------------------
async def supervised(store: RunEventStore) -> str:
    research = create_agent(
        ScriptedModel(messages=iter([reply("", ("web_search", {"query": "FAANG headcount"}, "r1")),
                                     reply("FAANG employs about 1.9M people")])),
        [web_search], name="research_expert")
    math = create_agent(
        ScriptedModel(messages=iter([reply("", ("add", {"a": 1, "b": 2}, "m1")), reply("1 + 2 = 3")])),
        [add], name="math_expert")
    lead = ScriptedModel(messages=iter([
        reply("", ("transfer_to_research_expert", {}, "s1")),
        reply("", ("transfer_to_math_expert", {}, "s2")),
        reply("Headcount is about 1.9M, and 1 + 2 = 3."),
    ]))
    graph: Any = create_supervisor([research, math], model=lead).compile()
    async with RunJournal(store, thread_id="team-1", run_id="supervised", pricing=PRICING) as journal:
        await graph.ainvoke({"messages": [("user", "FAANG headcount, and 1 + 2?")]}, {"callbacks": [journal]})
    return journal.run_id


# -- interrupt and resume --------------------------------------------------------------------------------
async def interrupted_and_resumed(store: RunEventStore) -> tuple[str, str]:
    model = ScriptedModel(messages=iter([reply("Refund of $40 approved and sent.")]))

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
    graph: Any = builder.compile(checkpointer=InMemorySaver())
    config: dict[str, Any] = {"configurable": {"thread_id": "refund-7"}}
    async with RunJournal(store, run_id="refund-asks", pricing=PRICING) as first:
        await graph.ainvoke({"messages": [("user", "Please refund my $40 order.")]},
                            {**config, "callbacks": [first]})
    async with RunJournal(store, run_id="refund-resumes", pricing=PRICING) as second:
        await graph.ainvoke(Command(resume="yes"), {**config, "callbacks": [second]})
    return first.run_id, second.run_id


# -- a subagent ------------------------------------------------------------------------------------------
@tool
def search_papers(topic: str) -> str:
    """Search a paper index."""
    return f"3 papers on {topic}: 'Seq is all you need', 'Dense logs', 'Append-only at scale'"


async def researcher(task_id: str, question: str) -> AsyncIterator[dict[str, Any]]:
    """A subagent that runs on its own (no callbacks of the parent: as if it ran in another service)
    and reports its progress as ``task_*`` chunks, its usage in the terminal one."""
    graph = tool_loop([
        reply("Searching the index.", ("search_papers", {"topic": "event logs"}, "sub-1"), tokens=(300, 20)),
        reply("Found three papers; 'Dense logs' is the closest match.", tokens=(500, 30)),
    ], [search_papers])
    messages: asyncio.Queue[Any] = asyncio.Queue()

    async def run_elsewhere() -> None:
        async for update in graph.astream({"messages": [("user", question)]}, stream_mode="updates"):
            for output in update.values():
                for message in output["messages"]:
                    await messages.put(message)
        await messages.put(None)

    yield {"type": "task_started", "task_id": task_id, "description": question, "subagent": "researcher"}
    # A fresh context: the subagent does not inherit the lead's callbacks (it stands for a subagent in
    # another process or service, which only reports chunks).
    worker = asyncio.get_running_loop().create_task(run_elsewhere(), context=contextvars.Context())
    index, last = 0, ""
    while (message := await messages.get()) is not None:
        yield {"type": "task_running", "task_id": task_id, "message_index": index, "message": message}
        index += 1
        if isinstance(message, AIMessage):
            last = str(message.content)
    await worker
    usage = {"input_tokens": 800, "output_tokens": 50, "total_tokens": 850}
    yield {"type": "task_completed", "task_id": task_id, "result": last, "usage": usage, "model": MODEL}


async def with_subagent(store: RunEventStore) -> str:
    async with RunJournal(store, thread_id="research-1", run_id="research", pricing=PRICING) as journal:
        @tool
        async def research(question: str) -> str:
            """Delegate a research question to the researcher subagent."""
            result = ""
            async for chunk in wrap_subagent_stream(researcher("task-1", question), journal):
                if chunk["type"] == "task_completed":
                    result = chunk["result"]
            return result

        graph = tool_loop([
            reply("I'll ask the researcher.", ("research", {"question": "Which papers cover event logs?"},
                                               "call-1")),
            reply("The researcher recommends 'Dense logs'."),
        ], [research])
        await graph.ainvoke({"messages": [("user", "Find me a paper on event logs.")]},
                            {"callbacks": [journal]})
    return journal.run_id


# -- workspace changes -------------------------------------------------------------------------------------
GREETER = "def greet(name):\n    print(f'hello, {name}')\n\ngreet('world')\n"


async def with_workspace_changes(store: RunEventStore, workspace: Path) -> str:
    def prepare() -> None:
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / "app.py").write_text("def greet():\n    print('hello')\n\ngreet()\n", encoding="utf-8")
        (workspace / "notes.txt").write_text("remember to write the README\n", encoding="utf-8")

    await asyncio.to_thread(prepare)

    @tool
    def write_file(path: str, text: str) -> str:
        """Write a text file in the workspace."""
        (workspace / path).write_text(text, encoding="utf-8")
        return f"wrote {len(text)} characters to {path}"

    @tool
    def delete_file(path: str) -> str:
        """Delete a file from the workspace."""
        (workspace / path).unlink()
        return f"deleted {path}"

    graph = tool_loop([
        reply("Updating the project.",
              ("write_file", {"path": "app.py", "text": GREETER}, "c1"),
              ("write_file", {"path": "README.md", "text": "# Demo\n\nRun `python app.py`.\n"}, "c2"),
              ("delete_file", {"path": "notes.txt"}, "c3")),
        reply("Done: app.py greets the world, README.md explains it, notes.txt is gone."),
    ], [write_file, delete_file])
    async with RunJournal(store, thread_id="workspace-1", run_id="files", pricing=PRICING) as journal:
        before = await WorkspaceSnapshot.acapture(workspace)
        await graph.ainvoke({"messages": [("user", "Make app.py greet the world.")]},
                            {"callbacks": [journal]})
        await arecord_workspace_changes(journal, before)
    return journal.run_id


# -- a long run ----------------------------------------------------------------------------------------------
async def long_run(store: RunEventStore, events: int = BIG_EVENTS) -> str:
    """A run of ``events`` events (model calls, tool calls and their outcomes), written in batches."""
    thread, run = "long-run", "ten-thousand"
    start = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    batch: list[NewEvent] = [NewEvent(thread, run, "run.start", "trace", {"run_name": "batch job"},
                                      {"caller": "lead_agent"}, start)]
    n = 0
    while len(batch) < events - 1:
        n += 1
        moment = start + timedelta(milliseconds=10 * len(batch))
        call = f"call-{n}"
        usage = {"input_tokens": 50, "output_tokens": 10, "total_tokens": 60}
        batch += [
            NewEvent(thread, run, "llm.ai.response", "message",
                     {"type": "ai", "content": f"step {n}",
                      "tool_calls": [{"name": "fetch", "args": {"page": n}, "id": call}]},
                     {"caller": "lead_agent", "usage": usage, "model_name": MODEL}, moment),
            NewEvent(thread, run, "tool.call", "trace",
                     {"tool_call_id": call, "tool_name": "fetch", "args_preview": f'{{"page":{n}}}'},
                     {"caller": "lead_agent", "tool_call_id": call}, moment),
            NewEvent(thread, run, "tool.outcome", "trace",
                     {"tool_call_id": call, "tool_name": "fetch", "outcome": "success", "duration_ms": 3,
                      "result_size": 120}, {"caller": "lead_agent", "tool_call_id": call}, moment),
        ]
    batch = batch[: events - 1]
    end = start + timedelta(milliseconds=10 * events)
    batch.append(NewEvent(thread, run, "run.end", "outputs", {"output": "done"}, {"caller": "lead_agent"},
                          end))
    for offset in range(0, len(batch), 1000):
        await store.put_batch(batch[offset: offset + 1000])
    calls = sum(1 for event in batch if event.event_type == "llm.ai.response")
    totals = UsageTotals(input_tokens=50 * calls, output_tokens=10 * calls, total_tokens=60 * calls,
                         llm_calls=calls)
    await store.put_run(RunRow(run_id=run, thread_id=thread, status="success", started_at=start,
                               ended_at=end, usage=totals, usage_by_model={MODEL: totals},
                               usage_by_caller={"lead_agent": totals}, tool_call_count=calls,
                               first_human_message="Fetch every page."))
    return run


async def record_all(url: str, workspace: Path) -> dict[str, Any]:
    async with open_store(url) as store:
        asked, resumed = await interrupted_and_resumed(store)
        turn = await tool_turn(store)
        await scored(store, turn)
        return {
            "tool_turn": turn,
            "tool_turn_again": await tool_turn_again(store),
            "failed": await failed(store),
            "supervised": await supervised(store),
            "interrupted": asked,
            "resumed": resumed,
            "subagent": await with_subagent(store),
            "workspace": await with_workspace_changes(store, workspace),
            "long": await long_run(store),
        }
