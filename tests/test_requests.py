"""Model requests, stored once: each call's ``llm.request`` resolves, through ``model_calls``, to exactly
what the model received (messages, tools, parameters), on real agents and every backend; storage
grows with distinct content; a failing call keeps its request; ``record_requests=False`` writes
none; ``verify`` reports a broken chain; ``calls`` and the HTTP API show them.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sys
from collections import Counter
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from run_journal import RunEventStore, RunJournal, model_calls
from run_journal.bodies import Body
from run_journal.calls import BodyResolver, ModelCall, request_problems
from run_journal.cli import main as cli
from run_journal.envelope import NewEvent
from run_journal.journal.payloads import message_payload
from run_journal.redact import redact_secrets
from run_journal.stores.base import RunEventStore as StoreContract
from run_journal.testing.capture import ScriptedChatModel, reply


def stores_bodies(store: RunEventStore) -> bool:
    return type(store)._put_bodies is not StoreContract._put_bodies  # type: ignore[attr-defined]  # the hook


@pytest.fixture
async def bodies_store(store: RunEventStore) -> RunEventStore:
    if not stores_bodies(store):
        pytest.skip(f"{type(store).__name__} does not store bodies yet")
    return store


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def lookup(city: str, units: str = "metric") -> str:
    """Look up the weather of a city."""
    return f"sunny in {city}"


def dumped(message: BaseMessage) -> dict[str, Any]:
    value = message_payload(message, redact_secrets).value
    assert isinstance(value, dict)
    return value


def assert_sent(calls: list[ModelCall], model: ScriptedChatModel) -> None:
    """The calls resolve to exactly what ``model`` received, call by call."""
    assert len(calls) == len(model.received)
    for call, received, tools in zip(calls, model.received, model.tools_offered, strict=True):
        assert call.request is not None
        assert call.request.complete, call.request.missing
        assert call.request.messages == [dumped(message) for message in received]
        assert call.request.message_count == len(received)
        assert call.request.tools == (tools or None)


async def test_a_tool_agent_across_runs_of_a_thread(bodies_store: RunEventStore) -> None:
    store = bodies_store
    model = ScriptedChatModel([reply(tool_calls=[("add", {"a": 1, "b": 2}, "c1")]), reply("it is 3"),
                               reply(tool_calls=[("lookup", {"city": "Paris"}, "c2")]), reply("sunny")],
                              temperature=0.25)
    agent = create_agent(model, [add, lookup], system_prompt="You add and look things up.",
                         checkpointer=InMemorySaver())
    run_ids = []
    for question in ("what is 1+2?", "weather in Paris?"):
        journal = RunJournal(store, thread_id="requests")
        await agent.ainvoke({"messages": [HumanMessage(question)]},
                            {"callbacks": [journal], "configurable": {"thread_id": "requests"}})
        await journal.aclose()
        run_ids.append(journal.run_id)
    first, second = [await model_calls(store, "requests", run_id) for run_id in run_ids]
    assert_sent([*first, *second], model)
    assert [call.index for call in first] == [0, 1]
    assert {call.caller for call in [*first, *second]} == {"lead_agent"}
    assert second[-1].request is not None
    assert second[-1].request.message_count == 8  # system, and both turns' human, ai, tool, ai, ...
    assert second[-1].request.system_prompt == "You add and look things up."
    assert first[0].request is not None
    assert [tool["function"]["name"] for tool in first[0].request.tools or []] == ["add", "lookup"]
    assert first[0].request.params["tool_choice"] is None  # create_agent's own binding
    assert first[0].reply is not None
    assert first[0].reply["tool_calls"][0]["name"] == "add"
    assert second[-1].reply is not None
    assert second[-1].reply["content"] == "sunny"
    assert second[-1].usage is not None
    assert second[-1].usage["total_tokens"] == 52
    assert all(call.request_seq is not None and call.reply_seq is not None
               and call.request_seq < call.reply_seq for call in [*first, *second])
    # storage grows with distinct content: every message once, one link per position, one tool list
    bodies = await store.list_bodies("requests")
    distinct_messages = {json.dumps(dumped(m), sort_keys=True) for call in model.received for m in call}
    assert len(bodies) == 2 * len(distinct_messages) + 1 + 1  # messages + links, tools, params
    assert await request_problems(store, "requests") == []


async def test_a_deep_agent_with_a_subagent(bodies_store: RunEventStore) -> None:
    from deepagents import create_deep_agent

    store = bodies_store
    lead = ScriptedChatModel([
        reply(tool_calls=[("task", {"description": "find 1+2", "subagent_type": "researcher"}, "t1")]),
        reply("the researcher says 3")])
    researcher = ScriptedChatModel([reply(tool_calls=[("add", {"a": 1, "b": 2}, "s1")]), reply("it is 3")])
    agent = create_deep_agent(model=lead, tools=[add], subagents=[
        {"name": "researcher", "description": "the researcher", "system_prompt": "You are the researcher.",
         "tools": [add], "model": researcher}])
    journal = RunJournal(store, thread_id="deep-requests")
    await agent.ainvoke({"messages": [HumanMessage("what is 1+2")]}, {"callbacks": [journal]})
    await journal.aclose()
    calls = await model_calls(store, "deep-requests", journal.run_id)
    assert [call.caller for call in calls] == ["lead_agent", "subagent:researcher", "subagent:researcher",
                                               "lead_agent"]
    assert_sent([call for call in calls if call.caller == "lead_agent"], lead)
    assert_sent([call for call in calls if call.caller == "subagent:researcher"], researcher)
    sub = calls[1].request
    assert sub is not None
    assert sub.system_prompt is not None
    assert sub.system_prompt.startswith("You are the researcher.")
    assert "task" in {tool["function"]["name"] for tool in calls[0].request.tools or []}  # type: ignore[union-attr]


async def test_a_middleware_model_call_and_a_failing_call(bodies_store: RunEventStore) -> None:
    store = bodies_store
    summarizer = ScriptedChatModel([reply("SUMMARY of the earlier talk")] * 3)
    model = ScriptedChatModel([reply(tool_calls=[("add", {"a": 1, "b": 2}, "c1")]), reply("it is 3")])
    agent = create_agent(model, [add], middleware=[
        SummarizationMiddleware(model=summarizer, trigger=("messages", 4), keep=("messages", 2))])
    journal = RunJournal(store, thread_id="summarized-requests")
    history = [HumanMessage("hi"), AIMessage("hello"), HumanMessage("how are you"), AIMessage("fine"),
               HumanMessage("what is 1+2")]
    await agent.ainvoke({"messages": history}, {"callbacks": [journal]})
    await journal.aclose()
    calls = await model_calls(store, "summarized-requests", journal.run_id)
    by_caller = Counter(call.caller for call in calls)
    assert set(by_caller) == {"lead_agent", "middleware:summarization"}
    assert_sent([call for call in calls if call.caller == "lead_agent"], model)
    assert_sent([call for call in calls if call.caller == "middleware:summarization"], summarizer)

    broken = ScriptedChatModel([])  # its script is empty: the call fails
    journal = RunJournal(store, thread_id="summarized-requests")
    with pytest.raises(Exception):  # noqa: B017 - the fake model's own error for an empty script
        await create_agent(broken, [add]).ainvoke({"messages": [HumanMessage("again")]},
                                                  {"callbacks": [journal]})
    await journal.aclose()
    (failed,) = await model_calls(store, "summarized-requests", journal.run_id)
    assert failed.reply is None
    assert failed.error is not None
    assert failed.request is not None
    assert failed.request.messages == [dumped(HumanMessage("again"))] or \
        [m["content"] for m in failed.request.messages] == ["again"]


async def test_record_requests_false_writes_no_request_and_no_body(store: RunEventStore) -> None:
    model = ScriptedChatModel([reply("hello")])
    journal = RunJournal(store, thread_id="no-requests", record_requests=False)
    await create_agent(model, [add]).ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
    await journal.aclose()
    events = await store.list_events("no-requests", limit=100)
    assert "llm.request" not in [event.event_type for event in events]
    (call,) = await model_calls(store, "no-requests", journal.run_id)
    assert call.request is None
    assert call.reply is not None
    assert call.reply["content"] == "hello"
    if stores_bodies(store):
        assert await store.list_bodies("no-requests") == []


async def test_a_long_history_is_stored_once_and_read_back_in_few_calls(
    bodies_store: RunEventStore,
) -> None:
    """Forty runs of a thread whose history grows by two messages each: every request resolves,
    each message body is stored once, and reading all forty takes a few store calls."""
    store = bodies_store
    script = [reply(f"answer {n}") for n in range(40)]
    model = ScriptedChatModel(script)
    agent = create_agent(model, [], checkpointer=InMemorySaver())
    for n in range(40):
        journal = RunJournal(store, thread_id="long")
        await agent.ainvoke({"messages": [HumanMessage(f"question {n}")]},
                            {"callbacks": [journal], "configurable": {"thread_id": "long"}})
        await journal.aclose()
    (last,) = await model_calls(store, "long", journal.run_id)
    assert last.request is not None
    assert last.request.message_count == 79
    assert last.request.messages == [dumped(message) for message in model.received[-1]]
    bodies = await store.list_bodies("long")
    assert len(bodies) == 2 * 79 + 1  # 79 messages (the last answer is in no request), 79 links, params
    requests = await store.list_events("long", event_types=["llm.request"], limit=100)
    resolver = BodyResolver(store, "long")
    resolved = await resolver.requests(requests)
    assert [request.message_count for request in resolved.values()] == list(range(1, 80, 2))
    assert all(request.complete for request in resolved.values())
    assert resolver.reads <= 3  # the heads, then one listing of the thread's bodies
    assert await request_problems(store, "long") == []


async def test_verify_reports_a_missing_link_and_a_missing_message(bodies_store: RunEventStore,
                                                                   store_url: str) -> None:
    store = bodies_store
    message = Body.of("broken", {"type": "human", "content": "hi"})
    orphan = "0" * 64
    link = Body.of("broken", {"prev": orphan, "message": message.digest})
    lost = Body.of("broken", {"prev": None, "message": "1" * 64})
    params = Body.of("broken", {})

    def request(head: str, count: int) -> NewEvent:
        return NewEvent("broken", "r1", "llm.request", "trace",
                        {"messages_sha256": head, "message_count": count, "tools_sha256": None,
                         "params_sha256": params.digest},
                        {"caller": "lead_agent", "llm_call_index": 0, "llm_run_id": "x",
                         "bodies": [head, params.digest]})

    await store.put_batch([request(link.digest, 2), request(lost.digest, 1)],
                          bodies=[message, link, lost, params])
    problems = await request_problems(store, "broken")
    assert [(seq, orphan in text) for seq, text in problems] == [(1, True), (2, False)]
    assert "1" * 64 in problems[1][1]
    if store_url.startswith("memory"):
        return  # the command line opens the URL again: a memory store starts empty
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert await asyncio.to_thread(cli, [store_url, "verify", "broken"]) == 1
    assert f"thread broken seq 1: llm.request body {orphan} is missing" in out.getvalue()


async def test_the_calls_command_prints_what_the_model_saw(tmp_path: Any) -> None:
    from run_journal import open_store

    url = f"sqlite:///{tmp_path / 'calls.db'}"
    async with open_store(url) as store:
        if not stores_bodies(store):
            pytest.skip("SQLite does not store bodies yet")
    model = ScriptedChatModel([reply(tool_calls=[("add", {"a": 1, "b": 2}, "c1")]), reply("it is 3")])
    journal = RunJournal(url, thread_id="shown")
    async with journal:
        await create_agent(model, [add], system_prompt="You add.").ainvoke(
            {"messages": [HumanMessage("what is 1+2?")]}, {"callbacks": [journal]})
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert await asyncio.to_thread(cli, [url, "calls", journal.run_id[:8], "--call", "1"]) == 0
    text = out.getvalue()
    assert text.startswith("call 1  lead_agent  fake-gpt")
    for line in ["    messages (4):", "        [system] You add.", "        [human] what is 1+2?",
                 '            -> add({"a": 1, "b": 2}) id c1', "        [tool add] 3  (answers c1)",
                 "        add(a, b): Add two numbers.", "    reply:", "        [ai] it is 3"]:
        assert line in text.splitlines(), line
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert await asyncio.to_thread(cli, [url, "calls", journal.run_id, "--json"]) == 0
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert second["request"]["messages"][0] == {"content": "You add.", "type": "system"}
    assert first["reply"]["tool_calls"][0]["id"] == "c1"
    with contextlib.redirect_stderr(io.StringIO()) as err:
        assert await asyncio.to_thread(cli, [url, "calls", journal.run_id, "--call", "7"]) == 1
    assert "no model call 7" in err.getvalue()


PROCESS_SCRIPT = """
import asyncio, sys
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from run_journal import RunJournal
from run_journal.testing.capture import ScriptedChatModel, reply

HISTORY = [HumanMessage(f"earlier question {n}", id=f"h{n}") if n % 2 == 0 else
           AIMessage(f"earlier answer {n}", id=f"a{n}") for n in range(20)]


async def main(url: str, worker: int) -> None:
    for run in range(10):
        model = ScriptedChatModel([reply(f"answer {worker}-{run}")])
        journal = RunJournal(url, thread_id="shared", run_id=f"run-{worker}-{run}")
        async with journal:
            await create_agent(model, [], system_prompt="You answer.").ainvoke(
                {"messages": [*HISTORY, HumanMessage(f"question {worker}-{run}", id=f"q{worker}-{run}")]},
                {"callbacks": [journal]})
    print("ran")

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


async def test_a_thread_of_30_runs_by_3_processes_resolves(store_url: str, tmp_path: Any) -> None:
    if store_url.startswith("memory"):
        pytest.skip("a memory store lives in one process")
    from run_journal import open_store

    async with open_store(store_url) as store:
        if not stores_bodies(store):
            pytest.skip(f"{type(store).__name__} does not store bodies yet")
    script = tmp_path / "worker.py"
    script.write_text(PROCESS_SCRIPT, encoding="utf-8")
    workers = [await asyncio.create_subprocess_exec(
        sys.executable, str(script), store_url, str(worker), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE) for worker in range(3)]
    for worker in workers:
        out, err = await asyncio.wait_for(worker.communicate(), 180)
        assert worker.returncode == 0, err.decode()
        assert out.decode().strip() == "ran"
    async with open_store(store_url) as store:
        runs = await store.list_runs("shared")
        assert len(runs) == 30
        for row in runs:
            (call,) = await model_calls(store, "shared", row.run_id)
            assert call.request is not None
            assert call.request.complete, call.request.missing
            contents = [message["content"] for message in call.request.messages]
            worker, run = row.run_id.split("-")[1:]
            history = [f"earlier question {n}" if n % 2 == 0 else f"earlier answer {n}" for n in range(20)]
            assert contents == ["You answer.", *history, f"question {worker}-{run}"]
        assert await request_problems(store, "shared") == []
        bodies = await store.list_bodies("shared")
        # the system prompt, 20 shared messages and their 21 links once; each run's question and its
        # link; the parameters
        assert len(bodies) == 21 + 21 + 30 * 2 + 1


async def test_the_http_api_serves_a_runs_calls_to_its_user_only(bodies_store: RunEventStore) -> None:
    httpx = pytest.importorskip("httpx", reason="the HTTP check needs httpx (dev extra)")
    pytest.importorskip("fastapi", reason="the HTTP API needs the serve extra")
    from run_journal.http import create_app

    store = bodies_store
    model = ScriptedChatModel([reply(tool_calls=[("add", {"a": 1, "b": 2}, "c1")]), reply("it is 3")])
    journal = RunJournal(store, thread_id="served", user_id="alice")
    await create_agent(model, [add], system_prompt="You add.").ainvoke(
        {"messages": [HumanMessage("what is 1+2?")]}, {"callbacks": [journal]})
    await journal.aclose()
    path = f"/api/threads/served/runs/{journal.run_id}/calls"
    transport = httpx.ASGITransport(app=create_app(store, user_header="X-User"))
    async with httpx.AsyncClient(transport=transport, base_url="http://journal") as client:
        mine = await client.get(path, headers={"X-User": "alice"})
        theirs = await client.get(path, headers={"X-User": "bob"})
        nobody = await client.get(path)
    assert mine.status_code == 200, mine.text
    data = mine.json()["data"]
    assert [call["index"] for call in data] == [0, 1]
    assert data[1]["request"]["messages"] == [dumped(message) for message in model.received[1]]
    assert data[1]["request"]["tools"][0]["function"]["name"] == "add"
    assert data[1]["reply"]["content"] == "it is 3"
    assert (theirs.status_code, theirs.json()["error"]) == (404, "not_found")
    assert nobody.status_code == 401


async def test_a_process_sends_each_body_once_per_thread_and_store() -> None:
    """The second run of a thread sends only what is new (the store acknowledged the history's
    bodies); another store gets them all."""
    from run_journal.stores.memory import MemoryRunEventStore

    class Counting(MemoryRunEventStore):
        def __init__(self) -> None:
            super().__init__()
            self.sent: list[int] = []

        async def _append(self, batch: Any, bodies: Any = ()) -> Any:
            self.sent.append(len(bodies))
            return await super()._append(batch, bodies)

        async def _put_run_close(self, batch: Any, terminal: Any, types: Any, row: Any,
                                 bodies: Any = ()) -> Any:
            self.sent.append(len(bodies))
            return await super()._put_run_close(batch, terminal, types, row, bodies)

    model = ScriptedChatModel([reply(f"answer {n}") for n in range(3)])
    agent = create_agent(model, [], system_prompt="You answer.", checkpointer=InMemorySaver())
    stores = [Counting(), Counting()]
    for store in (stores[0], stores[0], stores[1]):
        journal = RunJournal(store, thread_id="once")
        await agent.ainvoke({"messages": [HumanMessage("again")]},
                            {"callbacks": [journal], "configurable": {"thread_id": "once"}})
        await journal.aclose()
    first, second = stores
    # run 1: system, human (+2 links), params; run 2: its answer's predecessor, the new human (+2 links)
    assert sum(first.sent) == 5 + 4
    # a new store: the whole history of the third call, and the parameters
    assert sum(second.sent) == 2 * len(model.received[-1]) + 1
    for store in stores:
        assert await request_problems(store, "once") == []


async def test_a_text_completion_model_records_its_prompt(bodies_store: RunEventStore) -> None:
    from langchain_core.language_models.fake import FakeListLLM
    from langgraph.graph import START, MessagesState, StateGraph

    llm = FakeListLLM(responses=["a haiku"])

    async def write(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(await llm.ainvoke("write a haiku about rain"))]}

    builder = StateGraph(MessagesState)
    builder.add_node("write", write)
    builder.add_edge(START, "write")
    journal = RunJournal(bodies_store, thread_id="completion")
    await builder.compile().ainvoke({"messages": [HumanMessage("go")]}, {"callbacks": [journal]})
    await journal.aclose()
    (call,) = await model_calls(bodies_store, "completion", journal.run_id)
    assert call.request is not None
    assert call.request.messages == [{"content": "write a haiku about rain", "type": "human"}]
    assert call.request.params["_type"] == "fake-list"
    assert call.reply is not None
    assert call.reply["content"] == "a haiku"


async def test_a_written_request_event_lets_go_of_its_bodies() -> None:
    """A store that keeps the event objects it was handed (``memory://``) keeps only the events:
    not the bodies they brought, nor the thread's body cache (which holds the messages)."""
    from run_journal.stores.memory import MemoryRunEventStore

    class Keeping(MemoryRunEventStore):
        def __init__(self) -> None:
            super().__init__()
            self.handed: list[NewEvent] = []

        async def _put_run_close(self, batch: Any, terminal: Any, types: Any, row: Any,
                                 bodies: Any = ()) -> Any:
            self.handed += batch
            return await super()._put_run_close(batch, terminal, types, row, bodies)

    store = Keeping()
    journal = RunJournal(store, thread_id="kept")
    agent = create_agent(ScriptedChatModel([reply("hello")]), [], system_prompt="You answer.")
    await agent.ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
    await journal.aclose()
    requests = [event for event in store.handed if event.event_type == "llm.request"]
    assert requests
    assert all(getattr(event, "bodies", ()) == () and getattr(event, "stored", None) is None
               for event in requests)
    assert await store.list_bodies("kept")  # what they carried was written


async def test_the_digest_caches_keep_a_bounded_amount_of_messages_alive(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The process remembers messages (to recognise a checkpointer's copy without hashing it again)
    only up to ``CACHED_BYTES`` of their bodies: old threads are forgotten, and their requests still
    resolve from the store."""
    from run_journal.journal import requests
    from run_journal.stores.memory import MemoryRunEventStore

    limit = 3_000
    monkeypatch.setattr(requests, "CACHED_BYTES", limit)
    store = MemoryRunEventStore()
    agent = create_agent(ScriptedChatModel([reply("x" * 200) for _ in range(20)]), [],
                         system_prompt="You answer at length.")
    for n in range(20):
        journal = RunJournal(store, thread_id=f"bounded-{n}")
        question = HumanMessage(f"question {n} " + "y" * 200)
        await agent.ainvoke({"messages": [question]}, {"callbacks": [journal]})
        await journal.aclose()
    assert 0 < requests.REGISTRY.held() <= 2 * limit
    for n in (0, 19):
        assert await request_problems(store, f"bounded-{n}") == []
    # the count is kept as threads change, not summed: once every other thread is forgotten, only
    # the one thread left (which has hashed nothing yet) counts, so it is exactly zero
    monkeypatch.setattr(requests, "CACHED_THREADS", 1)
    requests.REGISTRY.get(("held", id(store)), None, "bounded-last", redact_secrets)
    assert requests.REGISTRY.held() == 0


async def test_threads_that_keep_growing_stay_within_the_cache_budget_together(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No new thread is opened, so nothing is forgotten at a journal's start: the budget holds as
    messages are remembered (the threads used longest ago give way)."""
    from run_journal.journal import requests
    from run_journal.stores.memory import MemoryRunEventStore

    limit = 3_000
    monkeypatch.setattr(requests, "CACHED_BYTES", limit)
    store = MemoryRunEventStore()
    agent = create_agent(ScriptedChatModel([reply("x" * 200) for _ in range(24)]), [])
    most = 0
    for n in range(24):
        journal = RunJournal(store, thread_id=f"growing-{n % 2}")
        await agent.ainvoke({"messages": [HumanMessage(f"question {n} " + "y" * 200)]},
                            {"callbacks": [journal]})
        await journal.aclose()
        most = max(most, requests.REGISTRY.held())
    assert limit // 2 < most <= limit + 500  # one message's body past it, while it is remembered
    for thread_id in ("growing-0", "growing-1"):
        assert await request_problems(store, thread_id) == []
