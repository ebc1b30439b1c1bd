"""Subagent streams: map ``task_*`` chunks to ``subagent.*`` events and journal a stream as it flows.

A parent agent that delegates to a subagent usually streams the subagent's progress as plain dict
chunks (``{"type": "task_started", "task_id": ...}``, ``task_running`` once per message, then one
terminal ``task_*``). :func:`subagent_run_event` turns one chunk into one catalog event (or ``None``),
and :func:`wrap_subagent_stream` passes every chunk of a live stream to the run's journal, so the
subagent's events take their place in the parent run's order (one writer, one order).

Chunk shapes accepted (unknown keys are ignored):

- ``task_started``: ``task_id``, ``description``, optional ``subagent`` (or ``subagent_type``).
- ``task_running``: ``task_id``, ``message_index`` (integer >= 0), ``message`` (a LangChain message,
  its ``model_dump()`` dict, its ``messages_to_dict`` form, or an OpenAI-style ``{"role": ...}`` dict).
- ``task_completed`` / ``task_failed`` / ``task_cancelled`` / ``task_timed_out``: ``task_id``,
  optional ``result``, ``error``, ``model``, ``usage``.

Mapping never raises: a chunk that does not fit is reported as ``None`` and not persisted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from typing import Any, Final, TypeVar, overload

from langchain_core.messages import BaseMessage

from run_journal.catalog import ID_MAX_LENGTH, SUBAGENT_TERMINAL_STATUSES, Category
from run_journal.envelope import JsonObject
from run_journal.journal.payloads import (
    ARGS_PREVIEW_LIMIT,
    ERROR_TEXT_LIMIT,
    args_preview,
    as_text,
    capped,
    content_text,
    error_text,
    text_fields,
)
from run_journal.journal.producer import ProducerJournal
from run_journal.redact import Redactor, redact_secrets
from run_journal.usage import usage_from_mapping

__all__ = [
    "DESCRIPTION_LIMIT", "ERROR_TEXT_LIMIT", "MAX_TOOL_CALLS", "RESULT_TEXT_LIMIT", "STEP_TEXT_LIMIT",
    "TERMINAL_STATUSES", "TOOL_ARGS_PREVIEW_LIMIT", "subagent_run_event", "wrap_subagent_stream",
]

logger = logging.getLogger(__name__)

STEP_TEXT_LIMIT: Final = 4_000
"""Characters of a step's message text kept in ``subagent.step`` (``truncated`` says when cut)."""
RESULT_TEXT_LIMIT: Final = 8_000
"""Characters of a task's result kept in ``subagent.end`` (``result_truncated``)."""
DESCRIPTION_LIMIT: Final = 2_000
"""Characters of a task's description kept in ``subagent.start`` (``description_truncated``)."""
TOOL_ARGS_PREVIEW_LIMIT: Final = ARGS_PREVIEW_LIMIT
"""Characters of one tool call's JSON arguments kept as ``args_preview`` (``args_truncated``): the
journal's one limit, as in ``tool.call``. A task's ``error`` is cut at ``ERROR_TEXT_LIMIT``."""
MAX_TOOL_CALLS: Final = 32
"""Tool calls listed per AI step; the rest are counted in ``tool_calls_omitted``."""

TERMINAL_STATUSES: Final = {f"task_{status}": status for status in SUBAGENT_TERMINAL_STATUSES}
"""The terminal chunk types and the ``subagent.end`` status each gives (``task_failed``: ``failed``)."""
_KINDS: Final = {
    "ai": "ai", "aimessage": "ai", "aimessagechunk": "ai", "assistant": "ai",
    "tool": "tool", "toolmessage": "tool", "toolmessagechunk": "tool", "function": "tool",
    "human": "human", "humanmessage": "human", "humanmessagechunk": "human", "user": "human",
    "system": "system", "systemmessage": "system", "systemmessagechunk": "system",
    "developer": "system",
}
_SUBAGENT: Final = Category.SUBAGENT.value


def subagent_run_event(chunk: Any, *, redact: Redactor = redact_secrets) -> dict[str, Any] | None:
    """Map one ``task_*`` chunk to ``{"event_type", "category", "content", "metadata"}``.

    Returns ``None`` (and never raises) for a malformed chunk: not a dict, a type that is not a
    known ``task_*``, a ``task_id`` that is not a string or is blank or longer than 255 characters
    (it is a filter key), or a ``task_running`` chunk whose ``message_index`` is not a non-negative
    integer or whose ``message`` is neither a message object nor a mapping. Tool-call arguments go
    through ``redact`` (by default the values of credential-named keys are hidden) before the preview.
    """
    try:
        return _map(chunk, redact)
    except Exception:  # a hostile chunk (broken __str__, odd mapping) is just malformed
        logger.debug("subagent chunk could not be mapped", exc_info=True)
        return None


def _map(chunk: Any, redact: Redactor) -> dict[str, Any] | None:
    if not isinstance(chunk, Mapping):
        return None
    kind = chunk.get("type")
    task_id = chunk.get("task_id")
    if not isinstance(kind, str) or not kind.startswith("task_"):
        return None
    if not isinstance(task_id, str) or not task_id.strip() or len(task_id) > ID_MAX_LENGTH:
        return None
    if kind == "task_started":
        return _started(task_id, chunk)
    if kind == "task_running":
        return _running(task_id, chunk, redact)
    if kind in TERMINAL_STATUSES:
        return _ended(task_id, TERMINAL_STATUSES[kind], chunk)
    return None


def _event(event_type: str, content: JsonObject, metadata: JsonObject) -> dict[str, Any]:
    return {"event_type": event_type, "category": _SUBAGENT, "content": content, "metadata": metadata}


def _started(task_id: str, chunk: Mapping[str, Any]) -> dict[str, Any]:
    content: JsonObject = {"task_id": task_id,
                           **text_fields("description", as_text(chunk.get("description")), DESCRIPTION_LIMIT)}
    name = chunk.get("subagent", chunk.get("subagent_type"))
    if isinstance(name, str) and name:
        content["subagent"] = name[:ID_MAX_LENGTH]
    return _event("subagent.start", content, {"task_id": task_id})


def _running(task_id: str, chunk: Mapping[str, Any], redact: Redactor) -> dict[str, Any] | None:
    index = chunk.get("message_index")
    if type(index) is not int or index < 0:
        return None
    message = _message_fields(chunk.get("message"))
    if message is None:
        return None
    kind = _KINDS.get(str(message.get("type") or message.get("role") or "").lower(), "other")
    text, cut = capped(content_text(message.get("content")), STEP_TEXT_LIMIT)
    content: JsonObject = {
        "task_id": task_id, "message_index": index, "kind": kind, "text": text, "truncated": cut,
    }
    if kind == "ai":
        calls = message.get("tool_calls")
        listed = list(calls) if isinstance(calls, list | tuple) else []
        content["tool_calls"] = [_tool_call(call, redact) for call in listed[:MAX_TOOL_CALLS]]
        if len(listed) > MAX_TOOL_CALLS:
            content["tool_calls_omitted"] = len(listed) - MAX_TOOL_CALLS
    elif kind == "tool":
        name = message.get("name")
        content["tool_name"] = name if isinstance(name, str) else None
        call_id = message.get("tool_call_id")
        if isinstance(call_id, str):
            content["tool_call_id"] = call_id
    return _event("subagent.step", content, {"task_id": task_id, "message_index": index})


def _ended(task_id: str, status: str, chunk: Mapping[str, Any]) -> dict[str, Any]:
    content: JsonObject = {"task_id": task_id, "status": status}
    model = chunk.get("model")
    if isinstance(model, str) and model:
        content["model"] = model[:ID_MAX_LENGTH]
    usage = _usage(chunk.get("usage"))
    if usage is not None:
        content["usage"] = usage
    for key, limit in (("result", RESULT_TEXT_LIMIT), ("error", ERROR_TEXT_LIMIT)):
        value = chunk.get(key)
        if value is not None:
            text = error_text(value) if key == "error" else _result_text(value)
            content[key], content[f"{key}_truncated"] = capped(text, limit)
    if chunk.get("closed_by_journal") is True:
        content["closed_by_journal"] = True
    return _event("subagent.end", content, {"task_id": task_id})


def _message_fields(message: Any) -> Mapping[str, Any] | None:
    """The fields of a message object or of one of its dict forms; None when it is not a message."""
    if isinstance(message, BaseMessage):
        return {
            "type": message.type,
            "content": message.content,
            "tool_calls": [dict(call) for call in getattr(message, "tool_calls", None) or ()],
            "name": message.name,
            "tool_call_id": getattr(message, "tool_call_id", None),
        }
    if not isinstance(message, Mapping):
        return None
    data = message.get("data")
    if "content" not in message and isinstance(data, Mapping):  # messages_to_dict() form
        return {"type": message.get("type"), **data}
    return message


def _tool_call(call: Any, redact: Redactor) -> JsonObject:
    if not isinstance(call, Mapping):
        preview, cut = capped(as_text(call), TOOL_ARGS_PREVIEW_LIMIT)
        return {"name": "", "id": None, "args_preview": preview, "args_truncated": cut}
    function = call.get("function")
    source = function if isinstance(function, Mapping) and "name" not in call else call
    name = source.get("name")
    call_id = call.get("id")
    preview, cut = args_preview(source.get("args", source.get("arguments")), redact)
    return {
        "name": name if isinstance(name, str) else "",
        "id": call_id if isinstance(call_id, str) else None,
        "args_preview": preview,
        "args_truncated": cut,
    }


def _usage(usage: Any) -> JsonObject | None:
    """The contract's flat usage shape, read by the one usage reader (every provider shape)."""
    counts = usage_from_mapping(usage)
    return None if counts is None else dict(counts.to_dict())


def _result_text(value: Any) -> str:
    if isinstance(value, BaseMessage):
        return content_text(value.content)
    return value if isinstance(value, str) else as_text(value)


# -- the stream wrapper -------------------------------------------------------------------------

T = TypeVar("T")


@overload
def wrap_subagent_stream(
    stream: AsyncIterable[T], journal: ProducerJournal, *, timeout: float | None = None
) -> AsyncIterator[T]: ...
@overload
def wrap_subagent_stream(
    stream: Iterable[T], journal: ProducerJournal, *, timeout: float | None = None
) -> Iterator[T]: ...
def wrap_subagent_stream(
    stream: Iterable[T] | AsyncIterable[T], journal: ProducerJournal, *, timeout: float | None = None
) -> Iterator[T] | AsyncIterator[T]:
    """Yield every chunk of ``stream`` unchanged (malformed ones too) and journal each one.

    A sync iterable gives a sync iterator, an async iterable an async iterator. Each chunk is passed
    to ``journal.record_subagent_chunk`` *before* it is yielded, so the subagent's events are queued
    before the consumer acts on them. With ``timeout`` (seconds from the first iteration), tasks
    still open at the deadline are closed with a synthesized ``task_timed_out`` chunk: an async
    stream does it at the deadline itself, a sync one at the next chunk or when the stream ends or
    is closed after the deadline; later chunks of a timed-out task are yielded but not journaled.
    Journaling problems are logged, never raised into the stream.
    """
    if timeout is not None and (isinstance(timeout, bool) or not timeout >= 0):
        raise ValueError(f"timeout must be a non-negative number of seconds, got {timeout!r}")
    if isinstance(stream, AsyncIterable):
        return _wrap_async(stream, _Tracker(journal, timeout))
    return _wrap_sync(stream, _Tracker(journal, timeout))


class _Tracker:
    """Feeds chunks to the journal and, with a timeout, remembers which tasks are still open."""

    def __init__(self, journal: ProducerJournal, timeout: float | None) -> None:
        self.journal = journal
        self.timeout = timeout
        self.deadline: float | None = None
        self.open: dict[str, None] = {}
        self.timed_out: set[str] = set()

    def start(self) -> None:
        if self.timeout is not None and self.deadline is None:
            self.deadline = time.monotonic() + self.timeout

    def past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def feed(self, chunk: Any) -> None:
        if self.timeout is not None:
            event = subagent_run_event(chunk)
            if event is not None:
                task_id = event["content"]["task_id"]
                if task_id in self.timed_out:
                    return
                if event["event_type"] == "subagent.end":
                    self.open.pop(task_id, None)
                else:
                    self.open[task_id] = None
        self._record(chunk)

    def expire(self) -> None:
        """Close every open task as ``timed_out`` (called once the deadline has passed)."""
        for task_id in list(self.open):
            self.open.pop(task_id)
            self.timed_out.add(task_id)
            self._record({
                "type": "task_timed_out",
                "task_id": task_id,
                "error": f"no terminal chunk within the {self.timeout:g}s timeout",
                "closed_by_journal": True,
            })

    def _record(self, chunk: Any) -> None:
        try:
            self.journal.record_subagent_chunk(chunk)
        except Exception:  # journaling must never break the subagent's stream
            logger.warning("could not journal a subagent chunk", exc_info=True)


def _wrap_sync(stream: Iterable[T], tracker: _Tracker) -> Iterator[T]:
    tracker.start()
    try:
        for chunk in stream:
            if tracker.past_deadline():
                tracker.expire()
            tracker.feed(chunk)
            yield chunk
    finally:
        if tracker.past_deadline():
            tracker.expire()


async def _wrap_async(stream: AsyncIterable[T], tracker: _Tracker) -> AsyncIterator[T]:
    import asyncio

    tracker.start()
    alarm = None
    if tracker.timeout is not None:
        # A timer on the loop closes open tasks at the deadline while we wait for the next chunk,
        # without cancelling or re-hosting the stream (it keeps running in the consumer's task).
        alarm = asyncio.get_running_loop().call_later(tracker.timeout, tracker.expire)
    try:
        async for chunk in stream:
            if tracker.past_deadline():
                tracker.expire()
            tracker.feed(chunk)
            yield chunk
    finally:
        if alarm is not None:
            alarm.cancel()
        if tracker.past_deadline():
            tracker.expire()
