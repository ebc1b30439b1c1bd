"""OpenTelemetry export: real journaled LangGraph / LangChain runs as spans (the SDK's in-memory exporter),
and a real OTLP/HTTP export to a receiver on 127.0.0.1 that decodes what it gets with opentelemetry-proto."""

from __future__ import annotations

import ast
import asyncio
import gzip
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _agent_tools import add, web_search
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware, SummarizationMiddleware
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from run_journal import RunEvent, RunEventStore, RunJournal, RunRow, open_store
from run_journal.otel import OtlpExporter, emit_spans, span_id_of, spans_of, trace_id_of
from run_journal.testing import CapturedRun, ScriptedChatModel, capture_run

ROOT = Path(__file__).resolve().parent.parent
RUN_JOURNAL = str(Path(sys.executable).with_name("run-journal"))


# -- agents ------------------------------------------------------------------------------------------
class BrokenModel(ScriptedChatModel):
    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("provider down")

    async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("provider down")


def said(text: str, tokens: int = 10, model: str = "gpt-4o-mini", **fields: Any) -> AIMessage:
    usage = {"input_tokens": tokens, "output_tokens": 2, "total_tokens": tokens + 2,
             "input_token_details": {"cache_read": tokens // 2}}
    return AIMessage(text, usage_metadata=usage, response_metadata={"model_name": model}, **fields)


def calls(name: str, call_id: str, tokens: int = 10, **args: Any) -> AIMessage:
    return said("", tokens, tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"tool failed: {reason}")


def tool_loop(replies: list[AIMessage], tools: list[Any], model: Any = None) -> Any:
    chat = model or ScriptedChatModel(replies)

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await chat.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools, handle_tool_errors=True))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


def recorded(run: CapturedRun) -> tuple[list[RunEvent], RunRow]:
    assert run.row is not None
    return run.events, run.row


async def recorded_in(store: RunEventStore, journal: RunJournal) -> tuple[list[RunEvent], RunRow]:
    assert journal.thread_id is not None
    events = await store.list_events(journal.thread_id, journal.run_id, limit=10_000)
    row = await store.get_run(journal.run_id)
    assert row is not None
    return events, row


def captured(events: list[RunEvent], row: RunRow | None) -> list[ReadableSpan]:
    """The spans as the SDK's InMemorySpanExporter receives them."""
    exporter = InMemorySpanExporter()
    count = emit_spans(events, row, SimpleSpanProcessor(exporter))
    spans = list(exporter.get_finished_spans())
    assert len(spans) == count
    return spans


def by_name(spans: list[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


def root_of(spans: list[ReadableSpan]) -> ReadableSpan:
    (root,) = [span for span in spans if span.parent is None]
    return root


def parent_of(span: ReadableSpan, spans: list[ReadableSpan]) -> ReadableSpan:
    assert span.parent is not None
    (parent,) = [s for s in spans if s.context.span_id == span.parent.span_id]
    return parent


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def has(span: ReadableSpan, **expected: Any) -> bool:
    """Whether the span's attributes include these (dots in names are written as __)."""
    found = attrs(span)
    return {key.replace("__", "."): found.get(key.replace("__", ".")) for key in expected} == {
        key.replace("__", "."): value for key, value in expected.items()}


@pytest.fixture
async def store() -> Any:
    async with open_store("memory://") as opened:
        yield opened


# -- span trees --------------------------------------------------------------------------------------
async def test_a_tool_turn_is_a_root_with_chat_and_execute_tool_spans() -> None:
    graph = tool_loop([calls("add", "c1", tokens=100, a=1, b=2), said("it is 3", tokens=120)], [add])
    async with capture_run(thread_id="turn") as run:
        await graph.ainvoke({"messages": [HumanMessage("what is 1+2")]}, run.config)
    events, row = recorded(run)
    run_id = row.run_id
    spans = captured(events, row)
    root = root_of(spans)
    names = by_name(spans)
    assert sorted(names) == sorted(["invoke_agent LangGraph", "chat gpt-4o-mini", "execute_tool add"])
    assert len(names["chat gpt-4o-mini"]) == 2
    assert all(parent_of(span, spans) is root for span in spans if span is not root)
    assert has(root, gen_ai__operation__name="invoke_agent", gen_ai__agent__name="LangGraph",
               gen_ai__conversation__id="turn", run_journal__run_id=run_id,
               run_journal__status="success", gen_ai__usage__input_tokens=220, gen_ai__usage__output_tokens=4)
    assert attrs(root)["gen_ai.usage.cache_read.input_tokens"] == 110
    assert attrs(root)["run_journal.cost_usd"] == pytest.approx(row.cost_usd)
    first, second = sorted(names["chat gpt-4o-mini"], key=lambda span: span.start_time or 0)
    assert has(first, gen_ai__operation__name="chat", gen_ai__request__model="gpt-4o-mini",
               gen_ai__response__model="gpt-4o-mini", gen_ai__usage__input_tokens=100,
               gen_ai__usage__output_tokens=2, run_journal__caller="lead_agent",
               run_journal__llm_call_index=0)
    assert attrs(first)["gen_ai.usage.cache_read.input_tokens"] == 50
    responses = [e for e in events if e.event_type == "llm.ai.response"]
    response = responses[0]
    assert attrs(first)["run_journal.cost_usd"] == pytest.approx(response.metadata["cost_usd"])
    assert first.end_time == int(response.created_at.timestamp() * 1_000_000) * 1000
    assert first.end_time - first.start_time == response.metadata["latency_ms"] * 1_000_000  # type: ignore[operator]
    (tool_span,) = names["execute_tool add"]
    assert has(tool_span, gen_ai__operation__name="execute_tool", gen_ai__tool__name="add",
               gen_ai__tool__call__id="c1", gen_ai__tool__type="function", run_journal__caller="lead_agent",
               run_journal__tool__outcome="success", run_journal__tool__result_size=1)
    assert first.end_time <= tool_span.start_time <= tool_span.end_time <= second.start_time  # type: ignore[operator]
    assert {span.status.status_code for span in spans} == {StatusCode.UNSET}
    assert {span.context.trace_id for span in spans} == {trace_id_of(run_id)}
    assert root.context.span_id == span_id_of(run_id)
    assert tool_span.context.span_id == span_id_of(run_id, "tool:c1")
    assert first.context.span_id == span_id_of(run_id, response.event_id)


async def test_exporting_twice_gives_the_same_trace() -> None:
    graph = tool_loop([calls("add", "c1", a=1, b=2), said("3")], [add])
    async with capture_run(thread_id="twice") as run:
        await graph.ainvoke({"messages": [HumanMessage("1+2")]}, run.config)
    events, row = recorded(run)

    def shape(spans: list[ReadableSpan]) -> list[tuple[Any, ...]]:
        return sorted((s.name, s.context.trace_id, s.context.span_id, s.parent.span_id if s.parent else None,
                       s.start_time, s.end_time, tuple(sorted(attrs(s).items()))) for s in spans)

    once = shape(spans_of(events, row))
    assert once == shape(spans_of(list(reversed(events)), row)) == shape(captured(events, row))
    assert [s[:6] for s in shape(spans_of(events, None))] == [s[:6] for s in once]  # the row adds totals only


async def test_errors_are_error_statuses_with_exception_events() -> None:
    graph = tool_loop([calls("explode", "c9", reason="boom"), said("sorry")], [explode])
    async with capture_run(thread_id="tool-error") as failing:
        await graph.ainvoke({"messages": [HumanMessage("go")]}, failing.config)
    spans = captured(*recorded(failing))
    (tool_span,) = by_name(spans)["execute_tool explode"]
    assert tool_span.status.status_code is StatusCode.ERROR
    assert "tool failed: boom" in (tool_span.status.description or "")
    assert attrs(tool_span)["run_journal.tool.outcome"] == "error"
    assert root_of(spans).status.status_code is StatusCode.UNSET  # the run itself went on

    graph = tool_loop([], [add], model=BrokenModel([]))
    async with capture_run(thread_id="run-error") as crashed:
        with pytest.raises(ConnectionError):
            await graph.ainvoke({"messages": [HumanMessage("go")]}, crashed.config)
    spans = captured(*recorded(crashed))
    root = root_of(spans)
    assert root.status.status_code is StatusCode.ERROR
    assert root.status.description == "ConnectionError: provider down"
    assert attrs(root)["error.type"] == "ConnectionError"
    assert attrs(root)["run_journal.status"] == "error"
    (exception,) = [event for event in root.events if event.name == "exception"]
    assert dict(exception.attributes or {})["exception.type"] == "ConnectionError"
    (chat,) = [span for span in spans if span.name.startswith("chat")]
    assert chat.status.status_code is StatusCode.ERROR
    assert attrs(chat)["error.type"] == "ConnectionError"
    assert parent_of(chat, spans) is root


async def test_an_interrupt_is_a_span_event_and_the_resume_links_to_it(store: RunEventStore) -> None:
    def ask(state: MessagesState) -> dict[str, Any]:
        answer = interrupt({"question": "proceed?"})
        return {"messages": [AIMessage(f"human said {answer}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("ask", ask)
    graph.add_edge(START, "ask")
    compiled = graph.compile(checkpointer=InMemorySaver())
    config: dict[str, Any] = {"configurable": {"thread_id": "hitl"}}
    first, second = RunJournal(store), RunJournal(store)
    await compiled.ainvoke({"messages": [HumanMessage("go")]}, {**config, "callbacks": [first]})
    await first.aclose()
    await compiled.ainvoke(Command(resume="yes"), {**config, "callbacks": [second]})
    await second.aclose()
    interrupted = root_of(captured(*await recorded_in(store, first)))
    resumed = root_of(captured(*await recorded_in(store, second)))
    assert attrs(interrupted)["run_journal.status"] == "interrupted"
    assert interrupted.status.status_code is StatusCode.UNSET  # waiting for a human is not an error
    (event,) = [event for event in interrupted.events if event.name == "run.interrupt"]
    assert dict(event.attributes or {})["run_journal.interrupt.count"] == 1
    assert attrs(resumed)["run_journal.resumed_from"] == first.run_id
    (link,) = resumed.links
    assert (link.context.trace_id, link.context.span_id) == (interrupted.context.trace_id,
                                                               interrupted.context.span_id)
    assert resumed.context.trace_id != interrupted.context.trace_id


async def test_a_human_in_the_loop_interrupt_is_an_event_of_its_hook_span() -> None:
    agent = create_agent(ScriptedChatModel([calls("add", "c1", a=1, b=2), said("3")]), [add],
                         middleware=[HumanInTheLoopMiddleware(interrupt_on={"add": True})],
                         checkpointer=InMemorySaver())
    async with capture_run() as run:
        await agent.ainvoke({"messages": [HumanMessage("1+2")]},
                            {"configurable": {"thread_id": "approve"}, **run.config})
    spans = captured(*recorded(run))
    (hook,) = by_name(spans)["HumanInTheLoopMiddleware.after_model"]
    assert attrs(hook)["run_journal.middleware.action"] == "interrupt"
    assert [event.name for event in hook.events] == ["interrupt"]
    (tool_span,) = by_name(spans)["execute_tool add"]
    assert attrs(tool_span)["run_journal.tool.outcome"] == "none"  # asked for, waiting for approval


async def test_a_middleware_hook_span_holds_the_model_call_it_made() -> None:
    summarizer = ScriptedChatModel([said("SUMMARY", tokens=50, model="claude-3-5-haiku-latest")] * 3)
    agent = create_agent(ScriptedChatModel([said("it is 3", 20)]), [add],
                         middleware=[SummarizationMiddleware(model=summarizer, trigger=("messages", 4),
                                                             keep=("messages", 2))])
    history = [HumanMessage("hi"), AIMessage("hello"), HumanMessage("how are you"), AIMessage("fine"),
               HumanMessage("what is 1+2")]
    async with capture_run(thread_id="summarized") as run:
        await agent.ainvoke({"messages": history}, run.config)
    spans = captured(*recorded(run))
    (hook,) = by_name(spans)["SummarizationMiddleware.before_model"]
    assert attrs(hook) == {"run_journal.middleware.tag": "summarization",
                           "run_journal.middleware.name": "SummarizationMiddleware",
                           "run_journal.middleware.hook": "before_model",
                           "run_journal.middleware.action": "update"}
    assert parent_of(hook, spans) is root_of(spans)
    (summary,) = by_name(spans)["chat claude-3-5-haiku-latest"]
    assert parent_of(summary, spans) is hook
    assert attrs(summary)["run_journal.caller"] == "middleware:summarization"
    assert hook.start_time == summary.start_time
    assert hook.end_time >= summary.end_time  # type: ignore[operator]
    (answer,) = by_name(spans)["chat gpt-4o-mini"]
    assert parent_of(answer, spans) is root_of(spans)


async def test_a_subagent_task_is_an_invoke_agent_span_under_its_task_tool_call() -> None:
    from deepagents import create_deep_agent

    agent = create_deep_agent(model=ScriptedChatModel([
        calls("task", "task-1", tokens=5, description="find 1+2", subagent_type="researcher"),
        said("the researcher says 3", 20)]), tools=[add], subagents=[{
            "name": "researcher", "description": "the researcher", "system_prompt": "You research.",
            "tools": [add],
            "model": ScriptedChatModel([calls("add", "s1", 7, a=1, b=2), said("it is 3", 7)]),
        }])
    async with capture_run(thread_id="deep") as run:
        await agent.ainvoke({"messages": [HumanMessage("what is 1+2")]}, run.config)
    spans = captured(*recorded(run))
    root = root_of(spans)
    names = by_name(spans)
    (task_tool,) = names["execute_tool task"]
    (task,) = names["invoke_agent researcher"]
    assert parent_of(task_tool, spans) is root
    assert parent_of(task, spans) is task_tool
    assert has(task, gen_ai__operation__name="invoke_agent", gen_ai__agent__name="researcher",
               run_journal__task_id="task-1", run_journal__subagent__status="completed",
               run_journal__caller="subagent:researcher")
    steps = [dict(event.attributes or {}) for event in task.events if event.name == "subagent.step"]
    assert [(step["run_journal.message_index"], step["run_journal.kind"]) for step in steps] == [
        (0, "ai"), (1, "tool"), (2, "ai")]
    assert steps[0]["run_journal.tool_calls"] == ("add",)
    assert steps[1]["gen_ai.tool.name"] == "add"
    inner = [span for span in spans
             if attrs(span).get("run_journal.caller") == "subagent:researcher" and span is not task]
    assert all(attrs(span)["gen_ai.agent.name"] == "researcher" for span in inner)
    assert sorted(span.name for span in inner) == ["chat gpt-4o-mini", "chat gpt-4o-mini", "execute_tool add"]
    assert all(parent_of(span, spans) is task for span in inner)
    lead = [span for span in names["chat gpt-4o-mini"] if attrs(span)["run_journal.caller"] == "lead_agent"]
    assert len(lead) == 2
    assert all(parent_of(span, spans) is root for span in lead)


async def test_a_supervisors_workers_are_agent_spans_named_like_the_journal_names_them() -> None:
    from langgraph_supervisor import create_supervisor

    research = create_agent(ScriptedChatModel([calls("web_search", "r1", query="headcount"),
                                               said("about 1.9M")]),
                            [web_search], name="research_expert")
    math = create_agent(ScriptedChatModel([calls("add", "m1", a=1, b=2), said("it is 3")]), [add],
                        name="math_expert")
    lead = ScriptedChatModel([calls("transfer_to_research_expert", "s1"),
                              calls("transfer_to_math_expert", "s2"), said("1.9M, and 3")])
    graph = create_supervisor([research, math], model=lead).compile()
    async with capture_run(thread_id="team") as run:
        await graph.ainvoke({"messages": [HumanMessage("go")]}, run.config)
    spans = captured(*recorded(run))
    root = root_of(spans)
    names = by_name(spans)
    (research_turn,) = names["invoke_agent research_expert"]
    (math_turn,) = names["invoke_agent math_expert"]
    assert parent_of(research_turn, spans) is root
    assert has(research_turn, gen_ai__operation__name="invoke_agent", gen_ai__agent__name="research_expert",
               run_journal__caller="agent:research_expert", run_journal__handoff__from="lead_agent",
               gen_ai__tool__call__id="s1")
    assert has(math_turn, run_journal__caller="agent:math_expert", gen_ai__tool__call__id="s2")
    for turn, caller, tool_name in ((research_turn, "agent:research_expert", "web_search"),
                                    (math_turn, "agent:math_expert", "add")):
        inner = [span for span in spans
                 if attrs(span).get("run_journal.caller") == caller and span is not turn]
        assert sorted(span.name for span in inner) == ["chat gpt-4o-mini", "chat gpt-4o-mini",
                                                       f"execute_tool {tool_name}"]
        assert all(parent_of(span, spans) is turn for span in inner)
        assert all(attrs(span)["gen_ai.agent.name"] == caller.removeprefix("agent:") for span in inner)
        assert all(turn.start_time <= span.start_time and span.end_time <= turn.end_time for span in inner)
    assert research_turn.end_time <= math_turn.start_time  # the turns follow one another
    lead_calls = [span for span in names["chat gpt-4o-mini"]
                  if attrs(span)["run_journal.caller"] == "lead_agent"]
    assert len(lead_calls) == 3
    assert all(parent_of(span, spans) is root for span in lead_calls)
    assert all("gen_ai.agent.name" not in attrs(span) for span in lead_calls)
    handoffs = [(e.attributes or {}) for e in root.events if e.name == "agent.handoff"]
    assert [(h["run_journal.handoff.from"], h["run_journal.handoff.to"]) for h in handoffs] == [
        ("lead_agent", "agent:research_expert"), ("agent:research_expert", "lead_agent"),
        ("lead_agent", "agent:math_expert"), ("agent:math_expert", "lead_agent")]


async def test_a_swarms_agents_each_have_their_turns() -> None:
    from langgraph_swarm import create_handoff_tool, create_swarm

    alice = create_agent(ScriptedChatModel([calls("transfer_to_bob", "a1")]),
                         [create_handoff_tool(agent_name="Bob")], name="Alice")
    bob = create_agent(ScriptedChatModel([calls("add", "b1", a=1, b=2), said("Bob here: 3")]),
                       [add, create_handoff_tool(agent_name="Alice")], name="Bob")
    graph = create_swarm([alice, bob], default_active_agent="Alice").compile()
    async with capture_run(thread_id="swarm") as run:
        await graph.ainvoke({"messages": [HumanMessage("go")]}, run.config)
    events, row = recorded(run)
    callers = {e.metadata["caller"] for e in events if e.event_type == "llm.ai.response"}
    spans = captured(events, row)
    chats = [span for span in spans if span.name.startswith("chat")]
    assert {attrs(span)["run_journal.caller"] for span in chats} == callers
    for span in chats:
        caller = attrs(span)["run_journal.caller"]
        parent = parent_of(span, spans)
        if caller.startswith("agent:"):
            assert attrs(parent)["run_journal.caller"] == caller
            assert parent.name == "invoke_agent " + caller.removeprefix("agent:")
        else:
            assert parent is root_of(spans)
    assert "invoke_agent Bob" in by_name(spans)


def test_the_core_package_never_imports_opentelemetry() -> None:
    for path in (ROOT / "run_journal").rglob("*.py"):
        if path.name == "otel.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(name.startswith("opentelemetry") for name in names), path


# -- OTLP/HTTP ---------------------------------------------------------------------------------------
class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1: keeps every decoded ExportTraceServiceRequest."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.status = 200
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.requests.append(request)
                receiver.paths.append(self.path)
                receiver.headers.append(dict(self.headers.items()))
                self.send_response(receiver.status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def spans(self) -> list[Any]:
        return [span for request in self.requests for resource in request.resource_spans
                for scope in resource.scope_spans for span in scope.spans]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


def attribute_values(span: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in span.attributes:
        kind = item.value.WhichOneof("value")
        value = getattr(item.value, kind)
        values[item.key] = list(getattr(value, "values", [])) if kind == "array_value" else value
    return values


async def test_a_run_sent_over_otlp_http_arrives_whole_with_its_ids(store: RunEventStore,
                                                                     receiver: Receiver) -> None:
    journal = RunJournal(store, thread_id="otlp")
    graph = tool_loop([calls("add", "c1", tokens=100, a=1, b=2), said("it is 3", tokens=120)], [add])
    await graph.ainvoke({"messages": [HumanMessage("what is 1+2")]}, {"callbacks": [journal]})
    await journal.aclose()
    exporter = OtlpExporter(receiver.endpoint, headers={"x-api-key": "k1"}, service_name="my-agents")
    assert await exporter.export_run(store, "otlp", journal.run_id) == 4
    assert await exporter.export_run(store, "otlp", journal.run_id) == 4
    exporter.shutdown()
    assert receiver.paths == ["/v1/traces", "/v1/traces"]
    assert receiver.headers[0].get("x-api-key") == "k1"
    first, again = receiver.requests
    assert first == again  # exporting twice sends the same trace
    (resource,) = first.resource_spans
    service = {item.key: item.value.string_value for item in resource.resource.attributes}
    assert service["service.name"] == "my-agents"
    (scope,) = resource.scope_spans
    assert scope.scope.name == "run_journal"
    spans = {span.name: span for span in scope.spans}
    assert set(spans) == {"invoke_agent LangGraph", "chat gpt-4o-mini", "execute_tool add"}
    root, tool_span = spans["invoke_agent LangGraph"], spans["execute_tool add"]
    trace_id = trace_id_of(journal.run_id).to_bytes(16, "big")
    assert {span.trace_id for span in scope.spans} == {trace_id}
    assert root.span_id == span_id_of(journal.run_id).to_bytes(8, "big")
    assert root.parent_span_id == b""
    assert {span.parent_span_id for span in scope.spans if span is not root} == {root.span_id}
    assert tool_span.span_id == span_id_of(journal.run_id, "tool:c1").to_bytes(8, "big")
    assert attribute_values(tool_span)["gen_ai.tool.call.id"] == "c1"
    assert attribute_values(tool_span)["gen_ai.operation.name"] == "execute_tool"
    values = attribute_values(root)
    assert (values["gen_ai.usage.input_tokens"], values["gen_ai.usage.output_tokens"]) == (220, 4)
    assert values["run_journal.run_id"] == journal.run_id
    chats = [span for span in scope.spans if span.name == "chat gpt-4o-mini"]
    assert sorted(attribute_values(span)["run_journal.llm_call_index"] for span in chats) == [0, 1]
    assert all(attribute_values(span)["gen_ai.request.model"] == "gpt-4o-mini" for span in chats)
    assert all(span.end_time_unix_nano >= span.start_time_unix_nano > 0 for span in scope.spans)


async def test_the_export_command_sends_otlp_and_a_dead_collector_never_fails_the_journal(
        tmp_path: Path, receiver: Receiver) -> None:
    url = f"sqlite:///{tmp_path}/journal.db"
    async with open_store(url) as store:
        runs = []
        for thread in ("a", "b"):
            journal = RunJournal(store, thread_id=thread)
            graph = tool_loop([calls("add", f"c-{thread}", a=1, b=2), said("3")], [add])
            await graph.ainvoke({"messages": [HumanMessage("1+2")]}, {"callbacks": [journal]})
            await journal.aclose()
            runs.append(journal.run_id)
        dead = OtlpExporter("http://127.0.0.1:9", timeout=1.0)
        await dead.run_ended(store, "a", runs[0])  # logged, not raised
        dead.shutdown()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [RUN_JOURNAL, url, "export", "--format", "otlp", "--endpoint", receiver.endpoint, *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    everything = await asyncio.to_thread(cli)
    assert everything.returncode == 0, everything.stderr
    assert everything.stdout.strip() == f"exported 2 run(s) as 8 span(s) to {receiver.endpoint}/v1/traces"
    one = await asyncio.to_thread(cli, "--thread", "b")
    assert one.stdout.startswith("exported 1 run(s) as 4 span(s)")
    by_run = await asyncio.to_thread(cli, "--run", runs[0])
    assert by_run.stdout.startswith("exported 1 run(s) as 4 span(s)")
    assert len(receiver.requests) == 4
    sent = [request.resource_spans[0].scope_spans for request in receiver.requests]  # each process has its
    assert sent[1] == sent[2]  # thread b, sent twice                                # service.instance.id
    assert sent[0] == sent[3]  # thread a's run, sent twice
    assert sent[0] != sent[1]
    missing = await asyncio.to_thread(cli, "--run", "nope")
    assert missing.returncode == 1
    assert "not found" in missing.stderr


async def test_a_journal_exports_its_run_once_the_end_is_stored(store: RunEventStore,
                                                                 receiver: Receiver) -> None:
    exporter = OtlpExporter(receiver.endpoint)
    journal = RunJournal(store, thread_id="live-otlp", exporters=[exporter])
    graph = tool_loop([calls("add", "c1", a=1, b=2), said("it is 3")], [add])
    await graph.ainvoke({"messages": [HumanMessage("what is 1+2")]}, {"callbacks": [journal]})
    await journal.aclose()  # waits for the export
    exporter.shutdown()
    assert len(receiver.requests) == 1
    names = sorted(span.name for span in receiver.spans())
    assert len(names) == 4
    assert any(name.startswith("execute_tool") for name in names)


def test_a_sync_run_is_exported_from_the_writer_thread_and_a_dead_collector_fails_nothing(
    receiver: Receiver, tmp_path: Path
) -> None:
    alive, dead = OtlpExporter(receiver.endpoint), OtlpExporter("http://127.0.0.1:9", timeout=0.5)
    journal = RunJournal(f"sqlite:///{tmp_path / 'live.db'}", thread_id="sync-otlp", exporters=[dead, alive])
    graph = tool_loop([said("hello")], [])
    asyncio.run(graph.ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]}))
    journal.close()  # no JournalError: the dead collector is only logged
    alive.shutdown()
    assert len(receiver.requests) == 1


def test_the_export_command_fails_fast_in_one_line_when_the_collector_is_dead_or_refuses(
        tmp_path: Path, receiver: Receiver, capsys: pytest.CaptureFixture[str]) -> None:
    import socket
    import time

    from run_journal.cli import main

    url = f"sqlite:///{tmp_path}/journal.db"

    async def record() -> None:
        async with open_store(url) as store:
            await store.put(thread_id="t1", run_id="r1", event_type="run.start", category="trace")
            await store.put(thread_id="t1", run_id="r1", event_type="run.end", category="outputs")

    asyncio.run(record())
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        dead = f"http://user:hunter2@127.0.0.1:{closed.getsockname()[1]}"
    started = time.monotonic()
    assert main([url, "export", "--format", "otlp", "--endpoint", dead]) == 1
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "the OTLP collector at http://user:***@127.0.0.1:" in err
    assert "cannot be reached: Connection refused" in err
    assert "hunter2" not in err
    assert "Transient error" not in err
    assert took < 5  # it took 7 s of the SDK's retries, with three warnings
    receiver.status = 400
    assert main([url, "export", "--format", "otlp", "--endpoint", receiver.endpoint]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"the OTLP collector at {receiver.endpoint}/v1/traces did not take run r1" in err
    assert main([url, "export", "--format", "otlp", "--endpoint", "ftp://collector"]) == 2
    assert "--endpoint takes an http:// or https:// URL" in capsys.readouterr().err
