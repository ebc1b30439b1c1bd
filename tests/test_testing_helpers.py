"""run_journal.testing for users: capture_run() in sync and async tests, importable without pytest."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from _agent_tools import add
from langchain.agents import create_agent

from run_journal import envelope
from run_journal.envelope import NewEvent
from run_journal.testing import ScriptedChatModel, capture_run, reply


def agent() -> Any:
    return create_agent(ScriptedChatModel([reply(tool_calls=[("add", {"a": 1, "b": 2}, "c1")]),
                                           reply("it is 3", input_tokens=50)]), [add])


def test_capture_run_records_a_sync_run_into_memory() -> None:
    with capture_run(thread_id="sync") as run:
        agent().invoke({"messages": [("user", "1+2?")]}, run.config)
    assert run.status == "success"
    assert run.event_types == ["run.start", "llm.human.input", "llm.request", "llm.ai.response", "tool.call",
                               "llm.tool.result", "tool.outcome", "llm.request", "llm.ai.response", "run.end"]
    assert run.row is not None
    assert run.row.usage.total_tokens == 52 + 62
    (outcome,) = run.of_type("tool.outcome")
    assert (outcome.content["tool_name"], outcome.content["outcome"]) == ("add", "success")


async def test_capture_run_records_an_async_run_into_memory() -> None:
    async with capture_run() as run:
        await agent().ainvoke({"messages": [("user", "1+2?")]}, run.config)
    assert run.status == "success"
    assert run.of_type("llm.ai.response")[-1].content["content"] == "it is 3"


def test_the_testing_helpers_import_without_pytest_and_the_kit_says_what_it_needs() -> None:
    script = (
        "import sys; sys.modules['pytest'] = None\n"
        "import run_journal.testing as t\n"
        "assert callable(t.capture_run)\n"
        "try:\n    t.RunEventStoreConformance\nexcept ImportError as e:\n    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "run_journal.testing.conformance is a pytest suite" in done.stdout


def test_every_slot_of_an_event_is_set_through_the_setter_of_that_very_slot() -> None:
    for slot in NewEvent.__slots__:
        setter = getattr(envelope, f"_SET_{slot.lstrip('_').upper()}")
        assert setter.__self__.__name__ == slot  # bound by name, never by position
