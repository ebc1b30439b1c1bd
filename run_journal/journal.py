"""RunJournal: LangChain callbacks in, catalog events out, one run per journal.

The handler is a small state machine guarded by one lock (callbacks arrive from the event loop
thread and from executor threads). Each callback only builds ``NewEvent`` objects in memory and
hands them to the :class:`~run_journal.writer.EventWriter`, which owns every store call. Callbacks
never raise into the user's graph: a bug here is logged and counted in ``stats.callback_errors``.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Final, ParamSpec, Self, TypeVar

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langgraph.errors import GraphBubbleUp

from run_journal import journal_payloads as p
from run_journal.catalog import (
    LIFECYCLE_EVENTS,
    category_of,
    middleware_event_type,
)
from run_journal.envelope import NewEvent, Normalized, new_event_id, sha256_hex, validate_id
from run_journal.journal_core import JournalCore
from run_journal.journal_state import RunState, ToolRun
from run_journal.redact import Redactor, resolve_redactor
from run_journal.runs import RunRow
from run_journal.stores.base import RunEventStore
from run_journal.usage import Pricing, RunTally
from run_journal.writer import EventWriter, JournalError, JournalStats, RetryPolicy

logger = logging.getLogger("run_journal")
P = ParamSpec("P")
R = TypeVar("R")


def _guarded(method: Callable[P, None]) -> Callable[P, None]:
    """Never let journaling break the user's run; count and log instead. Then apply backpressure."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        journal: RunJournal = args[0]  # type: ignore[assignment]  # first argument is self
        writer = journal._writer
        try:
            method(*args, **kwargs)
        except Exception:  # a journaling bug must not become the user's exception
            writer.callback_errors += 1
            logger.exception("run-journal: %s failed", method.__name__)
        if writer.backlogged and writer.throttle():
            journal._await_room()

    return wrapper


_AWAITABLE_CALLBACKS: Final = (
    "on_chain_start", "on_chain_end", "on_chain_error", "on_chat_model_start", "on_llm_start",
    "on_llm_new_token", "on_llm_end", "on_llm_error", "on_tool_start", "on_tool_end", "on_tool_error",
)


class RunJournal(JournalCore, BaseCallbackHandler):
    """Record one LangGraph / LangChain run as an ordered event stream plus a ``RunRow``.

    Pass it as ``config={"callbacks": [journal]}``, then make it durable with ``await
    journal.flush()`` / ``await journal.aclose()`` / ``async with journal:`` (or ``with journal:``
    around sync code). ``store`` is a ``RunEventStore`` or a store URL (opened and closed by the
    journal on its writer's loop, the convenient form for sync graphs).

    Options:
      ``pricing``: ``{model: {"input", "output", "cache_read", "cache_write"}}`` USD per million
      tokens; models without a price have ``cost_usd`` None. ``redact``: a callable applied to
      callback metadata, tool arguments and middleware changes before anything is queued (default:
      ``redact.redact_secrets``; ``False`` disables). ``resumed_from``: the run a
      ``Command(resume=...)`` resumes (default: the thread's latest interrupted run, looked up by
      the writer). ``batch_size`` (200), ``flush_interval`` (0.1 s), ``row_interval`` (2 s between
      run-row updates), ``max_pending`` (10 000 queued events before backpressure), ``retry``
      (a ``RetryPolicy``): see ``run_journal.writer``.
    """

    run_inline = True
    raise_error = False

    def __init__(
        self,
        store: RunEventStore | str,
        *,
        thread_id: str | None = None,
        run_id: str | None = None,
        user_id: str | None = None,
        pricing: Pricing | None = None,
        redact: Redactor | bool | None = None,
        resumed_from: str | None = None,
        batch_size: int = 200,
        flush_interval: float = 0.1,
        row_interval: float = 2.0,
        max_pending: int = 10_000,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__()
        self.thread_id = validate_id("thread_id", thread_id) if thread_id is not None else None
        self.run_id = validate_id("run_id", run_id) if run_id is not None else new_event_id()
        self.user_id = validate_id("user_id", user_id) if user_id is not None else None
        self.resumed_from = validate_id("resumed_from", resumed_from) if resumed_from else None
        self._redact = resolve_redactor(redact)
        self._lock = threading.Lock()
        self._state = RunState()
        self._tally = RunTally(pricing=pricing)
        self._payloads: dict[str, tuple[BaseMessage, Normalized]] = {}
        self._closed = False
        self._reported_errors = 0
        self._writer = EventWriter(
            store, self._row_for, batch_size=batch_size, flush_interval=flush_interval,
            row_interval=row_interval, max_pending=max_pending, retry=retry,
        )

    # -- backpressure on the writer's loop ----------------------------------------------------------
    def _await_room(self) -> None:
        """The queue is over ``max_pending`` and this callback ran on the writer's loop, which must
        not block. LangChain awaits a handler method that is a coroutine function, so until the queue
        has room again the callbacks are shadowed on this instance by coroutine versions that wait
        for the writer; the normal path stays plain calls."""
        if "on_llm_end" in self.__dict__:
            return
        for name in _AWAITABLE_CALLBACKS:
            setattr(self, name, functools.partial(self._awaiting_callback, getattr(type(self), name)))

    async def _awaiting_callback(self, callback: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        callback(self, *args, **kwargs)
        if threading.get_ident() == self._writer.loop_thread:
            await self._writer.wait_for_room()
        if not self._writer.needs_room():
            for name in _AWAITABLE_CALLBACKS:
                self.__dict__.pop(name, None)

    # -- public surface ---------------------------------------------------------------------------
    @property
    def stats(self) -> JournalStats:
        return self._writer.stats()

    @property
    def run_row(self) -> RunRow | None:
        """The run row as the journal sees it now (the stored one may lag until ``flush()``)."""
        with self._lock:
            return self._build_row(self._state.status)

    def unwritten_events(self) -> list[NewEvent]:
        """Events still waiting for the store (after a failed flush: what would be lost), including
        events recorded for a run whose root never started."""
        with self._lock:
            held = [event for event in self._state.held if isinstance(event, NewEvent)]
        return held + self._writer.unwritten()

    async def flush(self) -> None:
        """Write every event queued so far and the run row.

        ``JournalError`` if the store refused them, or if a callback failed since the last flush (the
        run itself went on; the log says what failed): journaling problems never pass silently.
        """
        await self._writer.flush()
        self._raise_for_lost_work()

    async def aclose(self) -> None:
        """Finish: an unfinished run is recorded as cancelled, then everything is flushed."""
        self._finish_unended()
        await self._writer.flush(closing=True)
        self._raise_for_lost_work()

    def close(self) -> None:
        """``aclose()`` for sync code (the writer must not run on this thread's loop)."""
        self._finish_unended()
        self._writer.close_blocking()
        self._raise_for_lost_work()

    def _raise_for_lost_work(self) -> None:
        with self._lock:
            failed = self._writer.callback_errors - self._reported_errors
            self._reported_errors = self._writer.callback_errors
            held = 0 if self._state.started else len(self._state.held)
        if held and self._closed:
            raise JournalError(
                f"{held} recorded event(s) were not written: the run they belong to never started "
                "(no root callback reached this journal); see unwritten_events()"
            )
        if failed:
            raise JournalError(
                f"{failed} journal callback(s) failed (logged by the 'run_journal' logger); the run "
                "went on, but its record may be incomplete"
            )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- recorders (any thread) -------------------------------------------------------------------
    def record(self, event_type: str, *, content: Any = "", metadata: Mapping[str, Any] | None = None,
               caller: str = p.LEAD_AGENT) -> None:
        """Queue any catalog event in run order (workspace changes, custom producers).

        Validated now (``ValueError`` for unknown names, lifecycle events or bad payloads); events
        recorded before the run starts are held and written right after ``run.start``.
        """
        if event_type in LIFECYCLE_EVENTS:
            raise ValueError(f"{event_type!r} is written by the journal's callbacks, not record()")
        try:
            category = category_of(event_type)
        except KeyError:
            raise ValueError(f"unknown event type {event_type!r}; see run_journal.catalog") from None
        with self._lock:
            self._check_open()
            event = self._event(event_type, content, {"caller": caller, **(metadata or {})}, category)
            self._queue(event)

    def record_middleware(self, tag: str, *, name: str, hook: str, action: str,
                          changes: Mapping[str, Any]) -> None:
        """``middleware:{tag}``: a middleware changed the run's state. The tag is checked first."""
        event_type = middleware_event_type(tag)
        if not isinstance(changes, Mapping):
            raise ValueError("changes must be a mapping")
        content = {"name": name, "hook": hook, "action": action, "changes": self._redact(dict(changes))}
        self.record(event_type, content=content, caller=f"middleware:{name}")

    def record_memory_context(self, *, content: str | None = None, content_sha256: str | None = None) -> bool:
        """``context:memory`` once per run: the sha256 of the memory text (never the text)."""
        if (content is None) == (content_sha256 is None):
            raise ValueError("pass exactly one of content= or content_sha256=")
        payload: dict[str, Any] = {}
        if content is not None:
            payload = {"content_sha256": sha256_hex(content), "content_length": len(content)}
        else:
            digest = str(content_sha256).lower()
            if len(digest) != 64 or any(ch not in "0123456789abcdef" for ch in digest):
                raise ValueError("content_sha256 must be 64 hexadecimal characters")
            payload = {"content_sha256": digest}
        with self._lock:
            if self._state.memory_recorded:
                return False
            self._state.memory_recorded = True
        self.record("context:memory", content=payload)
        return True

    def record_subagent_chunk(self, chunk: Any) -> bool:
        """Journal one ``task_*`` stream chunk; malformed chunks are ignored (returns False)."""
        from run_journal.subagents import subagent_run_event  # lazy: subagents imports usage only

        mapped = subagent_run_event(chunk, redact=self._redact)
        if mapped is None:
            return False
        with self._lock:
            self._check_open()
            self._subagent_event(mapped)
        return True

    # -- chains -----------------------------------------------------------------------------------
    @_guarded
    def on_chain_start(self, serialized: dict[str, Any] | None, inputs: Any, *, run_id: uuid.UUID,
                       parent_run_id: uuid.UUID | None = None, tags: list[str] | None = None,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        with self._lock:
            name = kwargs.get("name") or (serialized or {}).get("name") or "chain"
            if parent_run_id is None:
                self._start_root(run_id, str(name), inputs, tags, metadata)
                return
            state = self._state
            if not state.started:
                return
            state.chain_names[run_id] = str((metadata or {}).get("langgraph_node") or name)
            if state.baseline is None and parent_run_id == state.root and isinstance(inputs, Mapping):
                messages = inputs.get("messages")
                if isinstance(messages, list):
                    previous = messages[: max(0, len(messages) - state.root_input_count)]
                    state.baseline = {m.id for m in previous if isinstance(getattr(m, "id", None), str)}

    @_guarded
    def on_chain_end(self, outputs: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        with self._lock:
            state = self._state
            if run_id == state.root and not state.ended:
                self._end_root(outputs)
            elif state.started and not state.ended:
                state.chain_names.pop(run_id, None)
                answerable = state.answerable()
                for message in p.tool_messages(outputs) if answerable else ():
                    if message.tool_call_id in answerable:  # _tool_result skips a repeated id
                        self._tool_result(message, state.caller_of_call(message.tool_call_id), None)

    @_guarded
    def on_chain_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        with self._lock:
            state = self._state
            if not state.started or state.ended:
                return
            for item in p.interrupts_of(error):
                state.interrupts.setdefault(str(getattr(item, "id", id(item))), item)
            if run_id == state.root:
                self._fail_root(error)
            elif not isinstance(error, GraphBubbleUp) and state.error_node is None:
                state.error_node = state.chain_names.get(run_id)

    # -- models -----------------------------------------------------------------------------------
    @_guarded
    def on_chat_model_start(self, serialized: dict[str, Any] | None, messages: list[list[BaseMessage]],
                            *, run_id: uuid.UUID, parent_run_id: uuid.UUID | None = None,
                            tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                            **kwargs: Any) -> None:
        with self._lock:
            if parent_run_id is None and not self._state.started:
                self._start_root(run_id, "chat_model", messages[0] if messages else [], tags, metadata)
            self._model_start(run_id, tags, metadata, kwargs)

    @_guarded
    def on_llm_start(self, serialized: dict[str, Any] | None, prompts: list[str], *, run_id: uuid.UUID,
                     parent_run_id: uuid.UUID | None = None, tags: list[str] | None = None,
                     metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        with self._lock:
            if parent_run_id is None and not self._state.started:
                self._start_root(run_id, "llm", prompts, tags, metadata)
            self._model_start(run_id, tags, metadata, kwargs)

    @_guarded
    def on_llm_new_token(self, token: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        call = self._state.llm_calls.get(run_id)
        if call is not None and call.first_token_at is None:
            call.first_token_at = time.monotonic()

    @_guarded
    def on_llm_end(self, response: LLMResult, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        with self._lock:
            call = self._state.llm_calls.pop(run_id, None)
            if call is None or self._state.ended:
                return  # a second on_llm_end for the same call, or a call outside the run
            self._llm_response(call, response)
            if run_id == self._state.root:
                generations = [g for batch in response.generations for g in batch]
                first = generations[0] if generations else None
                self._end_root(first.message if isinstance(first, ChatGeneration) else response.llm_output)

    @_guarded
    def on_llm_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        with self._lock:
            call = self._state.llm_calls.pop(run_id, None)
            if call is None or self._state.ended:
                return
            meta = {"caller": call.caller, "llm_call_index": call.index, "model_name": call.model}
            self._queue(self._event("llm.error", p.error_content(error, with_traceback=False), meta))
            if run_id == self._state.root:
                self._fail_root(error)

    # -- tools ------------------------------------------------------------------------------------
    @_guarded
    def on_tool_start(self, serialized: dict[str, Any] | None, input_str: str, *, run_id: uuid.UUID,
                      parent_run_id: uuid.UUID | None = None, tags: list[str] | None = None,
                      metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        with self._lock:
            state = self._state
            if not state.started or state.ended:
                return
            name = str((serialized or {}).get("name") or kwargs.get("name") or "tool")
            call_id = kwargs.get("tool_call_id")
            state.tool_runs[run_id] = ToolRun(name, call_id if isinstance(call_id, str) else None,
                                              p.caller_of(tags), time.monotonic())
            if isinstance(call_id, str):
                state.seen_calls.add(call_id)
            self._tally.tool_calls += 1

    @_guarded
    def on_tool_end(self, output: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        with self._lock:
            tool = self._state.tool_runs.pop(run_id, None)
            if tool is None or self._state.ended:
                return
            status = "success"
            for message in p.tool_messages(output):
                self._tool_result(message, tool.caller, tool.name)
                if message.tool_call_id == tool.call_id and message.status == "error":
                    status = "error"
            if tool.call_id is not None:
                size, digest = p.result_digest(output)
                self._outcome(tool.call_id, tool.name, tool.caller, status, tool,
                              result_size=size, result_sha256=digest)

    @_guarded
    def on_tool_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        with self._lock:
            tool = self._state.tool_runs.pop(run_id, None)
            if tool is None or self._state.ended:
                return
            if isinstance(error, GraphBubbleUp):  # an interrupt or a parent command, not a failure
                for item in p.interrupts_of(error):
                    self._state.interrupts.setdefault(str(getattr(item, "id", id(item))), item)
                return
            if tool.call_id is not None:
                self._state.errored_calls.add(tool.call_id)
                text = p.capped(f"{type(error).__name__}: {error}", p.ERROR_TEXT_LIMIT)[0]
                self._outcome(tool.call_id, tool.name, tool.caller, "error", tool, error=text)
