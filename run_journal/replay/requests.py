"""Requests in the form a replay compares them: the recorded one, and the one a replayed call brings."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from langchain_core.messages import BaseMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from run_journal.envelope import JsonObject
from run_journal.journal.payloads import message_payload
from run_journal.normalization import encode, loads
from run_journal.redact import Redactor, redacted_text

CALL_ONLY_KWARGS: Final = frozenset({"tools", "ls_structured_output_format", "stream"})
"""Keyword arguments of a call that are not its parameters (``tools`` has a part of its own)."""


@dataclasses.dataclass(frozen=True, slots=True)
class RecordedRequest:
    """What a model call was sent, in the form a replay compares: its messages (LangChain message
    dicts without what a provider is not sent back: ids, response and usage metadata), the tools
    offered (each ``{"name", "description", "parameters"}``; None when the call's model did not
    report any, then they are not compared) and the call's parameters."""

    messages: tuple[JsonObject, ...]
    tools: tuple[JsonObject, ...] | None = None
    params: JsonObject = dataclasses.field(default_factory=dict)



NOT_SENT: Final = frozenset({"id", "response_metadata", "usage_metadata"})
"""Fields of a stored message that are not part of what a model is sent: ids (LangChain gives each
replayed message its own), and what a provider reported about a reply it made."""
CALL_IDS: Final = ("tool_calls", "invalid_tool_calls")
"""Lists of tool calls whose ids are left out (with a tool message's ``tool_call_id``): code that
writes tool calls itself (a supervisor handing the turn back) makes new ids on every run."""


def shaped_request(messages: Sequence[Any], tools: Any, params: Mapping[str, Any]) -> RecordedRequest:
    """A request in the form both sides are compared in (see ``RecordedRequest``)."""
    shaped: list[JsonObject] = []
    for message in messages:
        shaped.append(_compared(message) if isinstance(message, Mapping) else {"content": message})
    offered = None
    if isinstance(tools, list | tuple) and tools:
        offered = tuple(tool_schema(tool) for tool in tools)
    kept: JsonObject = {key: value for key, value in params.items() if key not in CALL_ONLY_KWARGS}
    return RecordedRequest(tuple(shaped), offered, kept)


def _compared(message: Mapping[str, Any]) -> JsonObject:
    kept: JsonObject = {}
    for key, value in message.items():
        if key in NOT_SENT or key == "tool_call_id":
            continue
        if key in CALL_IDS and isinstance(value, list):
            value = [{k: v for k, v in call.items() if k != "id"} if isinstance(call, Mapping) else call
                     for call in value]
        kept[str(key)] = value
    return kept


def incoming_request(messages: Sequence[BaseMessage], params: Mapping[str, Any], redact: Redactor
                     ) -> RecordedRequest:
    """The request of a call the replay model received, shaped as the journal stores requests (each
    message's payload, the tools in OpenAI's format, both redacted) and then as compared."""
    payloads = [message_payload(message, redact).value for message in messages]
    tools = params.get("tools")
    if isinstance(tools, list | tuple) and tools:
        tools = loads(redacted_text(encode([_openai_tool(tool) for tool in tools]), redact))
    return shaped_request(payloads, tools, params)


def _openai_tool(tool: Any) -> Any:
    try:
        return convert_to_openai_tool(tool)
    except Exception:  # noqa: BLE001 - a provider's own tool shape is compared as it is
        return tool


def tool_schema(tool: Any) -> JsonObject:
    """``{"name", "description", "parameters"}`` of a tool in OpenAI's format (or a bare function)."""
    function = tool.get("function") if isinstance(tool, Mapping) else None
    source = function if isinstance(function, Mapping) else tool if isinstance(tool, Mapping) else {}
    return {"name": source.get("name"), "description": source.get("description", ""),
            "parameters": source.get("parameters", {})}
