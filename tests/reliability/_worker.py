"""Subprocess workers for the reliability suite (each is killed or raced by a test).

``python _worker.py crash URL THREAD TAG``: write batches (1-40 events, ids ``TAG-n``) until killed;
after each ``put_batch`` returns, print one JSON line ``[[event_id, seq], ...]``: the acknowledgement
the parent checks after SIGKILL.

``python _worker.py contend URL THREAD WORKER COUNT``: COUNT single-event ``put`` calls (one
transaction each, the worst case for lock contention), then one JSON line with the slowest put.

``python _worker.py orphan URL THREAD RUN``: a journaled LangGraph run whose tool makes the journal
durable, prints ``started`` and then hangs, so the parent kills the worker with a running run.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from typing import Any

from run_journal import NewEvent, RunJournal, open_store


async def crash(url: str, thread_id: str, tag: str) -> None:
    rng = random.Random(tag)
    n = 0
    async with open_store(url) as store:
        while True:
            size = rng.randint(1, 40)
            batch = [
                NewEvent(
                    thread_id=thread_id, run_id=tag, event_type="llm.human.input", category="message",
                    content={"type": "human", "content": f"{n + i} " + "x" * rng.randint(0, 2000)},
                    metadata={"caller": "crash"}, event_id=f"{tag}-{n + i}",
                )
                for i in range(size)
            ]
            stored = await store.put_batch(batch)
            n += size
            print(json.dumps([[event.event_id, event.seq] for event in stored]), flush=True)


async def contend(url: str, thread_id: str, worker: int, count: int) -> None:
    slowest = 0.0
    async with open_store(url) as store:
        for n in range(count):
            began = time.perf_counter()
            await store.put(
                thread_id=thread_id, run_id=f"w{worker}", event_type="tool.call", category="trace",
                content={"n": n}, event_id=f"w{worker}-{n}",
            )
            slowest = max(slowest, time.perf_counter() - began)
    print(json.dumps({"worker": worker, "count": count, "slowest_put_s": slowest}), flush=True)


async def orphan(url: str, thread_id: str, run_id: str) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    async with open_store(url) as store:
        journal = RunJournal(store, thread_id=thread_id, run_id=run_id)

        @tool
        async def hang(seconds: int) -> str:
            """Make the journal durable, then hang until killed."""
            await journal.flush()
            print("started", flush=True)
            await asyncio.sleep(seconds)
            return "never"

        model = GenericFakeChatModel(messages=iter([
            AIMessage("", tool_calls=[{"name": "hang", "args": {"seconds": 3600}, "id": "h1",
                                       "type": "tool_call"}]),
            AIMessage("done"),
        ]))

        async def agent(state: MessagesState) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        graph = StateGraph(MessagesState)
        graph.add_node("agent", agent)
        graph.add_node("tools", ToolNode([hang]))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
        await graph.compile().ainvoke({"messages": [("user", "hang")]}, config={"callbacks": [journal]})


def main(argv: list[str]) -> None:
    mode, url, thread_id = argv[:3]
    if mode == "crash":
        asyncio.run(crash(url, thread_id, argv[3]))
    elif mode == "contend":
        asyncio.run(contend(url, thread_id, int(argv[3]), int(argv[4])))
    elif mode == "orphan":
        asyncio.run(orphan(url, thread_id, argv[3]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
