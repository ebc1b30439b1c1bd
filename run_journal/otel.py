"""OpenTelemetry export: one journaled run as a trace of GenAI spans, sent over OTLP/HTTP.

Needs the ``otel`` extra (``pip install 'run-journal[otel]'``: ``opentelemetry-sdk`` and
``opentelemetry-exporter-otlp-proto-http``); the rest of run-journal never imports it.

:func:`spans_of` maps one run's events (and its run row) to a span tree:

- the run is the root span (``invoke_agent``), with the row's usage and cost, its status (a
  ``run.error`` is an error status and an ``exception`` event; interrupts, cancellation, memory
  context and workspace changes are span events), and a link to the run it resumed;
- one ``chat`` span per model call (``llm.ai.response``, which ends the call and says how long it
  took, or ``llm.error``), with the GenAI semantic conventions' model, usage and cache attributes;
- one ``execute_tool`` span per tool call (``tool.call`` and ``tool.outcome``, paired by
  ``tool_call_id``), an error status for a failed or missing outcome;
- one ``invoke_agent`` span per subagent task (``subagent.start`` .. ``subagent.end`` by
  ``task_id``), its steps as span events, under the tool call that started it;
- one span per middleware hook event (``middleware:<tag>``), holding the model calls its hook made;
- one ``invoke_agent`` span per turn of a named agent (``agent:<name>``: a supervisor's worker, a
  swarm's agent), from the ``agent.handoff`` that gave it the turn (or its first call) to the one that
  took it away; each handoff is also an ``agent.handoff`` event of the run's span.

Every span names its caller the way the journal does (``run_journal.caller``: ``lead_agent``,
``agent:<name>``, ``subagent:<name>``, ``middleware:<tag>``), and an agent's span also carries
``gen_ai.agent.name`` (the name without its prefix). A model or tool span belongs to the span of its
caller: ``subagent:<name>`` to that subagent's task, ``agent:<name>`` to that agent's turn,
``middleware:<tag>`` to the hook event that follows it, anything else to the run. Trace and span ids
are derived from the run id and event ids (sha256), so exporting a run twice gives the same trace, and
a resumed run links to its origin's root span without reading it. No message text is exported:
spans carry names, counts, ids, timings and outcomes (tool arguments and replies stay in the journal).

The spans are made by the SDK itself (a ``TracerProvider`` whose ``IdGenerator`` hands out the
derived ids), so any SDK ``SpanProcessor`` / ``SpanExporter`` takes them (:func:`emit_spans`).
:class:`OtlpExporter` sends a run's spans in one OTLP/HTTP request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

try:
    from opentelemetry import trace as trace_api
    from opentelemetry.context import Context
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.id_generator import IdGenerator
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("run_journal.otel needs the otel extra: pip install 'run-journal[otel]'") from error

from run_journal.catalog import AGENT_PREFIX, LEAD_AGENT, SUBAGENT_PREFIX, TERMINAL_RUN_EVENTS
from run_journal.runs import RunRow, status_of

if TYPE_CHECKING:
    from run_journal.envelope import RunEvent
    from run_journal.stores.base import RunEventStore

__all__ = ["OtlpExportError", "OtlpExporter", "emit_spans", "span_id_of", "spans_of", "trace_id_of"]

logger = logging.getLogger("run_journal")
SCOPE: Final = "run_journal"
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
MAX_SPAN_EVENTS: Final = 1000
"""Span events kept per span (a long subagent's steps); the SDK counts the rest as dropped."""
MAX_ATTRIBUTE_LENGTH: Final = 4096
LEAD: Final = LEAD_AGENT
SAMPLED: Final = trace_api.TraceFlags(trace_api.TraceFlags.SAMPLED)


# -- ids ---------------------------------------------------------------------------------------------
def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x1f".join(("run-journal", *parts)).encode()).digest()


def trace_id_of(run_id: str) -> int:
    """The trace id of a run: 128 bits of sha256 of its run id (never 0)."""
    return int.from_bytes(_digest("trace", run_id)[:16], "big") or 1


def span_id_of(run_id: str, key: str | None = None) -> int:
    """The span id of a run's root span (``key`` None) or of the span ``key`` names (an event id,
    ``tool:<call id>``, ``task:<task id>``): 64 bits of sha256 (never 0)."""
    parts = ("span", run_id) if key is None else ("span", run_id, key)
    return int.from_bytes(_digest(*parts)[:8], "big") or 1


# -- the plan: spans as data -------------------------------------------------------------------------
@dataclasses.dataclass
class Planned:
    """One span before the SDK makes it."""

    key: str | None
    name: str
    start: datetime
    end: datetime
    parent: Planned | None = None
    attributes: dict[str, Any] = dataclasses.field(default_factory=dict)
    events: list[tuple[str, datetime, dict[str, Any]]] = dataclasses.field(default_factory=list)
    error: str | None = None
    links: list[tuple[str, dict[str, Any]]] = dataclasses.field(default_factory=list)
    seq: int = 0


def _ns(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1) * 1000


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes without None values (OpenTelemetry has no null)."""
    return {key: value for key, value in attributes.items() if value is not None}


def _usage_attributes(usage: Mapping[str, Any]) -> dict[str, Any]:
    return _clean({
        "gen_ai.usage.input_tokens": _int(usage.get("input_tokens")),
        "gen_ai.usage.output_tokens": _int(usage.get("output_tokens")),
        "gen_ai.usage.cache_read.input_tokens": _int(usage.get("cache_read_tokens")) or None,
        "gen_ai.usage.cache_creation.input_tokens": _int(usage.get("cache_creation_tokens")) or None,
        "gen_ai.usage.reasoning.output_tokens": _int(usage.get("reasoning_tokens")) or None,
    })


class _Planner:
    """Walks one run's events in seq order and lays out its spans (see the module docstring)."""

    def __init__(self, events: Sequence[RunEvent], row: RunRow | None) -> None:
        self.events = events
        self.row = row
        self.run_id = row.run_id if row is not None else events[0].run_id
        self.thread_id = row.thread_id if row is not None else events[0].thread_id
        self.spans: list[Planned] = []
        self.tasks: dict[str, Planned] = {}
        self.tools: dict[str, Planned] = {}
        self.hooks: list[tuple[int, str, Planned]] = []
        """(seq, caller, span) of every middleware hook event, in seq order."""
        self.task_ends: dict[int, int] = {}
        """The seq of each task span's ``subagent.end`` (by ``id`` of the span)."""
        self.turns: list[tuple[str, Planned]] = []
        """(caller, span) of every named agent's turn, in seq order."""
        self.turn_ends: dict[int, int] = {}
        """The seq of the handoff that ended each turn (by ``id`` of the span)."""

    def plan(self) -> list[Planned]:
        events, row = self.events, self.row
        first = next((e for e in events if e.event_type == "run.start"), None)
        start = first.created_at if first is not None else \
            (row.started_at if row is not None and row.started_at else events[0].created_at)
        terminal = next((e for e in reversed(events) if e.event_type in _TERMINAL), None)
        end = terminal.created_at if terminal is not None else \
            (row.ended_at if row is not None and row.ended_at else events[-1].created_at)
        self.root = root = self._span(None, "invoke_agent", start, max(start, end), None)
        self.end = root.end
        self._root_attributes(first, terminal)
        for event in events:
            if event.event_type.startswith("middleware:"):
                self._hook(event)
        for event in events:
            handler = _HANDLERS.get(event.event_type)
            if handler is not None:
                handler(self, event)
        self._place_calls()
        return self.spans

    def _span(self, key: str | None, name: str, start: datetime, end: datetime, parent: Planned | None,
              seq: int = 0, **attributes: Any) -> Planned:
        span = Planned(key, name, start, max(start, end), parent, _clean(attributes), seq=seq)
        self.spans.append(span)
        return span

    # -- the run -------------------------------------------------------------------------------------
    def _root_attributes(self, first: RunEvent | None, terminal: RunEvent | None) -> None:
        root, row = self.root, self.row
        content = _dict(first.content) if first is not None else {}
        name = _text(content.get("run_name")) or (_text(row.metadata.get("run_name")) if row else None)
        status = str(row.status) if row is not None else status_of(self.events).value
        root.name = f"invoke_agent {name}" if name else "invoke_agent"
        root.attributes.update(_clean({
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": name,
            "gen_ai.conversation.id": self.thread_id,
            "run_journal.thread_id": self.thread_id,
            "run_journal.run_id": self.run_id,
            "run_journal.status": status,
            "user.id": row.user_id if row is not None else self.events[0].user_id,
        }))
        resumed = _text(content.get("resumed_from")) or (row.resumed_from if row is not None else None)
        if resumed:
            root.attributes["run_journal.resumed_from"] = resumed
            root.links.append((resumed, {"run_journal.link": "resumed_from"}))
        if row is not None:
            root.attributes.update(_usage_attributes(row.usage.to_dict()))
            root.attributes.update(_clean({
                "run_journal.llm_calls": row.usage.llm_calls,
                "run_journal.tool_calls": row.tool_call_count,
                "run_journal.cost_usd": row.usage.cost_usd,
                "run_journal.cost_note": row.cost_note,
            }))
        if terminal is None:
            return
        body = _dict(terminal.content)
        if terminal.event_type == "run.error":
            kind, message = _text(body.get("error_type")) or "Exception", str(body.get("message") or "")
            root.error = f"{kind}: {message}"
            root.attributes["error.type"] = kind
            root.events.append(("exception", terminal.created_at, _clean({
                "exception.type": kind, "exception.message": message,
                "exception.stacktrace": _text(body.get("traceback"))})))
        elif terminal.event_type == "run.interrupt":
            root.events.append(("run.interrupt", terminal.created_at, _interrupts(body)))
        elif terminal.event_type == "run.cancel":
            root.events.append(("run.cancel", terminal.created_at,
                                _clean({"run_journal.reason": _text(body.get("reason"))})))

    def _context_event(self, event: RunEvent) -> None:
        body = _dict(event.content)
        attributes: dict[str, Any]
        if event.event_type == "workspace_changes":
            attributes = {"run_journal.summary": event.content if isinstance(event.content, str) else ""}
        else:
            attributes = _clean({"run_journal.content_sha256": _text(body.get("content_sha256"))})
        self.root.events.append((event.event_type, event.created_at, attributes))

    # -- callers -------------------------------------------------------------------------------------
    def _container(self, caller: str, seq: int) -> Planned:
        """The span a caller's work belongs to at ``seq``: its subagent task, the middleware hook event
        that follows it, or the run."""
        if caller.startswith("subagent:"):
            name = caller.removeprefix("subagent:")
            for task in reversed(list(self.tasks.values())):
                ended = self.task_ends.get(id(task), seq)
                if task.attributes.get("gen_ai.agent.name") == name and task.seq <= seq <= ended:
                    return task
        if caller.startswith(AGENT_PREFIX):
            for who, turn in reversed(self.turns):
                if who == caller and turn.seq <= seq <= self.turn_ends.get(id(turn), seq):
                    return turn
        if caller.startswith("middleware:"):
            for hook_seq, who, span in self.hooks:
                if who == caller and hook_seq > seq:
                    return span
        return self.root

    # -- named agents --------------------------------------------------------------------------------
    def _turn(self, caller: str, event: RunEvent, came_from: str | None, call_id: str | None) -> Planned:
        name = caller.removeprefix(AGENT_PREFIX)
        span = self._span(f"turn:{event.event_id}", f"invoke_agent {name}", event.created_at,
                          event.created_at, None, event.seq,
                          **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name,
                             "run_journal.caller": caller, "run_journal.handoff.from": came_from,
                             "gen_ai.tool.call.id": call_id})
        self.turns.append((caller, span))
        return span

    def _open_turn(self, caller: str, event: RunEvent) -> None:
        """A named agent's call outside any turn of it (its first turn, with no handoff before it)
        opens one."""
        if not caller.startswith(AGENT_PREFIX):
            return
        if any(who == caller and id(turn) not in self.turn_ends for who, turn in self.turns):
            return
        self._turn(caller, event, None, None)

    def _handoff(self, event: RunEvent) -> None:
        body = _dict(event.content)
        came_from, to = _text(body.get("from_agent")), _text(body.get("to_agent"))
        call_id = _text(body.get("tool_call_id"))
        self.root.events.append(("agent.handoff", event.created_at, _clean({
            "run_journal.handoff.from": came_from, "run_journal.handoff.to": to,
            "gen_ai.tool.call.id": call_id})))
        for who, turn in self.turns:
            if who == came_from and id(turn) not in self.turn_ends:
                turn.end = max(turn.end, event.created_at)
                self.turn_ends[id(turn)] = event.seq
        if to is not None and to.startswith(AGENT_PREFIX):
            self._turn(to, event, came_from, call_id)

    # -- model calls ---------------------------------------------------------------------------------
    def _model_call(self, event: RunEvent) -> None:
        meta = _dict(event.metadata)
        caller = _text(meta.get("caller")) or LEAD
        self._open_turn(caller, event)
        model = _text(meta.get("model_name"))
        latency = _int(meta.get("latency_ms"))
        end = event.created_at
        start = end - timedelta(milliseconds=latency) if latency is not None else end
        answered = event.event_type == "llm.ai.response"
        span = self._span(event.event_id, f"chat {model}" if model else "chat", start, end, None, event.seq,
                          **{"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                             "gen_ai.response.model": model if answered else None,
                             "run_journal.caller": caller, "gen_ai.agent.name": _agent_name(caller),
                             "run_journal.llm_call_index": _int(meta.get("llm_call_index")),
                             "run_journal.event_id": event.event_id})
        if answered:
            span.attributes.update(_usage_attributes(_dict(meta.get("usage"))))
            cost = meta.get("cost_usd")
            if isinstance(cost, int | float) and not isinstance(cost, bool):
                span.attributes["run_journal.cost_usd"] = float(cost)
            ttft = _int(meta.get("time_to_first_token_ms"))
            if ttft is not None:
                span.attributes["gen_ai.response.time_to_first_chunk"] = ttft / 1000
        else:
            body = _dict(event.content)
            kind, message = _text(body.get("error_type")) or "Exception", str(body.get("message") or "")
            span.error = f"{kind}: {message}"
            span.attributes["error.type"] = kind
            span.events.append(("exception", event.created_at,
                                {"exception.type": kind, "exception.message": message}))

    # -- tool calls ----------------------------------------------------------------------------------
    def _tool_call(self, event: RunEvent) -> None:
        body = _dict(event.content)
        call_id = _text(body.get("tool_call_id"))
        if call_id is None or call_id in self.tools:
            return
        name = _text(body.get("tool_name")) or "tool"
        caller = _text(_dict(event.metadata).get("caller")) or LEAD
        self._open_turn(caller, event)
        self.tools[call_id] = self._span(
            f"tool:{call_id}", f"execute_tool {name}", event.created_at, self.end, None, event.seq,
            **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
               "gen_ai.tool.call.id": call_id, "gen_ai.tool.type": "function",
               "run_journal.caller": caller, "gen_ai.agent.name": _agent_name(caller),
               "run_journal.tool.outcome": "none"})

    def _tool_outcome(self, event: RunEvent) -> None:
        body = _dict(event.content)
        call_id = _text(body.get("tool_call_id"))
        if call_id is None:
            return
        span = self.tools.get(call_id)
        if span is None:  # a tool run without a model's tool call
            self._tool_call(event)
            span = self.tools[call_id]
        duration = _int(body.get("duration_ms"))
        span.end = event.created_at
        if duration is not None:
            span.start = event.created_at - timedelta(milliseconds=duration)
        span.end = max(span.start, span.end)
        outcome = _text(body.get("outcome")) or "unknown"
        span.attributes.update(_clean({
            "run_journal.tool.outcome": outcome, "run_journal.tool.attempts": _int(body.get("attempts")),
            "run_journal.tool.result_size": _int(body.get("result_size")),
            "run_journal.tool.result_sha256": _text(body.get("result_sha256")),
            "run_journal.caller": _text(_dict(event.metadata).get("caller")) or LEAD,
        }))
        if outcome == "error":
            span.error = _text(body.get("error")) or "the tool failed"
            span.attributes["error.type"] = span.error.split(":", 1)[0] if ":" in span.error else "ToolError"
        elif outcome == "missing":
            span.error = "no outcome: the run ended before the tool answered"
            span.attributes["error.type"] = "missing"

    # -- subagents -----------------------------------------------------------------------------------
    def _task_start(self, event: RunEvent) -> None:
        body = _dict(event.content)
        task_id = _text(body.get("task_id"))
        if task_id is None or task_id in self.tasks:
            return
        name = _text(body.get("subagent")) or _text(_dict(event.metadata).get("caller")) or "task"
        name = name.removeprefix("subagent:")
        self.tasks[task_id] = self._span(
            f"task:{task_id}", f"invoke_agent {name}", event.created_at, self.end, None, event.seq,
            **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name,
               "run_journal.caller": f"{SUBAGENT_PREFIX}{name}",
               "run_journal.task_id": task_id, "run_journal.subagent.status": "running"})

    def _task_step(self, event: RunEvent) -> None:
        body = _dict(event.content)
        task = self.tasks.get(_text(body.get("task_id")) or "")
        if task is None:
            return
        calls = [str(name) for call in body.get("tool_calls") or () if (name := _dict(call).get("name"))]
        task.events.append(("subagent.step", event.created_at, _clean({
            "run_journal.message_index": _int(body.get("message_index")),
            "run_journal.kind": _text(body.get("kind")),
            "gen_ai.tool.name": _text(body.get("tool_name")),
            "gen_ai.tool.call.id": _text(body.get("tool_call_id")),
            "run_journal.tool_calls": calls or None,
        })))

    def _task_end(self, event: RunEvent) -> None:
        body = _dict(event.content)
        task = self.tasks.get(_text(body.get("task_id")) or "")
        if task is None:
            return
        status = _text(body.get("status")) or "completed"
        task.end = max(task.start, event.created_at)
        task.attributes["run_journal.subagent.status"] = status
        self.task_ends[id(task)] = event.seq
        task.attributes.update(_usage_attributes(_dict(body.get("usage"))))
        if status in {"failed", "timed_out"}:
            task.error = _text(body.get("error")) or status
            task.attributes["error.type"] = status

    # -- middleware ----------------------------------------------------------------------------------
    def _hook(self, event: RunEvent) -> None:
        body = _dict(event.content)
        tag = event.event_type.removeprefix("middleware:")
        name, hook = _text(body.get("name")) or tag, _text(body.get("hook"))
        changes = _dict(body.get("changes"))
        span = self._span(event.event_id, f"{name}.{hook}" if hook else name, event.created_at,
                          event.created_at, None, event.seq,
                          **{"run_journal.middleware.tag": tag, "run_journal.middleware.name": name,
                             "run_journal.middleware.hook": hook,
                             "run_journal.middleware.action": _text(body.get("action")),
                             "run_journal.middleware.jump_to": _text(changes.get("jump_to"))})
        task_id = _text(_dict(event.metadata).get("task_id"))
        if task_id is not None:
            span.attributes["run_journal.task_id"] = task_id
        if body.get("action") == "interrupt":
            span.events.append(("interrupt", event.created_at, _interrupts(changes)))
        self.hooks.append((event.seq, f"middleware:{tag}", span))

    # -- parents -------------------------------------------------------------------------------------
    def _place_calls(self) -> None:
        """Every span under its caller's span; a hook span starts at its first model call."""
        for span in self.spans:
            if span is self.root:
                continue
            key = span.key or ""
            if key.startswith("turn:"):
                span.parent = self.root
            elif key.startswith("task:"):
                tool = self.tools.get(key.removeprefix("task:"))
                span.parent = tool if tool is not None else self.root
            elif "run_journal.middleware.tag" in span.attributes:
                task = self.tasks.get(str(span.attributes.get("run_journal.task_id", "")))
                span.parent = task if task is not None else self.root
            else:
                span.parent = self._container(str(span.attributes.get("run_journal.caller", LEAD)), span.seq)
                if "run_journal.middleware.tag" in span.parent.attributes and span.start < span.parent.start:
                    span.parent.start = span.start
                if (span.parent.key or "").startswith("turn:"):  # a turn holds its agent's calls
                    span.parent.start = min(span.parent.start, span.start)
                    span.parent.end = max(span.parent.end, span.end)


def _agent_name(caller: str) -> str | None:
    """The agent's own name for ``gen_ai.agent.name`` (a named agent or a subagent), else None."""
    for prefix in (AGENT_PREFIX, SUBAGENT_PREFIX):
        if caller.startswith(prefix):
            return caller.removeprefix(prefix) or None
    return None


def _interrupts(body: Mapping[str, Any]) -> dict[str, Any]:
    items = [_dict(item) for item in body.get("interrupts") or ()]
    ids = [str(item["id"]) for item in items if item.get("id") is not None]
    return _clean({"run_journal.interrupt.count": len(items), "run_journal.interrupt.ids": ids or None})


_TERMINAL: Final = TERMINAL_RUN_EVENTS
_HANDLERS: Final = {
    "llm.ai.response": _Planner._model_call,
    "llm.error": _Planner._model_call,
    "tool.call": _Planner._tool_call,
    "tool.outcome": _Planner._tool_outcome,
    "subagent.start": _Planner._task_start,
    "subagent.step": _Planner._task_step,
    "subagent.end": _Planner._task_end,
    "agent.handoff": _Planner._handoff,
    "context:memory": _Planner._context_event,
    "workspace_changes": _Planner._context_event,
}


# -- the SDK makes the spans -------------------------------------------------------------------------
class _DerivedIds(IdGenerator):
    """Hands out the ids the plan derived, one span at a time."""

    def __init__(self, trace_id: int) -> None:
        self.trace_id = trace_id
        self.next_span_id = 0

    def generate_span_id(self) -> int:
        return self.next_span_id

    def generate_trace_id(self) -> int:
        return self.trace_id


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("run-journal")
    except PackageNotFoundError:  # pragma: no cover - a source tree that was not installed
        return "0"


def emit_spans(events: Iterable[RunEvent], row: RunRow | None, processor: SpanProcessor, *,
               resource: Resource | None = None) -> int:
    """Make one run's spans with the SDK and hand each finished span to ``processor`` (children before
    their parents); returns how many. The events of other runs (a thread's page) are ignored."""
    chosen = sorted(events, key=lambda event: event.seq)
    run_id = row.run_id if row is not None else (chosen[0].run_id if chosen else None)
    chosen = [event for event in chosen if event.run_id == run_id]
    if not chosen and row is None:
        return 0
    if not chosen:
        raise ValueError(f"run {run_id!r} has no events to export")
    plan = _Planner(chosen, row).plan()
    trace_id = trace_id_of(plan[0].attributes["run_journal.run_id"])
    run = plan[0].attributes["run_journal.run_id"]
    ids = _DerivedIds(trace_id)
    provider = TracerProvider(
        sampler=ALWAYS_ON, resource=resource or Resource.create({"service.name": "run-journal"}),
        shutdown_on_exit=False, id_generator=ids,
        span_limits=SpanLimits(max_events=MAX_SPAN_EVENTS, max_attribute_length=MAX_ATTRIBUTE_LENGTH),
    )
    provider.add_span_processor(processor)
    tracer = provider.get_tracer(SCOPE, _version())
    made: dict[int, Any] = {}
    contexts: dict[int, trace_api.SpanContext] = {}
    for planned in _parents_first(plan):
        ids.next_span_id = span_id_of(run, planned.key)
        parent = contexts.get(id(planned.parent)) if planned.parent is not None else None
        context = trace_api.set_span_in_context(trace_api.NonRecordingSpan(parent), Context()) \
            if parent is not None else Context()
        links = [trace_api.Link(trace_api.SpanContext(trace_id_of(origin), span_id_of(origin), is_remote=True,
                                                      trace_flags=SAMPLED), attributes)
                 for origin, attributes in planned.links]
        span = tracer.start_span(planned.name, context, trace_api.SpanKind.INTERNAL, planned.attributes,
                                 links, _ns(planned.start))
        for name, moment, attributes in planned.events:
            span.add_event(name, attributes, _ns(moment))
        if planned.error is not None:
            span.set_status(trace_api.Status(trace_api.StatusCode.ERROR, planned.error))
        made[id(planned)] = (span, planned)
        contexts[id(planned)] = span.get_span_context()
    for span, planned in reversed(list(made.values())):
        span.end(_ns(planned.end))
    provider.shutdown()
    return len(made)


def _parents_first(plan: list[Planned]) -> list[Planned]:
    ordered: list[Planned] = []
    placed: set[int] = set()

    def place(span: Planned) -> None:
        if id(span) in placed:
            return
        if span.parent is not None:
            place(span.parent)
        placed.add(id(span))
        ordered.append(span)

    for span in plan:
        place(span)
    return ordered


def spans_of(events: Iterable[RunEvent], row: RunRow | None = None, *,
             resource: Resource | None = None) -> list[ReadableSpan]:
    """One run's spans (see the module docstring), made by the SDK and captured with its
    ``InMemorySpanExporter``: the root first, then in the order they started."""
    captured = InMemorySpanExporter()
    emit_spans(events, row, SimpleSpanProcessor(captured), resource=resource)
    spans = list(captured.get_finished_spans())
    return sorted(spans, key=lambda span: (span.parent is not None, span.start_time or 0))


# -- OTLP/HTTP ---------------------------------------------------------------------------------------
class OtlpExportError(RuntimeError):
    """The collector did not accept a run's spans."""


class OtlpExporter:
    """Sends runs to an OTLP/HTTP collector (``http://host:4318``; ``/v1/traces`` is added).

    ``export(events, row)`` is synchronous (one blocking request, with the SDK exporter's retries);
    ``await export_run(store, thread_id, run_id)`` reads the run from a store and sends it from a
    worker thread; ``await run_ended(store, thread_id, run_id)`` does the same and never raises (a
    failure is logged), for a journal that exports each run once its end is stored.
    """

    def __init__(self, endpoint: str = "http://127.0.0.1:4318", *, headers: Mapping[str, str] | None = None,
                 timeout: float = 10.0, service_name: str = "run-journal",
                 resource_attributes: Mapping[str, str] | None = None) -> None:
        base = endpoint.rstrip("/")
        self.endpoint = base if base.endswith("/v1/traces") else f"{base}/v1/traces"
        self.resource = Resource.create({"service.name": service_name, **(resource_attributes or {})})
        self._exporter = OTLPSpanExporter(endpoint=self.endpoint, headers=dict(headers or {}),
                                          timeout=timeout)

    def export(self, events: Iterable[RunEvent], row: RunRow | None = None) -> int:
        """Send one run's spans in one request; returns how many. ``OtlpExportError`` if refused."""
        spans = spans_of(events, row, resource=self.resource)
        if not spans:
            return 0
        if self._exporter.export(spans) is not SpanExportResult.SUCCESS:
            raise OtlpExportError(f"{self.endpoint} did not accept {len(spans)} span(s)")
        return len(spans)

    async def export_run(self, store: RunEventStore, thread_id: str, run_id: str) -> int:
        """Read one run (events and row) from ``store`` and send it; returns the number of spans."""
        from run_journal.projections import iter_events

        events = [event async for event in iter_events(store, thread_id, run_id)]
        row = await store.get_run(run_id)
        return await asyncio.to_thread(self.export, events, row)

    async def run_ended(self, store: RunEventStore, thread_id: str, run_id: str) -> None:
        """``export_run`` for a journal's end-of-run hook: a failure is logged, never raised."""
        try:
            await self.export_run(store, thread_id, run_id)
        except Exception as error:  # noqa: BLE001 - the agent's run must not fail because a collector is down
            logger.warning("OTLP export of run %s failed: %s: %s", run_id, type(error).__name__, error)

    def shutdown(self) -> None:
        self._exporter.shutdown()  # type: ignore[no-untyped-call]  # the SDK's shutdown() has no annotations
