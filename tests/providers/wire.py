"""Each provider's replies for one agent turn with one tool call, in its documented wire format.

A turn is two model calls: the first asks for ``get_weather(city="Paris")``, the second answers. Each
case says what the provider reported (``reported``, one ``TokenUsage`` per call, in LangChain's
counting convention), where genai-prices finds the usage in the provider's own bodies, and the model
name the provider returned.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from typing import Any

from providers import eventstream
from providers.server import Reply, ndjson, sse
from run_journal.usage import TokenUsage

ARGS = {"city": "Paris"}
ANSWER = "It is sunny in Paris, 21 degrees."
CREATED = 1_760_000_000


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    model: Callable[[str, str], Any]
    """(server URL, API key) -> the LangChain chat model, talking to that server."""
    replies: list[Reply]
    reported: list[TokenUsage]
    returned_model: str
    """The model name the provider returned (the per-model bucket's key)."""
    usage_bodies: list[Any] = dataclasses.field(default_factory=list)
    """The provider's own JSON that carries each call's usage (a body, or a stream's usage event)."""
    genai: tuple[str, str] | None = None
    """(provider_id, api_flavor) for ``genai_prices.extract_usage``; None: genai-prices has no price."""
    price_model: str | None = None
    """The model genai-prices prices when the usage body names none."""
    twin: str | None = None
    """The plain case a streamed case must agree with."""
    stream_the_agent: bool = False
    """Run the agent with ``astream(stream_mode="messages")`` (how a model without a streaming switch
    is made to stream: LangGraph's message stream asks every model call for its chunks)."""


def _json(value: Any) -> str:
    return json.dumps(value)


# -- OpenAI Chat Completions (and DeepSeek, which speaks it) -------------------------------------------
def chat_usage(prompt: int, cached: int, completion: int, reasoning: int, **extra: Any) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
            **extra}


def chat_completion(model: str, message: dict[str, Any], finish: str, usage: dict[str, Any],
                    n: int) -> dict[str, Any]:
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": CREATED, "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": usage, "service_tier": "default", "system_fingerprint": "fp_0a1b2c"}


def tool_message(reasoning: str | None = None) -> dict[str, Any]:
    message = {"role": "assistant", "content": None, "refusal": None, "annotations": [],
               "tool_calls": [{"id": "call_w1", "type": "function",
                               "function": {"name": "get_weather", "arguments": _json(ARGS)}}]}
    return {**message, "reasoning_content": reasoning} if reasoning is not None else message


def text_message(reasoning: str | None = None) -> dict[str, Any]:
    message = {"role": "assistant", "content": ANSWER, "refusal": None, "annotations": []}
    return {**message, "reasoning_content": reasoning} if reasoning is not None else message


def chat_chunks(model: str, n: int, deltas: list[dict[str, Any]], finish: str,
                usage: dict[str, Any] | None, include_usage: bool) -> list[dict[str, Any]]:
    """``chat.completion.chunk`` objects: the deltas, a finish chunk, then (``stream_options.include_usage``)
    a last chunk with no choices and the usage; with it, every other chunk has ``usage: null``."""
    def chunk(choices: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
        base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": CREATED, "model": model,
                "system_fingerprint": "fp_0a1b2c", "service_tier": "default", "choices": choices}
        return {**base, **({"usage": None} if include_usage else {}), **more}

    out = [chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]) for delta in deltas]
    out.append(chunk([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}]))
    if include_usage:
        out.append(chunk([], usage=usage))
    return out


def tool_deltas(reasoning: str | None = None) -> list[dict[str, Any]]:
    first: dict[str, Any] = {"role": "assistant", "content": None}
    deltas = [{**first, "reasoning_content": reasoning}, {"reasoning_content": None}] if reasoning \
        else [first]
    return [*deltas,
            {"tool_calls": [{"index": 0, "id": "call_w1", "type": "function",
                             "function": {"name": "get_weather", "arguments": ""}}]},
            {"tool_calls": [{"index": 0, "function": {"arguments": _json(ARGS)}}]}]


def text_deltas(reasoning: str | None = None) -> list[dict[str, Any]]:
    first: list[dict[str, Any]] = [{"role": "assistant", "content": "", "reasoning_content": reasoning}] \
        if reasoning else [{"role": "assistant", "content": ""}]
    return [*first, {"content": ANSWER[:10]}, {"content": ANSWER[10:]}]


def _chat_usage_token(prompt: int, cached: int, completion: int, reasoning: int) -> TokenUsage:
    return TokenUsage(prompt, completion, prompt + completion, cache_read_tokens=cached,
                      reasoning_tokens=reasoning)


OPENAI_USAGE = [(1_300, 1_024, 180, 128), (1_450, 1_280, 60, 32)]


def openai_chat(streamed: bool, include_usage: bool = True) -> Case:
    returned = "gpt-5-mini-2025-08-07"
    usages = [chat_usage(*counts) for counts in OPENAI_USAGE]

    def model(url: str, key: str) -> Any:
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(model="gpt-5-mini", base_url=f"{url}/v1", api_key=key, streaming=streamed,  # type: ignore[arg-type]
                          stream_usage=include_usage, max_retries=0)

    if not streamed:
        bodies = [chat_completion(returned, tool_message(), "tool_calls", usages[0], 1),
                  chat_completion(returned, text_message(), "stop", usages[1], 2)]
        return Case("openai-chat", model, [Reply.json(body) for body in bodies],
                    [_chat_usage_token(*counts) for counts in OPENAI_USAGE], returned, bodies,
                    ("openai", "chat"))
    streams = [chat_chunks(returned, 1, tool_deltas(), "tool_calls", usages[0], include_usage),
               chat_chunks(returned, 2, text_deltas(), "stop", usages[1], include_usage)]
    replies = [Reply(sse([(None, chunk) for chunk in chunks], done=True), "text/event-stream")
               for chunks in streams]
    if not include_usage:
        return Case("openai-chat-streamed-no-usage", model, replies, [], returned)
    return Case("openai-chat-streamed", model, replies,
                [_chat_usage_token(*counts) for counts in OPENAI_USAGE], returned,
                [chunks[-1] for chunks in streams], ("openai", "chat"), twin="openai-chat")


DEEPSEEK_USAGE = [(800, 512, 300, 240), (1_150, 768, 90, 60)]


def deepseek(streamed: bool) -> Case:
    returned = "deepseek-reasoner"
    usages = [chat_usage(p, c, o, r, prompt_cache_hit_tokens=c, prompt_cache_miss_tokens=p - c)
              for p, c, o, r in DEEPSEEK_USAGE]
    thinking = "The user wants the weather; call the tool."

    def model(url: str, key: str) -> Any:
        from langchain_deepseek import ChatDeepSeek

        return ChatDeepSeek(model="deepseek-reasoner", api_base=url, api_key=key, streaming=streamed,  # type: ignore[arg-type]
                            stream_usage=True, max_retries=0)

    reported = [_chat_usage_token(*counts) for counts in DEEPSEEK_USAGE]
    if not streamed:
        bodies = [chat_completion(returned, tool_message(thinking), "tool_calls", usages[0], 1),
                  chat_completion(returned, text_message("Answer from the tool's result."), "stop",
                                  usages[1], 2)]
        return Case("deepseek", model, [Reply.json(body) for body in bodies], reported, returned, bodies,
                    ("deepseek", "chat"))
    streams = [chat_chunks(returned, 1, tool_deltas(thinking), "tool_calls", usages[0], True),
               chat_chunks(returned, 2, text_deltas("Answer from the tool's result."), "stop", usages[1],
                           True)]
    replies = [Reply(sse([(None, chunk) for chunk in chunks], done=True), "text/event-stream")
               for chunks in streams]
    return Case("deepseek-streamed", model, replies, reported, returned, [chunks[-1] for chunks in streams],
                ("deepseek", "chat"), twin="deepseek")


# -- OpenAI Responses API -------------------------------------------------------------------------------
RESPONSES_USAGE = [(1_100, 1_024, 200, 128), (1_330, 1_280, 50, 0)]


def response_body(model: str, n: int, output: list[dict[str, Any]], usage: tuple[int, int, int, int],
                  status: str = "completed") -> dict[str, Any]:
    inputs, cached, outputs, reasoning = usage
    return {
        "id": f"resp_{n}", "object": "response", "created_at": CREATED, "status": status, "model": model,
        "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "error": None, "incomplete_details": None, "instructions": None, "metadata": {},
        "temperature": 1.0, "top_p": 1.0, "text": {"format": {"type": "text"}},
        "reasoning": {"effort": "medium", "summary": None}, "store": True, "truncation": "disabled",
        "usage": {"input_tokens": inputs,
                  "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
                  "output_tokens": outputs, "output_tokens_details": {"reasoning_tokens": reasoning},
                  "total_tokens": inputs + outputs},
    }


def openai_responses(streamed: bool = False) -> Case:
    returned = "gpt-5-mini-2025-08-07"

    def model(url: str, key: str) -> Any:
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(model="gpt-5-mini", base_url=f"{url}/v1", api_key=key, use_responses_api=True,  # type: ignore[arg-type]
                          streaming=streamed, max_retries=0)

    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_w1", "name": "get_weather",
            "arguments": _json(ARGS), "status": "completed"}
    text = {"type": "message", "id": "msg_2", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": ANSWER, "annotations": [], "logprobs": []}]}
    bodies = [response_body(returned, 1, [reasoning, call], RESPONSES_USAGE[0]),
              response_body(returned, 2, [text], RESPONSES_USAGE[1])]
    reported = [TokenUsage(i, o, i + o, cache_read_tokens=c, reasoning_tokens=r)
                for i, c, o, r in RESPONSES_USAGE]
    if not streamed:
        return Case("openai-responses", model, [Reply.json(body) for body in bodies], reported, returned,
                    bodies, ("openai", "responses"))
    streams = [response_events(body) for body in bodies]
    return Case("openai-responses-streamed", model,
                [Reply(sse(events), "text/event-stream") for events in streams], reported, returned,
                [events[-1][1]["response"] for events in streams], ("openai", "responses"),
                twin="openai-responses")


def response_events(body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """A Responses API stream: ``response.created``, each output item added, its deltas and done, then
    ``response.completed`` with the whole response (the usage is only there)."""
    events: list[dict[str, Any]] = [
        {"type": "response.created",
         "response": {**body, "status": "in_progress", "output": [], "usage": None}}]
    for index, item in enumerate(body["output"]):
        if item["type"] == "function_call":
            events += [
                {"type": "response.output_item.added", "output_index": index,
                 "item": {**item, "arguments": "", "status": "in_progress"}},
                {"type": "response.function_call_arguments.delta", "item_id": item["id"],
                 "output_index": index, "delta": item["arguments"]},
                {"type": "response.function_call_arguments.done", "item_id": item["id"],
                 "output_index": index, "name": item["name"], "arguments": item["arguments"]},
            ]
        elif item["type"] == "message":
            part = item["content"][0]
            events += [
                {"type": "response.output_item.added", "output_index": index,
                 "item": {**item, "status": "in_progress", "content": []}},
                {"type": "response.content_part.added", "item_id": item["id"], "output_index": index,
                 "content_index": 0, "part": {**part, "text": ""}},
                {"type": "response.output_text.delta", "item_id": item["id"], "output_index": index,
                 "content_index": 0, "delta": part["text"], "logprobs": []},
                {"type": "response.output_text.done", "item_id": item["id"], "output_index": index,
                 "content_index": 0, "text": part["text"], "logprobs": []},
                {"type": "response.content_part.done", "item_id": item["id"], "output_index": index,
                 "content_index": 0, "part": part},
            ]
        else:
            events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": body})
    return [(event["type"], {**event, "sequence_number": n}) for n, event in enumerate(events)]


# -- Anthropic Messages -----------------------------------------------------------------------------------
def anthropic_usage(uncached: int, read: int, five_minutes: int, one_hour: int,
                    output: int) -> dict[str, Any]:
    return {"input_tokens": uncached, "cache_creation_input_tokens": five_minutes + one_hour,
            "cache_read_input_tokens": read,
            "cache_creation": {"ephemeral_5m_input_tokens": five_minutes,
                               "ephemeral_1h_input_tokens": one_hour},
            "output_tokens": output, "service_tier": "standard"}


ANTHROPIC_USAGE = {  # per call: uncached input, cache read, 5-minute writes, 1-hour writes, output
    "5m": [(40, 0, 2_400, 0, 90), (60, 2_400, 0, 0, 40)],
    "1h": [(40, 0, 800, 1_600, 90), (60, 2_400, 0, 0, 40)],
}


def anthropic(lifetime: str, streamed: bool) -> Case:
    returned = "claude-sonnet-4-5-20250929"
    counts = ANTHROPIC_USAGE[lifetime]
    usages = [anthropic_usage(*call) for call in counts]

    def model(url: str, key: str) -> Any:
        from langchain_anthropic import ChatAnthropic

        return ChatAnthropic(model="claude-sonnet-4-5", base_url=url, api_key=key, streaming=streamed,  # type: ignore[call-arg]
                             max_retries=0)

    tool_use = {"type": "tool_use", "id": "toolu_w1", "name": "get_weather", "input": ARGS}
    contents = [[{"type": "text", "text": "Let me check."}, tool_use], [{"type": "text", "text": ANSWER}]]
    stops = ["tool_use", "end_turn"]
    reported = [TokenUsage(u + r + w5 + w1, o, u + r + w5 + w1 + o, cache_read_tokens=r,
                           cache_creation_tokens=w5 + w1, cache_creation_1h_tokens=w1)
                for u, r, w5, w1, o in counts]
    name = f"anthropic-{lifetime}"
    if not streamed:
        bodies = [{"id": f"msg_{n}", "type": "message", "role": "assistant", "model": returned,
                   "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage}
                  for n, (content, stop, usage) in enumerate(zip(contents, stops, usages, strict=True))]
        return Case(name, model, [Reply.json(body) for body in bodies], reported, returned, bodies,
                    ("anthropic", "default"))
    streams = [anthropic_events(returned, n, content, stop, usage)
               for n, (content, stop, usage) in enumerate(zip(contents, stops, usages, strict=True))]
    deltas = [events[-2][1] for events in streams]  # message_delta: the stream's final usage
    # The stream's final usage has the writes' total, not their split by lifetime (message_start has it)
    streamed_reported = [dataclasses.replace(usage, cache_creation_1h_tokens=0) for usage in reported]
    return Case(f"{name}-streamed", model, [Reply(sse(events), "text/event-stream") for events in streams],
                streamed_reported, returned, deltas, ("anthropic", "default"), price_model=returned,
                twin=name)


def anthropic_events(model: str, n: int, content: list[dict[str, Any]], stop: str,
                     usage: dict[str, Any]) -> list[tuple[str | None, Any]]:
    start_usage = {**usage, "output_tokens": 1}
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": {
            "id": f"msg_{n}", "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": start_usage}}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(content):
        if block["type"] == "text":
            events += [
                ("content_block_start", {"type": "content_block_start", "index": index,
                                         "content_block": {"type": "text", "text": ""}}),
                ("content_block_delta", {"type": "content_block_delta", "index": index,
                                         "delta": {"type": "text_delta", "text": block["text"]}}),
            ]
        else:
            events += [
                ("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
                    "type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}),
                ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {
                    "type": "input_json_delta", "partial_json": _json(block["input"])}}),
            ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    final = {key: usage[key] for key in ("input_tokens", "cache_creation_input_tokens",
                                         "cache_read_input_tokens", "output_tokens")}
    events += [
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                           "usage": final}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events


# -- Google Gemini ----------------------------------------------------------------------------------------
GEMINI_USAGE = [(900, 512, 20, 150), (1_000, 512, 30, 0)]  # prompt, cached, candidates, thoughts


def gemini_usage(prompt: int, cached: int, candidates: int, thoughts: int) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "promptTokenCount": prompt, "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates + thoughts, "cachedContentTokenCount": cached,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
        "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": cached}],
        "candidatesTokensDetails": [{"modality": "TEXT", "tokenCount": candidates}],
    }
    return {**usage, "thoughtsTokenCount": thoughts} if thoughts else usage


def gemini(streamed: bool) -> Case:
    returned = "gemini-2.5-flash-preview-09-2025"

    def model(url: str, key: str) -> Any:
        from langchain_google_genai import ChatGoogleGenerativeAI

        return ChatGoogleGenerativeAI(model="gemini-2.5-flash", google_api_key=key, base_url=url,  # type: ignore[call-arg]
                                      streaming=streamed, max_retries=0)

    parts = [[{"functionCall": {"name": "get_weather", "args": ARGS}, "thoughtSignature": "c2lnbmF0dXJl"}],
             [{"text": ANSWER}]]
    bodies = [{"candidates": [{"content": {"role": "model", "parts": part}, "finishReason": "STOP",
                               "index": 0}],
               "usageMetadata": gemini_usage(*counts), "modelVersion": returned, "responseId": f"resp-{n}"}
              for n, (part, counts) in enumerate(zip(parts, GEMINI_USAGE, strict=True))]
    reported = [TokenUsage(p, c + t, p + c + t, cache_read_tokens=k, reasoning_tokens=t)
                for p, k, c, t in GEMINI_USAGE]
    if not streamed:
        return Case("gemini", model, [Reply.json(body) for body in bodies], reported, returned, bodies,
                    ("google", "default"))
    streams = []
    for body in bodies:
        part = body["candidates"][0]["content"]["parts"][0]
        if "text" in part:  # the answer comes in two chunks; each carries the usage so far
            opening = {"role": "model", "parts": [{"text": ANSWER[:10]}]}
            first = {"candidates": [{"content": opening, "index": 0}],
                     "usageMetadata": {"promptTokenCount": body["usageMetadata"]["promptTokenCount"],
                                       "totalTokenCount": body["usageMetadata"]["promptTokenCount"]},
                     "modelVersion": returned, "responseId": body["responseId"]}
            last = json.loads(json.dumps(body))
            last["candidates"][0]["content"]["parts"] = [{"text": ANSWER[10:]}]
            streams.append([first, last])
        else:
            streams.append([body])
    return Case("gemini-streamed", model,
                [Reply(sse([(None, chunk) for chunk in chunks]), "text/event-stream") for chunks in streams],
                reported, returned, [chunks[-1] for chunks in streams], ("google", "default"), twin="gemini")


# -- Amazon Bedrock Converse --------------------------------------------------------------------------
BEDROCK_USAGE = [(50, 0, 500, 1_500, 80), (70, 2_000, 0, 0, 30)]  # input, read, 5m writes, 1h writes, output
BEDROCK_MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"


def bedrock_usage(uncached: int, read: int, five_minutes: int, one_hour: int, output: int) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "inputTokens": uncached, "outputTokens": output,
        "totalTokens": uncached + read + five_minutes + one_hour + output,
        "cacheReadInputTokens": read, "cacheWriteInputTokens": five_minutes + one_hour}
    if five_minutes + one_hour:
        usage["cacheDetails"] = [{"ttl": "5m", "inputTokens": five_minutes},
                                 {"ttl": "1h", "inputTokens": one_hour}]
    return usage


def bedrock(streamed: bool) -> Case:
    @functools.cache  # boto3 clients are synchronous, so one serves every test (making one takes a second)
    def model(url: str, key: str) -> Any:
        from langchain_aws import ChatBedrockConverse

        # SigV4 credentials (a Bedrock API key is a bearer token, which botocore sends over HTTPS only):
        # the access key id travels in the Authorization header, the secret signs the request
        return ChatBedrockConverse(model=BEDROCK_MODEL, region_name="us-east-1", endpoint_url=url,  # type: ignore[call-arg]
                                   aws_access_key_id=key, aws_secret_access_key=f"secret-{key}",
                                   disable_streaming=not streamed)

    usages = [bedrock_usage(*counts) for counts in BEDROCK_USAGE]
    contents = [[{"text": "Let me check."},
                 {"toolUse": {"toolUseId": "tooluse_w1", "name": "get_weather", "input": ARGS}}],
                [{"text": ANSWER}]]
    stops = ["tool_use", "end_turn"]
    reported = [TokenUsage(u + r + w5 + w1, o, u + r + w5 + w1 + o, cache_read_tokens=r,
                           cache_creation_tokens=w5 + w1, cache_creation_1h_tokens=w1)
                for u, r, w5, w1, o in BEDROCK_USAGE]
    bodies = [{"output": {"message": {"role": "assistant", "content": content}}, "stopReason": stop,
               "usage": usage, "metrics": {"latencyMs": 420}}
              for content, stop, usage in zip(contents, stops, usages, strict=True)]
    if not streamed:
        return Case("bedrock", model, [Reply.json(body) for body in bodies], reported, BEDROCK_MODEL, bodies,
                    ("aws", "default"), price_model=BEDROCK_MODEL)
    streams = [bedrock_events(content, stop, usage) for content, stop, usage in zip(contents, stops, usages,
                                                                                   strict=True)]
    return Case("bedrock-streamed", model,
                [Reply(eventstream.stream(events), "application/vnd.amazon.eventstream")
                 for events in streams],
                reported, BEDROCK_MODEL, [events[-1][1] for events in streams], ("aws", "default"),
                price_model=BEDROCK_MODEL, twin="bedrock", stream_the_agent=True)


def bedrock_events(content: list[dict[str, Any]], stop: str, usage: dict[str, Any]) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = [("messageStart", {"role": "assistant"})]
    for index, block in enumerate(content):
        if "text" in block:
            events.append(("contentBlockDelta", {"contentBlockIndex": index,
                                                 "delta": {"text": block["text"]}}))
        else:
            tool = block["toolUse"]
            events += [
                ("contentBlockStart", {"contentBlockIndex": index, "start": {"toolUse": {
                    "toolUseId": tool["toolUseId"], "name": tool["name"]}}}),
                ("contentBlockDelta", {"contentBlockIndex": index, "delta": {"toolUse": {
                    "input": _json(tool["input"])}}}),
            ]
        events.append(("contentBlockStop", {"contentBlockIndex": index}))
    events += [("messageStop", {"stopReason": stop}),
               ("metadata", {"usage": usage, "metrics": {"latencyMs": 420}})]
    return events


# -- Ollama -------------------------------------------------------------------------------------------
OLLAMA_USAGE = [(300, 25), (350, 15)]


def ollama() -> Case:
    returned = "llama3.2"

    def model(url: str, key: str) -> Any:
        from langchain_ollama import ChatOllama

        return ChatOllama(model="llama3.2", base_url=url,
                          client_kwargs={"headers": {"Authorization": f"Bearer {key}"}})

    def line(message: dict[str, Any], done: bool, counts: tuple[int, int] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"model": returned, "created_at": "2025-10-01T12:00:00.000000Z",
                               "message": message, "done": done}
        if counts is not None:
            out.update(done_reason="stop", total_duration=912_000_000, load_duration=12_000_000,
                       prompt_eval_count=counts[0], prompt_eval_duration=300_000_000, eval_count=counts[1],
                       eval_duration=600_000_000)
        return out

    call = {"role": "assistant", "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": ARGS}}]}
    streams = [
        [line(call, False), line({"role": "assistant", "content": ""}, True, OLLAMA_USAGE[0])],
        [line({"role": "assistant", "content": ANSWER[:10]}, False),
         line({"role": "assistant", "content": ANSWER[10:]}, False),
         line({"role": "assistant", "content": ""}, True, OLLAMA_USAGE[1])],
    ]
    reported = [TokenUsage(i, o, i + o) for i, o in OLLAMA_USAGE]
    return Case("ollama", model, [Reply(ndjson(lines), "application/x-ndjson") for lines in streams],
                reported, returned, [lines[-1] for lines in streams])


def cases() -> list[Case]:
    return [
        openai_chat(False), openai_chat(True), openai_responses(), openai_responses(streamed=True),
        anthropic("5m", False), anthropic("5m", True), anthropic("1h", False), anthropic("1h", True),
        gemini(False), gemini(True), bedrock(False), bedrock(True), ollama(), deepseek(False), deepseek(True),
    ]


CASES_BY_ID = {case.id: case for case in cases()}
