"""Two worker processes journal runs on one thread of a shared PostgreSQL store; a third follows live.

Each worker runs a few agent turns on the same thread at the same time. The store assigns ``seq`` in
the same transaction that inserts the events (under a per-thread counter row lock), so the thread's
events come out as 1, 2, 3, ... with no gap and no duplicate however the workers interleave. The
follower process prints each event as it is committed (``store.follow``, woken by LISTEN/NOTIFY).

    python examples/postgres_workers.py [postgresql://user@host/db[?schema=name]]

The URL defaults to ``$RUN_JOURNAL_POSTGRES_URL`` or ``postgresql://postgres@127.0.0.1:5432/test``.
With no server reachable, or without the asyncpg driver, it prints why and exits with status 0
("skipped"). Each invocation uses a thread and run ids of its own (run ids are unique in a store),
so it can run again and again against the same database.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from typing import Any

from _models import chat_model, reply
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from run_journal import RunJournal, open_store
from run_journal.projections import find_gaps

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
RUNS_PER_WORKER = 3
EVENTS_PER_RUN = 10  # start, human input, request, AI + tool.call, tool result + outcome, request, AI, end


@tool
def roll_dice(sides: int) -> int:
    """Roll a die."""
    return sides // 2


def build_graph(worker: str, turn: int) -> Any:
    model = chat_model([
        reply(f"{worker} rolls", tool_calls=[{"name": "roll_dice", "args": {"sides": 6}, "id": f"c{turn}"}]),
        reply(f"{worker} rolled a 3"),
    ]).bind_tools([roll_dice])

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([roll_dice]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


def run_id_of(thread_id: str, name: str, turn: int) -> str:
    """``w1-run0-<the thread's suffix>``: readable, and unused by any earlier invocation."""
    return f"{name}-run{turn}-{thread_id.removeprefix('dice-')}"


async def worker(url: str, thread_id: str, name: str) -> None:
    """One worker process: a few runs on the shared thread, each with its own journal."""
    async with open_store(url) as store:
        graphs = [build_graph(name, turn) for turn in range(RUNS_PER_WORKER)]
        print(f"{name}: ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # start together with the other worker
        for turn, graph in enumerate(graphs):
            run_id = run_id_of(thread_id, name, turn)
            async with RunJournal(store, thread_id=thread_id, run_id=run_id) as journal:
                await graph.ainvoke({"messages": [("user", f"{name}, roll a die")]}, {"callbacks": [journal]})


async def follower(url: str, thread_id: str, expected: int) -> None:
    """Print the thread's events as they are committed, until every expected event has arrived."""
    async with open_store(url) as store:
        print("follower: waiting for events", flush=True)
        seen = 0
        async with asyncio.timeout(120):
            async for event in store.follow(thread_id, after_seq=0):
                print(f"follower: seq {event.seq:>2} {event.run_id:<18} {event.event_type}", flush=True)
                seen += 1
                if seen == expected:
                    return


async def reachable(url: str) -> str | None:
    """None when the server answers (and the tables exist), else why not."""
    try:
        async with asyncio.timeout(10):
            async with open_store(url) as store:
                await store.last_seq("ping")
    except Exception as error:  # noqa: BLE001 - any failure to connect means: skip with the reason
        return f"{type(error).__name__}: {error}"
    return None


def main() -> int:
    url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("RUN_JOURNAL_POSTGRES_URL", DEFAULT_URL)
    try:
        import asyncpg  # noqa: F401 - only checks the driver is installed
    except ImportError:
        print("skipped: the PostgreSQL driver asyncpg is not installed "
              "(pip install 'run-journal[postgres]'); the server was not tried")
        return 0
    problem = asyncio.run(reachable(url))
    if problem is not None:
        print(f"skipped: no PostgreSQL server reachable at {url} ({problem})")
        return 0
    thread_id = f"dice-{uuid.uuid4().hex[:8]}"
    expected = 2 * RUNS_PER_WORKER * EVENTS_PER_RUN
    me = [sys.executable, os.path.abspath(__file__)]
    follow = subprocess.Popen([*me, "--follow", url, thread_id, str(expected)])
    workers = [subprocess.Popen([*me, "--worker", url, thread_id, name], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True) for name in ("w1", "w2")]
    for process in workers:
        print(process.stdout.readline().strip() if process.stdout else "", flush=True)
    for process in workers:  # both are ready: let them go at the same moment
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.close()
    failed = [p.args for p in workers if p.wait() != 0]
    if failed:  # the follower would wait for events that never come
        follow.terminate()
    failed += [follow.args] if follow.wait() != 0 else []
    if failed:
        print(f"a process failed: {failed}")
        return 1
    return asyncio.run(report(url, thread_id))


async def report(url: str, thread_id: str) -> int:
    async with open_store(url) as store:
        events = await store.list_events(thread_id, limit=1000)
        runs = await store.list_runs(thread_id)
    seqs = [event.seq for event in events]
    print(f"thread {thread_id}: {len(events)} events from {len(runs)} runs by 2 workers")
    print(f"seq runs from {seqs[0]} to {seqs[-1]}; gaps: {find_gaps(seqs) or 'none'}; "
          f"duplicates: {len(seqs) - len(set(seqs))}")
    order = "".join("1" if event.run_id.startswith("w1") else "2" for event in events)
    print(f"writer of each seq (1 = w1, 2 = w2): {order}")
    print("statuses:", sorted({str(row.status) for row in runs}))
    return 0 if seqs == list(range(1, len(seqs) + 1)) else 1


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        asyncio.run(worker(*sys.argv[2:5]))
    elif len(sys.argv) == 5 and sys.argv[1] == "--follow":
        asyncio.run(follower(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    else:
        sys.exit(main())
