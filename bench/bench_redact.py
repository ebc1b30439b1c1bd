"""The redaction pass per event, against an older revision of it, in one process.

The payloads are what the pass really sees: the canonical JSON texts (content and metadata) of every
event of journaled LangGraph runs, recorded with redaction off (``run.end`` by its metadata only: its
content splices message payloads the pass has already seen). Two runs: a clean tool-agent turn
(a question, two tool calls with ordinary results, the answer) and the same turn where secrets appear
in the places people leak them (tool arguments, a tool returning ``{"access_token": ...}`` as JSON
text, an exception message with ``password=...`` and a traceback). ``run_journal.redact`` as it is and
as it was at ``--baseline`` (read with ``git show``) run ``redacted_text`` over the same texts,
interleaved round by round so machine noise hits them alike. Prints the median time per event
(content and metadata) of each run and the ratio current / baseline.

    .venv/bin/python bench/bench_redact.py [--rounds 31] [--calls 200] [--baseline REV]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from run_journal import RunJournal, open_store, redact

ROOT = Path(__file__).resolve().parent.parent
BASELINE = "d5e73c4"


def load_revision(revision: str) -> ModuleType:
    """``run_journal/redact.py`` as it was at ``revision``, as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{revision}:run_journal/redact.py"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    spec = importlib.util.spec_from_loader(f"redact_{revision}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    exec(compile(source, f"{revision}:run_journal/redact.py", "exec"), module.__dict__)
    return module


def graph(leaky: bool) -> Any:
    @tool
    def search(query: str, api_key: str = "") -> str:
        """Searches the web."""
        if leaky:
            return json.dumps({"results": ["Paris is the capital of France."], "access_token": "tok-1234"})
        return "Paris is the capital of France. It has 2.1 million inhabitants (2023)."

    @tool
    def fetch(url: str) -> str:
        """Fetches a page."""
        if leaky:
            raise ConnectionError(f"refused {url}: password=hunter2 Authorization: Bearer sk-abc123")
        return "<html><title>Paris</title><body>Paris, the City of Light, on the Seine.</body></html>"

    args = {"query": "capital of France"} | ({"api_key": "sk-live-1234567890"} if leaky else {})
    replies = [
        AIMessage("Let me look that up.", tool_calls=[
            {"name": "search", "args": args, "id": "call_1"},
            {"name": "fetch", "args": {"url": "https://example.org/paris"}, "id": "call_2"},
        ], usage_metadata={"input_tokens": 120, "output_tokens": 30, "total_tokens": 150}),
        AIMessage("The capital of France is Paris, a city of about 2.1 million people.",
                  usage_metadata={"input_tokens": 260, "output_tokens": 18, "total_tokens": 278}),
    ]
    model = GenericFakeChatModel(messages=iter(replies))

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([search, fetch], handle_tool_errors=True))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


async def event_texts(leaky: bool) -> list[list[str]]:
    """The texts the pass reads for each event of one journaled turn (not redacted)."""
    async with open_store("memory://") as store:
        async with RunJournal(store, thread_id="bench", redact=False) as journal:
            await graph(leaky).ainvoke({"messages": [("user", "What is the capital of France?")]},
                                       config={"callbacks": [journal]})
        events = await store.list_events("bench", journal.run_id)
    def text(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

    return [[text(e.metadata)] if e.event_type == "run.end" else [text(e.content), text(e.metadata)]
            for e in events]


def per_event(module: ModuleType, texts: list[list[str]], calls: int) -> float:
    """Seconds per event: the pass over its content and its metadata."""
    pass_, redactor = module.redacted_text, module.redact_secrets
    flat = [item for event in texts for item in event]
    started = time.perf_counter()
    for _ in range(calls):
        for item in flat:
            pass_(item, redactor)
    return (time.perf_counter() - started) / (calls * len(texts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--baseline", default=BASELINE)
    options = parser.parse_args()
    baseline = load_revision(options.baseline)
    runs = {"clean turn": asyncio.run(event_texts(False)),
            "turn with secrets": asyncio.run(event_texts(True))}
    load = os.getloadavg()[0]
    print(f"load average {load:.2f}; {options.rounds} rounds x {options.calls} passes over each run's events")
    for name, texts in runs.items():
        read = [item for event in texts for item in event]
        walked = sum(redact._may_hold_secrets(item) for item in read)
        samples: dict[str, list[float]] = {"current": [], "baseline": []}
        for _ in range(options.rounds):
            samples["baseline"].append(per_event(baseline, texts, options.calls))
            samples["current"].append(per_event(redact, texts, options.calls))
        now, before = (statistics.median(samples[key]) for key in ("current", "baseline"))
        print(f"{name}: {len(texts)} events ({walked} of {len(read)} texts walked now), "
              f"per event: current {now * 1e6:.2f} us, baseline {options.baseline} {before * 1e6:.2f} us, "
              f"ratio {now / before:.2f}")


if __name__ == "__main__":
    main()
