"""Quickstart: journal one agent turn into ``journal.db``, then print what was recorded.

Run from any directory (the store is ``journal.db`` in the current directory)::

    python examples/quickstart.py

The agent is a two-node LangGraph graph (model -> tools -> model) whose model is an offline fake
(``RUN_JOURNAL_MODEL=openai:gpt-4o-mini`` swaps in a real one, see examples/README.md). It ends with
the command lines that list the store's threads and show the run, as they run from here (for example
``.venv/bin/run-journal sqlite:///journal.db threads`` when the virtualenv is not activated).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from _models import chat_model, reply
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from run_journal import RunJournal, open_store
from run_journal.envelope import RunEvent


@tool
def get_weather(city: str) -> str:
    """Today's weather in a city."""
    return f"It is sunny and 21 C in {city}."


def build_graph() -> Any:
    model = chat_model([
        reply("Let me check the weather.",
              tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "call-1"}]),
        reply("It is sunny and 21 C in Paris today.", input_tokens=70, output_tokens=11),
    ]).bind_tools([get_weather])

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([get_weather]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


def summary(event: RunEvent) -> str:
    """One line per event: the part of its content a person looks at first."""
    content = event.content if isinstance(event.content, dict) else {"text": event.content}
    if event.category == "message":
        calls = [call["name"] for call in content.get("tool_calls") or []]
        return str(content.get("content", "")) + (f" [calls {', '.join(calls)}]" if calls else "")
    if event.event_type == "tool.call":
        return f"{content['tool_name']}({content['args_preview']})"
    if event.event_type == "tool.outcome":
        return f"{content['tool_name']} {content['outcome']}, {content.get('result_size')} bytes"
    if event.event_type == "run.start":
        return f"{content['run_name']} started"
    return str(event.metadata.get("status", ""))


def shown(path: Path) -> str:
    """A path as typed from the current directory: relative when it is inside it."""
    try:
        text = str(path.relative_to(Path.cwd()))
    except ValueError:
        text = str(path)
    if os.sep not in text:  # a bare name would be looked up on PATH
        text = os.path.join(".", text)
    return shlex.quote(text)


def run_journal_command() -> str:
    """The ``run-journal`` command line as it will run from here, activated virtualenv or not."""
    for name in ("run-journal", "run-journal.exe"):  # installed next to this Python
        script = Path(sys.executable).parent / name
        if script.is_file():
            on_path = shutil.which("run-journal")
            if on_path and Path(on_path).resolve() == script.resolve():
                return "run-journal"
            return shown(script)
    python = shown(Path(sys.executable))
    if importlib.util.find_spec("run_journal.cli.__main__") is not None:
        return f"{python} -m run_journal.cli"
    return f"{python} -c 'import sys; from run_journal.cli import main; sys.exit(main())'"


async def main() -> None:
    graph = build_graph()
    inputs = {"messages": [("user", "What's the weather in Paris?")]}
    async with open_store("sqlite:///journal.db") as store:
        async with RunJournal(store) as journal:
            await graph.ainvoke(inputs, config={"callbacks": [journal], "configurable": {"thread_id": "t1"}})
        print(journal.run_row.status, journal.run_row.usage.total_tokens)

        print(f"\nrun {journal.run_id} on thread {journal.thread_id}")
        print(f"{'seq':>4}  {'event':<16} {'caller':<11} summary")
        for event in await store.list_events(journal.thread_id, journal.run_id):
            caller = event.metadata.get("caller", "-")
            print(f"{event.seq:>4}  {event.event_type:<16} {caller:<11} {summary(event)}")

        row = await store.get_run(journal.run_id)
        assert row is not None
        usage = row.usage
        print(f"\nstatus {row.status}: {usage.llm_calls} model calls, {usage.input_tokens} input + "
              f"{usage.output_tokens} output = {usage.total_tokens} tokens, "
              f"{row.tool_call_count} tool call(s)")
        command = run_journal_command()
        print("\nstored in journal.db; read it back with the command line:")
        print(f"  {command} sqlite:///journal.db threads")
        print(f"  {command} sqlite:///journal.db show {journal.run_id}")


if __name__ == "__main__":
    asyncio.run(main())
