"""Cost of RunJournal on an offline agent turn, as a ratio against a no-op callback handler.

One turn = fake chat model -> tool call -> tool -> model answer (a LangGraph graph, ``ainvoke``).
The three variants run interleaved in one process (so machine noise hits them alike): a no-op
``run_inline`` handler, RunJournal on the memory store, RunJournal on SQLite; each journal is closed
at the end of its turn. Prints the median time per turn and the ratio to the no-op baseline.

Two kinds of turn: the fake model answers at once (CPU-bound: the journal's whole cost shows), and
the fake model awaits ``--latency`` ms per call first, as a real model behind a network does (the
journal's writer then works while the agent waits).

    .venv/bin/python bench/bench_journal.py [--turns 300] [--latency 20] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from run_journal import RunJournal, open_store


class NoOp(BaseCallbackHandler):
    run_inline = True


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def build_graph(latency: float = 0.0) -> Any:
    replies = itertools.cycle([
        AIMessage("adding", tool_calls=[{"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"}]),
        AIMessage("the answer is 3"),
    ])
    model = GenericFakeChatModel(messages=replies)

    async def agent(state: MessagesState) -> dict[str, Any]:
        if latency:
            await asyncio.sleep(latency)  # the model's network round trip
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([add]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


def build_sync_graph() -> Any:
    """The same turn for ``invoke``: plain functions, the model called synchronously."""
    replies = itertools.cycle([
        AIMessage("adding", tool_calls=[{"name": "add", "args": {"a": 1, "b": 2}, "id": "c1"}]),
        AIMessage("the answer is 3"),
    ])
    model = GenericFakeChatModel(messages=replies)
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode([add]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


async def main(turns: int, latency: float) -> None:
    graph = build_graph(latency)
    with tempfile.TemporaryDirectory() as tmp:
        async with open_store("memory://") as memory, \
                open_store(f"sqlite:///{Path(tmp) / 'bench.db'}") as sqlite:
            times: dict[str, list[float]] = {"noop": [], "memory": [], "sqlite": []}

            async def turn(kind: str, index: int) -> None:
                inputs = {"messages": [HumanMessage("what is 1+2?")]}
                started = time.perf_counter()
                if kind == "noop":
                    await graph.ainvoke(inputs, {"callbacks": [NoOp()]})
                else:
                    journal = RunJournal(memory if kind == "memory" else sqlite, thread_id=f"{kind}-{index}")
                    await graph.ainvoke(inputs, {"callbacks": [journal]})
                    await journal.aclose()
                times[kind].append(time.perf_counter() - started)

            for index in range(20):  # warm-up: imports, caches, SQLite schema
                for kind in times:
                    await turn(kind, -index - 1)
            for values in times.values():
                values.clear()
            for index in range(turns):
                for kind in itertools.islice(itertools.cycle(times), index % 3, index % 3 + 3):
                    await turn(kind, index)
    base = statistics.median(times["noop"])
    print(f"model latency {latency * 1000:.0f} ms, turns per variant: {turns}")
    for kind, values in times.items():
        median = statistics.median(values)
        extra = (median - base) * 1e6
        print(f"{kind:>7}: median {median * 1000:7.3f} ms/turn  ratio {median / base:5.3f}x  "
              f"(+{extra:.0f} us)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--latency", type=float, default=20.0,
                        help="ms the fake model awaits per call in the I/O-bound turn (default 20)")
    parser.add_argument("--quick", action="store_true", help="30 turns per variant")
    args = parser.parse_args()
    turns = 30 if args.quick else args.turns
    asyncio.run(main(turns, 0.0))
    asyncio.run(main(max(turns // 3, 30), args.latency / 1000))
