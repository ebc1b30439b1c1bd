"""The agents people build: LangChain v1 ``create_agent`` with middleware, and deepagents' subagents.

Real ``langchain`` and ``deepagents`` agents on offline scripted chat models, journaled on
every backend. Each test checks who each model call is attributed to, the usage buckets, what
thread history shows, the run row's last AI message, the middleware events and exactly one
terminal event.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import (
    HumanInTheLoopMiddleware,
    ModelCallLimitMiddleware,
    ModelFallbackMiddleware,
    SummarizationMiddleware,
    ToolRetryMiddleware,
)
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from run_journal import RunEventStore, RunJournal
from run_journal.catalog import TERMINAL_RUN_EVENTS
from run_journal.envelope import RunEvent
from run_journal.projections import thread_history
from run_journal.runs import RunRow
from run_journal.testing import ScriptedChatModel


class BrokenModel(ScriptedChatModel):
    """A model whose provider is down."""

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("provider down")

    async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("provider down")


def said(text: str, tokens: int = 10, **fields: Any) -> AIMessage:
    return AIMessage(text, usage_metadata={"input_tokens": tokens, "output_tokens": 1,
                                           "total_tokens": tokens + 1}, **fields)


def calls(name: str, call_id: str, tokens: int = 10, **args: Any) -> AIMessage:
    return said("", tokens, tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


FLAKY_CALLS: list[int] = []


@tool
def flaky_add(a: int, b: int) -> int:
    """Add two numbers, failing the first time."""
    FLAKY_CALLS.append(1)
    if len(FLAKY_CALLS) % 2 == 1:
        raise TimeoutError("try again")
    return a + b


async def run_of(store: RunEventStore, journal: RunJournal) -> tuple[list[RunEvent], RunRow]:
    assert journal.thread_id is not None
    events = await store.list_events(journal.thread_id, journal.run_id, limit=10_000)
    row = await store.get_run(journal.run_id)
    assert row is not None
    assert sum(e.event_type in TERMINAL_RUN_EVENTS for e in events) == 1
    assert sum(e.event_type == "run.start" for e in events) == 1
    return events, row


def callers(events: list[RunEvent], event_type: str = "llm.ai.response") -> list[str]:
    return [e.metadata["caller"] for e in events if e.event_type == event_type]


async def history_texts(store: RunEventStore, thread_id: str) -> list[tuple[str, str]]:
    page = await thread_history(store, thread_id)
    return [(e.event_type, str(e.content.get("content")) if isinstance(e.content, dict) else "")
            for e in page.data]


# -- create_agent with middleware ------------------------------------------------------------------
async def test_summarization_is_the_middlewares_own_call_not_the_assistants(store: RunEventStore) -> None:
    summarizer = ScriptedChatModel([said("SUMMARY of the earlier talk", tokens=50)] * 3)
    agent = create_agent(ScriptedChatModel([calls("add", "c1", a=1, b=2), said("it is 3", 20)]), [add],
                         middleware=[SummarizationMiddleware(model=summarizer, trigger=("messages", 4),
                                                             keep=("messages", 2))])
    journal = RunJournal(store, thread_id="summarized")
    history = [HumanMessage("hi"), AIMessage("hello"), HumanMessage("how are you"), AIMessage("fine"),
               HumanMessage("what is 1+2")]
    await agent.ainvoke({"messages": history}, {"callbacks": [journal]})
    await journal.aclose()
    events, row = await run_of(store, journal)
    assert set(callers(events)) == {"lead_agent", "middleware:summarization"}
    assert callers(events).count("lead_agent") == 2
    assert set(row.usage_by_caller) == {"lead_agent", "middleware:summarization"}
    assert row.usage_by_caller["middleware:summarization"].input_tokens % 50 == 0
    assert row.usage_by_caller["lead_agent"].input_tokens == 30
    assert row.last_ai_message == "it is 3"
    assert row.first_human_message == "what is 1+2"  # the turn's input, not the history's first
    (human,) = [e for e in events if e.event_type == "llm.human.input"]
    assert human.content["content"] == "what is 1+2"
    summaries = [e for e in events if e.event_type == "middleware:summarization"]
    assert summaries
    assert summaries[0].content["name"] == "SummarizationMiddleware"
    assert summaries[0].content["hook"] == "before_model"
    assert summaries[0].content["changes"]["messages"]["removed"] == "all"
    assert summaries[0].category == "middleware"
    shown = await history_texts(store, "summarized")
    assert ("llm.ai.response", "it is 3") in shown
    assert not any("SUMMARY" in text for kind, text in shown if kind == "llm.ai.response")


async def test_a_model_call_limit_hook_writes_its_counters_and_its_jump(store: RunEventStore) -> None:
    model = ScriptedChatModel([calls("add", f"c{n}", a=n, b=n) for n in range(5)])
    limit = ModelCallLimitMiddleware(run_limit=2, exit_behavior="end")
    agent = create_agent(model, [add], middleware=[limit])
    journal = RunJournal(store, thread_id="limited")
    await agent.ainvoke({"messages": [HumanMessage("keep adding")]}, {"callbacks": [journal]})
    await journal.aclose()
    events, row = await run_of(store, journal)
    limits = [e for e in events if e.event_type == "middleware:model_call_limit"]
    assert {e.content["hook"] for e in limits} >= {"after_model", "before_model"}
    jumps = [e for e in limits if e.content["action"] == "jump"]
    assert len(jumps) == 1
    assert jumps[0].content["changes"]["jump_to"] == "end"
    assert callers(events) == ["lead_agent", "lead_agent"]
    assert row.status == "success"


async def test_every_hook_can_be_journaled_even_when_it_changes_nothing(store: RunEventStore) -> None:
    quiet, chatty = RunJournal(store, thread_id="hooks-q"), RunJournal(store, thread_id="hooks-a",
                                                                        middleware_events="all")
    for journal in (quiet, chatty):
        agent = create_agent(ScriptedChatModel([said("done")]), [],
                             middleware=[ModelCallLimitMiddleware(run_limit=5)])
        await agent.ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
        await journal.aclose()
    quiet_events, _ = await run_of(store, quiet)
    chatty_events, _ = await run_of(store, chatty)
    assert [e.content["hook"] for e in quiet_events if e.category == "middleware"] == ["after_model"]
    hooks = [(e.content["hook"], e.content["action"]) for e in chatty_events if e.category == "middleware"]
    assert hooks == [("before_model", "none"), ("after_model", "update")]


async def test_human_in_the_loop_interrupts_then_resumes_as_a_second_run(store: RunEventStore) -> None:
    model = ScriptedChatModel([calls("add", "c1", a=1, b=2), said("it is 3")])
    agent = create_agent(model, [add], middleware=[HumanInTheLoopMiddleware(interrupt_on={"add": True})],
                         checkpointer=InMemorySaver())
    config: dict[str, Any] = {"configurable": {"thread_id": "approval"}}
    first = RunJournal(store)
    out = await agent.ainvoke({"messages": [HumanMessage("what is 1+2")]}, {**config, "callbacks": [first]})
    assert out["__interrupt__"]
    await first.aclose()
    second = RunJournal(store)
    approve = Command(resume={"decisions": [{"type": "approve"}]})
    await agent.ainvoke(approve, {**config, "callbacks": [second]})
    await second.aclose()
    first_events, first_row = await run_of(store, first)
    second_events, second_row = await run_of(store, second)
    assert (first_row.status, second_row.status) == ("interrupted", "success")
    assert second_row.resumed_from == first.run_id
    (asked,) = [e for e in first_events if e.event_type == "middleware:human_in_the_loop"]
    assert (asked.content["hook"], asked.content["action"]) == ("after_model", "interrupt")
    assert asked.content["changes"]["interrupts"][0]["value"]["action_requests"][0]["name"] == "add"
    assert first_events[-1].event_type == "run.interrupt"
    assert second_row.last_ai_message == "it is 3"
    assert [e.content["outcome"] for e in second_events if e.event_type == "tool.outcome"] == ["success"]


async def test_tool_retry_and_model_fallback_are_the_lead_agents_own_work(store: RunEventStore) -> None:
    FLAKY_CALLS.clear()
    backup = ScriptedChatModel([calls("flaky_add", "c1", a=2, b=2), said("it is 4")])
    agent = create_agent(BrokenModel([]), [flaky_add], middleware=[
        ModelFallbackMiddleware(backup),
        ToolRetryMiddleware(max_retries=2, initial_delay=0.0, jitter=False),
    ])
    journal = RunJournal(store, thread_id="fallback")
    await agent.ainvoke({"messages": [HumanMessage("what is 2+2")]}, {"callbacks": [journal]})
    await journal.aclose()
    events, row = await run_of(store, journal)
    assert len(FLAKY_CALLS) == 2  # failed once, retried once
    assert [e.metadata["caller"] for e in events if e.event_type == "llm.error"] == ["lead_agent"] * 2
    assert callers(events) == ["lead_agent", "lead_agent"]
    assert row.last_ai_message == "it is 4"
    assert row.status == "success"
    (outcome,) = [e.content for e in events if e.event_type == "tool.outcome"]
    assert (outcome["outcome"], outcome["attempts"]) == ("success", 2)


# -- deepagents ----------------------------------------------------------------------------------------
def deep_agent(subagents: list[tuple[str, list[AIMessage]]], lead: list[AIMessage]) -> Any:
    from deepagents import create_deep_agent

    return create_deep_agent(model=ScriptedChatModel(lead), tools=[add], subagents=[
        {"name": name, "description": f"the {name}", "system_prompt": f"You are the {name}.",
         "tools": [add], "model": ScriptedChatModel(script)}
        for name, script in subagents
    ])


def delegate(call_id: str, subagent: str, description: str) -> AIMessage:
    return calls("task", call_id, tokens=5, description=description, subagent_type=subagent)


async def drive(agent: Any, journal: RunJournal, text: str, mode: str) -> None:
    inputs = {"messages": [HumanMessage(text)]}
    config: dict[str, Any] = {"callbacks": [journal]}
    if mode == "ainvoke":
        await agent.ainvoke(inputs, config)
    elif mode == "astream":
        async for _ in agent.astream(inputs, config):
            pass
    else:  # a sync graph on a journal that owns its loop in a private thread
        agent.invoke(inputs, config)


@pytest.mark.parametrize("mode", ["ainvoke", "astream", "invoke"])
async def test_a_deep_agents_subagent_is_a_task_not_the_assistant(store: RunEventStore, mode: str) -> None:
    agent = deep_agent([("researcher", [calls("add", "s1", 7, a=1, b=2), said("it is 3", 7)])],
                       [delegate("task-1", "researcher", "find 1+2"), said("the researcher says 3", 20)])
    journal = RunJournal(store, thread_id=f"deep-{mode}")
    await drive(agent, journal, "what is 1+2", mode)
    await journal.aclose()
    events, row = await run_of(store, journal)
    assert callers(events) == ["lead_agent", "subagent:researcher", "subagent:researcher", "lead_agent"]
    start, *steps, end = [e for e in events if e.category == "subagent"]
    assert (start.event_type, start.content["task_id"], start.content["subagent"],
            start.content["description"]) == ("subagent.start", "task-1", "researcher", "find 1+2")
    kinds = [(s.content["message_index"], s.content["kind"]) for s in steps]
    assert kinds == [(0, "ai"), (1, "tool"), (2, "ai")]
    assert steps[0].content["tool_calls"][0]["name"] == "add"
    assert (steps[1].content["tool_name"], steps[1].content["text"]) == ("add", "3")
    assert (end.event_type, end.content["status"], end.content["result"]) == (
        "subagent.end", "completed", "it is 3")
    assert {e.metadata["caller"] for e in (start, *steps, end)} == {"subagent:researcher"}
    assert row.usage_by_caller["subagent:researcher"].input_tokens == 14
    assert row.usage_by_caller["lead_agent"].input_tokens == 25
    assert row.last_ai_message == "the researcher says 3"
    shown = await history_texts(store, f"deep-{mode}")
    assert shown[0] == ("llm.human.input", "what is 1+2")
    assert shown[-1] == ("llm.ai.response", "the researcher says 3")
    assert ("llm.tool.result", "it is 3") in shown  # the task tool's result: subtask cards restore
    assert not any(text in {"it is 3", "3"} for kind, text in shown if kind == "llm.ai.response")


async def test_two_subagents_in_one_turn_keep_their_own_tasks_and_usage(store: RunEventStore) -> None:
    agent = deep_agent(
        [("researcher", [said("facts", 3)]), ("writer", [said("prose", 4)])],
        [said("", 5, tool_calls=[
            {"name": "task", "args": {"description": "get facts", "subagent_type": "researcher"}, "id": "t-r",
             "type": "tool_call"},
            {"name": "task", "args": {"description": "write it", "subagent_type": "writer"}, "id": "t-w",
             "type": "tool_call"},
        ]), said("done", 6)],
    )
    journal = RunJournal(store, thread_id="deep-two")
    await agent.ainvoke({"messages": [HumanMessage("report")]}, {"callbacks": [journal]})
    await journal.aclose()
    events, row = await run_of(store, journal)
    ends = {e.content["task_id"]: e.content for e in events if e.event_type == "subagent.end"}
    assert {task: (end["status"], end["result"]) for task, end in ends.items()} == {
        "t-r": ("completed", "facts"), "t-w": ("completed", "prose")}
    starts = {e.content["task_id"]: e.content["subagent"] for e in events if e.event_type == "subagent.start"}
    assert starts == {"t-r": "researcher", "t-w": "writer"}
    assert row.usage_by_caller["subagent:researcher"].input_tokens == 3
    assert row.usage_by_caller["subagent:writer"].input_tokens == 4
    assert row.usage_by_caller["lead_agent"].input_tokens == 11
    assert row.last_ai_message == "done"
