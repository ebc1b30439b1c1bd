"""Reading usage where the journal's producers find it: LangChain results and the shapes providers
report (the producer side; the journal calls :func:`extract_usage` once per model call).

LangChain's ``AIMessage.usage_metadata`` is the normalized form and wins when present; otherwise
``llm_output["token_usage"]`` / ``llm_output["usage"]`` (OpenAI and Anthropic wire shapes) and
finally each generation's ``generation_info``. Every generation of a response is summed, so a
provider that reports the end twice is never counted twice.

Anthropic's wire shape reports cache tokens *outside* ``input_tokens``, so they are added in when
that shape is read (see :mod:`run_journal.usage.tokens` for the counting convention).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from langchain_core.outputs import ChatGeneration

from run_journal.usage.tokens import TokenUsage, count

if TYPE_CHECKING:
    from langchain_core.outputs import LLMResult

SERVICE_TIERS: Final = ("", "priority_", "flex_")
"""Prefixes langchain-openai gives ``cache_read`` and ``reasoning`` on a priority or flex request."""


def _nested(mapping: Mapping[str, Any], outer: str, inner: str) -> int:
    value = mapping.get(outer)
    return count(value.get(inner)) if isinstance(value, Mapping) else 0


def _details(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    return value if isinstance(value, Mapping) else {}


def _tiered(details: Mapping[str, Any], key: str) -> int:
    return sum(count(details.get(prefix + key)) for prefix in SERVICE_TIERS)


def _writes(total: int, five_minutes: int, one_hour: int) -> tuple[int, int]:
    """(every cache write, the one-hour ones). Some report the total, some only its split by lifetime
    (langchain-anthropic and langchain-aws set ``cache_creation`` to 0 beside the split), some both."""
    written = max(total, five_minutes + one_hour)
    return written, min(one_hour, written)


def from_usage_metadata(data: Mapping[str, Any]) -> TokenUsage:
    """LangChain's normalized ``usage_metadata`` (input includes cache and audio tokens)."""
    input_tokens = count(data.get("input_tokens"))
    output_tokens = count(data.get("output_tokens"))
    inputs, outputs = _details(data, "input_token_details"), _details(data, "output_token_details")
    written, one_hour = _writes(_tiered(inputs, "cache_creation"),
                                count(inputs.get("ephemeral_5m_input_tokens")),
                                count(inputs.get("ephemeral_1h_input_tokens")))
    return TokenUsage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=count(data.get("total_tokens")) or input_tokens + output_tokens,
        cache_read_tokens=_tiered(inputs, "cache_read"),
        cache_creation_tokens=written,
        reasoning_tokens=_tiered(outputs, "reasoning"),
        cache_creation_1h_tokens=one_hour,
        input_audio_tokens=count(inputs.get("audio")),
        output_audio_tokens=count(outputs.get("audio")),
    )


def from_provider(data: Mapping[str, Any]) -> TokenUsage | None:
    """An OpenAI (``prompt_tokens``...) or Anthropic (``input_tokens``, ``cache_*_input_tokens``) dict."""
    if "prompt_tokens" in data or "completion_tokens" in data:
        prompt = count(data.get("prompt_tokens"))
        completion = count(data.get("completion_tokens"))
        return TokenUsage(
            input_tokens=prompt,
            output_tokens=completion,
            total_tokens=count(data.get("total_tokens")) or prompt + completion,
            cache_read_tokens=_nested(data, "prompt_tokens_details", "cached_tokens"),
            cache_creation_tokens=count(data.get("cache_creation_input_tokens"))
            or _nested(data, "prompt_tokens_details", "cache_write_tokens"),
            reasoning_tokens=_nested(data, "completion_tokens_details", "reasoning_tokens"),
            input_audio_tokens=_nested(data, "prompt_tokens_details", "audio_tokens"),
            output_audio_tokens=_nested(data, "completion_tokens_details", "audio_tokens"),
        )
    if "input_token_details" in data or "output_token_details" in data:
        return from_usage_metadata(data)
    if "input_tokens" in data or "output_tokens" in data:
        cache_read = count(data.get("cache_read_input_tokens"))
        by_lifetime = _details(data, "cache_creation")
        written, one_hour = _writes(count(data.get("cache_creation_input_tokens")),
                                    count(by_lifetime.get("ephemeral_5m_input_tokens")),
                                    count(by_lifetime.get("ephemeral_1h_input_tokens")))
        input_tokens = count(data.get("input_tokens")) + cache_read + written
        output_tokens = count(data.get("output_tokens"))
        return TokenUsage(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_tokens=input_tokens + output_tokens,
            cache_read_tokens=cache_read,
            cache_creation_tokens=written,
            reasoning_tokens=_nested(data, "output_tokens_details", "reasoning_tokens")
            or _nested(data, "output_tokens_details", "thinking_tokens"),
            cache_creation_1h_tokens=one_hour,
        )
    return None


def usage_from_mapping(data: Any) -> TokenUsage | None:
    """Usage reported as a plain mapping (a subagent's ``usage``), in any of the known shapes."""
    if not isinstance(data, Mapping):
        return None
    if "cache_read_tokens" in data or "cache_creation_tokens" in data or "reasoning_tokens" in data:
        return TokenUsage.from_dict(data)
    return from_provider(data)


def _sum(parts: list[TokenUsage]) -> TokenUsage | None:
    if not parts:
        return None
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total


def extract_usage(response: LLMResult) -> TokenUsage | None:
    """The usage of one model response, summed over every generation; None when nobody reported any."""
    generations = [g for batch in response.generations for g in batch]
    from_messages = [
        from_usage_metadata(reported)
        for g in generations
        if isinstance(g, ChatGeneration) and (reported := getattr(g.message, "usage_metadata", None))
    ]
    if from_messages:
        return _sum(from_messages)
    llm_output = response.llm_output or {}
    for key in ("token_usage", "usage"):
        value = llm_output.get(key)
        if isinstance(value, Mapping):
            found = from_provider(value)
            if found is not None:
                return found
    from_info: list[TokenUsage] = []
    for generation in generations:
        info = generation.generation_info or {}
        for key in ("usage_metadata", "token_usage", "usage"):
            value = info.get(key)
            found = from_provider(value) if isinstance(value, Mapping) else None
            if found is not None:
                from_info.append(found)
                break
    return _sum(from_info)


def model_name_of(response: LLMResult, fallback: str | None) -> str | None:
    """The model that answered: the provider's own report first, then what the call asked for."""
    llm_output = response.llm_output
    if llm_output:
        for key in ("model_name", "model"):
            if isinstance(name := llm_output.get(key), str):
                return str(name)
    for batch in response.generations:
        for generation in batch:
            if isinstance(generation, ChatGeneration):
                meta = generation.message.response_metadata or {}
                for key in ("model_name", "model"):
                    if isinstance(meta.get(key), str):
                        return str(meta[key])
    return fallback


def provider_of(response: LLMResult, fallback: str | None) -> str | None:
    """The provider the call was made through: what the call said (LangChain's ``ls_provider``, the
    ``fallback``) first, then the message's ``model_provider``."""
    if fallback:
        return fallback
    for batch in response.generations:
        for generation in batch:
            if isinstance(generation, ChatGeneration):
                found = (generation.message.response_metadata or {}).get("model_provider")
                if isinstance(found, str) and found:
                    return found
    return None
