"""A recorded model call turned back into what a chat model returns: a whole reply, or its chunks.

The reply keeps what was stored: content, tool calls, ``usage_metadata`` and ``response_metadata``,
so the journal of the replayed run reads the same usage, model and provider as the recorded one.
Where the record knew a call's model or provider from the call itself rather than from the reply,
the reply carries them (``llm_output["model_name"]``, ``response_metadata["model_provider"]``).
A failed call is raised again as an exception of the recorded type's name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, Final

from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

from run_journal.replay.recorded import RecordedCall
from run_journal.usage.tokens import TokenUsage

DROPPED_FIELDS: Final = ("type", "id")
"""Stored message fields a replayed reply does not take: its type is fixed, and LangChain gives each
replayed reply an id of its own run, as it did to the recorded one."""
_PIECES: Final = re.compile(r"\s*\S+\s*|\s+")


class RecordedModelError(Exception):
    """A model call that failed in the recorded run fails again in the replay. Each recorded error
    type gets a subclass of this class with the recorded type's name (``ConnectionError``, ...),
    so the replayed run records the same failure."""


_ERROR_TYPES: dict[str, type[RecordedModelError]] = {}


def recorded_error(call: RecordedCall) -> RecordedModelError:
    name = call.error_type or "Exception"
    kind = _ERROR_TYPES.get(name)
    if kind is None:
        kind = _ERROR_TYPES.setdefault(name, type(name, (RecordedModelError,), {"__module__": __name__}))
    return kind(call.error or "")


def reply_message(call: RecordedCall) -> AIMessage:
    """The recorded reply as an ``AIMessage`` (``ValueError`` when the stored reply is not one)."""
    stored = call.reply
    if stored is None:
        raise ValueError(f"{call.label} failed; it has no reply")
    fields = {key: value for key, value in stored.items() if key not in DROPPED_FIELDS}
    try:
        message = AIMessage.model_validate(fields)
    except Exception as error:
        raise ValueError(f"the stored reply of {call.label} is not a chat message: {error}") from error
    if message.usage_metadata is None and call.usage is not None:
        message.usage_metadata = usage_metadata(TokenUsage.from_dict(call.usage) or TokenUsage())
    if call.provider and "model_provider" not in message.response_metadata:
        message.response_metadata = {**message.response_metadata, "model_provider": call.provider}
    return message


def chat_result(call: RecordedCall) -> ChatResult:
    message = reply_message(call)
    llm_output = {"model_name": call.model} if call.model and not _names_model(message) else None
    return ChatResult(generations=[ChatGeneration(message=message)], llm_output=llm_output)


def chunks(call: RecordedCall) -> Iterator[ChatGenerationChunk]:
    """The reply as a stream: its text piece by piece, then one last chunk with the tool calls, the
    usage and the response metadata (merged, the chunks give back the recorded reply)."""
    message = reply_message(call)
    metadata = dict(message.response_metadata)
    if call.model and not _names_model(message):
        metadata["model_name"] = call.model
    content = message.content
    if isinstance(content, str):
        for piece in _PIECES.findall(content):
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece))
        last_content: Any = ""
    else:
        last_content = content  # content blocks: whole, in the last chunk
    calls = [tool_call_chunk(name=c["name"], args=json.dumps(c["args"], ensure_ascii=False), id=c["id"],
                             index=i) for i, c in enumerate(message.tool_calls)]
    calls += [tool_call_chunk(name=c.get("name"), args=c.get("args"), id=c.get("id"), index=len(calls) + i)
              for i, c in enumerate(message.invalid_tool_calls)]
    yield ChatGenerationChunk(message=AIMessageChunk(
        content=last_content, tool_call_chunks=calls, usage_metadata=message.usage_metadata,
        response_metadata=metadata, additional_kwargs=message.additional_kwargs, name=message.name,
        chunk_position="last",
    ))


def _names_model(message: AIMessage) -> bool:
    meta = message.response_metadata
    return any(isinstance(meta.get(key), str) for key in ("model_name", "model"))


def usage_metadata(usage: TokenUsage) -> UsageMetadata:
    """LangChain's ``usage_metadata`` that the journal reads back as ``usage``."""
    shaped = UsageMetadata(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                           total_tokens=usage.total_tokens)
    inputs = {"cache_read": usage.cache_read_tokens, "cache_creation": usage.cache_creation_tokens,
              "ephemeral_1h_input_tokens": usage.cache_creation_1h_tokens, "audio": usage.input_audio_tokens}
    outputs = {"reasoning": usage.reasoning_tokens, "audio": usage.output_audio_tokens}
    if any(inputs.values()):
        shaped["input_token_details"] = {key: value for key, value in inputs.items() if value}  # type: ignore[typeddict-item]  # LangChain's details are open
    if any(outputs.values()):
        shaped["output_token_details"] = {key: value for key, value in outputs.items() if value}  # type: ignore[typeddict-item]  # LangChain's details are open
    return shaped
