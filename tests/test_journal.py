"""RunJournal over real LangGraph graphs (offline fake chat models) on every store backend."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from blockbuster import blockbuster_ctx
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult, LLMResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt

from run_journal import RunEvent, RunEventStore, RunJournal, status_of
from run_journal.contract import validate_record
from run_journal.testing import ScriptedChatModel, reply


@pytest.fixture
def no_blocking() -> Iterator[None]:
    """Fail on blocking I/O in the event loop while the journal runs."""
    validate_record({})  # the test's own check loads its schema validator now, not inside the window
    with blockbuster_ctx() as detector:
        # LangGraph / LangChain import and inspect lazily; those are not the journal's I/O.
        for name in ("os.stat", "io.TextIOWrapper.read", "io.BufferedReader.read", "os.path.abspath"):
            if name in detector.functions:
                detector.functions[name].deactivate()
        yield


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"tool failed: {reason}")


def agent_graph(replies: list[AIMessage], tools: list[Any] | None = None, *, sync: bool = False,
                **tool_node: Any) -> Any:
    """agent -> (tools -> agent)*: the classic tool-calling loop."""
    model = ScriptedChatModel(replies)

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    def sync_agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", sync_agent if sync else agent)
    graph.add_node("tools", ToolNode(tools or [add], **tool_node))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph


def turn_replies() -> list[AIMessage]:
    return [reply("adding", tool_calls=[("add", {"a": 1, "b": 2}, "c1")]), reply("the answer is 3")]


def config(journal: RunJournal, thread_id: str = "t1") -> dict[str, Any]:
    return {"callbacks": [journal], "configurable": {"thread_id": thread_id}}


async def run_events(store: RunEventStore, journal: RunJournal) -> list[RunEvent]:
    assert journal.thread_id is not None
    events = await store.list_events(journal.thread_id, journal.run_id)
    for event in events:
        assert validate_record(event.to_dict()) == [], (event.event_type, validate_record(event.to_dict()))
    return events


def types(events: list[RunEvent]) -> list[str]:
    return [event.event_type for event in events]


async def check_row(store: RunEventStore, journal: RunJournal, events: list[RunEvent]) -> None:
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.status == status_of(events)


async def test_tool_calling_turn_exact_sequence(store: RunEventStore, no_blocking: None) -> None:
    journal = RunJournal(store)
    graph = agent_graph(turn_replies()).compile()
    await graph.ainvoke({"messages": [HumanMessage("what is 1+2?")]}, config(journal))
    await journal.aclose()
    events = await run_events(store, journal)
    assert types(events) == [
        "run.start", "llm.human.input", "llm.request", "llm.ai.response", "tool.call", "llm.tool.result",
        "tool.outcome", "llm.request", "llm.ai.response", "run.end",
    ]
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    start, human, asked, first, tool_call, result, outcome, asked_again, answer, end = events
    assert asked.content["message_count"] == 1
    assert asked_again.content["message_count"] == 3  # the human message, the reply, the tool result
    assert asked.metadata["llm_call_index"] == first.metadata["llm_call_index"] == 0
    assert asked_again.metadata["llm_call_index"] == answer.metadata["llm_call_index"] == 1
    assert journal.thread_id == "t1"
    assert start.metadata["langgraph"]["thread_id"] == "t1"
    assert human.content["content"] == "what is 1+2?"
    assert first.metadata["llm_call_index"] == 0
    assert answer.metadata["llm_call_index"] == 1
    assert tool_call.content["tool_call_id"] == "c1"
    assert tool_call.content["args_preview"] == '{"a":1,"b":2}'
    assert result.metadata["tool_call_id"] == "c1"
    assert result.content["content"] == "3"
    assert outcome.content["outcome"] == "success"
    assert outcome.content["result_size"] == 1
    assert len(outcome.content["result_sha256"]) == 64
    assert "3" not in outcome.content.values()
    produced = end.content["output"]["messages"]
    assert [m["type"] for m in produced] == ["human", "ai", "tool", "ai"]
    await check_row(store, journal, events)
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.status == "success"
    assert row.llm_call_count == 2
    assert row.tool_call_count == 1
    assert row.message_count == 4
    assert row.first_human_message == "what is 1+2?"
    assert row.last_ai_message == "the answer is 3"


async def test_run_end_holds_only_this_runs_messages(store: RunEventStore) -> None:
    saver = InMemorySaver()
    graph = agent_graph([*turn_replies(), reply("second answer")]).compile(checkpointer=saver)
    first = RunJournal(store)
    await graph.ainvoke({"messages": [HumanMessage("one")]}, config(first))
    await first.aclose()
    second = RunJournal(store)
    await graph.ainvoke({"messages": [HumanMessage("two")]}, config(second))
    await second.aclose()
    end = (await run_events(store, second))[-1]
    assert [m["content"] for m in end.content["output"]["messages"]] == ["two", "second answer"]


async def test_exception_in_node_is_one_run_error(store: RunEventStore, no_blocking: None) -> None:
    def boom(state: MessagesState) -> dict[str, Any]:
        raise ValueError("node exploded")

    graph = StateGraph(MessagesState)
    graph.add_node("boom", boom)
    graph.add_edge(START, "boom")
    journal = RunJournal(store)
    with pytest.raises(ValueError, match="node exploded"):
        await graph.compile().ainvoke({"messages": [HumanMessage("hi")]}, config(journal))
    await journal.aclose()
    events = await run_events(store, journal)
    assert types(events) == ["run.start", "llm.human.input", "run.error"]
    assert events[-1].content["error_type"] == "ValueError"
    assert events[-1].content["node"] == "boom"
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.status == "error"
    assert row.error == "node exploded"


async def test_interrupt_then_resume(store: RunEventStore) -> None:
    def ask(state: MessagesState) -> dict[str, Any]:
        answer = interrupt({"question": "proceed?"})
        return {"messages": [AIMessage(f"human said {answer}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("ask", ask)
    graph.add_edge(START, "ask")
    compiled = graph.compile(checkpointer=InMemorySaver())
    first = RunJournal(store)
    out = await compiled.ainvoke({"messages": [HumanMessage("go")]}, config(first))
    assert "__interrupt__" in out
    await first.aclose()
    second = RunJournal(store)
    await compiled.ainvoke(Command(resume="yes"), config(second))
    await second.aclose()
    one, two = await run_events(store, first), await run_events(store, second)
    assert types(one) == ["run.start", "llm.human.input", "run.interrupt"]
    assert one[-1].content["interrupts"][0]["value"] == {"question": "proceed?"}
    assert types(two) == ["run.start", "run.end"]
    assert two[0].content["resumed_from"] == first.run_id
    assert [m["content"] for m in two[-1].content["output"]["messages"]] == ["human said yes"]
    rows = {row.run_id: row for row in await store.list_runs("t1")}
    assert rows[first.run_id].status == "interrupted"
    assert rows[second.run_id].status == "success"
    assert rows[second.run_id].resumed_from == first.run_id


async def test_cancellation_and_close_of_unfinished_run(store: RunEventStore) -> None:
    started = asyncio.Event()

    async def slow(state: MessagesState) -> dict[str, Any]:
        started.set()
        await asyncio.sleep(30)
        return {}

    graph = StateGraph(MessagesState)
    graph.add_node("slow", slow)
    graph.add_edge(START, "slow")
    journal = RunJournal(store)
    task = asyncio.create_task(graph.compile().ainvoke({"messages": [HumanMessage("hi")]}, config(journal)))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await journal.aclose()
    events = await run_events(store, journal)
    assert types(events) == ["run.start", "llm.human.input", "run.cancel"]
    await check_row(store, journal, events)

    unfinished = RunJournal(store, thread_id="t2")
    unfinished.on_chain_start({}, {"messages": []}, run_id=__import__("uuid").uuid4())
    await unfinished.aclose()
    closed = await run_events(store, unfinished)
    assert types(closed) == ["run.start", "run.cancel"]
    await check_row(store, unfinished, closed)


async def test_parallel_tools_and_a_raised_tool_error(store: RunEventStore, no_blocking: None) -> None:
    replies = [
        reply(tool_calls=[("add", {"a": 1, "b": 1}, "p1"), ("explode", {"reason": "x"}, "p2"),
                          ("add", {"a": 2, "b": 2}, "p3")]),
        reply("done"),
    ]
    journal = RunJournal(store)
    graph = agent_graph(replies, [add, explode], handle_tool_errors=True).compile()
    await graph.ainvoke({"messages": [HumanMessage("hi")]}, config(journal))
    await journal.aclose()
    events = await run_events(store, journal)
    assert types(events).count("tool.call") == 3
    outcomes = {e.content["tool_call_id"]: e.content for e in events if e.event_type == "tool.outcome"}
    assert {k: v["outcome"] for k, v in outcomes.items()} == {"p1": "success", "p2": "error", "p3": "success"}
    assert "tool failed: x" in outcomes["p2"]["error"]
    results = {e.metadata["tool_call_id"]: e.metadata["status"] for e in events
               if e.event_type == "llm.tool.result"}
    assert results == {"p1": "success", "p2": "error", "p3": "success"}
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.tool_call_count == 3
    assert row.tool_error_count == 1


async def test_subgraph_and_unanswered_call_is_missing(store: RunEventStore) -> None:
    model = ScriptedChatModel([reply(tool_calls=[("add", {"a": 1, "b": 1}, "m1")])])

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    inner = StateGraph(MessagesState)
    inner.add_node("agent", agent)
    inner.add_edge(START, "agent")
    outer = StateGraph(MessagesState)
    outer.add_node("inner", inner.compile())
    outer.add_edge(START, "inner")
    journal = RunJournal(store)
    await outer.compile().ainvoke({"messages": [HumanMessage("hi")]}, config(journal))
    await journal.aclose()
    events = await run_events(store, journal)
    assert types(events) == [
        "run.start", "llm.human.input", "llm.request", "llm.ai.response", "tool.call", "tool.outcome",
        "run.end",
    ]
    assert events[5].content["outcome"] == "missing"
    assert types(events).count("run.start") == 1


class _CaptureLlmRuns(BaseCallbackHandler):
    run_inline = True

    def __init__(self) -> None:
        self.run_ids: list[Any] = []

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: Any, **kwargs: Any) -> None:
        self.run_ids.append(run_id)


async def test_double_llm_end_writes_one_response(store: RunEventStore) -> None:
    model = ScriptedChatModel([reply("once")])
    capture = _CaptureLlmRuns()
    journal = RunJournal(store)

    async def agent(state: MessagesState) -> dict[str, Any]:
        message = await model.ainvoke(state["messages"])
        again = LLMResult(generations=[[ChatGeneration(message=message)]])
        journal.on_llm_end(again, run_id=capture.run_ids[-1])  # a provider reporting the end twice
        return {"messages": [message]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    await graph.compile().ainvoke({"messages": [HumanMessage("hi")]},
                                  {"callbacks": [journal, capture], "configurable": {"thread_id": "t1"}})
    await journal.aclose()
    events = await run_events(store, journal)
    assert types(events).count("llm.ai.response") == 1
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.llm_call_count == 1


class LlmOutputUsageModel(GenericFakeChatModel):
    """A provider that reports usage only in llm_output (OpenAI wire shape)."""

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        message = next(self.messages)
        assert isinstance(message, AIMessage)
        usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                 "prompt_tokens_details": {"cached_tokens": 40}}
        return ChatResult(generations=[ChatGeneration(message=message)],
                          llm_output={"token_usage": usage, "model_name": "gpt-test"})


@pytest.mark.parametrize("priced", [True, False])
async def test_usage_only_in_llm_output(store: RunEventStore, priced: bool) -> None:
    model = LlmOutputUsageModel(messages=iter([AIMessage("a"), AIMessage("b")]))

    def agent(state: MessagesState) -> dict[str, Any]:
        first = model.invoke(state["messages"])
        return {"messages": [first, model.invoke([*state["messages"], first])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    pricing = {"gpt-test": {"input": 1.0, "output": 10.0, "cache_read": 0.5}} if priced else None
    journal = RunJournal(store, pricing=pricing)
    await graph.compile().ainvoke({"messages": [HumanMessage("hi")]}, config(journal))
    await journal.aclose()
    events = await run_events(store, journal)
    response = next(e for e in events if e.event_type == "llm.ai.response")
    assert response.metadata["usage"]["input_tokens"] == 100
    assert response.metadata["model_name"] == "gpt-test"
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert row.usage.input_tokens == 200
    assert row.usage.output_tokens == 40
    assert row.usage.cache_read_tokens == 80
    assert row.usage.total_tokens == 240
    assert row.usage_by_model["gpt-test"].llm_calls == 2
    assert row.usage_by_caller["lead_agent"].total_tokens == 240
    if priced:  # 2 x (60 x 1.0 + 40 x 0.5 + 20 x 10.0) per million
        assert row.cost_usd == pytest.approx(2 * 280 / 1_000_000)
    else:
        assert row.cost_usd is None


async def test_stream_modes_and_astream_events(store: RunEventStore) -> None:
    for index, mode in enumerate(("astream", "astream_events", "stream")):
        journal = RunJournal(store, thread_id=f"s{index}")
        graph = agent_graph(turn_replies()).compile()
        inputs = {"messages": [HumanMessage("hi")]}
        if mode == "astream":
            async for _ in graph.astream(inputs, {"callbacks": [journal]}):
                pass
        elif mode == "astream_events":  # the fake model streams text only, so no tool call here
            graph = agent_graph([reply("streamed answer")]).compile()
            async for _ in graph.astream_events(inputs, {"callbacks": [journal]}, version="v2"):
                pass
        else:  # a sync stream on the loop thread: the writer runs once the loop is free again
            sync_graph = agent_graph(turn_replies(), sync=True).compile()
            for _ in sync_graph.stream(inputs, {"callbacks": [journal]}):
                pass
        await journal.aclose()
        events = await run_events(store, journal)
        assert (types(events)[0], types(events)[-1]) == ("run.start", "run.end"), mode
        responses = [e for e in events if e.event_type == "llm.ai.response"]
        assert len(responses) == (1 if mode == "astream_events" else 2), mode
        if mode == "astream_events":  # streamed: time to first token is measured
            assert responses[0].metadata["time_to_first_token_ms"] is not None


async def test_graph_invoked_inside_a_sync_tool(store: RunEventStore) -> None:
    inner_model = ScriptedChatModel([reply("inner answer")])

    def inner_agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [inner_model.invoke(state["messages"])]}

    inner = StateGraph(MessagesState)
    inner.add_node("inner_agent", inner_agent)
    inner.add_edge(START, "inner_agent")
    inner_graph = inner.compile()

    @tool
    def research(topic: str) -> str:
        """Runs a whole graph (sync tool: LangGraph runs it in an executor thread)."""
        out = inner_graph.invoke({"messages": [HumanMessage(topic)]})
        return str(out["messages"][-1].content)

    replies = [reply(tool_calls=[("research", {"topic": "x"}, "r1")]), reply("final")]
    journal = RunJournal(store)
    await agent_graph(replies, [research]).compile().ainvoke({"messages": [HumanMessage("hi")]},
                                                               config(journal))
    await journal.aclose()
    events = await run_events(store, journal)
    names = types(events)
    assert names.count("llm.ai.response") == 3
    assert names.index("tool.call") < names.index("tool.outcome") < len(names) - 1
    # a graph that calls a model inside a tool call is a subagent task, named after the tool
    start, inner_request, inner_response, step, end = events[names.index("tool.call") + 1:
                                                            names.index("tool.call") + 6]
    assert inner_request.event_type == "llm.request"
    assert inner_request.metadata["caller"] == "subagent:research"
    assert (start.event_type, start.content["task_id"], start.content["subagent"]) == (
        "subagent.start", "r1", "research")
    assert inner_response.event_type == "llm.ai.response"
    assert inner_response.content["content"] == "inner answer"
    assert inner_response.metadata["caller"] == "subagent:research"
    assert (step.event_type, step.content["kind"], step.content["text"]) == (
        "subagent.step", "ai", "inner answer")
    assert (end.event_type, end.content["status"], end.content["result"]) == (
        "subagent.end", "completed", "inner answer")
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert set(row.usage_by_caller) == {"lead_agent", "subagent:research"}
