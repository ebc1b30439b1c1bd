"""What a run did, step by step: the structured trajectory checks and comparisons read.

Every step names the ``seq`` of the event it was read from (and of the events that completed it), so a
check can say which events it relied on and a comparison can point at both runs' records.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Mapping
from typing import Any, ClassVar, Final

from run_journal.catalog import AGENT_PREFIX, LEAD_AGENT
from run_journal.envelope import JsonObject, JsonValue
from run_journal.runs import UsageTotals

AGENT_CALLERS: Final = (LEAD_AGENT, AGENT_PREFIX)
"""Callers whose replies are the conversation a user sees: the lead agent and each named agent."""


def is_agent_caller(caller: str) -> bool:
    """``lead_agent`` or ``agent:<name>`` (not a subagent, not a middleware)."""
    return caller == LEAD_AGENT or caller.startswith(AGENT_PREFIX)


@dataclasses.dataclass(frozen=True, slots=True)
class ToolRequest:
    """One tool call as the model asked for it in a reply."""

    id: str
    name: str
    args: JsonValue

    def to_dict(self) -> JsonObject:
        return {"id": self.id, "name": self.name, "args": self.args}


@dataclasses.dataclass(frozen=True, slots=True)
class ModelCall:
    """One model call: its reply (``llm.ai.response``) or its failure (``llm.error``)."""

    kind: ClassVar[str] = "model_call"
    seq: int
    caller: str
    index: int | None
    """``llm_call_index``: the call's position among the run's model calls, as the journal counted."""
    model: str | None
    text: str
    tool_calls: tuple[ToolRequest, ...] = ()
    usage: JsonObject | None = None
    cost_usd: float | None = None
    latency_ms: int | None = None
    error: str | None = None
    handoff: bool = False
    """Routing between agents (a reply that only hands the turn over), not conversation."""

    def compared(self) -> dict[str, JsonValue]:
        return {
            "tool_calls": [{"name": call.name, "args": call.args} for call in self.tool_calls],
            "text": self.text,
            "model": self.model,
            "error": self.error,
        }

    def label(self) -> str:
        return "model call" + (" (failed)" if self.error is not None else "")

    def to_dict(self) -> JsonObject:
        return {
            "kind": self.kind, "seq": self.seq, "caller": self.caller, "index": self.index,
            "model": self.model, "text": self.text,
            "tool_calls": [call.to_dict() for call in self.tool_calls], "usage": self.usage,
            "cost_usd": self.cost_usd, "latency_ms": self.latency_ms, "error": self.error,
            "handoff": self.handoff,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call: what was asked (``tool.call``), how it ended (``tool.outcome``) and what the
    model got back (``llm.tool.result``, or a subagent's tool step).

    ``args`` are the arguments of the model's reply; when the reply is not on record they come from
    ``tool.call``'s capped preview (``args_truncated`` then says whether it was cut). ``outcome`` is
    ``success``, ``error``, ``missing`` or None while no outcome is recorded (an interrupted run).
    """

    kind: ClassVar[str] = "tool_call"
    seq: int
    caller: str
    tool_call_id: str
    name: str
    args: JsonValue = None
    args_truncated: bool = False
    outcome: str | None = None
    result: str | None = None
    result_sha256: str | None = None
    result_size: int | None = None
    error: str | None = None
    duration_ms: int | None = None
    attempts: int | None = None
    outcome_seq: int | None = None
    result_seq: int | None = None

    @property
    def failed(self) -> bool:
        return self.outcome in {"error", "missing"}

    @property
    def seqs(self) -> tuple[int, ...]:
        """Every event this call was read from, in order."""
        return tuple(sorted({self.seq, *(s for s in (self.outcome_seq, self.result_seq) if s)}))

    def compared(self) -> dict[str, JsonValue]:
        fields: dict[str, JsonValue] = {"name": self.name, "args": self.args, "outcome": self.outcome}
        fields["result"] = self.result if self.result is not None else self.result_sha256
        fields["error"] = self.error
        return fields

    def label(self) -> str:
        return f"tool {self.name}"

    def to_dict(self) -> JsonObject:
        return {
            "kind": self.kind, "seq": self.seq, "caller": self.caller, "tool_call_id": self.tool_call_id,
            "name": self.name, "args": self.args, "args_truncated": self.args_truncated,
            "outcome": self.outcome, "result": self.result, "result_sha256": self.result_sha256,
            "result_size": self.result_size, "error": self.error, "duration_ms": self.duration_ms,
            "attempts": self.attempts, "outcome_seq": self.outcome_seq, "result_seq": self.result_seq,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class SubagentTask:
    """One subagent task, from ``subagent.start`` to ``subagent.end`` (``status`` None while open)."""

    kind: ClassVar[str] = "subagent_task"
    seq: int
    caller: str
    task_id: str
    name: str | None
    description: str
    status: str | None = None
    result: str | None = None
    error: str | None = None
    end_seq: int | None = None

    @property
    def seqs(self) -> tuple[int, ...]:
        return (self.seq,) if self.end_seq is None else (self.seq, self.end_seq)

    def compared(self) -> dict[str, JsonValue]:
        return {"name": self.name, "description": self.description, "status": self.status,
                "result": self.result, "error": self.error}

    def label(self) -> str:
        return f"subagent {self.name or '?'}"

    def to_dict(self) -> JsonObject:
        return {
            "kind": self.kind, "seq": self.seq, "caller": self.caller, "task_id": self.task_id,
            "name": self.name, "description": self.description, "status": self.status,
            "result": self.result, "error": self.error, "end_seq": self.end_seq,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Handoff:
    """The turn passing from one agent to another (``agent.handoff``)."""

    kind: ClassVar[str] = "handoff"
    seq: int
    caller: str
    from_agent: str
    to_agent: str
    tool_call_id: str | None = None

    def compared(self) -> dict[str, JsonValue]:
        return {"from_agent": self.from_agent, "to_agent": self.to_agent}

    def label(self) -> str:
        return f"handoff to {self.to_agent}"

    def to_dict(self) -> JsonObject:
        return {"kind": self.kind, "seq": self.seq, "caller": self.caller, "from_agent": self.from_agent,
                "to_agent": self.to_agent, "tool_call_id": self.tool_call_id}


@dataclasses.dataclass(frozen=True, slots=True)
class MiddlewareStep:
    """A middleware hook that changed the run (``middleware:<tag>``)."""

    kind: ClassVar[str] = "middleware"
    seq: int
    caller: str
    tag: str
    name: str
    hook: str
    action: str
    changes: JsonObject = dataclasses.field(default_factory=dict)

    def compared(self) -> dict[str, JsonValue]:
        return {"tag": self.tag, "hook": self.hook, "action": self.action}

    def label(self) -> str:
        return f"middleware {self.tag}"

    def to_dict(self) -> JsonObject:
        return {"kind": self.kind, "seq": self.seq, "caller": self.caller, "tag": self.tag,
                "name": self.name, "hook": self.hook, "action": self.action, "changes": self.changes}


Step = ModelCall | ToolCall | SubagentTask | Handoff | MiddlewareStep


@dataclasses.dataclass(frozen=True, slots=True)
class FileChange:
    """One file of a ``workspace_changes`` event."""

    seq: int
    path: str
    root: str
    status: str
    """``created``, ``modified`` or ``deleted``."""

    def to_dict(self) -> JsonObject:
        return {"seq": self.seq, "path": self.path, "root": self.root, "status": self.status}


@dataclasses.dataclass(frozen=True, slots=True)
class Score:
    """A score recorded on the run (``run.score``)."""

    seq: int
    name: str
    value: JsonValue
    source: str
    comment: str | None = None

    def to_dict(self) -> JsonObject:
        return {"seq": self.seq, "name": self.name, "value": self.value, "source": self.source,
                "comment": self.comment}


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """One message of the conversation as the models saw it, in OpenAI's chat format when shown."""

    seq: int
    caller: str
    role: str
    """``user``, ``assistant`` or ``tool``."""
    content: str
    tool_calls: tuple[ToolRequest, ...] = ()
    tool_call_id: str | None = None

    def to_openai(self) -> JsonObject:
        message: JsonObject = {"role": self.role, "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [_openai_tool_call(call) for call in self.tool_calls]
        if self.role == "tool":
            message["tool_call_id"] = self.tool_call_id or ""
        return message


def _openai_tool_call(call: ToolRequest) -> JsonObject:
    arguments = call.args if isinstance(call.args, str) else json.dumps(call.args, ensure_ascii=False)
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments}}


@dataclasses.dataclass(frozen=True, slots=True)
class Trajectory:
    """One run read back from its events (and its run row, when there is one).

    ``steps`` are in the order their first event was stored. ``status`` is the fold over the run's
    lifecycle events (``terminal_seq`` is its terminal event's seq, None while the run is open);
    ``final_answer`` is the last reply with text of the lead agent or of a named agent.
    ``usage`` and ``cost_usd`` are the run row's totals (summed from the replies when there is no
    row, with an unknown cost); ``duration_ms`` is the terminal event's, else the row's.
    """

    thread_id: str
    run_id: str
    status: str
    steps: tuple[Step, ...]
    messages: tuple[Message, ...]
    input: str | None = None
    input_seq: int | None = None
    final_answer: str | None = None
    final_answer_seq: int | None = None
    error: str | None = None
    start_seq: int | None = None
    terminal_seq: int | None = None
    error_seqs: tuple[int, ...] = ()
    """``run.error`` events (a run can record more than one failure)."""
    usage: UsageTotals = dataclasses.field(default_factory=UsageTotals)
    cost_note: str | None = None
    duration_ms: int | None = None
    files: tuple[FileChange, ...] = ()
    files_omitted: int = 0
    """Changed files the ``workspace_changes`` events counted but did not list (over their limits)."""
    scores: tuple[Score, ...] = ()
    event_count: int = 0
    has_row: bool = False

    @property
    def model_calls(self) -> tuple[ModelCall, ...]:
        return tuple(step for step in self.steps if isinstance(step, ModelCall))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(step for step in self.steps if isinstance(step, ToolCall))

    @property
    def subagent_tasks(self) -> tuple[SubagentTask, ...]:
        return tuple(step for step in self.steps if isinstance(step, SubagentTask))

    @property
    def handoffs(self) -> tuple[Handoff, ...]:
        return tuple(step for step in self.steps if isinstance(step, Handoff))

    @property
    def middleware(self) -> tuple[MiddlewareStep, ...]:
        return tuple(step for step in self.steps if isinstance(step, MiddlewareStep))

    @property
    def cost_usd(self) -> float | None:
        return self.usage.cost_usd

    def openai_messages(self, callers: Collection[str] | None = None) -> list[JsonObject]:
        """The conversation as OpenAI-style messages (``role``, ``content``, ``tool_calls`` with
        ``id`` / ``type`` / ``function{name, arguments}``, tool messages with ``tool_call_id``),
        the shape agentevals' trajectory evaluators take.

        ``callers``: None for the lead agent and every named agent (what the user's conversation
        holds), ``"all"`` for every caller (subagents and middleware too), or a collection of caller
        names.
        """
        return [message.to_openai() for message in self.messages if _selected(message.caller, callers)]

    def to_dict(self) -> JsonObject:
        return {
            "thread_id": self.thread_id, "run_id": self.run_id, "status": self.status,
            "input": self.input, "final_answer": self.final_answer, "error": self.error,
            "usage": self.usage.to_dict(), "cost_note": self.cost_note, "duration_ms": self.duration_ms,
            "steps": [step.to_dict() for step in self.steps],
            "files": [change.to_dict() for change in self.files],
            "scores": [score.to_dict() for score in self.scores],
        }


def _selected(caller: str, callers: Collection[str] | None) -> bool:
    if callers is None:
        return is_agent_caller(caller)
    if callers == "all":
        return True
    if isinstance(callers, str):
        raise ValueError(f"callers must be None, 'all' or a collection of caller names, got {callers!r}")
    return caller in callers


def value_text(value: Any) -> str:
    """A field value as the text a person compares: strings as they are, the rest as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def mapping_of(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
