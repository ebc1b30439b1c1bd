"""Subprocess workers for the reliability suite (each is killed or raced by a test).

``python _worker.py crash URL THREAD TAG``: write batches (1-40 events, ids ``TAG-n``) until killed;
after each ``put_batch`` returns, print one JSON line ``[[event_id, seq], ...]``: the acknowledgement
the parent checks after SIGKILL.

``python _worker.py contend URL THREAD WORKER COUNT``: COUNT single-event ``put`` calls (one
transaction each, the worst case for lock contention), then one JSON line with the slowest put.

``python _worker.py orphan URL THREAD RUN``: a journaled LangGraph run whose tool makes the journal
durable, prints ``started`` and then hangs, so the parent kills the worker with a running run.

``python _worker.py rowless URL THREAD RUN``: a journaled LangGraph run whose store never answers
``put_run``: its first events (``run.start`` among them) are stored, its row never is; prints
``started`` once ``run.start`` is stored, so the parent kills the worker before the run's first row.

``python _worker.py fullfile URL THREAD TAG LIMIT``: as ``crash``, but every file this process writes
is limited to LIMIT bytes (``RLIMIT_FSIZE``, the signal ignored): a full disk for the JSONL events
file. One JSON line per batch: the acknowledgement, or ``{"error": ...}``; it stops after 3 errors
(or 200 batches).

``python _worker.py fulljournal URL THREAD LIMIT``: a journaled LangGraph run (one big model reply)
under the same file size limit; prints ``{"closed": true}`` or ``{"error": ...}`` from ``aclose()``.
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import signal
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
        compiled: Any = graph.compile()  # the state is a plain dict of messages
        await compiled.ainvoke({"messages": [("user", "hang")]}, config={"callbacks": [journal]})


def limit_file_size(limit: int) -> None:
    """Every file this process writes may grow to ``limit`` bytes; a write past it fails (EFBIG)
    instead of killing the process, as a full disk fails it."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


async def fullfile(url: str, thread_id: str, tag: str, limit: int) -> None:
    rng = random.Random(tag)
    n = errors = 0
    async with open_store(url) as store:
        limit_file_size(limit)
        for _ in range(200):  # a store that never refuses still stops
            if errors == 3:
                break
            size = rng.randint(1, 20)
            batch = [
                NewEvent(
                    thread_id=thread_id, run_id=tag, event_type="llm.human.input", category="message",
                    content={"type": "human", "content": f"{n + i} " + "x" * rng.randint(200, 2000)},
                    metadata={"caller": "full"}, event_id=f"{tag}-{n + i}",
                )
                for i in range(size)
            ]
            try:
                stored = await store.put_batch(batch)
            except Exception as error:
                errors += 1
                print(json.dumps({"error": f"{type(error).__name__}: {error}",
                                  "ids": [event.event_id for event in batch]}), flush=True)
                continue
            n += size
            print(json.dumps([[event.event_id, event.seq] for event in stored]), flush=True)


def reply_graph(replies: list[Any], tools: list[Any] | None = None) -> Any:
    """agent (an offline fake model giving ``replies``), with a tool loop when ``tools`` are given."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    model = GenericFakeChatModel(messages=iter(replies))

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    if tools:
        graph.add_node("tools", ToolNode(tools))
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
    return graph.compile()


async def fulljournal(url: str, thread_id: str, limit: int) -> None:
    from langchain_core.messages import AIMessage

    from run_journal import JournalError, RetryPolicy

    graph = reply_graph([AIMessage("y" * 60_000)])
    async with open_store(url) as store:
        journal = RunJournal(store, thread_id=thread_id, run_id="full-run",
                             retry=RetryPolicy(attempts=3, initial_delay=0.01, max_delay=0.05))
        limit_file_size(limit)
        await graph.ainvoke({"messages": [("user", "write a long answer")]}, config={"callbacks": [journal]})
        try:
            await journal.aclose()
        except JournalError as error:
            print(json.dumps({"error": str(error)}), flush=True)
        else:
            print(json.dumps({"closed": True}), flush=True)


async def rowless(url: str, thread_id: str, run_id: str) -> None:
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    from run_journal.runs import RunRow

    async with open_store(url) as store:
        async def never(row: RunRow) -> RunRow:  # the worker dies before its first run row
            await asyncio.sleep(3600)
            return row

        store.put_run = never  # type: ignore[method-assign]  # a store that hangs on run rows
        journal = RunJournal(store, thread_id=thread_id, run_id=run_id, flush_interval=0.01)

        @tool
        async def wait_for_start(seconds: int) -> str:
            """Wait until the run's first events are stored, say so, then hang until killed."""
            async with open_store(url) as other:
                started = False
                while not started:  # polling the store, as another process would
                    started = bool(await other.list_events(thread_id, run_id, event_types=["run.start"]))
                    await asyncio.sleep(0 if started else 0.01)
            print("started", flush=True)
            await asyncio.sleep(seconds)
            return "never"

        graph = reply_graph([
            AIMessage("", tool_calls=[{"name": "wait_for_start", "args": {"seconds": 3600}, "id": "w1",
                                       "type": "tool_call"}]),
            AIMessage("done"),
        ], tools=[wait_for_start])
        await graph.ainvoke({"messages": [("user", "go")]}, config={"callbacks": [journal]})


def main(argv: list[str]) -> None:
    mode, url, thread_id = argv[:3]
    if mode == "crash":
        asyncio.run(crash(url, thread_id, argv[3]))
    elif mode == "contend":
        asyncio.run(contend(url, thread_id, int(argv[3]), int(argv[4])))
    elif mode == "orphan":
        asyncio.run(orphan(url, thread_id, argv[3]))
    elif mode == "rowless":
        asyncio.run(rowless(url, thread_id, argv[3]))
    elif mode == "fullfile":
        asyncio.run(fullfile(url, thread_id, argv[3], int(argv[4])))
    elif mode == "fulljournal":
        asyncio.run(fulljournal(url, thread_id, int(argv[3])))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
