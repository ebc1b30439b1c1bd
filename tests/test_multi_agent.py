"""Multi-agent runs: every model and tool call belongs to the innermost named agent that made it.

Real ``langgraph-supervisor`` and ``langgraph-swarm`` graphs of ``langchain.agents.create_agent``
agents, driven by scripted fake chat models, journaled on every backend: the supervisor's own calls
stay the lead agent's, each worker and each swarm agent is ``agent:<name>`` (usage buckets, event
metadata), handoffs are ``agent.handoff`` events, and thread history keeps the agents' replies and
leaves out the routing. A plain graph whose nodes call models keeps one caller.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from _agent_tools import add, web_search
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph_supervisor import create_supervisor
from langgraph_swarm import create_handoff_tool, create_swarm

from run_journal import RunEventStore, RunJournal
from run_journal.envelope import RunEvent
from run_journal.projections import thread_history
from run_journal.testing import ScriptedChatModel, reply


def model(*replies: AIMessage) -> ScriptedChatModel:
    return ScriptedChatModel(replies)


def supervisor_graph() -> Any:
    research = create_agent(model(reply(tool_calls=[("web_search", {"query": "FAANG headcount"}, "r1")]),
                                  reply("FAANG employs about 1.9M people")),
                            [web_search], name="research_expert")
    math = create_agent(model(reply(tool_calls=[("add", {"a": 1, "b": 2}, "m1")]), reply("1 + 2 = 3")),
                        [add], name="math_expert")
    supervisor = model(
        reply(tool_calls=[("transfer_to_research_expert", {}, "s1")]),
        reply(tool_calls=[("transfer_to_math_expert", {}, "s2")]),
        reply("Headcount is about 1.9M, and 1 + 2 = 3."),
    )
    return create_supervisor([research, math], model=supervisor).compile()


def swarm_graph() -> Any:
    alice = create_agent(model(reply(tool_calls=[("transfer_to_bob", {}, "a1")])),
                         [create_handoff_tool(agent_name="Bob")], name="Alice")
    bob = create_agent(model(reply(tool_calls=[("add", {"a": 1, "b": 2}, "b1")]), reply("Bob here: it is 3")),
                       [add, create_handoff_tool(agent_name="Alice")], name="Bob")
    return create_swarm([alice, bob], default_active_agent="Alice").compile()


async def journaled(store: RunEventStore, graph: Any, thread_id: str) -> tuple[RunJournal, list[RunEvent]]:
    journal = RunJournal(store, thread_id=thread_id)
    await graph.ainvoke({"messages": [HumanMessage("go")]}, {"callbacks": [journal]})
    await journal.aclose()
    return journal, await store.list_events(thread_id, limit=1000)


def callers_of(events: list[RunEvent], event_type: str) -> list[str]:
    return [e.metadata["caller"] for e in events if e.event_type == event_type]


def calls_by_caller(journal: RunJournal) -> dict[str, int]:
    row = journal.run_row
    assert row is not None
    return {caller: totals.llm_calls for caller, totals in row.usage_by_caller.items()}


async def test_a_supervisors_calls_are_the_leads_and_each_worker_is_its_own_caller(
    store: RunEventStore,
) -> None:
    journal, events = await journaled(store, supervisor_graph(), "supervisor")
    assert calls_by_caller(journal) == {"lead_agent": 3, "agent:research_expert": 2, "agent:math_expert": 2}
    stored = await store.get_run(journal.run_id)
    assert stored is not None
    assert {caller: totals.llm_calls for caller, totals in stored.usage_by_caller.items()} == \
        calls_by_caller(journal)
    assert callers_of(events, "llm.ai.response") == [
        "lead_agent", "agent:research_expert", "agent:research_expert", "lead_agent",
        "agent:math_expert", "agent:math_expert", "lead_agent"]
    tools = {e.content["tool_name"]: e.metadata["caller"] for e in events if e.event_type == "tool.outcome"}
    assert tools["web_search"] == "agent:research_expert"
    assert tools["add"] == "agent:math_expert"
    handoffs = [(e.content["from_agent"], e.content["to_agent"])
                for e in events if e.event_type == "agent.handoff"]
    assert handoffs == [("lead_agent", "agent:research_expert"), ("agent:research_expert", "lead_agent"),
                        ("lead_agent", "agent:math_expert"), ("agent:math_expert", "lead_agent")]
    first = next(e for e in events if e.event_type == "agent.handoff")
    assert first.content["tool_call_id"] == "s1"  # the supervisor's transfer_to_research_expert call
    assert first.seq < next(e.seq for e in events if e.event_type == "llm.ai.response"
                            and e.metadata["caller"] == "agent:research_expert")
    assert journal.run_row is not None
    assert journal.run_row.last_ai_message == "Headcount is about 1.9M, and 1 + 2 = 3."


async def test_thread_history_keeps_the_agents_replies_and_leaves_out_the_routing(
    store: RunEventStore,
) -> None:
    await journaled(store, supervisor_graph(), "supervisor-history")
    page = await thread_history(store, "supervisor-history")
    shown = [(e.metadata["caller"], e.event_type, e.content) for e in page.data]
    texts = [content["content"] for _, kind, content in shown
             if kind == "llm.ai.response" and content["content"]]
    assert texts == ["FAANG employs about 1.9M people", "1 + 2 = 3",
                     "Headcount is about 1.9M, and 1 + 2 = 3."]
    tool_calls = [call["name"] for _, kind, content in shown if kind == "llm.ai.response"
                  for call in content.get("tool_calls", [])]
    assert tool_calls == ["web_search", "add"]  # the workers' own tool calls; no transfer_to_*
    results = [content.get("name") for _, kind, content in shown if kind == "llm.tool.result"]
    assert results == ["web_search", "add"]
    assert shown[0][:2] == ("lead_agent", "llm.human.input")


async def test_each_swarm_agent_is_its_own_caller_and_the_handoff_is_recorded(store: RunEventStore) -> None:
    journal, events = await journaled(store, swarm_graph(), "swarm")
    assert calls_by_caller(journal) == {"agent:Alice": 1, "agent:Bob": 2}
    assert callers_of(events, "llm.ai.response") == ["agent:Alice", "agent:Bob", "agent:Bob"]
    (handoff,) = [e for e in events if e.event_type == "agent.handoff"]
    assert handoff.content == {"from_agent": "agent:Alice", "to_agent": "agent:Bob", "tool_call_id": "a1"}
    page = await thread_history(store, "swarm")
    replies = [(e.content["content"], [c["name"] for c in e.content.get("tool_calls", [])])
               for e in page.data if e.event_type == "llm.ai.response"]
    assert replies == [("", ["add"]), ("Bob here: it is 3", [])]  # Alice's transfer_to_bob is routing
    assert journal.run_row is not None
    assert journal.run_row.last_ai_message == "Bob here: it is 3"


async def test_a_plain_graph_of_model_nodes_keeps_one_caller_unless_a_node_is_a_named_agent(
    store: RunEventStore,
) -> None:
    planner = model(reply("plan: add them"))
    writer = model(reply("the answer is 3"))
    helper = create_agent(model(reply(tool_calls=[("add", {"a": 1, "b": 2}, "h1")]), reply("3")), [add],
                          name="calculator")

    async def plan(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await planner.ainvoke(state["messages"])]}

    async def write(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await writer.ainvoke(state["messages"])]}

    plain = StateGraph(MessagesState)
    plain.add_node("plan", plan)
    plain.add_node("write", write)
    plain.add_edge(START, "plan")
    plain.add_edge("plan", "write")
    journal, events = await journaled(store, plain.compile(), "plain")
    assert calls_by_caller(journal) == {"lead_agent": 2}
    assert not [e for e in events if e.event_type == "agent.handoff"]

    planner, writer = model(reply("plan: ask the calculator")), model(reply("the answer is 3"))
    mixed = StateGraph(MessagesState)
    mixed.add_node("plan", plan)
    mixed.add_node("calculator", helper)
    mixed.add_node("write", write)
    mixed.add_edge(START, "plan")
    mixed.add_edge("plan", "calculator")
    mixed.add_edge("calculator", "write")
    journal, events = await journaled(store, mixed.compile(), "mixed")
    assert calls_by_caller(journal) == {"lead_agent": 2, "agent:calculator": 2}
    assert Counter(callers_of(events, "llm.ai.response")) == {"lead_agent": 2, "agent:calculator": 2}
    assert [(e.content["from_agent"], e.content["to_agent"]) for e in events
            if e.event_type == "agent.handoff"] == [("lead_agent", "agent:calculator"),
                                                    ("agent:calculator", "lead_agent")]
