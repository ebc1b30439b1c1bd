"""Port of DeerFlow's ``tests/test_run_events_endpoint.py``: ``GET .../runs/{run_id}/events``, the
read behind historical subtask cards and the memory audit, on every backend. The originals called
the route function with a fake store and checked the arguments it was given; here a real agent run
is journaled and the test checks what the route returns."""

from __future__ import annotations

import hashlib
from typing import Any

from langchain.agents import create_agent
from langchain_core.tools import tool

from run_journal import RunEventStore, RunJournal
from run_journal.testing import ScriptedChatModel, reply

from ._support import THREAD, gateway

MEMORY = "<memory>\nUser prefers Python.\n</memory>\n"


async def create_agent_run(journal: RunJournal, script: list[Any], tools: list[Any] | None = None) -> None:
    """One real ``create_agent`` run on a scripted model under ``journal``."""
    agent = create_agent(ScriptedChatModel(script), tools or [])
    await agent.ainvoke({"messages": [{"role": "user", "content": "go"}]}, {"callbacks": [journal]})


async def delegating_run(store: RunEventStore, steps: dict[str, int]) -> str:
    """A real agent whose ``task`` tool runs subagents (one per entry of ``steps``, with that many
    steps each, interleaved) and journals their stream; the tool also records the memory context."""
    journal = RunJournal(store, thread_id=THREAD)

    @tool
    def task(description: str) -> str:
        """Delegate to subagents."""
        journal.record_memory_context(content=MEMORY)
        for task_id in steps:
            journal.record_subagent_chunk({"type": "task_started", "task_id": task_id,
                                           "description": description, "subagent": "researcher"})
        for index in range(max(steps.values())):
            for task_id, count in steps.items():
                if index < count:
                    message: dict[str, Any] = (
                        {"type": "ai", "content": f"{task_id} thinks {index}",
                         "tool_calls": [{"name": "search", "args": {"query": f"q{index}"},
                                         "id": f"{task_id}-{index}"}]}
                        if index % 2 == 0 else
                        {"type": "tool", "content": f"found {index}", "name": "search",
                         "tool_call_id": f"{task_id}-{index - 1}"})
                    journal.record_subagent_chunk({"type": "task_running", "task_id": task_id,
                                                   "message_index": index, "message": message})
        for task_id in steps:
            journal.record_subagent_chunk({"type": "task_completed", "task_id": task_id,
                                           "result": "done"})
        return "Task Succeeded. Result: done"

    async with journal:
        await create_agent_run(journal, [reply("", tool_calls=[("task", {"description": "look"}, "t-1")]),
                                         reply("All done.")], [task])
    return journal.run_id


async def test_list_run_events_forwards_task_id_and_after_seq(store: RunEventStore) -> None:
    run = await delegating_run(store, {"task-A": 6, "task-B": 6})
    types = "subagent.start,subagent.step,subagent.end"
    async with gateway(store) as client:
        everything = (await client.get(f"/api/threads/{THREAD}/runs/{run}/events",
                                       params={"event_types": types, "task_id": "task-A"})).json()
        cursor = everything[2]["seq"]
        rest = (await client.get(f"/api/threads/{THREAD}/runs/{run}/events",
                                 params={"event_types": types, "task_id": "task-A",
                                         "after_seq": cursor})).json()
    assert isinstance(everything, list)  # the gateway's shape: a bare list
    assert [e["event_type"] for e in everything] == (
        ["subagent.start"] + ["subagent.step"] * 6 + ["subagent.end"])
    assert {e["metadata"]["task_id"] for e in everything} == {"task-A"}
    assert rest == everything[3:]  # strictly above the cursor, the same task only
    step = everything[1]["content"]
    assert step["task_id"] == "task-A"
    assert step["message_index"] == 0
    assert step["kind"] == "ai"
    assert step["tool_calls"][0]["name"] == "search"
    assert step["tool_calls"][0]["args"] == {"query": "q0"}  # parsed from the stored preview


async def test_list_run_events_redacts_historical_run_start_metadata(store: RunEventStore) -> None:
    """A row written before redaction (straight to the store) is redacted on the way out.
    Deliberately different: the secret is masked (``[redacted]``) rather than its key dropped, and
    the journal itself never stores it (docs/http.md)."""
    stored = await store.put(thread_id="legacy-thread", run_id="legacy-run", event_type="run.start",
                             category="trace",
                             metadata={"caller": "lead_agent", "auth_token": "legacy-secret",
                                       "token_usage": 7})
    async with gateway(store) as client:
        events = (await client.get("/api/threads/legacy-thread/runs/legacy-run/events")).json()
    assert events[0]["metadata"] == {"caller": "lead_agent", "auth_token": "[redacted]",
                                     "token_usage": 7}
    assert "legacy-secret" not in str(events)
    assert stored.metadata["auth_token"] == "legacy-secret"  # the stored row itself is untouched
    again = await store.list_events("legacy-thread", "legacy-run")
    assert again[0].metadata["auth_token"] == "legacy-secret"


async def test_effective_memory_flows_from_injection_to_the_existing_debug_api(
    store: RunEventStore,
) -> None:
    run = await delegating_run(store, {"task-A": 1})
    async with gateway(store) as client:
        events = (await client.get(f"/api/threads/{THREAD}/runs/{run}/events",
                                   params={"event_types": "context:memory"})).json()
    assert len(events) == 1
    assert events[0]["content"]["content_sha256"] == hashlib.sha256(MEMORY.encode("utf-8")).hexdigest()
    assert "User prefers Python" not in str(events)  # only the hash is stored
