"""The journal's internals: the run's state transitions and how each becomes an event.

``RunJournal`` (``journal.py``) is the callback surface; this base class holds what it does with the
lock held: build events, track model and tool calls, close the run with exactly one terminal event
and build the run row. Nothing here performs I/O; the two deferred events at the bottom do their
store reads in the writer, off the hot path.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langgraph.errors import GraphBubbleUp

from run_journal import journal_payloads as p
from run_journal.catalog import EVENTS
from run_journal.envelope import NewEvent, Normalized, new_event_id, utc_now, validate_id
from run_journal.journal_state import LlmCall, RunState, ToolRun
from run_journal.redact import Redactor
from run_journal.runs import RunRow, RunStatus
from run_journal.stores.base import RunEventStore
from run_journal.usage import RunTally, cap_text, extract_usage, model_name_of, usage_from_mapping
from run_journal.writer import DeferredEvent, EventWriter, JournalError

logger = logging.getLogger("run_journal")
CANCELLED: Final = (asyncio.CancelledError, KeyboardInterrupt, GeneratorExit)
"""How a root run that was stopped from outside ends: a cancelled task, Ctrl-C, a consumer that left
a ``stream()`` / ``astream()`` early (the generator is closed)."""


class JournalCore:
    """State and transitions of one journaled run; every method runs with ``_lock`` held."""

    thread_id: str | None
    run_id: str
    user_id: str | None
    resumed_from: str | None
    _redact: Redactor
    _lock: threading.Lock
    _state: RunState
    _tally: RunTally
    _payloads: dict[str, tuple[BaseMessage, Normalized]]
    _closed: bool
    _writer: EventWriter

    # -- internals (all called with the lock held) ------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise JournalError("this RunJournal is closed")

    def _event(self, event_type: str, content: Any, metadata: Mapping[str, Any],
               category: str | None = None, *, created_at: datetime | None = None) -> NewEvent:
        if category is None:  # the journal's own event types: ids were checked when they were set
            return NewEvent._checked_by_producer(
                self.thread_id or "pending", self.run_id, event_type, EVENTS[event_type].category, content,
                metadata, created_at or utc_now(), self.user_id,
            )
        return NewEvent(
            thread_id=self.thread_id or "pending", run_id=self.run_id, event_type=event_type,
            category=category, content=content, metadata=metadata,
            created_at=created_at or utc_now(), user_id=self.user_id,
        )

    def _message_payload(self, message: BaseMessage) -> Normalized:
        """A message's redacted, normalized payload, computed once per message id per run."""
        key = message.id if isinstance(message.id, str) and message.id else None
        cached = self._payloads.get(key) if key else None
        if cached is None or cached[0] is not message:
            cached = (message, p.message_payload(message, self._redact))
            if key:
                self._payloads[key] = cached
        return cached[1]

    def _queue(self, event: NewEvent | DeferredEvent) -> None:
        if self._state.started:
            self._writer.submit(event)
        else:
            self._state.held.append(event)

    def _start_root(self, root: uuid.UUID, name: str, inputs: Any, tags: list[str] | None,
                    metadata: dict[str, Any] | None) -> None:
        state = self._state
        if state.started:
            return  # one journal records one run; a second root call is not journaled
        lg = p.langgraph_identity(metadata)
        if self.thread_id is None:
            candidate = lg.get("thread_id")
            try:
                self.thread_id = validate_id("thread_id", candidate)
            except ValueError:
                self.thread_id = new_event_id()
        state.root, state.started_at, state.status = root, utc_now(), RunStatus.RUNNING
        state.started_mono = time.monotonic()
        state.caller = p.caller_of(tags)
        state.run_name = name
        content = {"run_name": name, "input_preview": p.input_preview(inputs)}
        user_meta = {k: v for k, v in (metadata or {}).items() if k not in p.LANGGRAPH_KEYS}
        meta = {"caller": state.caller, "langgraph": p.bounded(self._redact(lg)), "tags": list(tags or []),
                "run_metadata": p.bounded(self._redact(user_meta))}
        created = state.started_at
        if p.is_resume(inputs) and self.resumed_from is None:
            start: NewEvent | DeferredEvent = _ResumeStart(self, content, meta, created)
        else:
            start = self._start_event(content, meta, created, self.resumed_from)
        held, state.held = state.held, []
        state.started = True
        self._writer.submit(start)
        for event in held:
            self._writer.submit(event if isinstance(event, DeferredEvent)
                                else _rehome(event, self.thread_id))
        messages = p.input_messages(inputs) if not p.is_resume(inputs) else []
        state.root_input_count = len(messages)
        human = next((m for m in messages if p.is_visible_human(m)), None)
        if human is not None:
            self._tally.messages += 1
            self._tally.first_human = cap_text(p.message_text(human))
            self._queue(self._event("llm.human.input", self._message_payload(human),
                                    {"caller": state.caller, "message_id": human.id}))

    def _start_event(self, content: dict[str, Any], meta: dict[str, Any], created: datetime,
                     resumed_from: str | None) -> NewEvent:
        return self._event("run.start", {**content, "resumed_from": resumed_from},
                           {**meta, "resumed_from": resumed_from}, created_at=created)

    def _model_start(self, run_id: uuid.UUID, tags: list[str] | None, metadata: dict[str, Any] | None,
                     kwargs: dict[str, Any]) -> None:
        state = self._state
        if not state.started or state.ended:
            return
        params = kwargs.get("invocation_params") or {}
        model = params.get("model_name") or params.get("model") or (metadata or {}).get("ls_model_name")
        state.llm_calls[run_id] = LlmCall(p.caller_of(tags), str(model) if model else None,
                                          state.next_llm_index(), time.monotonic())

    def _llm_response(self, call: LlmCall, response: LLMResult) -> None:
        generations = [g for batch in response.generations for g in batch]
        first = generations[0] if generations else None
        message = first.message if isinstance(first, ChatGeneration) else AIMessage(
            content=first.text if first is not None else "")
        model = model_name_of(response, call.model)
        usage = extract_usage(response)
        priced = self._tally.add_call(call.caller, model, usage)
        now = time.monotonic()
        ttft = None if call.first_token_at is None else int((call.first_token_at - call.started) * 1000)
        meta = {
            "caller": call.caller, "llm_call_index": call.index, "model_name": model,
            "usage": usage.to_dict() if usage else None, "cost_usd": priced.cost_usd,
            "latency_ms": int((now - call.started) * 1000), "time_to_first_token_ms": ttft,
            "message_id": message.id,
        }
        self._tally.messages += 1
        if call.caller == p.LEAD_AGENT and (text := p.message_text(message)):
            self._tally.last_ai = cap_text(text)
        self._queue(self._event("llm.ai.response", self._message_payload(message), meta))
        for tool_call in getattr(message, "tool_calls", None) or []:
            call_id = tool_call.get("id")
            if not isinstance(call_id, str) or not call_id:
                continue
            preview, cut = p.args_preview(tool_call.get("args", {}), self._redact)
            name = str(tool_call.get("name", ""))
            self._state.open_calls[call_id] = (name, call.caller)
            self._queue(self._event(
                "tool.call",
                {"tool_call_id": call_id, "tool_name": name, "args_preview": preview, "args_truncated": cut},
                {"caller": call.caller, "tool_call_id": call_id, "llm_call_index": call.index},
            ))

    def _tool_result(self, message: Any, caller: str, tool_name: str | None) -> None:
        state = self._state
        call_id = message.tool_call_id
        if call_id in state.results_done:
            return
        state.results_done.add(call_id)
        if message.status == "error" and call_id not in state.errored_calls:
            state.errored_calls.add(call_id)
            self._tally.tool_errors += 1
        self._tally.messages += 1
        meta = {"caller": caller, "tool_call_id": call_id, "tool_name": message.name or tool_name,
                "status": message.status}
        self._queue(self._event("llm.tool.result", self._message_payload(message), meta))

    def _outcome(self, call_id: str, name: str, caller: str, outcome: str, tool: ToolRun | None,
                 **extra: Any) -> None:
        state = self._state
        if call_id in state.outcomes_done:
            return
        state.outcomes_done.add(call_id)
        state.open_calls.pop(call_id, None)
        if outcome == "error" and tool is not None:
            self._tally.tool_errors += 1
        duration = None if tool is None else int((time.monotonic() - tool.started) * 1000)
        content = {"tool_call_id": call_id, "tool_name": name, "outcome": outcome,
                   "duration_ms": duration, **extra}
        self._queue(self._event("tool.outcome", content, {"caller": caller, "tool_call_id": call_id}))

    def _subagent_event(self, mapped: dict[str, Any]) -> None:
        content, state = mapped["content"], self._state
        task_id = content["task_id"]
        name = content.get("subagent") or state.open_tasks.get(task_id) or "task"
        caller = f"subagent:{name}"
        if mapped["event_type"] == "subagent.start":
            state.open_tasks[task_id] = str(name)
        elif mapped["event_type"] == "subagent.end":
            state.open_tasks.pop(task_id, None)
            usage = usage_from_mapping(content.get("usage"))
            seen = self._tally.by_caller.get(caller)
            if seen is not None and seen.llm_calls:
                usage = None  # the subagent ran in-process: its model calls were already counted
            if usage is not None and task_id not in state.counted_tasks:
                state.counted_tasks.add(task_id)
                self._tally.add_external(caller, content.get("model"), usage)
        meta = {"caller": caller, **mapped["metadata"]}
        self._queue(self._event(mapped["event_type"], content, meta, mapped["category"]))

    def _close_open_work(self, *, missing: bool) -> None:
        """Before a terminal event: close unfinished subagent tasks and (optionally) unanswered calls."""
        from run_journal.subagents import subagent_run_event

        for task_id in list(self._state.open_tasks):
            mapped = subagent_run_event({"type": "task_cancelled", "task_id": task_id,
                                         "closed_by_journal": True}, redact=self._redact)
            if mapped is not None:
                self._subagent_event(mapped)
        if missing:
            for call_id, (name, caller) in list(self._state.open_calls.items()):
                self._outcome(call_id, name, caller, "missing", None)

    def _terminal(self, event_type: str, status: RunStatus, content: Any,
                  error: str | None = None) -> None:
        state = self._state
        self._close_open_work(missing=status != RunStatus.INTERRUPTED)
        state.ended, state.status, state.error = True, status, error
        state.ended_at = utc_now()
        duration = int((time.monotonic() - state.started_mono) * 1000)
        meta = {"status": status.value, "duration_ms": duration, "caller": state.caller}
        self._queue(self._event(event_type, content, meta, created_at=state.ended_at))
        self._writer.write_soon()

    def _end_root(self, output: Any) -> None:
        state = self._state
        pending = output.get("__interrupt__") if isinstance(output, Mapping) else None
        if state.interrupts or pending:
            items = list(state.interrupts.values()) or list(pending or [])
            self._terminal("run.interrupt", RunStatus.INTERRUPTED,
                           {"interrupts": p.interrupt_payload(items)})
            return
        produced, truncated, keys = p.produced_messages(
            output, state.baseline, self._redact, self._message_payload
        )
        self._terminal("run.end", RunStatus.SUCCESS, p.end_content(produced, truncated, keys))

    def _fail_root(self, error: BaseException) -> None:
        state = self._state
        if isinstance(error, CANCELLED):
            self._terminal("run.cancel", RunStatus.CANCELLED, {"reason": f"{type(error).__name__}"})
        elif state.interrupts or isinstance(error, GraphBubbleUp):
            self._terminal("run.interrupt", RunStatus.INTERRUPTED,
                           {"interrupts": p.interrupt_payload(state.interrupts.values())})
        else:
            content = {**p.error_content(error, with_traceback=True), "node": state.error_node}
            self._terminal("run.error", RunStatus.ERROR, content, error=str(content["message"]))

    def _finish_unended(self) -> None:
        with self._lock:
            if self._state.started and not self._state.ended:
                self._terminal("run.cancel", RunStatus.CANCELLED,
                               {"reason": "the journal was closed before the run ended"})
            self._closed = True

    def _row_for(self, written_status: RunStatus) -> RunRow | None:
        """The row the writer stores, with the status of the events it has actually written."""
        with self._lock:
            return self._build_row(written_status)

    def _build_row(self, status: RunStatus) -> RunRow | None:
        state = self._state
        if not state.started or self.thread_id is None:
            return None
        terminal = status in (RunStatus.SUCCESS, RunStatus.ERROR, RunStatus.INTERRUPTED,
                              RunStatus.CANCELLED)
        return RunRow(
            run_id=self.run_id, thread_id=self.thread_id, user_id=self.user_id, status=status,
            started_at=state.started_at, ended_at=state.ended_at if terminal else None,
            resumed_from=self.resumed_from, error=state.error if terminal else None,
            metadata={"run_name": state.run_name, "caller": state.caller},
            **self._tally.row_fields(),
        )


def _rehome(event: NewEvent, thread_id: str | None) -> NewEvent:
    """An event recorded before the thread was known, moved to the run's thread."""
    if thread_id is None or event.thread_id == thread_id:
        return event
    return NewEvent(
        thread_id=thread_id, run_id=event.run_id, event_type=event.event_type, category=event.category,
        content=event.content, metadata=event.metadata, created_at=event.created_at,
        event_id=event.event_id, user_id=event.user_id,
    )


class _ResumeStart(DeferredEvent):
    """``run.start`` of a ``Command(resume=...)`` run: the writer finds the run it resumes."""

    def __init__(self, journal: JournalCore, content: dict[str, Any], meta: dict[str, Any],
                 created: datetime) -> None:
        self.journal, self.content, self.meta, self.created = journal, content, meta, created

    async def resolve(self, store: RunEventStore) -> NewEvent:
        journal = self.journal
        resumed: str | None = None
        if journal.thread_id is not None:
            try:
                runs = await store.list_runs(journal.thread_id, statuses=[RunStatus.INTERRUPTED.value])
                candidates = [run for run in runs if run.run_id != journal.run_id]
                resumed = candidates[-1].run_id if candidates else None
            except Exception:  # an unknown origin must not hold the run's events back
                logger.warning("run-journal: could not look up the interrupted run", exc_info=True)
        with journal._lock:
            journal.resumed_from = resumed
            return journal._start_event(self.content, self.meta, self.created, resumed)

