"""The journal's payload shortcuts give exactly what the plain path gives (they only skip work)."""

from __future__ import annotations

import json
import traceback
from typing import Any

import pytest
from _agent_tools import add
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from run_journal import normalization
from run_journal.envelope import NewEvent, Normalized
from run_journal.journal import payloads as p
from run_journal.normalization import encode
from run_journal.redact import redact_secrets
from run_journal.runs import UsageTotals
from run_journal.testing import ScriptedChatModel, capture_run, reply
from run_journal.usage import RunTally, TokenUsage

_text = st.text(max_size=40)  # any code point, lone surrogates included


@st.composite
def _messages(draw: Any) -> list[Any]:
    found: list[Any] = []
    for index in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["human", "ai", "tool"]))
        if kind == "human":
            found.append(HumanMessage(draw(_text), id=f"h{index}"))
        elif kind == "ai":
            args = draw(st.dictionaries(st.sampled_from(["q", "api_key", "n"]), _text, max_size=3))
            calls = [{"name": "lookup", "args": args, "id": f"c{index}"}] if draw(st.booleans()) else []
            found.append(AIMessage(draw(_text), tool_calls=calls, id=f"a{index}"))
        else:
            found.append(ToolMessage(draw(_text), tool_call_id=f"c{index}", name="lookup"))
    return found


@settings(max_examples=150, deadline=None)
@given(_messages(), st.booleans(), st.one_of(st.none(), st.lists(_text, max_size=3)))
def test_run_end_content_splices_the_payload_texts_it_repeats(
    messages: list[Any], truncated: bool, keys: list[str] | None
) -> None:
    payloads = [p.message_payload(message, redact_secrets) for message in messages]
    spliced = p.end_content({"messages": payloads}, truncated, keys)
    plain: dict[str, Any] = {"output": {"messages": [payload.value for payload in payloads]},
                             "output_truncated": truncated}
    if keys is not None:
        plain["state_keys"] = keys
    assert isinstance(spliced, Normalized)
    assert spliced.text == encode(plain)
    assert spliced.value == json.loads(encode(plain))


def test_run_end_content_keeps_items_that_are_not_payloads_in_the_plain_form() -> None:
    produced = {"messages": [p.message_payload(HumanMessage("hi"), redact_secrets), {"raw": 1}]}
    content = p.end_content(produced, False, ["messages"])
    assert content == {"output": produced, "output_truncated": False, "state_keys": ["messages"]}
    event = NewEvent(thread_id="t", run_id="r", event_type="run.end", category="outputs",
                     content=content)
    assert event.content["output"]["messages"][1] == {"raw": 1}


def test_a_payload_built_from_its_text_decodes_only_when_asked() -> None:
    payload = Normalized.from_text('{"a":[1,"é"]}')
    assert payload.text == '{"a":[1,"é"]}'
    assert payload._value is normalization._UNDECODED_VALUE  # nothing decoded yet
    assert payload.value == {"a": [1, "é"]}
    assert payload.value is payload.value  # decoded once
    event = NewEvent(thread_id="t", run_id="r", event_type="llm.ai.response", category="message",
                     content=payload)
    assert event.content_json == payload.text
    assert event.content == payload.value
    assert event.content is not payload.value


def test_a_message_payload_is_the_redacted_compact_dump() -> None:
    message = AIMessage("x", tool_calls=[{"name": "f", "args": {"password": "hunter2", "q": 1}, "id": "c"}])
    payload = p.message_payload(message, redact_secrets)
    dumped = message.model_dump(exclude_defaults=True)
    assert payload.value["content"] == "x"
    assert payload.value["type"] == "ai"
    assert payload.value["tool_calls"][0]["args"] == {"password": "[redacted]", "q": 1}
    assert set(payload.value) == set(dumped) | {"type"}


def _hide_names(value: Any) -> Any:
    """A redactor of a user's own: every caller and tool name hidden, at any depth."""
    if isinstance(value, dict):
        return {key: "hidden" if key in ("caller", "tool_name") else _hide_names(item)
                for key, item in value.items()}
    return [_hide_names(item) for item in value] if isinstance(value, list) else value


async def test_a_redactor_of_the_users_sees_every_payload_the_journals_own_values_too() -> None:
    """``redact=`` receives each event's content and metadata (docs/journal.md): the ids, names and
    counts the journal writes itself skip the scan only with the built-in redactors."""
    agent = create_agent(ScriptedChatModel([reply(tool_calls=[("add", {"a": 1, "b": 2}, "c1")]),
                                            reply("it is 3")]), [add])
    async with capture_run(redact=_hide_names) as run:
        await agent.ainvoke({"messages": [("user", "1+2?")]}, run.config)
    assert run.status == "success"
    callers = {event.event_type: event.metadata.get("caller") for event in run.events}
    assert set(callers.values()) == {"hidden"}, callers
    for event in run.of_type("tool.call", "tool.outcome", "llm.tool.result"):
        assert event.content.get("tool_name", "hidden") == "hidden", event.event_type  # type: ignore[union-attr]


@pytest.mark.parametrize("pricing", [None, {"m1": {"input": 1.0, "output": 2.0}}])
def test_the_tally_folds_its_groups_into_the_same_totals_as_adding_every_call(pricing: Any) -> None:
    tally = RunTally(pricing=pricing)
    calls = [
        ("lead_agent", "m1", TokenUsage(10, 5, 15, 2, 0, 1)),
        ("subagent:a", "m1", None),
        ("lead_agent", "m2", TokenUsage(1, 1, 2)),
        ("lead_agent", "m1", TokenUsage(3, 4, 7, 0, 1, 0)),
        ("middleware:s", None, TokenUsage(2, 2, 4)),
    ]
    rows = [tally.add_call(caller, model, usage) for caller, model, usage in calls]
    expected_total, by_caller, by_model = UsageTotals(), {}, {}
    for (caller, model, _), row in zip(calls, rows, strict=True):
        expected_total = expected_total + row
        by_caller[caller] = by_caller.get(caller, UsageTotals()) + row
        by_model[model or "unknown"] = by_model.get(model or "unknown", UsageTotals()) + row
    assert tally.total == expected_total
    assert tally.by_caller == by_caller
    assert tally.by_model == by_model
    assert tally.total.llm_calls == 5
    assert RunTally().total == UsageTotals()


def test_a_payload_survives_copy_and_pickle_before_and_after_decoding() -> None:
    import copy
    import pickle

    for decoded in (False, True):
        payload = Normalized.from_text('{"k":["v",2]}')
        if decoded:
            assert payload.value == {"k": ["v", 2]}
        for clone in (copy.copy(payload), copy.deepcopy(payload), pickle.loads(pickle.dumps(payload))):
            assert clone.text == payload.text
            assert clone.value == {"k": ["v", 2]}
    assert pickle.loads(pickle.dumps(Normalized({"a": 1}))).text == '{"a":1}'


def test_tool_messages_are_found_in_every_shape_of_node_output() -> None:
    from langgraph.types import Command

    first = ToolMessage("1", tool_call_id="a")
    second = ToolMessage("2", tool_call_id="b")
    third = ToolMessage("3", tool_call_id="c")
    assert p.tool_messages({"messages": [AIMessage("x"), first]}) == [first]  # a node's usual update
    assert p.tool_messages([first, Command(update={"messages": [second]})]) == [first, second]
    assert p.tool_messages({"messages": [("messages", [third])]}) == [third]
    assert p.tool_messages([Command(update=[("messages", [first])]), second]) == [first, second]
    assert p.tool_messages({"messages": "not a list"}) == []


# -- one payload toolkit for every producer ------------------------------------------------------


def test_a_cut_text_keeps_its_first_characters_and_says_so_beside_it() -> None:
    assert p.capped("abcdef", 6) == ("abcdef", False)
    assert p.capped("abcdef", 4) == ("abcd", True)  # a prefix: no ellipsis added
    assert p.text_fields("error", "abc", 5) == {"error": "abc"}  # the flag only when cut
    assert p.text_fields("error", "abcdef", 5) == {"error": "abcde", "error_truncated": True}
    error = ValueError("e" * (p.ERROR_TEXT_LIMIT + 10))
    content = p.error_content(error, with_traceback=False)
    assert content == {"error_type": "ValueError", "message": "e" * p.ERROR_TEXT_LIMIT,
                       "message_truncated": True}
    assert p.tool_error_fields(error)["error"] == f"ValueError: {'e' * (p.ERROR_TEXT_LIMIT - 12)}"


def test_a_long_traceback_keeps_its_end_from_a_line_start() -> None:
    def ping(n: int) -> None:  # two functions in turn: Python shortens no repeated frame
        if n:
            pong(n - 1)
        raise RuntimeError("the end")

    def pong(n: int) -> None:
        ping(n)

    try:
        ping(200)
    except RuntimeError as error:
        content = p.error_content(error, with_traceback=True)
        full = "".join(traceback.format_exception(error))
    text = content["traceback"]
    assert isinstance(text, str)
    assert content["traceback_truncated"] is True
    assert p.TRACEBACK_LIMIT - 200 < len(text) <= p.TRACEBACK_LIMIT
    assert full.endswith(text)
    assert full[-len(text) - 1] == "\n"  # it starts at a line's start, not in the middle of one


BLOCKS: list[Any] = [
    "plain ", {"type": "text", "text": "typed "}, {"type": "output_text", "text": "responses "},
    {"text": "untyped"}, {"type": "image_url", "image_url": {"url": "data:x"}},
    {"type": "reasoning", "text": "not shown"}, {"type": "tool_use", "id": "t", "input": {}},
    {"type": "text", "text": 5},
]


def test_a_message_text_is_the_same_for_the_journal_and_the_subagent_mapper() -> None:
    from run_journal.journal.subagents import subagent_run_event

    message = AIMessage(content=BLOCKS)
    assert p.message_text(message) == "plain typed responses untyped"
    step = subagent_run_event({"type": "task_running", "task_id": "t", "message_index": 0,
                               "message": message})
    assert step is not None
    assert step["content"]["text"] == p.message_text(message)


@pytest.mark.parametrize("args", [
    {"q": "deer", "api_key": "sk-1"}, '{"password": "pw", "n": 1}', "not json password=pw", None, {},
    {"blob": "y" * (p.ARGS_PREVIEW_LIMIT + 50)},
], ids=["dict", "json-text", "free-text", "none", "empty", "long"])
def test_a_tool_call_is_previewed_alike_by_the_journal_and_the_subagent_mapper(args: Any) -> None:
    from run_journal.journal.subagents import subagent_run_event

    call = {"name": "f", "args": args, "id": "c1"}
    step = subagent_run_event({"type": "task_running", "task_id": "t", "message_index": 0,
                               "message": {"type": "ai", "content": "", "tool_calls": [call]}})
    assert step is not None
    (listed,) = step["content"]["tool_calls"]
    preview, cut = p.args_preview(args, redact_secrets)
    assert (listed["args_preview"], listed["args_truncated"]) == (preview, cut)
    assert "sk-1" not in preview
    assert "pw" not in preview or "characters of non-JSON" in preview
    assert len(preview) <= p.ARGS_PREVIEW_LIMIT


async def test_a_journaled_run_flags_what_it_cut() -> None:
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from run_journal.testing import ScriptedChatModel, capture_run, reply

    @tool
    def fail(n: int) -> str:
        """Fails with a long message."""
        raise ValueError("x" * 5000)

    model = ScriptedChatModel([reply(tool_calls=[("fail", {"n": 1}, "c1")]), reply("ok")])

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([fail], handle_tool_errors=True))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    question = "q" * 600
    async with capture_run(thread_id="cut") as run:
        await builder.compile().ainvoke({"messages": [HumanMessage(question)]}, config=run.config)
    events = {e.event_type: e.content for e in run.events}
    start, outcome = events["run.start"], events["tool.outcome"]
    assert isinstance(start, dict)
    assert isinstance(outcome, dict)
    assert start["input_preview"] == question[: p.INPUT_PREVIEW_LIMIT]
    assert start["input_preview_truncated"] is True
    assert outcome["error_truncated"] is True
    assert outcome["error"] == ("ValueError: " + "x" * 5000)[: p.ERROR_TEXT_LIMIT]


def test_contract_values_are_spelled_once_in_the_catalog() -> None:
    from pathlib import Path

    from run_journal import catalog, otel

    package = Path(catalog.__file__).parent
    spelled = sorted(path.relative_to(package).as_posix() for path in package.rglob("*.py")
                     if '"lead_agent"' in path.read_text("utf-8"))
    assert spelled == ["catalog.py"]
    assert otel._TERMINAL is catalog.TERMINAL_RUN_EVENTS
    assert p.LEAD_AGENT is catalog.LEAD_AGENT


async def test_every_producer_helper_takes_the_one_journal_interface() -> None:
    from run_journal import open_store, workspace
    from run_journal import subagents as old_path
    from run_journal.journal import RunJournal
    from run_journal.journal.producer import ProducerJournal

    assert workspace.EventJournal is ProducerJournal
    assert old_path.SubagentJournal is ProducerJournal
    async with open_store("memory://") as store, RunJournal(store) as journal:
        assert isinstance(journal, ProducerJournal)
    assert not isinstance(object(), ProducerJournal)
