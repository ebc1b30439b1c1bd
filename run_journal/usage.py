"""Token usage: read it from whatever shape a provider reports, price it, and add it up per run.

Providers disagree on where usage lives. LangChain's ``AIMessage.usage_metadata`` is the normalized
form and wins when present; otherwise ``llm_output["token_usage"]`` / ``llm_output["usage"]`` (OpenAI
and Anthropic wire shapes) and finally each generation's ``generation_info``. Every generation of a
response is summed, and the journal calls :func:`extract_usage` once per model call, so a provider
that reports the end twice is never counted twice.

Counting convention (LangChain's): ``input_tokens`` includes cached and cache-creation tokens;
``cache_read_tokens`` / ``cache_creation_tokens`` say how many of them were cached. Anthropic's wire
shape reports cache tokens *outside* ``input_tokens``, so they are added in when that shape is read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Final

from langchain_core.outputs import ChatGeneration, LLMResult

from run_journal.runs import UsageTotals

TEXT_CAP: Final = 2000
"""Characters kept of the first human and the last AI message in the run row."""

Pricing = Mapping[str, Mapping[str, float]]
"""``{model: {"input": usd, "output": usd, "cache_read": usd, "cache_write": usd}}`` per million tokens."""


@dataclasses.dataclass(frozen=True, slots=True)
class TokenUsage:
    """The usage of one model call (before pricing)."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(*(a + b for a, b in zip(_values(self), _values(other), strict=True)))

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def _values(usage: TokenUsage) -> tuple[int, ...]:
    return (usage.input_tokens, usage.output_tokens, usage.total_tokens, usage.cache_read_tokens,
            usage.cache_creation_tokens, usage.reasoning_tokens)


def _int(value: Any) -> int:
    """Token counts are non-negative integers; anything else (None, junk, bool) counts as 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(0, int(value))


def _nested(mapping: Mapping[str, Any], outer: str, inner: str) -> int:
    value = mapping.get(outer)
    return _int(value.get(inner)) if isinstance(value, Mapping) else 0


def from_usage_metadata(data: Mapping[str, Any]) -> TokenUsage:
    """LangChain's normalized ``usage_metadata`` (input includes cache tokens)."""
    input_tokens = _int(data.get("input_tokens"))
    output_tokens = _int(data.get("output_tokens"))
    return TokenUsage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=_int(data.get("total_tokens")) or input_tokens + output_tokens,
        cache_read_tokens=_nested(data, "input_token_details", "cache_read"),
        cache_creation_tokens=_nested(data, "input_token_details", "cache_creation"),
        reasoning_tokens=_nested(data, "output_token_details", "reasoning"),
    )


def from_provider(data: Mapping[str, Any]) -> TokenUsage | None:
    """An OpenAI (``prompt_tokens``...) or Anthropic (``input_tokens``, ``cache_*_input_tokens``) dict."""
    if "prompt_tokens" in data or "completion_tokens" in data:
        prompt = _int(data.get("prompt_tokens"))
        completion = _int(data.get("completion_tokens"))
        return TokenUsage(
            input_tokens=prompt,
            output_tokens=completion,
            total_tokens=_int(data.get("total_tokens")) or prompt + completion,
            cache_read_tokens=_nested(data, "prompt_tokens_details", "cached_tokens"),
            cache_creation_tokens=_int(data.get("cache_creation_input_tokens")),
            reasoning_tokens=_nested(data, "completion_tokens_details", "reasoning_tokens"),
        )
    if "input_token_details" in data or "output_token_details" in data:
        return from_usage_metadata(data)
    if "input_tokens" in data or "output_tokens" in data:
        cache_read = _int(data.get("cache_read_input_tokens"))
        cache_creation = _int(data.get("cache_creation_input_tokens"))
        input_tokens = _int(data.get("input_tokens")) + cache_read + cache_creation
        output_tokens = _int(data.get("output_tokens"))
        return TokenUsage(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_tokens=input_tokens + output_tokens,
            cache_read_tokens=cache_read,
            cache_creation_tokens=cache_creation,
            reasoning_tokens=_nested(data, "output_tokens_details", "reasoning_tokens"),
        )
    return None


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


def cost_of(usage: TokenUsage, model: str | None, pricing: Pricing | None) -> float | None:
    """USD cost of one call; None when the model has no price (unknown is not free).

    Cached tokens are billed at ``cache_read`` and cache creation at ``cache_write`` when given,
    otherwise at the input price; the rest of the input at ``input``.
    """
    if not pricing or model is None or model not in pricing:
        return None
    price = pricing[model]
    if "input" not in price or "output" not in price:
        return None
    input_price = float(price["input"])
    plain_input = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_creation_tokens)
    cost = (
        plain_input * input_price
        + usage.cache_read_tokens * float(price.get("cache_read", input_price))
        + usage.cache_creation_tokens * float(price.get("cache_write", input_price))
        + usage.output_tokens * float(price["output"])
    )
    return cost / 1_000_000


def priced(usage: TokenUsage, cost: float | None, calls: int = 1) -> UsageTotals:
    """One call's usage as a ``UsageTotals`` row (what the buckets add up)."""
    return UsageTotals(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_creation_tokens=usage.cache_creation_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        llm_calls=calls,
        cost_usd=cost,
    )


def usage_from_mapping(data: Any) -> TokenUsage | None:
    """Usage reported as a plain mapping (a subagent's ``usage``), in any of the known shapes."""
    if not isinstance(data, Mapping):
        return None
    if "cache_read_tokens" in data or "cache_creation_tokens" in data or "reasoning_tokens" in data:
        fields = {f.name for f in dataclasses.fields(TokenUsage)}
        usage = TokenUsage(**{key: _int(data.get(key)) for key in fields})
        if not usage.total_tokens:
            usage = dataclasses.replace(usage, total_tokens=usage.input_tokens + usage.output_tokens)
        return usage
    return from_provider(data)


def cap_text(text: str | None, limit: int = TEXT_CAP) -> str | None:
    if text is None:
        return None
    return text if len(text) <= limit else text[:limit] + "…"


_NO_USAGE: Final = TokenUsage()
_UNPRICED_CALL: Final = UsageTotals(llm_calls=1)
"""A call that reported no usage, of a model without a price."""


@dataclasses.dataclass(slots=True)
class RunTally:
    """What a run's row adds up: usage per caller and per model, counts, first and last messages.

    Mutated under the journal's lock. A call adds into one (caller, model) group; the run's total and
    its per-caller and per-model totals are folded from the few groups when a row asks for them, so
    a model call costs one addition (none for a group's first call), not three.
    """

    pricing: Pricing | None = None
    groups: dict[tuple[str, str], UsageTotals] = dataclasses.field(default_factory=dict)
    tool_calls: int = 0
    tool_errors: int = 0
    messages: int = 0
    first_human: str | None = None
    last_ai: str | None = None

    def add_call(self, caller: str, model: str | None, usage: TokenUsage | None) -> UsageTotals:
        """Count one model call (usage may be unknown: the call still counts, tokens do not)."""
        cost = cost_of(usage or _NO_USAGE, model, self.pricing)
        row = _UNPRICED_CALL if usage is None and cost is None else priced(usage or _NO_USAGE, cost)
        self._add(caller, model, row)
        return row

    def add_external(self, caller: str, model: str | None, usage: TokenUsage) -> None:
        """Usage reported by someone else (a subagent's end event): one call, priced the same way."""
        self._add(caller, model, priced(usage, cost_of(usage, model, self.pricing)))

    def _add(self, caller: str, model: str | None, row: UsageTotals) -> None:
        key = (caller, model or "unknown")
        seen = self.groups.get(key)
        self.groups[key] = row if seen is None else seen + row

    @property
    def total(self) -> UsageTotals:
        return _fold(self.groups.values())

    @property
    def by_caller(self) -> dict[str, UsageTotals]:
        return self._by(0)

    @property
    def by_model(self) -> dict[str, UsageTotals]:
        return self._by(1)

    def _by(self, part: int) -> dict[str, UsageTotals]:
        buckets: dict[str, list[UsageTotals]] = {}
        for key, totals in self.groups.items():
            buckets.setdefault(key[part], []).append(totals)
        return {name: _fold(parts) for name, parts in buckets.items()}

    def copy(self) -> RunTally:
        """A snapshot that later calls do not change (the groups are immutable totals)."""
        return RunTally(self.pricing, dict(self.groups), self.tool_calls, self.tool_errors, self.messages,
                        self.first_human, self.last_ai)

    def row_fields(self) -> dict[str, Any]:
        """The ``RunRow`` fields this tally owns."""
        return {
            "usage": self.total,
            "usage_by_caller": self.by_caller,
            "usage_by_model": self.by_model,
            "tool_call_count": self.tool_calls,
            "tool_error_count": self.tool_errors,
            "message_count": self.messages,
            "first_human_message": self.first_human,
            "last_ai_message": self.last_ai,
        }


def _fold(parts: Iterable[UsageTotals]) -> UsageTotals:
    total: UsageTotals | None = None
    for part in parts:
        total = part if total is None else total + part
    return total if total is not None else _NOTHING


_NOTHING: Final = UsageTotals()
