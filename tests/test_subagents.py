"""subagent_run_event (each mapping, each malformed case) and wrap_subagent_stream (sync, async, timeout)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage, messages_to_dict
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from run_journal.contract import validate_record
from run_journal.envelope import NewEvent, RunEvent
from run_journal.journal.subagents import (
    DESCRIPTION_LIMIT,
    ERROR_TEXT_LIMIT,
    MAX_TOOL_CALLS,
    RESULT_TEXT_LIMIT,
    STEP_TEXT_LIMIT,
    TOOL_ARGS_PREVIEW_LIMIT,
    subagent_run_event,
    wrap_subagent_stream,
)
from run_journal.redact import no_redaction


def valid(mapped: dict[str, Any] | None) -> dict[str, Any]:
    """The mapped event, after checking it has exactly the journal's keys and passes the contract."""
    assert mapped is not None
    assert set(mapped) == {"event_type", "category", "content", "metadata"}
    record = RunEvent.stored(NewEvent(thread_id="t", run_id="r", **mapped), 1).to_dict()
    assert validate_record(record) == []
    return mapped


def step(message: Any, index: int = 0, task_id: str = "task-1") -> dict[str, Any]:
    return valid(subagent_run_event(
        {"type": "task_running", "task_id": task_id, "message_index": index, "message": message}
    ))


class RecordingJournal:
    """The two recorders the producers use, recording what they were given."""

    def __init__(self, fail: bool = False) -> None:
        self.chunks: list[Any] = []
        self.records: list[tuple[str, Any, Any]] = []
        self.fail = fail

    def record_subagent_chunk(self, chunk: Any) -> None:
        self.chunks.append(chunk)
        if self.fail:
            raise RuntimeError("journal is broken")

    def record(self, event_type: str, *, content: Any = "", metadata: Any = None) -> None:
        self.records.append((event_type, content, metadata))

    def mapped(self) -> list[tuple[str, str, str | None]]:
        """(event_type, task_id, status) of every chunk that maps to an event."""
        out = []
        for chunk in self.chunks:
            event = subagent_run_event(chunk)
            if event is not None:
                out.append((event["event_type"], event["content"]["task_id"], event["content"].get("status")))
        return out


# -- mapping ---------------------------------------------------------------------------------------


def test_task_started_maps_to_subagent_start_with_name() -> None:
    event = valid(subagent_run_event(
        {"type": "task_started", "task_id": "a1", "description": "research X", "subagent": "researcher"}
    ))
    assert event["event_type"] == "subagent.start"
    assert event["category"] == "subagent"
    assert event["content"] == {"task_id": "a1", "description": "research X", "subagent": "researcher"}
    assert event["metadata"] == {"task_id": "a1"}


def test_task_started_without_description_or_name() -> None:
    event = valid(subagent_run_event({"type": "task_started", "task_id": "a1"}))
    assert event["content"] == {"task_id": "a1", "description": ""}


def test_long_description_is_cut_with_flag() -> None:
    event = valid(subagent_run_event(
        {"type": "task_started", "task_id": "a1", "description": "d" * (DESCRIPTION_LIMIT + 5)}
    ))
    assert len(event["content"]["description"]) == DESCRIPTION_LIMIT
    assert event["content"]["description_truncated"] is True


def test_ai_step_from_message_object_with_content_blocks_and_tool_calls() -> None:
    message = AIMessage(
        content=[{"type": "text", "text": "Let me "}, {"type": "image_url", "image_url": {"url": "x"}},
                 {"type": "text", "text": "search."}],
        tool_calls=[{"name": "search", "args": {"q": "deer"}, "id": "call-1"}],
    )
    event = step(message, index=3)
    assert event["event_type"] == "subagent.step"
    assert event["metadata"] == {"task_id": "task-1", "message_index": 3}
    content = event["content"]
    assert content["kind"] == "ai"
    assert content["text"] == "Let me search."
    assert content["truncated"] is False
    assert content["tool_calls"] == [
        {"name": "search", "id": "call-1", "args_preview": '{"q":"deer"}', "args_truncated": False}
    ]
    assert "tool_name" not in content


@pytest.mark.parametrize(
    "form",
    [
        lambda m: m.model_dump(),
        lambda m: messages_to_dict([m])[0],
        lambda m: json.loads(json.dumps(m.model_dump())),
    ],
    ids=["model_dump", "messages_to_dict", "json_round_trip"],
)
def test_ai_step_from_dict_forms_matches_the_object(form: Any) -> None:
    message = AIMessage(content="thinking", tool_calls=[{"name": "f", "args": {"n": 1}, "id": "c"}])
    assert step(form(message)) == step(message)


def test_tool_step_has_tool_name_and_call_id() -> None:
    event = step(ToolMessage(content="42 results", tool_call_id="call-1", name="search"), index=4)
    assert event["content"]["kind"] == "tool"
    assert event["content"]["tool_name"] == "search"
    assert event["content"]["tool_call_id"] == "call-1"
    assert event["content"]["text"] == "42 results"
    assert "tool_calls" not in event["content"]


def test_tool_step_without_name_has_null_tool_name() -> None:
    event = step({"type": "tool", "content": "ok", "tool_call_id": "c"})
    assert event["content"]["tool_name"] is None


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        (HumanMessage(content="hi"), "human"),
        (SystemMessage(content="be brief"), "system"),
        ({"role": "assistant", "content": "hello"}, "ai"),
        ({"role": "user", "content": "hello"}, "human"),
        ({"type": "AIMessageChunk", "content": "par"}, "ai"),
        ({"type": "remove", "content": ""}, "other"),
        ({"content": "no type at all"}, "other"),
    ],
)
def test_step_kinds(message: Any, kind: str) -> None:
    assert step(message)["content"]["kind"] == kind


def test_openai_style_tool_call_function_shape() -> None:
    message = {"role": "assistant", "content": None,
               "tool_calls": [{"id": "c9", "function": {"name": "lookup", "arguments": '{"k": 1}'}}]}
    event = step(message)
    assert event["content"]["text"] == ""
    assert event["content"]["tool_calls"] == [
        {"name": "lookup", "id": "c9", "args_preview": '{"k":1}', "args_truncated": False}
    ]


def test_tool_args_are_redacted_by_default_whatever_their_form() -> None:
    calls = [
        {"name": "login", "args": {"user": "ann", "password": "pw-123"}, "id": "c1"},
        {"id": "c2", "function": {"name": "call", "arguments": '{"api_key": "sk-999", "q": 1}'}},
        {"name": "raw", "args": "not json password=pw-123", "id": "c3"},
    ]
    event = step({"type": "ai", "content": "", "tool_calls": calls})
    previews = [call["args_preview"] for call in event["content"]["tool_calls"]]
    assert previews[0] == '{"user":"ann","password":"[redacted]"}'
    assert previews[1] == '{"api_key":"[redacted]","q":1}'
    assert previews[2] == "<24 characters of non-JSON arguments>"  # free text can't be redacted
    chunk = {"type": "task_running", "task_id": "a", "message_index": 0,
             "message": {"type": "ai", "content": "", "tool_calls": calls[:1]}}
    plain = valid(subagent_run_event(chunk, redact=no_redaction))
    assert "pw-123" in plain["content"]["tool_calls"][0]["args_preview"]


def test_long_step_text_is_truncated_at_the_limit() -> None:
    event = step(AIMessage(content="x" * (STEP_TEXT_LIMIT + 1)))
    assert event["content"]["truncated"] is True
    assert len(event["content"]["text"]) == STEP_TEXT_LIMIT
    exact = step(AIMessage(content="x" * STEP_TEXT_LIMIT))
    assert exact["content"]["truncated"] is False


def test_long_tool_args_are_truncated_and_many_calls_are_capped() -> None:
    calls = [{"name": f"t{i}", "args": {"blob": "y" * TOOL_ARGS_PREVIEW_LIMIT}, "id": f"c{i}"}
             for i in range(MAX_TOOL_CALLS + 3)]
    event = step({"type": "ai", "content": "", "tool_calls": calls})
    listed = event["content"]["tool_calls"]
    assert len(listed) == MAX_TOOL_CALLS
    assert event["content"]["tool_calls_omitted"] == 3
    assert all(call["args_truncated"] and len(call["args_preview"]) == TOOL_ARGS_PREVIEW_LIMIT
               for call in listed)


@pytest.mark.parametrize(
    ("chunk_type", "status"),
    [("task_completed", "completed"), ("task_failed", "failed"),
     ("task_cancelled", "cancelled"), ("task_timed_out", "timed_out")],
)
def test_terminal_chunks_map_to_subagent_end(chunk_type: str, status: str) -> None:
    event = valid(subagent_run_event({"type": chunk_type, "task_id": "a1"}))
    assert event["event_type"] == "subagent.end"
    assert event["content"] == {"task_id": "a1", "status": status}
    assert event["metadata"] == {"task_id": "a1"}


def test_end_with_model_usage_and_result() -> None:
    usage = {"input_tokens": 10, "output_tokens": 4, "input_token_details": {"cache_read": 3}}
    event = valid(subagent_run_event(
        {"type": "task_completed", "task_id": "a1", "model": "fake-model", "usage": usage, "result": "done"}
    ))
    content = event["content"]
    assert content["model"] == "fake-model"
    assert content["usage"]["input_tokens"] == 10
    assert content["usage"]["total_tokens"] == 14
    assert content["usage"]["cache_read_tokens"] == 3
    assert content["result"] == "done"
    assert content["result_truncated"] is False


def test_end_result_and_error_truncation_and_non_string_values() -> None:
    event = valid(subagent_run_event(
        {"type": "task_failed", "task_id": "a1", "result": "r" * (RESULT_TEXT_LIMIT + 1),
         "error": ValueError("e" * ERROR_TEXT_LIMIT)}
    ))
    assert event["content"]["result_truncated"] is True
    assert len(event["content"]["result"]) == RESULT_TEXT_LIMIT
    assert event["content"]["error"].startswith("ValueError: eee")
    assert event["content"]["error_truncated"] is True
    structured = valid(subagent_run_event(
        {"type": "task_completed", "task_id": "a1", "result": {"answer": 42}, "usage": "junk"}
    ))
    assert structured["content"]["result"] == '{"answer":42}'
    assert "usage" not in structured["content"]
    message_result = valid(subagent_run_event(
        {"type": "task_completed", "task_id": "a1", "result": AIMessage(content="final")}
    ))
    assert message_result["content"]["result"] == "final"


class _Exploding(dict[str, Any]):
    def get(self, key: str, default: Any = None) -> Any:
        raise RuntimeError("hostile mapping")


@pytest.mark.parametrize(
    "chunk",
    [
        None, "task_started", ["task_started"], 42,
        {"task_id": "a1"},
        {"type": "message", "task_id": "a1"},
        {"type": 5, "task_id": "a1"},
        {"type": "task_exploded", "task_id": "a1"},
        {"type": "task_started"},
        {"type": "task_started", "task_id": ""},
        {"type": "task_started", "task_id": "   "},
        {"type": "task_started", "task_id": 7},
        {"type": "task_completed", "task_id": None},
        {"type": "task_started", "task_id": "x" * 256},
        {"type": "task_running", "task_id": "a1", "message": {"type": "ai", "content": "x"}},
        {"type": "task_running", "task_id": "a1", "message_index": -1, "message": {"content": "x"}},
        {"type": "task_running", "task_id": "a1", "message_index": True, "message": {"content": "x"}},
        {"type": "task_running", "task_id": "a1", "message_index": 1.0, "message": {"content": "x"}},
        {"type": "task_running", "task_id": "a1", "message_index": "1", "message": {"content": "x"}},
        {"type": "task_running", "task_id": "a1", "message_index": 0},
        {"type": "task_running", "task_id": "a1", "message_index": 0, "message": "hello"},
        {"type": "task_running", "task_id": "a1", "message_index": 0, "message": ["hello"]},
        _Exploding(type="task_started", task_id="a1"),
    ],
)
def test_malformed_chunks_map_to_none(chunk: Any) -> None:
    assert subagent_run_event(chunk) is None


def test_the_first_module_name_and_the_package_names_stay_importable() -> None:
    import run_journal
    from run_journal import subagents as first_name
    from run_journal.journal import subagents

    for name in first_name.__all__:
        if name != "SubagentJournal":
            assert getattr(first_name, name) is getattr(subagents, name)
    assert run_journal.subagent_run_event is subagent_run_event
    assert run_journal.wrap_subagent_stream is wrap_subagent_stream


# -- stream wrapper ------------------------------------------------------------------------------

CHUNKS: list[Any] = [
    {"type": "task_started", "task_id": "a1", "description": "d"},
    {"type": "task_running", "task_id": "a1", "message_index": 0, "message": AIMessage(content="hm")},
    "not a chunk",
    {"type": "task_running", "task_id": "a1", "message_index": -3, "message": {}},
    {"type": "task_completed", "task_id": "a1", "result": "ok"},
]


def test_sync_stream_yields_every_chunk_unchanged_and_journals_each() -> None:
    journal = RecordingJournal()
    wrapped = wrap_subagent_stream(iter(CHUNKS), journal)
    assert isinstance(wrapped, Iterator)
    out = list(wrapped)
    assert len(out) == len(CHUNKS)
    assert all(a is b for a, b in zip(out, CHUNKS, strict=True))
    assert all(a is b for a, b in zip(journal.chunks, CHUNKS, strict=True))


def test_chunk_is_journaled_before_the_consumer_sees_it() -> None:
    journal = RecordingJournal()
    for count, chunk in enumerate(wrap_subagent_stream(CHUNKS, journal), start=1):
        assert journal.chunks[-1] is chunk
        assert len(journal.chunks) == count


async def _agen(chunks: list[Any]) -> AsyncIterator[Any]:
    for chunk in chunks:
        await asyncio.sleep(0)
        yield chunk


async def test_async_stream_yields_every_chunk_unchanged_and_journals_each() -> None:
    journal = RecordingJournal()
    wrapped = wrap_subagent_stream(_agen(CHUNKS), journal)
    assert not isinstance(wrapped, Iterator)
    out = [chunk async for chunk in wrapped]
    assert all(a is b for a, b in zip(out, CHUNKS, strict=True))
    assert len(journal.chunks) == len(CHUNKS)


async def test_a_failing_journal_never_breaks_the_stream() -> None:
    journal = RecordingJournal(fail=True)
    assert list(wrap_subagent_stream(CHUNKS, journal)) == CHUNKS
    assert [chunk async for chunk in wrap_subagent_stream(_agen(CHUNKS), journal)] == CHUNKS
    assert len(journal.chunks) == 2 * len(CHUNKS)


def test_without_timeout_open_tasks_are_left_for_the_journal() -> None:
    journal = RecordingJournal()
    list(wrap_subagent_stream(CHUNKS[:2], journal))
    assert journal.mapped() == [("subagent.start", "a1", None), ("subagent.step", "a1", None)]


def test_generous_timeout_adds_nothing() -> None:
    journal = RecordingJournal()
    list(wrap_subagent_stream(CHUNKS[:2], journal, timeout=3600))
    assert [event for event, _, _ in journal.mapped()] == ["subagent.start", "subagent.step"]


def test_sync_stream_past_its_deadline_times_out_open_tasks_once() -> None:
    journal = RecordingJournal()
    chunks = [
        {"type": "task_started", "task_id": "a1", "description": "d"},
        {"type": "task_running", "task_id": "a1", "message_index": 0, "message": {"content": "late"}},
        {"type": "task_completed", "task_id": "a1"},
    ]
    out = list(wrap_subagent_stream(chunks, journal, timeout=0))
    assert out == chunks  # the consumer still sees everything
    assert journal.mapped() == [("subagent.start", "a1", None), ("subagent.end", "a1", "timed_out")]
    synthesized = journal.chunks[-1]
    assert synthesized["closed_by_journal"] is True
    valid(subagent_run_event(synthesized))


def test_sync_stream_ending_after_the_deadline_times_out_what_is_open() -> None:
    journal = RecordingJournal()
    chunks = [{"type": "task_started", "task_id": "a1"}]
    list(wrap_subagent_stream(chunks, journal, timeout=0))
    assert journal.mapped() == [("subagent.start", "a1", None), ("subagent.end", "a1", "timed_out")]


def test_sync_consumer_breaking_out_after_the_deadline_times_out_open_tasks() -> None:
    journal = RecordingJournal()

    def endless() -> Iterator[dict[str, Any]]:
        yield {"type": "task_started", "task_id": "a1"}
        index = 0
        while True:
            yield {"type": "task_running", "task_id": "a1", "message_index": index, "message": {}}
            index += 1

    stream = wrap_subagent_stream(endless(), journal, timeout=0)
    next(stream)
    stream.close()  # type: ignore[attr-defined]  # a generator: the consumer gives up
    assert journal.mapped()[-1] == ("subagent.end", "a1", "timed_out")


async def test_async_stream_times_out_at_the_deadline_while_waiting() -> None:
    journal = RecordingJournal()
    seen_while_waiting: list[Any] = []

    async def stuck() -> AsyncIterator[dict[str, Any]]:
        yield {"type": "task_started", "task_id": "a1"}
        for _ in range(1000):  # the subagent is stuck; the event loop keeps turning
            if len(journal.chunks) > 1:
                break
            await asyncio.sleep(0)
        seen_while_waiting.extend(journal.mapped())
        yield {"type": "task_completed", "task_id": "a1"}

    out = [chunk async for chunk in wrap_subagent_stream(stuck(), journal, timeout=0)]
    assert len(out) == 2
    expected = [("subagent.start", "a1", None), ("subagent.end", "a1", "timed_out")]
    assert seen_while_waiting == expected  # closed by the timer, before the stream produced more
    assert journal.mapped() == expected  # the late completion is not journaled after the end


async def test_async_generous_timeout_adds_nothing() -> None:
    journal = RecordingJournal()
    out = [chunk async for chunk in wrap_subagent_stream(_agen(CHUNKS[:1]), journal, timeout=3600)]
    assert out == CHUNKS[:1]
    assert journal.mapped() == [("subagent.start", "a1", None)]


@pytest.mark.parametrize("timeout", [-1, True, float("nan")])
def test_bad_timeout_is_rejected(timeout: Any) -> None:
    with pytest.raises(ValueError, match="timeout"):
        wrap_subagent_stream([], RecordingJournal(), timeout=timeout)


# -- integration: a real LangGraph run whose tool streams a subagent ------------------------------


def _subagent_chunks(steps: int) -> list[Any]:
    """A subagent's stream: start, alternating AI / tool steps, one malformed chunk, completion."""
    chunks: list[Any] = [{"type": "task_started", "task_id": "sub-1", "description": "look it up",
                          "subagent": "researcher"}]
    for index in range(steps):
        message: AIMessage | ToolMessage = (
            AIMessage(content=f"thinking {index}", tool_calls=[{"name": "web", "args": {}, "id": "w"}])
            if index % 2 == 0
            else ToolMessage(content=f"found {index}", tool_call_id="w", name="web")
        )
        chunks.append({"type": "task_running", "task_id": "sub-1", "message_index": index,
                       "message": message})
    chunks.append("a malformed chunk the parent ignores")
    chunks.append({"type": "task_completed", "task_id": "sub-1", "result": "the answer is 42",
                   "model": "fake-sub-model", "usage": {"input_tokens": 30, "output_tokens": 7}})
    return chunks


@pytest.mark.parametrize("mode", ["async", "sync"])
async def test_langgraph_tool_streaming_a_subagent_reads_back_in_causal_order(
    store: Any, mode: str
) -> None:
    journal = pytest.importorskip("run_journal.journal").RunJournal(store, thread_id="thread-sub")
    passed_through: list[Any] = []

    @tool
    async def delegate_async(question: str) -> str:
        """Ask a subagent."""

        async def stream() -> AsyncIterator[Any]:
            for chunk in _subagent_chunks(6):
                yield chunk

        async for chunk in wrap_subagent_stream(stream(), journal):
            passed_through.append(chunk)
        return "subagent says 42"

    @tool
    def delegate_sync(question: str) -> str:
        """Ask a subagent."""
        passed_through.extend(wrap_subagent_stream(iter(_subagent_chunks(6)), journal))
        return "subagent says 42"

    delegate = delegate_async if mode == "async" else delegate_sync
    model = GenericFakeChatModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": delegate.name, "args": {"question": "q"},
                                           "id": "call-d"}]),
        AIMessage(content="The subagent says 42."),
    ]))

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([delegate]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    graph = builder.compile()

    async with journal:
        await graph.ainvoke({"messages": [HumanMessage(content="ask the subagent")]},
                            config={"callbacks": [journal]})

    assert len(passed_through) == 9  # every chunk, the malformed one too
    events = await store.list_events("thread-sub", journal.run_id)
    names = [event.event_type for event in events]
    for event in events:
        assert validate_record(event.to_dict()) == []

    def first(predicate: Any) -> int:
        return next(i for i, event in enumerate(events) if predicate(event))

    call = first(lambda e: e.event_type == "tool.call" and e.content["tool_call_id"] == "call-d")
    start = names.index("subagent.start")
    end = names.index("subagent.end")
    result = first(lambda e: e.event_type == "llm.tool.result" and e.metadata.get("tool_call_id") == "call-d")
    steps = [i for i, name in enumerate(names) if name == "subagent.step"]
    assert call < start < steps[0]
    assert steps[-1] < end < result
    assert [events[i].content["message_index"] for i in steps] == list(range(6))
    assert names.count("subagent.end") == 1
    assert events[end].content["status"] == "completed"
    assert events[start].metadata["caller"] == "subagent:researcher"

    # Subtask cards page the steps by task id.
    pages: list[list[int]] = []
    after = None
    while True:
        page = await store.list_events("thread-sub", journal.run_id, event_types=["subagent.step"],
                                       task_id="sub-1", limit=4, after_seq=after)
        if not page:
            break
        pages.append([event.content["message_index"] for event in page])
        after = page[-1].seq
    assert pages == [[0, 1, 2, 3], [4, 5]]
    assert await store.list_events("thread-sub", journal.run_id, task_id="other") == []

    row = journal.run_row
    assert row is not None
    assert row.usage_by_caller["subagent:researcher"].input_tokens == 30
    assert row.usage_by_model["fake-sub-model"].output_tokens == 7
