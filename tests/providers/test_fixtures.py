"""The local server's replies are what each provider's own SDK accepts: every body and stream event
parses into the SDK's typed response (required fields present, types right), and Bedrock's use only
the members its service model declares, framed as botocore's event-stream decoder expects."""

from __future__ import annotations

import json
from typing import Any

import pytest

from providers.server import Reply
from providers.wire import CASES_BY_ID as CASES


def sse_data(reply: Reply) -> list[tuple[str | None, Any]]:
    events = []
    for block in reply.body.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in lines and lines["data"] != "[DONE]":
            events.append((lines.get("event"), json.loads(lines["data"])))
    return events


@pytest.mark.parametrize("case_id", ["openai-chat", "openai-chat-streamed", "deepseek", "deepseek-streamed"])
def test_chat_completions_parse_with_the_openai_sdk(case_id: str) -> None:
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    for reply in CASES[case_id].replies:
        if reply.content_type == "application/json":
            parsed = ChatCompletion.model_validate(json.loads(reply.body))
            assert parsed.usage is not None
            assert parsed.usage.prompt_tokens_details is not None
        else:
            chunks = [ChatCompletionChunk.model_validate(data) for _, data in sse_data(reply)]
            assert chunks[-1].usage is not None
            assert reply.body.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize("case_id", ["openai-responses", "openai-responses-streamed"])
def test_responses_parse_with_the_openai_sdk(case_id: str) -> None:
    from openai.types.responses import Response, ResponseStreamEvent
    from pydantic import TypeAdapter

    events = TypeAdapter(ResponseStreamEvent)
    for reply in CASES[case_id].replies:
        if reply.content_type == "application/json":
            parsed = Response.model_validate(json.loads(reply.body))
        else:
            stream = [(name, events.validate_python(data)) for name, data in sse_data(reply)]
            assert all(name == event.type for name, event in stream)
            last = stream[-1][1]
            assert last.type == "response.completed"
            parsed = last.response
        assert parsed.usage is not None
        assert parsed.usage.output_tokens_details.reasoning_tokens >= 0


@pytest.mark.parametrize("case_id", ["anthropic-5m", "anthropic-1h", "anthropic-5m-streamed",
                                     "anthropic-1h-streamed"])
def test_messages_parse_with_the_anthropic_sdk(case_id: str) -> None:
    from anthropic.types import Message, RawMessageStreamEvent
    from pydantic import TypeAdapter

    events = TypeAdapter(RawMessageStreamEvent)
    for reply in CASES[case_id].replies:
        if reply.content_type == "application/json":
            message = Message.model_validate(json.loads(reply.body))
            assert message.usage.cache_creation is not None
        else:
            # the SDK's stream reader skips ``ping`` (a keep-alive, not a message event)
            parsed = [(name, events.validate_python(data))
                      for name, data in sse_data(reply) if name != "ping"]
            assert all(name == event.type for name, event in parsed)
            assert parsed[0][1].type == "message_start"


@pytest.mark.parametrize("case_id", ["gemini", "gemini-streamed"])
def test_generate_content_parses_with_the_google_genai_sdk(case_id: str) -> None:
    from google.genai.types import GenerateContentResponse

    for reply in CASES[case_id].replies:
        bodies = [json.loads(reply.body)] if reply.content_type == "application/json" else \
            [data for _, data in sse_data(reply)]
        for body in bodies:
            parsed = GenerateContentResponse.model_validate(body)
            assert parsed.usage_metadata is not None
            assert parsed.usage_metadata.prompt_token_count == body["usageMetadata"]["promptTokenCount"]
        assert parsed.model_version == CASES[case_id].returned_model


def declared(value: Any, shape: Any, path: str) -> None:
    """Every key of ``value`` is a member of the botocore ``shape`` (recursively)."""
    if shape.type_name == "structure":
        assert isinstance(value, dict), path
        if shape.members and not getattr(shape, "is_document_type", False):
            unknown = set(value) - set(shape.members)
            assert not unknown, f"{path}: not in {shape.name}: {unknown}"
            for key, item in value.items():
                declared(item, shape.members[key], f"{path}.{key}")
    elif shape.type_name == "list":
        for index, item in enumerate(value):
            declared(item, shape.member, f"{path}[{index}]")


@pytest.mark.parametrize("case_id", ["bedrock", "bedrock-streamed"])
def test_converse_parses_with_botocore(case_id: str) -> None:
    import botocore.session
    from botocore.eventstream import EventStreamBuffer

    service = botocore.session.get_session().get_service_model("bedrock-runtime")
    for reply in CASES[case_id].replies:
        if reply.content_type == "application/json":
            declared(json.loads(reply.body), service.operation_model("Converse").output_shape, "Converse")
            continue
        assert reply.content_type == "application/vnd.amazon.eventstream"
        stream_shape = service.operation_model("ConverseStream").output_shape.members["stream"]
        buffer = EventStreamBuffer()
        buffer.add_data(reply.body)  # checks each prelude's and message's CRC32
        names = []
        for message in buffer:
            headers = message.headers
            assert (headers[":message-type"], headers[":content-type"]) == ("event", "application/json")
            name = headers[":event-type"]
            names.append(name)
            declared(json.loads(message.payload), stream_shape.members[name], name)
        assert names[0] == "messageStart"
        assert names[-2:] == ["messageStop", "metadata"]


def test_chat_lines_parse_with_the_ollama_sdk() -> None:
    from ollama import ChatResponse

    for reply in CASES["ollama"].replies:
        lines = [ChatResponse.model_validate(json.loads(line)) for line in reply.body.splitlines()]
        assert lines[-1].done
        assert lines[-1].prompt_eval_count is not None
