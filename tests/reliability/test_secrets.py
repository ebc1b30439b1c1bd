"""Secrets never reach a store: a value planted under a credential-named key anywhere a run carries
user or model data (messages and their content blocks, tool-call arguments as objects and as JSON
text, streamed tool-call chunks, function calls, config metadata with models and dataclasses nested
deeper than 32 levels, graph inputs, interrupts and resume values, middleware changes, subagent
steps) is found in no stored event, no run row and no ``run-journal export`` output.

The property test plants it at random depths and places under random spellings of the key; the
example test plants it everywhere at once and runs on every backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import uuid
from typing import Annotated, Any, TypedDict

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, AnyMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from run_journal import RunEventStore, RunJournal, open_store
from run_journal.cli import main as cli

pytestmark = pytest.mark.reliability

SECRET = "sk-PLANTED-9f27c1e4"
KEY_SPELLINGS = ["api_key", "apiKey", "X-Api-Key", "Authorization", "password", "client_secret",
                 "access_token", "refreshToken", "private_key", "credentials", "sessionId", "db_password"]


class Settings(pydantic.BaseModel):
    endpoint: str = "https://example.invalid"
    api_key: str = SECRET


@dataclasses.dataclass
class Login:
    user: str = "ada"
    password: str = SECRET


def nest(value: Any, path: list[int | str]) -> Any:
    """``value`` wrapped in containers along ``path`` (an int: a list, a string: a dict key)."""
    for step in reversed(path):
        value = [value, "filler"] if isinstance(step, int) else {step: value, "note": "filler"}
    return value


def plant(key: str, path: list[int | str]) -> Any:
    return nest({key: SECRET, "kept": "visible"}, path)


paths = st.lists(st.one_of(st.integers(0, 1), st.sampled_from(["a", "data", "inner", "items"])),
                 max_size=45)
plants = st.builds(plant, st.sampled_from(KEY_SPELLINGS), paths)


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    extra: Any


def model_reply(planted: Any) -> AIMessageChunk:
    """A streamed model's reply carrying the plant in every shape tool calls take."""
    args = {"query": planted}
    text = json.dumps(args)
    return AIMessageChunk(
        content=[{"type": "text", "text": "calling"},
                 {"type": "tool_use", "id": "c1", "name": "lookup", "input": args},
                 {"type": "tool_call", "id": "c2", "name": "lookup", "args": args}],
        tool_call_chunks=[
            {"name": "lookup", "args": text, "id": "c3", "index": 0, "type": "tool_call_chunk"},
        ],
        additional_kwargs={"function_call": {"name": "lookup", "arguments": text}, "extra": planted},
        id=f"ai-{uuid.uuid4().hex}",
    )


def graph_with(planted: Any) -> Any:
    model = GenericFakeChatModel(messages=iter([model_reply(planted)]))

    async def agent(state: State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    def ask(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "go on?", "context": planted})
        return {"extra": answer}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("ask", ask)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "ask")
    return builder.compile(checkpointer=InMemorySaver())


async def journal_everything(store: RunEventStore, thread: str, planted: Any) -> list[str]:
    graph = graph_with(planted)
    config: dict[str, Any] = {"configurable": {"thread_id": thread},
                              "metadata": {"tenant": planted, "settings": Settings(), "login": Login(),
                                           "deep": plant("api_key", ["a"] * 40)}}
    human = HumanMessage(content=[{"type": "text", "text": "hi"}, {"type": "data", "payload": planted}],
                         additional_kwargs={"meta": planted})
    first = RunJournal(store, thread_id=thread)
    first.record_middleware("guardrail", name="pii", hook="before_model", action="replace",
                            changes={"messages": [HumanMessage("x", additional_kwargs={"k": planted})]})
    await graph.ainvoke({"messages": [human], "extra": planted}, {**config, "callbacks": [first]})
    first.record_subagent_chunk({
        "type": "task_running", "task_id": "task-1", "message_index": 0,
        "message": AIMessage("step", tool_calls=[{"name": "lookup", "args": {"q": planted}, "id": "c9"}]),
    })
    await first.aclose()
    second = RunJournal(store, thread_id=thread)
    await graph.ainvoke(Command(resume=planted), {**config, "callbacks": [second]})
    await second.aclose()
    return [first.run_id, second.run_id]


async def stored_text(store: RunEventStore, thread: str, run_ids: list[str]) -> str:
    events = await store.list_events(thread, limit=10_000)
    rows = [await store.get_run(run_id) for run_id in run_ids]
    assert len(events) >= 8
    assert all(row is not None for row in rows)
    return "\n".join([*(json.dumps(e.to_dict()) for e in events),
                      *(json.dumps(row.to_dict(), default=str) for row in rows if row is not None)])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(planted=plants)
async def test_a_planted_secret_reaches_no_event_and_no_row(planted: Any) -> None:
    async with open_store("memory://") as store:
        thread = f"secrets-{uuid.uuid4().hex[:8]}"
        run_ids = await journal_everything(store, thread, planted)
        text = await stored_text(store, thread, run_ids)
    assert SECRET not in text
    assert "visible" in text  # the plant's harmless sibling is kept: the pass redacts, it does not drop


async def test_secrets_planted_everywhere_reach_no_store_and_no_export(store_url: str) -> None:
    planted = plant("api_key", ["a", 0, "data"])
    async with open_store(store_url) as store:
        run_ids = await journal_everything(store, "secrets-everywhere", planted)
        text = await stored_text(store, "secrets-everywhere", run_ids)
    assert SECRET not in text
    if store_url.startswith("memory"):
        return  # an export opens the URL again: a memory store starts empty
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # the command line runs its own event loop
        assert await asyncio.to_thread(cli, [store_url, "export", "secrets-everywhere"]) == 0
    assert "run.start" in out.getvalue()
    assert SECRET not in out.getvalue()
