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
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal, TypeGuard

from run_journal import prices
from run_journal.prices import Quote
from run_journal.runs import RunRow, UsageTotals

if TYPE_CHECKING:
    from langchain_core.outputs import LLMResult

    from run_journal.envelope import RunEvent

TEXT_CAP: Final = 2000
"""Characters kept of the first human and the last AI message in the run row."""

Pricing = Mapping[str, Mapping[str, float]]
"""``{model: {"input": usd, "output": usd, "cache_read": usd, "cache_write": usd}}`` per million tokens."""
PricingOption = Pricing | Literal[False] | None
"""What a journal is given: None (the price database), a table (overriding the database for the models
it names) or False (no prices at all)."""
NOTE_REASONS: Final = 5
"""Reasons listed in a row's ``cost_note`` (the rest are counted)."""


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
    from langchain_core.outputs import ChatGeneration  # the journal has it loaded; the CLI never needs it

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
    from langchain_core.outputs import ChatGeneration

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


def quote(usage: TokenUsage, model: str | None, pricing: PricingOption = None,
          at: datetime | None = None, calls: int = 1) -> Quote:
    """USD cost of one call and, when it is None, the reason: unknown is not free.

    ``pricing`` is your table (``{model: {"input", "output", "cache_read", "cache_write"}}``, USD per
    million tokens), looked up by the exact model name first; any other model is priced by the price
    database (``run_journal.prices``) as of ``at`` (now by default). ``pricing=False`` turns both off.
    Cache reads are billed at ``cache_read`` and cache writes at ``cache_write`` when the price has
    them, otherwise at the input price; the rest of the input at ``input``.

    ``calls`` > 1 prices the sum of that many calls as that many average calls (exact for prices
    without tiers; a tier is chosen by the average call's input).
    """
    if pricing is False:
        return None, "pricing is off (pricing=False)"
    if model is None:
        return None, "a model call did not report which model answered"
    n = max(1, calls)
    tokens: tuple[float, float, float, float, float] = (
        usage.input_tokens, usage.cache_read_tokens, usage.cache_creation_tokens, usage.output_tokens,
        usage.reasoning_tokens)
    if n > 1:
        tokens = (tokens[0] / n, tokens[1] / n, tokens[2] / n, tokens[3] / n, tokens[4] / n)
    cost: float | None
    if pricing and model in pricing:
        rates = prices.table_rates(pricing[model])
        if isinstance(rates, str):
            return None, f"no usable price for model {model!r}: {rates}"
        cost, reason = rates.cost(*tokens), None
    else:
        cost, reason = prices.DEFAULT.quote(model, *tokens, at=at)
    return (cost if cost is None or n == 1 else cost * n), reason


def cost_of(usage: TokenUsage, model: str | None, pricing: PricingOption = None,
            at: datetime | None = None) -> float | None:
    """USD cost of one call, None when no price is known (see :func:`quote`, which also says why)."""
    return quote(usage, model, pricing, at)[0]


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


_UNPRICED_CALL: Final = UsageTotals(llm_calls=1)
"""A call that reported no usage: it counts, its tokens and cost are unknown."""


@dataclasses.dataclass(slots=True)
class RunTally:
    """What a run's row adds up: usage per caller and per model, counts, first and last messages.

    Mutated under the journal's lock. A call adds into one (caller, model) group; the run's total and
    its per-caller and per-model totals are folded from the few groups when a row asks for them, so
    a model call costs one addition (none for a group's first call), not three. Each call is priced
    when it is counted (see :func:`quote`); why a call has no price is kept, by model, for the row's
    ``cost_note``.
    """

    pricing: PricingOption = None
    groups: dict[tuple[str, str], UsageTotals] = dataclasses.field(default_factory=dict)
    tool_calls: int = 0
    tool_errors: int = 0
    messages: int = 0
    first_human: str | None = None
    last_ai: str | None = None
    unpriced: dict[str, str] = dataclasses.field(default_factory=dict)
    """Why calls have no price: one reason per model (the first seen)."""

    def __post_init__(self) -> None:
        if self.pricing is not False and prices.DEFAULT.cold:
            prices.DEFAULT.warm_up()

    def add_call(self, caller: str, model: str | None, usage: TokenUsage | None,
                 at: datetime | None = None) -> UsageTotals:
        """Count one model call (usage may be unknown: the call still counts, its tokens and cost do not)."""
        if usage is None:
            row = _UNPRICED_CALL
            self._unpriced(model, f"a call to {model!r} reported no token usage" if model
                           else "a model call reported neither its model nor its token usage")
        else:
            cost, reason = quote(usage, model, self.pricing, at)
            row = priced(usage, cost)
            if reason is not None:
                self._unpriced(model, reason)
        self._add(caller, model, row)
        return row

    def add_external(self, caller: str, model: str | None, usage: TokenUsage,
                     at: datetime | None = None) -> None:
        """Usage reported by someone else (a subagent's end event): one call, priced the same way."""
        self.add_call(caller, model, usage, at)

    def _unpriced(self, model: str | None, reason: str) -> None:
        self.unpriced.setdefault(model or "", reason)

    @property
    def cost_note(self) -> str | None:
        """Why the run's cost is unknown (None when it is known or there is nothing to price)."""
        if not self.unpriced:
            return None
        reasons = list(dict.fromkeys(self.unpriced.values()))
        note = "; ".join(reasons[:NOTE_REASONS])
        return note + (f"; and {len(reasons) - NOTE_REASONS} more" if len(reasons) > NOTE_REASONS else "")

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
                        self.first_human, self.last_ai, dict(self.unpriced) if self.unpriced else {})

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
            "cost_note": self.cost_note,
        }


def _fold(parts: Iterable[UsageTotals]) -> UsageTotals:
    total: UsageTotals | None = None
    for part in parts:
        total = part if total is None else total + part
    return total if total is not None else _NOTHING


_NOTHING: Final = UsageTotals()


# -- repricing stored runs -------------------------------------------------------------------------------
RELEVANT_EVENTS: Final = ("llm.ai.response", "subagent.start", "subagent.end")
"""The events :func:`replay` reads (a reader may select only these)."""
_COUNTED: Final = ("input_tokens", "output_tokens", "total_tokens", "cache_read_tokens",
                   "cache_creation_tokens", "reasoning_tokens", "llm_calls")


def replay(events: Iterable[RunEvent], pricing: PricingOption = None, *, keep_known: bool = True) -> RunTally:
    """The usage a run's events record, priced again: each ``llm.ai.response`` as the journal counted
    it (its caller, model and usage, priced as of the call's time), and the usage a subagent task
    reported at its end when the run saw none of that subagent's own calls while the task ran.

    ``keep_known``: a call recorded with a cost keeps it (it may come from a table you no longer
    pass), unless ``pricing`` names its model; False prices every call again.
    """
    tally = RunTally(pricing=pricing)
    calls_at_start: dict[str, int] = {}
    counted: set[str] = set()
    for event in events:
        metadata = event.metadata if isinstance(event.metadata, Mapping) else {}
        content = event.content if isinstance(event.content, Mapping) else {}
        caller = str(metadata.get("caller") or "lead_agent")
        if event.event_type == "llm.ai.response":
            model = metadata.get("model_name")
            model = model if isinstance(model, str) else None
            usage = usage_from_mapping(metadata.get("usage"))
            recorded = metadata.get("cost_usd")
            named = bool(pricing) and model is not None and model in (pricing or {})
            if keep_known and usage is not None and _is_cost(recorded) and not named:
                tally._add(caller, model, priced(usage, float(recorded)))
            else:
                tally.add_call(caller, model, usage, event.created_at)
        elif event.event_type == "subagent.start" and isinstance(task_id := content.get("task_id"), str):
            calls_at_start[task_id] = _calls_of(tally, caller)
        elif event.event_type == "subagent.end" and isinstance(task_id := content.get("task_id"), str):
            usage = usage_from_mapping(content.get("usage"))
            seen = _calls_of(tally, caller) > calls_at_start.pop(task_id, 0)
            if usage is not None and not seen and task_id not in counted:
                counted.add(task_id)
                model = content.get("model")
                tally.add_external(caller, model if isinstance(model, str) else None, usage, event.created_at)
    return tally


def _is_cost(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def _calls_of(tally: RunTally, caller: str) -> int:
    return sum(totals.llm_calls for (who, _), totals in tally.groups.items() if who == caller)


def _same_tokens(left: UsageTotals, right: UsageTotals) -> bool:
    return all(getattr(left, name) == getattr(right, name) for name in _COUNTED)


def _same_buckets(left: Mapping[str, UsageTotals], right: Mapping[str, UsageTotals]) -> bool:
    return left.keys() == right.keys() and all(_same_tokens(left[key], right[key]) for key in left)


def reprice_row(row: RunRow, events: Iterable[RunEvent], pricing: PricingOption = None, *,
                keep_known: bool = True) -> RunRow:
    """``row`` with its costs computed again from its usage, with today's price data (or ``pricing``).

    When the run's events account for every token of the row, each call is priced on its own, as of
    its time (exact, whatever the tiers). Otherwise (events deleted, usage the events do not show) each
    per-model total of the row is priced as that many average calls as of the run's start, the total
    is their sum, and a per-caller total is repriced only when the run used one model.

    ``keep_known`` (the default): a cost already known stays as it was, unless ``pricing`` names the
    model (see :func:`replay`); False computes every cost again.
    """
    tally = replay(events, pricing, keep_known=keep_known)
    if not (_same_tokens(tally.total, row.usage) and _same_buckets(tally.by_caller, row.usage_by_caller)
            and _same_buckets(tally.by_model, row.usage_by_model)):
        return _reprice_totals(row, pricing, keep_known)
    named = {model for (_, model) in tally.groups if pricing and model in pricing}
    callers_named = {caller for (caller, model) in tally.groups if model in named}

    def merged(new: Mapping[str, UsageTotals], old: Mapping[str, UsageTotals],
               renamed: set[str]) -> dict[str, UsageTotals]:
        """A bucket the row knows the cost of keeps it (``keep_known``), unless ``pricing`` names it."""
        return {key: old[key] if keep_known and old[key].cost_usd is not None and key not in renamed
                else totals for key, totals in new.items()}

    by_model = merged(tally.by_model, row.usage_by_model, named)
    by_caller = merged(tally.by_caller, row.usage_by_caller, callers_named)
    usage = dataclasses.replace(tally.total, cost_usd=_fold(by_model.values()).cost_usd)
    return row.replace(usage=usage, usage_by_caller=by_caller, usage_by_model=by_model,
                       cost_note=tally.cost_note if usage.cost_usd is None and usage.llm_calls else None)


def _reprice_totals(row: RunRow, pricing: PricingOption, keep_known: bool) -> RunRow:
    reasons: dict[str, str] = {}

    def priced_as(model: str | None, totals: UsageTotals) -> UsageTotals:
        if not totals.llm_calls:
            return totals
        if keep_known and totals.cost_usd is not None and not (pricing and model in pricing):
            return totals
        usage = TokenUsage(totals.input_tokens, totals.output_tokens, totals.total_tokens,
                           totals.cache_read_tokens, totals.cache_creation_tokens, totals.reasoning_tokens)
        cost, reason = quote(usage, None if model == "unknown" else model, pricing, row.started_at,
                             totals.llm_calls)
        if reason is not None:
            reasons.setdefault(model or "", reason)
        return dataclasses.replace(totals, cost_usd=cost)

    def unknown(totals: UsageTotals) -> UsageTotals:
        if not totals.llm_calls or (keep_known and totals.cost_usd is not None):
            return totals
        return dataclasses.replace(totals, cost_usd=None)

    by_model = {model: priced_as(model, totals) for model, totals in row.usage_by_model.items()}
    if len(by_model) == 1:
        (model,) = by_model
        by_caller = {caller: priced_as(model, totals) for caller, totals in row.usage_by_caller.items()}
    else:
        by_caller = {caller: unknown(totals) for caller, totals in row.usage_by_caller.items()}
        if by_caller and any(totals.llm_calls for totals in by_caller.values()):
            reasons.setdefault("", "the run's events do not account for its usage, so its calls cannot be "
                                   "priced by caller" if by_model else "the run row has no per-model totals")
    usage = dataclasses.replace(row.usage, cost_usd=_fold(by_model.values()).cost_usd) if by_model \
        else unknown(row.usage)
    known = list(dict.fromkeys(reasons.values()))
    note = "; ".join(known[:NOTE_REASONS]) if known and usage.cost_usd is None else None
    return row.replace(usage=usage, usage_by_caller=by_caller, usage_by_model=by_model, cost_note=note)
