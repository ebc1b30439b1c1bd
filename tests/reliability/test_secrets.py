"""Secrets never reach a store: a value planted under a credential-named key anywhere a run carries
user or model data (messages and their content blocks, tool-call arguments as objects and as JSON
text, streamed tool-call chunks, function calls, config metadata with models and dataclasses nested
deeper than 32 levels, graph inputs, interrupts and resume values, middleware changes, subagent
steps), and written out as ``key=value``, ``'key': 'value'`` or ``Authorization: Bearer ...`` where
programs write credentials in free text (what a tool returned, as a dict, as JSON text, as content
blocks and as an artifact; exception messages of a tool, a model and a graph node; the traceback,
whose source lines hold the secret; a subagent task's dict-valued error and result; a model call's
request: its messages, a tool's JSON schema and description, the invocation parameters), is found in
no stored event, no stored body, no run row, no ``run-journal export`` output and no HTTP API
response.

The property test plants it at random depths and places under random spellings of the key and
random ways of writing it out; the example test plants it everywhere at once and runs on every
backend; a third run with redaction off shows that every planted place is really journaled.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatResult
from langchain_core.tools import StructuredTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt

from run_journal import RunEventStore, RunJournal, open_store
from run_journal.cli import main as cli
from run_journal.testing.capture import ScriptedChatModel, reply

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

WRITTEN_OUT = ["{key}={secret}", "{key}: {secret}", "'{key}': '{secret}'", '"{key}": "{secret}"',
               '{key} = "{secret}"', "Authorization: Bearer {secret}", "Authorization: Basic {secret}",
               "curl -H 'Authorization: Bearer {secret}' https://api.example.invalid"]
"""How programs write a credential out in free text (an exception message, a log line in a result)."""


def written_out(key: str, form: str) -> str:
    return f"login refused for ada ({form.format(key=key, secret=SECRET)}), retry later"


texts = st.builds(written_out, st.sampled_from(KEY_SPELLINGS), st.sampled_from(WRITTEN_OUT))


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


def tool_graph(planted: Any, text: str) -> Any:
    """A tool loop whose tools return the plant in every shape a result takes, and one that fails."""

    @tool
    def structured(q: str) -> dict[str, Any]:
        """Returns a dict (the tool node sends it to the model as JSON text)."""
        return {"data": planted, "q": q}

    @tool
    def as_json_text(q: str) -> str:
        """Returns JSON text."""
        return json.dumps({"items": [planted]})

    @tool
    def as_blocks(q: str) -> list[dict[str, Any]]:
        """Returns content blocks."""
        return [{"type": "text", "text": json.dumps(planted)}, {"type": "text", "text": text}]

    @tool(response_format="content_and_artifact")
    def with_artifact(q: str) -> tuple[str, Any]:
        """Returns a summary and an artifact."""
        return "see the artifact", planted

    @tool
    def broken(q: str) -> str:
        """Fails with the credential in its message."""
        raise ValueError(text)

    names = ["structured", "as_json_text", "as_blocks", "with_artifact", "broken"]
    calls = [{"name": name, "args": {"q": "x"}, "id": f"t{i}", "type": "tool_call"}
             for i, name in enumerate(names)]
    model = GenericFakeChatModel(messages=iter([AIMessage("", tool_calls=calls), AIMessage("done")]))

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([structured, as_json_text, as_blocks, with_artifact, broken],
                                       handle_tool_errors=True))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


class RefusingModel(BaseChatModel):
    """A chat model whose every call fails with ``refusal`` as the exception message."""

    refusal: str

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        raise PermissionError(self.refusal)

    @property
    def _llm_type(self) -> str:
        return "refusing"


class Credentials(pydantic.BaseModel):
    """A tool's arguments whose schema carries a credential as a default."""

    query: str
    api_key: str = pydantic.Field(default=SECRET, description="the key to use")


def requests_graph(planted: Any) -> Any:
    """A model call whose request carries the plant: in a message (JSON text and a content block),
    in a tool's JSON schema (a default under a credential-named property) and description (JSON
    text), and in the invocation parameters (headers bound to the model)."""

    def search(query: str, api_key: str = "") -> str:
        return "found"

    tools = [StructuredTool.from_function(search, args_schema=Credentials, description="search the web"),
             StructuredTool.from_function(search, name="described", args_schema=Credentials,
                                          description=json.dumps(planted))]
    model = ScriptedChatModel([reply("done")]).bind_tools(tools).bind(
        extra_headers={"Authorization": f"Bearer {SECRET}"}, metadata_payload=planted)

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    return builder.compile()


def login(model: BaseChatModel, password: str) -> Any:
    return model.invoke([HumanMessage(f"log in as ada with {len(password)} characters")])


def failing_graph(text: str) -> Any:
    """One node whose model call fails; the traceback shows the line below, secret included."""
    model = RefusingModel(refusal=text)

    def call(state: MessagesState) -> dict[str, Any]:
        login(model, password="sk-PLANTED-9f27c1e4")  # the traceback prints this line
        return {}

    assert SECRET in "sk-PLANTED-9f27c1e4"
    builder = StateGraph(MessagesState)
    builder.add_node("call", call)
    builder.add_edge(START, "call")
    return builder.compile()


async def journal_everything(store: RunEventStore, thread: str, planted: Any, text: str,
                             redact: bool = True) -> list[str]:
    graph = graph_with(planted)
    config: dict[str, Any] = {"configurable": {"thread_id": thread},
                              "metadata": {"tenant": planted, "settings": Settings(), "login": Login(),
                                           "deep": plant("api_key", ["a"] * 40)}}
    human = HumanMessage(content=[{"type": "text", "text": "hi"}, {"type": "data", "payload": planted}],
                         additional_kwargs={"meta": planted})
    first = RunJournal(store, thread_id=thread, redact=redact)
    first.record_middleware("guardrail", name="pii", hook="before_model", action="replace",
                            changes={"messages": [HumanMessage("x", additional_kwargs={"k": planted})]})
    await graph.ainvoke({"messages": [human], "extra": planted}, {**config, "callbacks": [first]})
    first.record_subagent_chunk({
        "type": "task_running", "task_id": "task-1", "message_index": 0,
        "message": AIMessage("step", tool_calls=[{"name": "lookup", "args": {"q": planted}, "id": "c9"}]),
    })
    first.record_subagent_chunk({
        "type": "task_running", "task_id": "task-1", "message_index": 1,
        "message": ToolMessage(json.dumps(planted), tool_call_id="c9", name="lookup"),
    })
    first.record_subagent_chunk({
        "type": "task_running", "task_id": "task-1", "message_index": 2,
        "message": ToolMessage(text, tool_call_id="c9", name="lookup"),
    })
    first.record_subagent_chunk({"type": "task_failed", "task_id": "task-1", "error": planted,
                                 "result": json.dumps(planted)})
    first.record_subagent_chunk({"type": "task_failed", "task_id": "task-2", "error": PermissionError(text)})
    await first.aclose()
    second = RunJournal(store, thread_id=thread, redact=redact)
    await graph.ainvoke(Command(resume=planted), {**config, "callbacks": [second]})
    await second.aclose()
    third = RunJournal(store, thread_id=thread, redact=redact)
    await tool_graph(planted, text).ainvoke({"messages": [("user", "use the tools")]},
                                            {"callbacks": [third]})
    await third.aclose()
    fourth = RunJournal(store, thread_id=thread, redact=redact)
    with pytest.raises(PermissionError):
        await failing_graph(text).ainvoke({"messages": [("user", "log in")]}, {"callbacks": [fourth]})
    await fourth.aclose()
    fifth = RunJournal(store, thread_id=thread, redact=redact)
    asked = HumanMessage(content=[{"type": "text", "text": json.dumps(planted)},
                                  {"type": "data", "payload": planted}])
    await requests_graph(planted).ainvoke({"messages": [asked]}, {"callbacks": [fifth]})
    await fifth.aclose()
    return [first.run_id, second.run_id, third.run_id, fourth.run_id, fifth.run_id]


async def stored_bodies(store: RunEventStore, thread: str) -> list[str]:
    """The text of every body the thread's requests stored."""
    texts: list[str] = []
    after = None
    while page := await store.list_bodies(thread, after=after):
        texts += [body.data.decode("utf-8") for body in page]
        after = page[-1].digest
    return texts


async def stored_text(store: RunEventStore, thread: str, run_ids: list[str]) -> str:
    events = await store.list_events(thread, limit=10_000)
    rows = [await store.get_run(run_id) for run_id in run_ids]
    assert len(events) >= 8
    assert all(row is not None for row in rows)
    bodies = await stored_bodies(store, thread)
    assert any('"described"' in body for body in bodies)  # the requests' bodies are there to search
    return "\n".join([*(json.dumps(e.to_dict()) for e in events),
                      *(json.dumps(row.to_dict(), default=str) for row in rows if row is not None), *bodies])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(planted=plants, text=texts)
async def test_a_planted_secret_reaches_no_event_and_no_row(planted: Any, text: str) -> None:
    async with open_store("memory://") as store:
        thread = f"secrets-{uuid.uuid4().hex[:8]}"
        run_ids = await journal_everything(store, thread, planted, text)
        stored = await stored_text(store, thread, run_ids)
    assert SECRET not in stored
    assert "visible" in stored  # the plant's harmless sibling is kept: the pass redacts, it does not drop
    assert "login refused for ada" in stored  # and so is the rest of the text around a written-out one


async def http_text(store: RunEventStore, thread: str, run_ids: list[str]) -> str:
    """Every HTTP API response about the thread and its runs."""
    httpx = pytest.importorskip("httpx", reason="the HTTP check needs httpx (dev extra)")
    pytest.importorskip("fastapi", reason="the HTTP API needs the serve extra")
    from run_journal.http import create_app

    base = f"/api/threads/{thread}"
    paths = ["/api/threads", f"{base}/runs", f"{base}/messages/page?limit=1000", f"{base}/token-usage"]
    for run in run_ids:
        paths += [f"{base}/runs/{run}", f"{base}/runs/{run}/messages?limit=1000",
                  f"{base}/runs/{run}/events?limit=1000", f"{base}/runs/{run}/workspace-changes",
                  f"{base}/runs/{run}/calls"]
    transport = httpx.ASGITransport(app=create_app(store))
    bodies = []
    async with httpx.AsyncClient(transport=transport, base_url="http://journal") as client:
        for path in paths:
            response = await client.get(path)
            assert response.status_code in (200, 404), (path, response.text)
            bodies.append(response.text)
    return "\n".join(bodies)


async def test_secrets_planted_everywhere_reach_no_store_no_export_and_no_http_answer(store_url: str) -> None:
    planted = plant("api_key", ["a", 0, "data"])
    text = " ".join([written_out("password", "{key}={secret}"),
                     written_out("x", "Authorization: Bearer {secret}")])
    async with open_store(store_url) as store:
        run_ids = await journal_everything(store, "secrets-everywhere", planted, text)
        stored = await stored_text(store, "secrets-everywhere", run_ids)
        answered = await http_text(store, "secrets-everywhere", run_ids)
    assert SECRET not in stored
    assert "run.error" in answered  # the API really served the runs
    assert "llm.tool.result" in answered
    assert SECRET not in answered
    if store_url.startswith("memory"):
        return  # an export opens the URL again: a memory store starts empty
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # the command line runs its own event loop
        assert await asyncio.to_thread(cli, [store_url, "export", "secrets-everywhere"]) == 0
    assert "run.start" in out.getvalue()
    assert SECRET not in out.getvalue()


def places(events: list[Any]) -> Iterator[tuple[str, str]]:
    """(event type, the first field holding the secret) of every event that holds it."""
    for event in events:
        for field, value in (("content", event.content), ("metadata", event.metadata)):
            if SECRET in json.dumps(value):
                yield event.event_type, field


async def test_every_planted_place_is_journaled_when_redaction_is_off() -> None:
    """What the two tests above find nothing of is really written: turned off, the pass lets the
    plant through in each kind of event, the run row's error included."""
    planted = plant("api_key", ["a"])
    text = written_out("password", "{key}={secret}")
    async with open_store("memory://") as store:
        run_ids = await journal_everything(store, "in-clear", planted, text, redact=False)
        events = await store.list_events("in-clear", limit=10_000)
        failed = await store.get_run(run_ids[-2])
        bodies = await stored_bodies(store, "in-clear")
    found = set(places(events))
    assert sum(SECRET in body for body in bodies) >= 3  # the message, a tool list, the parameters
    for expected in [("llm.tool.result", "content"), ("tool.outcome", "content"), ("llm.error", "content"),
                     ("run.error", "content"), ("subagent.step", "content"), ("subagent.end", "content"),
                     ("tool.call", "content"), ("run.start", "metadata"), ("run.interrupt", "content"),
                     ("middleware:guardrail", "content")]:
        assert expected in found, expected
    (error,) = [e.content for e in events if e.event_type == "run.error"]
    assert isinstance(error, dict)
    tracebacks = [error["traceback"]]
    assert 'password="sk-PLANTED-9f27c1e4"' in tracebacks[0]  # the source line, as printed
    assert failed is not None
    assert failed.error is not None
    assert SECRET in failed.error


# -- the rules of the default redactor, one by one ------------------------------------------------

R = "[redacted]"


@pytest.mark.parametrize(("value", "expected"), [
    # free text a program wrote: values of credential-named assignments, bearer tokens
    ({"error": "login refused: password=hunter2, retry"}, {"error": f"login refused: password={R}, retry"}),
    ({"message": "connect(dsn='db', password=\"hunter2\")"},
     {"message": f"connect(dsn='db', password=\"{R}\")"}),
    ({"traceback": "Authorization: Bearer abc.def-123"}, {"traceback": f"Authorization: Bearer {R}"}),
    ({"error": "{'Authorization': 'Basic dXNlcjpwYXNz'}"}, {"error": f"{{'Authorization': '{R}'}}"}),
    ({"stderr": "curl -H 'X-Api-Key: sk-123' https://x"}, {"stderr": f"curl -H 'X-Api-Key: {R}' https://x"}),
    ({"result": "?api_key=abc&page=2 clientSecret: xyz"},
     {"result": f"?api_key={R}&page=2 clientSecret: {R}"}),
    ({"error": '"access_token": "sk-cut-sh'}, {"error": f'"access_token": "{R}'}),  # its quote cut off
    ({"error": "refused bearer sk-PLANTED-9f27c1e4"}, {"error": f"refused bearer {R}"}),
    ({"error": "Authorization: token ghp_abc"}, {"error": f"Authorization: token {R}"}),
    ({"error": "max_tokens=100 monkey=banana input_tokens: 5"},
     {"error": "max_tokens=100 monkey=banana input_tokens: 5"}),  # not credentials
    # what a tool returned: its message's text, a subagent's tool step
    ({"type": "tool", "content": "export PASSWORD=s3cret"},
     {"type": "tool", "content": f"export PASSWORD={R}"}),
    ({"kind": "tool", "text": "db.password = s3cret;"}, {"kind": "tool", "text": f"db.password = {R};"}),
    # JSON text anywhere is read as the value it encodes; kept as written when nothing is hidden
    ({"type": "human", "content": '{"api_key": "sk-1", "n": 2}'},
     {"type": "human", "content": f'{{"api_key":"{R}","n":2}}'}),
    ({"note": ' [{"refresh_token": "x"}]'}, {"note": f'[{{"refresh_token":"{R}"}}]'}),
    ({"note": '{"n": 2,  "spaced": true}'}, {"note": '{"n": 2,  "spaced": true}'}),
    # prose people and models write is kept as written
    ({"type": "ai", "content": "token: a unit of text; password=hunter2"},
     {"type": "ai", "content": "token: a unit of text; password=hunter2"}),
    # odd shapes never break the pass
    ({"type": {"not": "hashable"}, "error": "pwd=1"}, {"type": {"not": "hashable"}, "error": f"pwd={R}"}),
    ({"error": "[" * 3000 + "]" * 3000}, {"error": "[" * 3000 + "]" * 3000}),
    ({"error": "İ password=x ẞ"}, {"error": f"İ password={R} ẞ"}),  # lower case of another length
])
def test_the_default_redactor_hides_what_it_must_and_keeps_the_rest(value: Any, expected: Any) -> None:
    from run_journal.normalization import encode
    from run_journal.redact import redact_secrets, redacted_text

    assert redact_secrets(value) == expected
    assert redact_secrets(expected) == expected  # a second pass changes nothing
    assert json.loads(redacted_text(encode(value), redact_secrets)) == expected


FRAGMENTS = ["password", "Authorization", "Bearer ", "api_key", "token", "TOKEN", "=", ": ", "'", '"', "{",
             "}", "[", "]", ",", " ", "\n", "\t", "\\", "sk-123456789", "monkey", "İ", "x"]
fragment_texts = st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join)
redaction_inputs = st.recursive(
    st.one_of(fragment_texts, st.integers(), st.none()),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.one_of(st.sampled_from(["error", "message", "content", "type", "kind", "text",
                                                   "args", "note", "traceback"]), fragment_texts),
                        children, max_size=3),
        st.builds(lambda kind, inner: {"type": kind, "content": inner},
                  st.sampled_from(["tool", "ai"]), children),
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(value=redaction_inputs)
def test_the_quick_check_never_skips_a_text_the_walk_would_change(value: Any) -> None:
    """The pass skips the walk for text without any hint: it must give exactly what the walk gives."""
    from run_journal.normalization import encode, loads
    from run_journal.redact import redact_secrets, redacted_text

    text = encode(value)
    assert redacted_text(text, redact_secrets) == encode(redact_secrets(loads(text)))
