"""An incoming model call's request, shaped as the journal records requests, so the two compare."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from langchain_core.messages import BaseMessage

from run_journal.envelope import JsonObject
from run_journal.journal.payloads import message_payload
from run_journal.redact import Redactor
from run_journal.replay.recorded import RecordedRequest

CALL_ONLY_KWARGS: Final = frozenset({"tools", "ls_structured_output_format", "stream"})
"""Keyword arguments of a call that are not its parameters (``tools`` has a part of its own)."""


def incoming_request(messages: Sequence[BaseMessage], kwargs: Mapping[str, Any], redact: Redactor
                     ) -> RecordedRequest:
    """The request of a call the replay model received: its messages as the journal stores them
    (without their ids: LangChain gives replies new ones), the tools bound to it and its parameters."""
    shaped: list[JsonObject] = []
    for message in messages:
        value = message_payload(message, redact).value
        if isinstance(value, dict):
            value = {key: item for key, item in value.items() if key != "id"}
        shaped.append(value if isinstance(value, dict) else {"content": value})
    tools = tuple(tool_schema(tool) for tool in kwargs.get("tools") or ())
    params: JsonObject = {key: value for key, value in kwargs.items() if key not in CALL_ONLY_KWARGS}
    return RecordedRequest(tuple(shaped), tools, params)


def tool_schema(tool: Any) -> JsonObject:
    """``{"name", "description", "parameters"}`` of a tool bound to the model (OpenAI's shape)."""
    function = tool.get("function") if isinstance(tool, Mapping) else None
    source = function if isinstance(function, Mapping) else tool if isinstance(tool, Mapping) else {}
    return {"name": source.get("name"), "description": source.get("description", ""),
            "parameters": source.get("parameters", {})}
