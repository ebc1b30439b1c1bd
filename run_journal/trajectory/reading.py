"""A run's events (and row) folded into its ``Trajectory``: one pass, in seq order, no I/O."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from run_journal.catalog import LEAD_AGENT, MIDDLEWARE_PREFIX, TERMINAL_RUN_EVENTS, canonical_event_type
from run_journal.envelope import JsonValue, RunEvent
from run_journal.projections import iter_events
from run_journal.runs import RunRow, RunStatus, UsageTotals, status_of
from run_journal.stores.base import RunEventStore
from run_journal.trajectory.steps import (
    FileChange,
    Handoff,
    Message,
    MiddlewareStep,
    ModelCall,
    Score,
    Step,
    SubagentTask,
    ToolCall,
    ToolRequest,
    Trajectory,
    is_agent_caller,
    mapping_of,
)

SCORE_EVENT = "run.score"


async def read_trajectory(
    store: RunEventStore, thread_id: str, run_id: str, *, user_id: str | None = None
) -> Trajectory:
    """The trajectory of one stored run: every event of the run, read page by page, and its row.

    ``LookupError`` when the thread holds no event of the run and the store has no row for it in
    that thread (``user_id`` keeps only that user's events, like every read).
    """
    events = [event async for event in iter_events(store, thread_id, run_id, user_id=user_id)]
    row = await store.get_run(run_id)
    if row is not None and (row.thread_id != thread_id or (user_id is not None and row.user_id != user_id)):
        row = None
    if not events and row is None:
        raise LookupError(f"no run {run_id!r} in thread {thread_id!r}")
    return build_trajectory(events, row, thread_id=thread_id, run_id=run_id)


def build_trajectory(
    events: Iterable[RunEvent], row: RunRow | None = None, *, thread_id: str | None = None,
    run_id: str | None = None,
) -> Trajectory:
    """Fold one run's events (any order: they are sorted by seq) and its optional row."""
    ordered = sorted(events, key=lambda event: event.seq)
    thread = thread_id or (ordered[0].thread_id if ordered else row.thread_id if row else "")
    run = run_id or (ordered[0].run_id if ordered else row.run_id if row else "")
    fold = _Fold()
    for event in ordered:
        fold.add(event)
    return fold.trajectory(thread, run, ordered, row)


@dataclasses.dataclass
class _Fold:
    steps: list[Step] = dataclasses.field(default_factory=list)
    messages: list[Message] = dataclasses.field(default_factory=list)
    tools: dict[str, int] = dataclasses.field(default_factory=dict)
    """tool_call_id -> index in ``steps``."""
    tasks: dict[str, int] = dataclasses.field(default_factory=dict)
    requested: dict[str, ToolRequest] = dataclasses.field(default_factory=dict)
    """Tool calls of the replies seen so far, by id (their arguments are whole, not a preview)."""
    answered: set[str] = dataclasses.field(default_factory=set)
    """Tool call ids whose result reached a model as ``llm.tool.result``."""
    from_steps: set[int] = dataclasses.field(default_factory=set)
    """Seqs of the tool messages read from a subagent's steps (dropped when the result is on record)."""
    input: str | None = None
    input_seq: int | None = None
    start_seq: int | None = None
    terminal: RunEvent | None = None
    errors: list[RunEvent] = dataclasses.field(default_factory=list)
    files: list[FileChange] = dataclasses.field(default_factory=list)
    files_omitted: int = 0
    scores: list[Score] = dataclasses.field(default_factory=list)

    def add(self, event: RunEvent) -> None:
        name = canonical_event_type(event.event_type)
        caller = _caller(event)
        content = mapping_of(event.content)
        if name == "run.start":
            self.start_seq = self.start_seq or event.seq
        elif name in TERMINAL_RUN_EVENTS:
            self.terminal = event
            if name == "run.error":
                self.errors.append(event)
        elif name == "llm.human.input":
            text = content_text(content.get("content"))
            if self.input is None:
                self.input, self.input_seq = text, event.seq
            self.messages.append(Message(event.seq, caller, "user", text))
        elif name == "llm.ai.response":
            self._reply(event, caller, content)
        elif name == "llm.error":
            error = f"{content.get('error_type', 'Error')}: {content.get('message', '')}"
            self.steps.append(ModelCall(event.seq, caller, _int(event.metadata.get("llm_call_index")),
                                        _str(event.metadata.get("model_name")), "", error=error))
        elif name == "tool.call":
            self._tool_call(event, caller, content)
        elif name == "tool.outcome":
            self._tool_outcome(event, caller, content)
        elif name == "llm.tool.result":
            self._tool_result(event, caller, content)
        elif name.startswith("subagent."):
            self._subagent(event, name, caller, content)
        elif name == "agent.handoff":
            self.steps.append(Handoff(event.seq, caller, str(content.get("from_agent", "")),
                                      str(content.get("to_agent", "")), _str(content.get("tool_call_id"))))
        elif name.startswith(MIDDLEWARE_PREFIX):
            changes = content.get("changes")
            self.steps.append(MiddlewareStep(
                event.seq, caller, name[len(MIDDLEWARE_PREFIX):], str(content.get("name", "")),
                str(content.get("hook", "")), str(content.get("action", "")),
                dict(changes) if isinstance(changes, Mapping) else {}))
        elif name == "workspace_changes":
            self._files(event)
        elif name == SCORE_EVENT:
            self.scores.append(Score(event.seq, str(content.get("name", "")), content.get("value"),
                                     str(content.get("source", "")), _str(content.get("comment"))))

    def _reply(self, event: RunEvent, caller: str, content: Mapping[str, Any]) -> None:
        requests = []
        for call in content.get("tool_calls") or ():
            call = mapping_of(call)
            request = ToolRequest(str(call.get("id") or ""), str(call.get("name", "")), call.get("args"))
            requests.append(request)
            if request.id:
                self.requested[request.id] = request
        meta = event.metadata
        usage = meta.get("usage")
        cost = meta.get("cost_usd")
        text = content_text(content.get("content"))
        self.steps.append(ModelCall(
            event.seq, caller, _int(meta.get("llm_call_index")), _str(meta.get("model_name")), text,
            tuple(requests), dict(usage) if isinstance(usage, Mapping) else None,
            float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None,
            _int(meta.get("latency_ms")), handoff=bool(meta.get("handoff")),
        ))
        self.messages.append(Message(event.seq, caller, "assistant", text, tuple(requests)))

    def _tool_call(self, event: RunEvent, caller: str, content: Mapping[str, Any]) -> None:
        call_id = str(content.get("tool_call_id") or event.metadata.get("tool_call_id") or "")
        request = self.requested.get(call_id)
        truncated = bool(content.get("args_truncated"))
        args: JsonValue
        if request is not None:
            args, truncated = request.args, False
        else:
            args = _parsed(str(content.get("args_preview", "")), truncated)
        step = ToolCall(event.seq, caller, call_id, str(content.get("tool_name", "")), args, truncated)
        self._put_tool(call_id, step)

    def _tool_step(self, event: RunEvent, caller: str, call_id: str, name: str) -> tuple[int, ToolCall]:
        """The step of ``call_id``; a call whose ``tool.call`` is in another run (a resumed run)
        starts here."""
        if call_id in self.tools:
            at = self.tools[call_id]
            step = self.steps[at]
            assert isinstance(step, ToolCall)
            return at, step
        request = self.requested.get(call_id)
        step = ToolCall(event.seq, caller, call_id, name, request.args if request else None)
        self._put_tool(call_id, step)
        return self.tools[call_id], step

    def _put_tool(self, call_id: str, step: ToolCall) -> None:
        if call_id and call_id in self.tools:  # the same id asked again (a retry of the reply)
            call_id = f"{call_id}#{step.seq}"
        self.tools[call_id] = len(self.steps)
        self.steps.append(step)

    def _tool_outcome(self, event: RunEvent, caller: str, content: Mapping[str, Any]) -> None:
        call_id = str(content.get("tool_call_id") or event.metadata.get("tool_call_id") or "")
        at, step = self._tool_step(event, caller, call_id, str(content.get("tool_name", "")))
        self.steps[at] = dataclasses.replace(
            step, outcome=_str(content.get("outcome")), result_sha256=_str(content.get("result_sha256")),
            result_size=_int(content.get("result_size")), error=_str(content.get("error")),
            duration_ms=_int(content.get("duration_ms")), attempts=_int(content.get("attempts")),
            outcome_seq=event.seq,
        )

    def _tool_result(self, event: RunEvent, caller: str, content: Mapping[str, Any]) -> None:
        call_id = str(event.metadata.get("tool_call_id") or content.get("tool_call_id") or "")
        name = str(event.metadata.get("tool_name") or content.get("name") or "")
        text = content_text(content.get("content"))
        at, step = self._tool_step(event, caller, call_id, name)
        self.steps[at] = dataclasses.replace(step, result=text, result_seq=event.seq)
        self.answered.add(call_id)
        self.messages.append(Message(event.seq, caller, "tool", text, tool_call_id=call_id))

    def _subagent(self, event: RunEvent, name: str, caller: str, content: Mapping[str, Any]) -> None:
        task_id = str(content.get("task_id") or event.metadata.get("task_id") or "")
        if name == "subagent.start":
            subagent = _str(content.get("subagent"))
            description = str(content.get("description", ""))
            self.tasks[task_id] = len(self.steps)
            self.steps.append(SubagentTask(event.seq, caller, task_id, subagent, description))
            self.messages.append(Message(event.seq, caller, "user", description))
        elif name == "subagent.end" and task_id in self.tasks:
            at = self.tasks[task_id]
            task = self.steps[at]
            assert isinstance(task, SubagentTask)
            self.steps[at] = dataclasses.replace(
                task, status=_str(content.get("status")), result=_str(content.get("result")),
                error=_str(content.get("error")), end_seq=event.seq)
        elif name == "subagent.end":  # a task whose start this run did not record
            self.steps.append(SubagentTask(
                event.seq, caller, task_id, None, "", _str(content.get("status")),
                _str(content.get("result")), _str(content.get("error")), event.seq))
        elif name == "subagent.step" and content.get("kind") == "tool":
            call_id = _str(content.get("tool_call_id"))
            if call_id and call_id in self.tools:
                at = self.tools[call_id]
                step = self.steps[at]
                assert isinstance(step, ToolCall)
                if step.result is None:
                    self.steps[at] = dataclasses.replace(step, result=str(content.get("text", "")),
                                                         result_seq=event.seq)
            if call_id:
                self.from_steps.add(event.seq)
                self.messages.append(Message(event.seq, caller, "tool", str(content.get("text", "")),
                                             tool_call_id=call_id))

    def _files(self, event: RunEvent) -> None:
        payload = mapping_of(event.metadata.get("workspace_changes"))
        omitted = mapping_of(payload.get("summary")).get("files_omitted", payload.get("files_omitted"))
        self.files_omitted += _int(omitted) or 0
        for entry in payload.get("files") or ():
            entry = mapping_of(entry)
            self.files.append(FileChange(event.seq, str(entry.get("path", "")), str(entry.get("root", "")),
                                         str(entry.get("status", ""))))

    def trajectory(self, thread_id: str, run_id: str, events: list[RunEvent], row: RunRow | None
                   ) -> Trajectory:
        status = status_of(events)
        if status is RunStatus.PENDING and row is not None:
            status = RunStatus(row.status)
        final = next((step for step in reversed(self.steps) if isinstance(step, ModelCall)
                      and is_agent_caller(step.caller) and not step.handoff and step.text), None)
        messages = [message for message in self.messages
                    if message.seq not in self.from_steps or message.tool_call_id not in self.answered]
        error = None
        if self.errors:
            content = mapping_of(self.errors[-1].content)
            error = f"{content.get('error_type', 'Error')}: {content.get('message', '')}"
        elif row is not None and row.error:
            error = row.error
        return Trajectory(
            thread_id=thread_id, run_id=run_id, status=str(status), steps=tuple(self.steps),
            messages=tuple(messages), input=self.input, input_seq=self.input_seq,
            final_answer=final.text if final else row.last_ai_message if row else None,
            final_answer_seq=final.seq if final else None, error=error, start_seq=self.start_seq,
            terminal_seq=self.terminal.seq if self.terminal else None,
            error_seqs=tuple(event.seq for event in self.errors),
            usage=row.usage if row is not None else _summed_usage(self.steps),
            cost_note=row.cost_note if row is not None else None,
            duration_ms=_duration(self.terminal, row), files=tuple(self.files),
            files_omitted=self.files_omitted,
            scores=tuple(self.scores), event_count=len(events), has_row=row is not None,
        )


def _duration(terminal: RunEvent | None, row: RunRow | None) -> int | None:
    if terminal is not None:
        duration = terminal.metadata.get("duration_ms")
        if isinstance(duration, int) and not isinstance(duration, bool):
            return duration
    if row is not None and row.started_at and row.ended_at:
        return round((row.ended_at - row.started_at).total_seconds() * 1000)
    return None


def _summed_usage(steps: list[Step]) -> UsageTotals:
    total = UsageTotals()
    costs: list[float | None] = []
    for step in steps:
        if isinstance(step, ModelCall) and step.error is None:
            total += UsageTotals.from_dict({**(step.usage or {}), "llm_calls": 1, "cost_usd": None})
            costs.append(step.cost_usd)
    known = bool(costs) and all(cost is not None for cost in costs)
    return dataclasses.replace(total, cost_usd=sum(c for c in costs if c is not None) if known else None)


def content_text(content: Any) -> str:
    """The readable text of a message's content: a string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [block if isinstance(block, str) else str(block.get("text", ""))
                 for block in content
                 if isinstance(block, str) or (isinstance(block, Mapping) and block.get("type") == "text")]
        return "".join(parts)
    return "" if content is None else json.dumps(content, ensure_ascii=False, sort_keys=True)


def _parsed(preview: str, truncated: bool) -> JsonValue:
    """Arguments from a ``tool.call`` preview: the JSON value when it is whole, else the text."""
    if truncated:
        return preview
    try:
        value: JsonValue = json.loads(preview)
    except ValueError:
        return preview
    return value


def _caller(event: RunEvent) -> str:
    caller = event.metadata.get("caller")
    return caller if isinstance(caller, str) else LEAD_AGENT


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None

