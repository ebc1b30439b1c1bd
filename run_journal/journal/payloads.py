"""The payload toolkit: pure helpers that turn LangChain / LangGraph values into event payloads.

The recorder (callbacks) and the subagent chunk mapper build their events with these, so a value is
shaped one way wherever it appears. Kept apart from the recorder so that it reads as a state machine:
nothing here touches journal state, locks or stores, and everything is cheap enough for the callback
hot path. The rules every producer follows:

- a text cut to a limit keeps its first ``limit`` characters exactly (a prefix, no ellipsis added),
  and the payload says so in a boolean beside it: ``<field>_truncated`` (``args_truncated`` for
  ``args_preview``, ``truncated`` for a subagent step's ``text``); a field that has no such flag in
  the contract gets one only when it was cut; a traceback keeps its end instead, from a line's start;
- the text of a message is its string content, or the text of its content blocks: plain strings and
  blocks of type ``text`` or ``output_text`` (or without a type) whose ``text`` is a string; images,
  tool uses, reasoning and other blocks are not text;
- a tool call's arguments are previewed as their redacted JSON text (JSON given as text is parsed
  first, text that is not JSON is replaced by its length, none is ``{}``), cut at
  ``ARGS_PREVIEW_LIMIT`` characters, wherever the call appears (``tool.call``, ``subagent.step``).
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from langchain_core.messages import BaseMessage, ToolMessage, convert_to_messages
from langgraph.errors import GraphBubbleUp, GraphInterrupt
from langgraph.types import Command

from run_journal.catalog import AGENT_PREFIX as AGENT_PREFIX  # re-exported: the recorder names them p.*
from run_journal.catalog import LEAD_AGENT as LEAD_AGENT
from run_journal.catalog import MIDDLEWARE_PREFIX, SUBAGENT_PREFIX
from run_journal.envelope import JsonObject, JsonValue, Normalized, dumps, normalize, sha256_hex
from run_journal.normalization import encode, encode_value
from run_journal.redact import Redactor, redact_json_text, redacted_string, redacted_text

CALLER_PREFIXES: Final = (SUBAGENT_PREFIX, MIDDLEWARE_PREFIX, AGENT_PREFIX)
"""Tags naming a caller explicitly (``RunnableConfig(tags=["subagent:researcher"])``)."""
HANDOFF_DESTINATION: Final = "__handoff_destination"
"""Tool metadata of langgraph-supervisor's and langgraph-swarm's handoff tools: the agent it goes to."""
HANDOFF_TOOL_PREFIXES: Final = ("transfer_to_", "transfer_back_to_")
"""How those libraries name their handoff tools by default."""
ARGS_PREVIEW_LIMIT: Final = 2000
"""Characters of a tool call's (redacted) JSON arguments kept as ``args_preview``."""
ERROR_TEXT_LIMIT: Final = 4000
"""Characters of an error's text kept (``llm.error`` / ``run.error`` message, a tool's or a task's
error)."""
TRACEBACK_LIMIT: Final = 8000
"""Characters of a traceback kept: its end, from a line's start (``traceback_truncated``)."""
INPUT_PREVIEW_LIMIT: Final = 500
OUTPUT_MESSAGES_LIMIT: Final = 100
"""At most this many messages in ``run.end``; beyond it the latest are kept and the cut is flagged."""
LANGGRAPH_KEYS: Final = (
    "thread_id", "checkpoint_ns", "checkpoint_id", "langgraph_node", "langgraph_path",
    "langgraph_step", "langgraph_triggers", "langgraph_checkpoint_ns", "assistant_id", "graph_id",
)
"""The callback metadata that identifies a LangGraph run; nothing else of it is copied (no secrets)."""


def caller_of(tags: Sequence[str] | None) -> str:
    """``subagent:<name>`` / ``middleware:<name>`` / ``lead_agent`` from a run's (inherited) tags."""
    return explicit_caller(tags) or LEAD_AGENT


def explicit_caller(tags: Sequence[str] | None) -> str | None:
    """The attribution a run's (inherited) tags name, if any: the innermost wins, as LangChain
    appends a child's own tags after inherited ones."""
    for tag in reversed(tags or ()):
        if isinstance(tag, str) and (tag.startswith(CALLER_PREFIXES) or tag == LEAD_AGENT):
            return tag
    return None


MIDDLEWARE_HOOKS: Final = frozenset({"before_agent", "before_model", "after_model", "after_agent"})
"""The middleware hooks of ``langchain.agents.create_agent`` that run as graph nodes of their own,
named ``<MiddlewareName>.<hook>`` (the wrap hooks run inside the model and tool nodes)."""
MIDDLEWARE_TAG_LIMIT: Final = 21


def middleware_node(node: str) -> tuple[str, str, str] | None:
    """``(name, hook, tag)`` for a middleware hook's node name, else None. The tag is the name in
    snake case without its ``Middleware`` suffix, within the catalog's 21 characters:
    ``SummarizationMiddleware.before_model`` -> ``("SummarizationMiddleware", "before_model",
    "summarization")``."""
    name, dot, hook = node.rpartition(".")
    if not dot or hook not in MIDDLEWARE_HOOKS or not name:
        return None
    stem = name.strip("_")
    stem = stem[: -len("Middleware")] if stem.endswith("Middleware") and stem != "Middleware" else stem
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", stem)
    tag = re.sub(r"[^a-z0-9_]+", "_", words.lower()).strip("_")[:MIDDLEWARE_TAG_LIMIT].rstrip("_")
    return (name, hook, tag or "middleware")


REMOVE_ALL_MESSAGES: Final = "__remove_all__"
MIDDLEWARE_PREVIEW_LIMIT: Final = 2000
"""Characters of a middleware hook's (redacted) state update kept in its event."""


def middleware_changes(output: Any) -> tuple[str, dict[str, Any], Any] | None:
    """What a middleware hook's node changed: ``(action, changes, update)``, or None for nothing.

    ``action`` is ``jump`` (the hook sent the run elsewhere) or ``update``; ``changes`` counts the
    messages removed (``"all"`` for a reset) and added, and names the other state keys written.
    """
    goto: Any = None
    if isinstance(output, Command):
        goto, output = output.goto, output.update
    if isinstance(output, list | tuple) and all(isinstance(item, Command) for item in output):
        updates = [item.update for item in output if isinstance(item.update, Mapping)]
        goto = next((item.goto for item in output if item.goto), None)
        output = {key: value for update in updates for key, value in update.items()}
    update = dict(output) if isinstance(output, Mapping) else {}
    jump = update.pop("jump_to", None) or goto or None
    if not update and not jump:
        return None
    changes: dict[str, Any] = {}
    messages = update.get("messages")
    if isinstance(messages, list):
        removals = [m for m in messages if getattr(m, "type", None) == "remove"]
        removed: int | str = len(removals)
        if any(getattr(m, "id", None) == REMOVE_ALL_MESSAGES for m in removals):
            removed = "all"
        changes["messages"] = {"removed": removed, "added": len(messages) - len(removals)}
    others = sorted(str(key) for key in update if key != "messages")
    if others:
        changes["updated"] = others
    if jump:
        changes["jump_to"] = jump if isinstance(jump, str) else str(jump)
    return ("jump" if jump else "update"), changes, update


def capped(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to its first ``limit`` characters, and whether it was cut."""
    return (text, False) if len(text) <= limit else (text[:limit], True)


def text_fields(name: str, text: str, limit: int) -> JsonObject:
    """``{name: text}`` cut to ``limit`` characters, with ``{name}_truncated: true`` when it was cut."""
    kept, cut = capped(text, limit)
    return {name: kept, f"{name}_truncated": True} if cut else {name: kept}


def as_text(value: Any) -> str:
    """A value as text: a string as it is, anything else as its normalized JSON (None: empty)."""
    if value is None:
        return ""
    normalized: JsonValue = normalize(value)
    return normalized if isinstance(normalized, str) else dumps(normalized)


def error_text(error: Any) -> str:
    """``"<type>: <message>"`` for an exception, the value as text for anything else."""
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    return as_text(error)


METADATA_PREVIEW_LIMIT: Final = 16 * 1024
"""Bytes of user metadata kept in ``run.start``; larger metadata is replaced by its digest."""


def bounded(value: Any, limit: int = METADATA_PREVIEW_LIMIT) -> JsonValue:
    """``value`` normalized, or, when its JSON is over ``limit`` bytes, a digest that says so."""
    if not value and isinstance(value, Mapping):
        return {}
    text, data = encode_value(value)
    if len(text) <= limit // 4 or len(text.encode("utf-8")) <= limit:
        return data
    keys = sorted(data)[:50] if isinstance(data, dict) else []
    return {"truncated": True, "bytes": len(text.encode("utf-8")), "sha256": sha256_hex(text),
            "keys": list(keys)}


def langgraph_identity(metadata: Mapping[str, Any] | None) -> JsonObject:
    if not metadata:
        return {}
    return {key: normalize(metadata[key]) for key in LANGGRAPH_KEYS if key in metadata}


def is_resume(inputs: Any) -> bool:
    return isinstance(inputs, Command) and inputs.resume is not None


def input_preview_fields(inputs: Any, redact: Redactor) -> JsonObject:
    """``input_preview`` (and ``input_preview_truncated`` when cut): the start of what the root call
    was given, the last message's text or the redacted input."""
    return text_fields("input_preview", _input_text(inputs, redact), INPUT_PREVIEW_LIMIT)


def _input_text(inputs: Any, redact: Redactor) -> str:
    if isinstance(inputs, Command):
        return f"Command(resume={redacted_text(encode(inputs.resume), redact)})"
    messages = inputs.get("messages") if isinstance(inputs, Mapping) else None
    if isinstance(messages, list) and messages and isinstance(messages[-1], BaseMessage):
        return redacted_string(message_text(messages[-1]), redact)  # cheap: no full dump
    try:
        return redacted_text(encode(inputs), redact)
    except Exception:  # noqa: BLE001 - a preview is best effort
        return ""


def input_messages(inputs: Any) -> list[BaseMessage]:
    """The messages a root call was given (a graph's ``{"messages": ...}`` or a model's prompt)."""
    raw: Any = inputs.get("messages") if isinstance(inputs, Mapping) else inputs
    if isinstance(raw, BaseMessage):
        raw = [raw]
    if not isinstance(raw, list | tuple):
        return []
    try:
        return list(convert_to_messages(raw))
    except Exception:  # noqa: BLE001 - an input we cannot read as messages has no human input
        return []


def is_visible_human(message: BaseMessage) -> bool:
    """A human message a person typed: not hidden from the UI, not a summary of older turns."""
    if message.type != "human":
        return False
    extra = message.additional_kwargs or {}
    if extra.get("hide_from_ui") or extra.get("lc_source") == "summarization":
        return False
    return message.name not in {"summary", "summarization"}


TEXT_BLOCK_TYPES: Final = frozenset({None, "text", "output_text"})
"""Content blocks whose ``text`` is the message's text (``None``: a block without a type)."""


def message_text(message: BaseMessage) -> str:
    """The text of a message (see the module docstring for which blocks count)."""
    return content_text(message.content)


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text blocks of a content-block list."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list | tuple):
        return as_text(content)
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and block.get("type") in TEXT_BLOCK_TYPES:
            text = block.get("text")
            if isinstance(text, str):
                parts.append(text)
    return "".join(parts)


def message_payload(message: BaseMessage, redact: Redactor) -> Normalized:
    """The message in its compact dump: ``model_dump()`` without default-valued fields (empty
    ``additional_kwargs``, ``None`` name...), ``type`` always kept; normalized, encoded and redacted
    once (events that carry it write the text as is)."""
    try:
        dumped: Any = message.model_dump(exclude_defaults=True)
        dumped["type"] = message.type
    except Exception:  # noqa: BLE001 - a message that cannot dump itself is stored as normalize() sees it
        dumped = message
    return Normalized.from_text(redacted_text(encode(dumped), redact))


def args_preview(args: Any, redact: Redactor) -> tuple[str, bool]:
    """A tool call's arguments as redacted JSON text, capped (see the module docstring)."""
    if isinstance(args, str):
        text = redact_json_text(args, redact)
    else:
        text = redacted_text(encode({} if args is None else args), redact)
    return capped(text, ARGS_PREVIEW_LIMIT)


def tool_messages(output: Any) -> list[ToolMessage]:
    """Tool messages in a tool's or node's output: a ToolMessage, a ``Command(update=...)``, lists."""
    found: list[ToolMessage] = []
    _collect(output, found, 0)
    return found


def _collect(value: Any, found: list[ToolMessage], depth: int) -> None:
    if depth > 4:
        return
    if isinstance(value, ToolMessage):
        found.append(value)
    elif isinstance(value, Command):
        _collect(value.update, found, depth + 1)
    elif isinstance(value, Mapping):
        _collect(value.get("messages"), found, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, tuple) and len(item) == 2 and item[0] == "messages":
                _collect(item[1], found, depth + 1)  # Command(update=[("messages", [...])])
            else:
                _collect(item, found, depth + 1)


def result_digest(output: Any) -> tuple[int, str]:
    """Size in UTF-8 bytes and sha256 of a tool's result text (never the text itself)."""
    content: Any = output.content if isinstance(output, ToolMessage) else output
    text = content if isinstance(content, str) else encode(content)
    data = text.encode("utf-8", "surrogatepass")
    return len(data), sha256_hex(data)


def error_content(error: BaseException, *, with_traceback: bool) -> JsonObject:
    """``llm.error`` / ``run.error`` content: ``error_type``, ``message`` and, asked for, the
    ``traceback`` (its end, from a line's start, so no line or key is cut in two)."""
    content: JsonObject = {"error_type": type(error).__name__,
                           **text_fields("message", str(error), ERROR_TEXT_LIMIT)}
    if with_traceback and error.__traceback__ is not None:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        cut = len(text) > TRACEBACK_LIMIT
        if cut:
            text = text[-TRACEBACK_LIMIT:]
            text = text[text.find("\n") + 1:]
        content["traceback"] = text
        if cut:
            content["traceback_truncated"] = True
    return content


def tool_error_fields(error: BaseException) -> JsonObject:
    """A failed tool call's ``error`` for its ``tool.outcome`` (``error_truncated`` when cut)."""
    return text_fields("error", error_text(error), ERROR_TEXT_LIMIT)


def is_bubble_up(error: BaseException) -> bool:
    """LangGraph's control flow (an interrupt, a command to the parent graph), not a failure."""
    return isinstance(error, GraphBubbleUp)


def interrupts_of(error: BaseException) -> list[Any]:
    """The ``Interrupt`` objects a ``GraphInterrupt`` carries (empty for other errors)."""
    if not isinstance(error, GraphInterrupt) or not error.args:
        return []
    first = error.args[0]
    return list(first) if isinstance(first, list | tuple) else [first]


def interrupt_payload(interrupts: Iterable[Any]) -> list[JsonValue]:
    return [
        {"id": getattr(item, "id", None), "value": normalize(getattr(item, "value", item))}
        for item in interrupts
    ]


def end_content(produced: Any, truncated: bool, keys: list[str] | None) -> Any:
    """``run.end`` content: ``{"output", "output_truncated", "state_keys"?}``. Messages the run
    already wrote are spliced in as the JSON text of their payloads instead of being encoded again."""
    messages = produced.get("messages") if type(produced) is dict and len(produced) == 1 else None
    if not isinstance(messages, list) or any(type(item) is not Normalized for item in messages):
        content: JsonObject = {"output": produced, "output_truncated": truncated}
        if keys is not None:
            content["state_keys"] = keys  # type: ignore[assignment]  # a list of str is JSON
        return content
    parts = ['{"output":{"messages":[', ",".join(item.text for item in messages), ']},"output_truncated":',
             "true" if truncated else "false"]
    if keys is not None:
        parts += [',"state_keys":', encode(keys)]
    parts.append("}")
    return Normalized.from_text("".join(parts))


def produced_messages(
    output: Any,
    baseline: set[str] | None,
    redact: Redactor | None = None,
    payload_of: Callable[[BaseMessage], Any] | None = None,
) -> tuple[Any, bool, list[str] | None]:
    """What a root run produced: new messages only (never the thread's whole history), bounded.

    ``baseline`` holds the ids of the messages the thread had before this run; without it only the
    latest messages are kept and the result is flagged as truncated. ``redact`` hides secrets in
    tool-call arguments and state keys, as in every other event (AI messages repeat their tool calls);
    ``payload_of`` (the journal's cache of payloads it already wrote) replaces ``message_payload``.
    """
    if isinstance(output, Mapping):
        keys = sorted(str(key) for key in output)
        messages = output.get("messages")
        if isinstance(messages, list):
            if baseline is not None:
                new = [m for m in messages if getattr(m, "id", None) not in baseline]
            else:
                new = messages
            truncated = len(new) > OUTPUT_MESSAGES_LIMIT or (baseline is None and len(new) > 1)
            keep = new[-OUTPUT_MESSAGES_LIMIT:] if baseline is not None else new[-1:]
            if payload_of is not None:
                keep = [payload_of(m) if isinstance(m, BaseMessage) else m for m in keep]
            elif redact is not None:
                keep = [message_payload(m, redact) if isinstance(m, BaseMessage) else m for m in keep]
            return {"messages": keep}, truncated, keys  # NewEvent normalizes once
        state = normalize({key: value for key, value in output.items() if key != "__interrupt__"})
        return (redact(state) if redact is not None else state), False, keys
    return normalize(output), False, None
