"""What recording model requests costs: stored bytes over a long thread, and time per turn.

Storage: a 50-turn thread of a ``create_agent`` tool agent (a system prompt, three tools), four model
calls per turn (three tool calls, then the answer), journaled on the memory store. It compares, in
one run, the bytes the requests take in the store (message, link, tool and parameter bodies, and
the ``llm.request`` events) with the bytes of the thread's distinct messages, and with what storing
every request whole (each call's messages, tools and parameters as one JSON document) would take.

Time: ``bench/bench_journal.py``'s turn (fake chat model -> tool -> answer), interleaved in one
process: a no-op handler, ``RunJournal(record_requests=False)`` and ``RunJournal()`` (requests on),
on the memory store. Prints the median per turn and the ratios.

    .venv/bin/python bench/bench_requests.py [--turns 50] [--timed 300] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from run_journal import RunJournal, open_store
from run_journal.journal.payloads import message_payload
from run_journal.journal.requests import params_value, tool_specs
from run_journal.normalization import encode
from run_journal.redact import redact_secrets
from run_journal.testing.capture import ScriptedChatModel, reply

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_journal import NoOp, build_graph  # the turn bench_journal.py times

SYSTEM = ("You are a careful research assistant. " * 40).strip()
FILLER = "The station reported steady readings through the afternoon, with light wind. "


@tool
def weather(city: str) -> str:
    """The current weather of a city: temperature, wind and sky, from the nearest station."""
    return f"{city}: 18 C. " + FILLER * 8


@tool
def population(city: str) -> str:
    """The population of a city, from the latest census."""
    return f"{city}: 2.1 million. " + FILLER * 6


@tool
def distance(origin: str, destination: str) -> str:
    """The distance by road between two cities, in kilometres."""
    return f"{origin} to {destination}: 465 km. " + FILLER * 4


def script(turns: int) -> list[Any]:
    replies = []
    for turn in range(turns):
        replies += [
            reply(f"Let me check the weather for turn {turn}.",
                  tool_calls=[("weather", {"city": "Paris"}, f"w{turn}")]),
            reply("Now the population.", tool_calls=[("population", {"city": "Paris"}, f"p{turn}")]),
            reply("And the distance.", tool_calls=[("distance", {"origin": "Paris", "destination": "Lyon"},
                                                    f"d{turn}")]),
            reply(f"Turn {turn}: it is 18 C in Paris, 2.1 million people live there, Lyon is 465 km away. "
                  + FILLER * 2),
        ]
    return replies


async def storage(turns: int) -> dict[str, float]:
    model = ScriptedChatModel(script(turns), temperature=0.2, max_tokens=1024)
    agent = create_agent(model, [weather, population, distance], system_prompt=SYSTEM,
                         checkpointer=InMemorySaver())
    async with open_store("memory://") as store:
        for turn in range(turns):
            journal = RunJournal(store, thread_id="long-thread")
            question = HumanMessage(f"Question {turn}: tell me about Paris and Lyon.")
            await agent.ainvoke({"messages": [question]},
                                {"callbacks": [journal], "configurable": {"thread_id": "long-thread"}})
            await journal.aclose()
        bodies, after = [], None
        while page := await store.list_bodies("long-thread", after=after):
            bodies += page
            after = page[-1].digest
        requests = await store.list_events("long-thread", event_types=["llm.request"], limit=10_000)
    body_bytes = sum(len(body.data) for body in bodies)
    event_bytes = sum(len(encode(event.content).encode("utf-8")) + len(encode(event.metadata).encode("utf-8"))
                      for event in requests)
    distinct = {encode(message_payload(message, redact_secrets).value): None
                for call in model.received for message in call}
    distinct_bytes = sum(len(text.encode("utf-8")) for text in distinct)
    whole = 0
    for received, offered in zip(model.received, model.tools_offered, strict=True):
        document = {"messages": [message_payload(m, redact_secrets).value for m in received],
                    "tools": tool_specs(offered),
                    "params": params_value({"temperature": 0.2, "max_tokens": 1024})}
        whole += len(encode(document).encode("utf-8"))
    return {"calls": len(requests), "bodies": len(bodies), "stored": body_bytes + event_bytes,
            "body_bytes": body_bytes, "event_bytes": event_bytes, "distinct": distinct_bytes, "whole": whole}


async def timing(turns: int) -> dict[str, float]:
    graph = build_graph(0.0)
    async with open_store("memory://") as memory:
        times: dict[str, list[float]] = {"noop": [], "requests off": [], "requests on": []}

        async def turn(kind: str, index: int) -> None:
            inputs = {"messages": [HumanMessage("what is 1+2?")]}
            started = time.perf_counter()
            if kind == "noop":
                await graph.ainvoke(inputs, {"callbacks": [NoOp()]})
            else:
                journal = RunJournal(memory, thread_id=f"{kind}-{index}",
                                     record_requests=kind == "requests on")
                await graph.ainvoke(inputs, {"callbacks": [journal]})
                await journal.aclose()
            times[kind].append(time.perf_counter() - started)

        for index in range(20):  # warm-up
            for kind in times:
                await turn(kind, -index - 1)
        for values in times.values():
            values.clear()
        for index in range(turns):
            for kind in itertools.islice(itertools.cycle(times), index % 3, index % 3 + 3):
                await turn(kind, index)
    return {kind: statistics.median(values) for kind, values in times.items()}


async def main(turns: int, timed: int) -> None:
    load = os.getloadavg()
    print(f"machine load (1, 5, 15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    sizes = await storage(turns)
    print(f"\n{turns}-turn thread, {sizes['calls']:.0f} model calls, {sizes['bodies']:.0f} bodies stored")
    print(f"  distinct messages:      {sizes['distinct'] / 1024:9.1f} KiB  1.00x")
    distinct = sizes["distinct"]
    for label, key in (("requests as stored", "stored"), ("  of which bodies", "body_bytes"),
                       ("  of which events", "event_bytes"), ("every request whole", "whole")):
        print(f"  {label + ':':<24}{sizes[key] / 1024:9.1f} KiB  {sizes[key] / distinct:5.2f}x")
    print("  (target: requests as stored <= 2x the distinct messages)")
    medians = await timing(timed)
    base, off, on = medians["noop"], medians["requests off"], medians["requests on"]
    print(f"\nbench_journal.py's turn on the memory store, {timed} turns per variant (medians)")
    for kind, median in medians.items():
        print(f"  {kind:>12}: {median * 1000:7.3f} ms/turn  {median / base:5.3f}x the no-op handler")
    print(f"  requests on / off: {on / off:5.3f}x per turn (target <= 1.10x); the journal's own cost "
          f"{(on - base) * 1e6:.0f} us vs {(off - base) * 1e6:.0f} us ({(on - base) / (off - base):.2f}x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50, help="turns of the long thread (default 50)")
    parser.add_argument("--timed", type=int, default=300, help="timed turns per variant (default 300)")
    parser.add_argument("--quick", action="store_true", help="10 turns, 60 timed turns")
    args = parser.parse_args()
    asyncio.run(main(10, 60) if args.quick else main(args.turns, args.timed))
