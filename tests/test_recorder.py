"""The recorder alone: callbacks in, events and run-row snapshots out, with no store and no loop."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langgraph.types import Command

from run_journal.envelope import NewEvent
from run_journal.journal.recorder import RunRecorder
from run_journal.redact import redact_secrets
from run_journal.runs import RunStatus

PRICING = {"fake-model": {"input": 1.0, "output": 2.0}}


def recorder(**options: Any) -> RunRecorder:
    settings: dict[str, Any] = {"thread_id": "t", "run_id": "r", "user_id": None, "resumed_from": None,
                                "redact": redact_secrets, "pricing": PRICING, **options}
    return RunRecorder(**settings)


def reply(message: AIMessage) -> LLMResult:
    return LLMResult(generations=[[ChatGeneration(message=message)]])


def usage(inputs: int, outputs: int) -> dict[str, int]:
    return {"input_tokens": inputs, "output_tokens": outputs, "total_tokens": inputs + outputs}


def types(events: list[Any]) -> list[str]:
    return [e.event_type for e in events]


def test_a_tool_turn_becomes_its_events_and_row_without_a_store_or_a_loop() -> None:
    rec = recorder()
    root, model1, tool, model2 = (uuid.uuid4() for _ in range(4))
    rec.chain_start(root, None, "graph", {"messages": [HumanMessage("add 1 and 2", id="h1")]}, [], {})
    params = {"model_name": "fake-model"}
    rec.model_start(model1, root, "chat_model", [], ["lead_agent"], {}, params)
    call = {"name": "add", "args": {"a": 1, "b": 2, "api_key": "sk-secret"}, "id": "c1", "type": "tool_call"}
    rec.llm_end(reply(AIMessage("adding", id="a1", tool_calls=[call], usage_metadata=usage(10, 5))), model1)
    rec.tool_start(tool, root, "add", "c1", [])
    rec.tool_end(ToolMessage("3", tool_call_id="c1", name="add", id="m1"), tool)
    rec.model_start(model2, root, "chat_model", [], [], {}, params)
    rec.llm_end(reply(AIMessage("it is 3", id="a2", usage_metadata=usage(20, 4))), model2)
    rec.chain_end({"messages": []}, root)
    events = rec.take()
    assert all(isinstance(e, NewEvent) for e in events)
    assert types(events) == ["run.start", "llm.human.input", "llm.request", "llm.ai.response", "tool.call",
                             "llm.tool.result", "tool.outcome", "llm.request", "llm.ai.response", "run.end"]
    first, second = (e for e in events if e.event_type == "llm.request")
    assert first.metadata["llm_run_id"] == str(model1)
    assert second.metadata["llm_run_id"] == str(model2)
    assert [first.metadata["llm_call_index"], second.metadata["llm_call_index"]] == [0, 1]
    stored = "".join(e.content_json + e.metadata_json for e in events if isinstance(e, NewEvent))
    assert "sk-secret" not in stored
    assert rec.take() == []
    row = rec.row()
    assert row is not None
    assert (row.status, row.usage.total_tokens, row.tool_call_count, row.message_count) == (
        RunStatus.SUCCESS, 39, 1, 4)
    assert row.usage.cost_usd is not None
    assert row.first_human_message == "add 1 and 2"
    assert row.last_ai_message == "it is 3"


def test_a_snapshot_keeps_the_row_as_it_was_when_taken() -> None:
    rec = recorder()
    root, model = uuid.uuid4(), uuid.uuid4()
    rec.chain_start(root, None, "graph", {"messages": [HumanMessage("hi")]}, [], {})
    snapshot = rec.snapshot()
    assert snapshot is not None
    rec.model_start(model, root, "chat_model", [], [], {}, {"model_name": "fake-model"})
    rec.llm_end(reply(AIMessage("hello", usage_metadata=usage(3, 2))), model)
    rec.chain_end({"messages": []}, root)
    before, now = snapshot(), rec.row()
    assert now is not None
    assert (before.status, before.usage.total_tokens) == (RunStatus.RUNNING, 0)
    assert (now.status, now.usage.total_tokens) == (RunStatus.SUCCESS, 5)


def test_events_recorded_before_the_run_are_held_then_follow_its_start_in_its_thread() -> None:
    rec = recorder(thread_id=None)
    rec.record("context:memory", {"content_sha256": "0" * 64}, None, "lead_agent")
    assert rec.take() == []
    assert types(rec.held) == ["context:memory"]
    assert rec.row() is None
    rec.chain_start(uuid.uuid4(), None, "graph", {"messages": []}, [], {"thread_id": "from-config"})
    events = rec.take()
    assert types(events) == ["run.start", "context:memory"]
    assert {e.thread_id for e in events} == {"from-config"}
    assert rec.held == []


def test_exactly_one_terminal_event_whatever_comes_after_it() -> None:
    rec = recorder()
    root = uuid.uuid4()
    rec.chain_start(root, None, "graph", {"messages": []}, [], {})
    rec.chain_error(RuntimeError("boom"), root)
    rec.chain_end({"messages": []}, root)  # a late end
    rec.finish_unended()
    rec.llm_end(reply(AIMessage("late")), uuid.uuid4())
    assert types(rec.take()) == ["run.start", "run.error"]
    row = rec.row()
    assert row is not None
    assert (row.status, row.error) == (RunStatus.ERROR, "boom")


def test_a_run_never_ended_is_cancelled_when_the_journal_closes() -> None:
    rec = recorder()
    rec.chain_start(uuid.uuid4(), None, "graph", {"messages": []}, [], {})
    rec.finish_unended()
    rec.finish_unended()
    assert types(rec.take()) == ["run.start", "run.cancel"]


def test_a_resume_without_its_origin_leaves_the_lookup_to_the_writer() -> None:
    rec = recorder()
    rec.chain_start(uuid.uuid4(), None, "graph", Command(resume="yes"), [], {})
    (start,) = rec.take()
    assert start.event_type == "run.start"
    assert rec.resume_lookup is start  # the journal has the writer look the origin up in the store
    assert start.content["resumed_from"] is None


def test_producers_refuse_the_legacy_alias_and_name_the_canonical_event() -> None:
    rec = recorder()
    with pytest.raises(ValueError, match=r"legacy.*'llm\.ai\.response'"):
        rec.record("ai_message", "hello", None, "lead_agent")
    assert rec.held == []


def test_usage_reported_by_two_streamed_tasks_of_one_subagent_is_counted_for_each_task() -> None:
    from run_journal.subagents import subagent_run_event

    rec = recorder()
    rec.chain_start(uuid.uuid4(), None, "graph", {"messages": []}, [], {})
    for task in ("k1", "k2"):
        for chunk in ({"type": "task_started", "task_id": task, "description": "d", "subagent": "researcher"},
                      {"type": "task_completed", "task_id": task, "usage": usage(7, 3)},
                      {"type": "task_completed", "task_id": task, "usage": usage(7, 3)}):  # a repeat
            mapped = subagent_run_event(chunk)
            assert mapped is not None
            rec.record_subagent(mapped)
    row = rec.row()
    assert row is not None
    bucket = row.usage_by_caller["subagent:researcher"]
    assert (bucket.llm_calls, bucket.total_tokens) == (2, 20)
