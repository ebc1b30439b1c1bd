"""Pricing one call, and ``RunTally``: what a run's row adds up (usage per caller and per model,
counts, the first and last messages), including the usage subagent tasks report at their end."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final, Literal

from run_journal import prices
from run_journal.prices import Quote
from run_journal.runs import UsageTotals
from run_journal.usage.tokens import FIELDS, TokenUsage

TEXT_CAP: Final = 2000
"""Characters kept of the first human and the last AI message in the run row."""

Pricing = Mapping[str, Mapping[str, float]]
"""``{model: {"input", "output", "cache_read", "cache_write", "cache_write_1h"}}``, USD per million tokens."""
PricingOption = Pricing | Literal[False] | None
"""What a journal is given: None (the price database), a table (overriding the database for the models
it names) or False (no prices at all)."""
NOTE_REASONS: Final = 5
"""Reasons listed in a row's ``cost_note`` (the rest are counted)."""


def quote(usage: TokenUsage, model: str | None, pricing: PricingOption = None,
          at: datetime | None = None, calls: int = 1, provider: str | None = None) -> Quote:
    """USD cost of one call and, when it is None, the reason: unknown is not free.

    ``pricing`` is your table (``{model: {"input", "output", "cache_read", "cache_write",
    "cache_write_1h"}}``, USD per million tokens), looked up by the exact model name first; any other
    model is priced by the price database (``run_journal.prices``) as of ``at`` (now by default), by
    ``provider``'s price when it is given (LangChain's ``ls_provider``). ``pricing=False`` turns both
    off. Cache reads are billed at ``cache_read``, five-minute cache writes at ``cache_write`` and
    one-hour writes at ``cache_write_1h`` when the price has them (one-hour writes otherwise at
    ``cache_write``, writes otherwise at the input price); the rest of the input at ``input``.

    ``calls`` > 1 prices the sum of that many calls as that many average calls (exact for prices
    without tiers; a tier is chosen by the average call's input).
    """
    if pricing is False:
        return None, "pricing is off (pricing=False)"
    if model is None:
        return None, "a model call did not report which model answered"
    calls = max(1, calls)
    if pricing and model in pricing:
        rates = prices.table_rates(pricing[model])
        if isinstance(rates, str):
            return None, f"no usable price for model {model!r}: {rates}"
        return rates.cost(usage, calls), None
    return prices.DEFAULT.quote(model, usage, at=at, calls=calls, provider=provider)


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
        cache_creation_1h_tokens=usage.cache_creation_1h_tokens,
        input_audio_tokens=usage.input_audio_tokens,
        output_audio_tokens=usage.output_audio_tokens,
    )


def usage_of(totals: UsageTotals) -> TokenUsage:
    """The tokens of a ``UsageTotals`` (without its calls and cost)."""
    return TokenUsage(*(getattr(totals, name) for name in FIELDS))


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

    A subagent task may report its usage at its end (:meth:`task_ended`). That usage is counted once
    per task, and only when none of that subagent's own model calls was counted while the task ran
    (a subagent running in process is counted call by call instead).
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
    calls_at_task_start: dict[str, int] = dataclasses.field(default_factory=dict)
    """Open tasks: the model calls their subagent had made when they started."""
    reported_tasks: set[str] = dataclasses.field(default_factory=set)
    """Tasks whose reported usage was counted."""
    tools: set[str] = dataclasses.field(default_factory=set)
    """Names of the tools called."""
    llm_errors: int = 0
    failed_models: set[str] = dataclasses.field(default_factory=set)
    """Models of failed calls (their usage is never counted, so no group names them)."""
    tool_callers: set[str] = dataclasses.field(default_factory=set)

    def __post_init__(self) -> None:
        if self.pricing is not False and prices.DEFAULT.cold:
            prices.DEFAULT.warm_up()

    def add_call(self, caller: str, model: str | None, usage: TokenUsage | None,
                 at: datetime | None = None, provider: str | None = None) -> UsageTotals:
        """Count one model call (usage may be unknown: the call still counts, its tokens and cost do not).
        ``provider`` is LangChain's ``ls_provider`` of the call, when known (see :func:`quote`)."""
        if usage is None:
            row = _UNPRICED_CALL
            self._unpriced(model, f"a call to {model!r} reported no token usage" if model
                           else "a model call reported neither its model nor its token usage")
        else:
            cost, reason = quote(usage, model, self.pricing, at, provider=provider)
            row = priced(usage, cost)
            if reason is not None:
                self._unpriced(model, reason)
        self._add(caller, model, row)
        return row

    def add_known(self, caller: str, model: str | None, usage: TokenUsage, cost: float) -> None:
        """Count one model call whose cost is already known (a stored call's recorded cost)."""
        self._add(caller, model, priced(usage, cost))

    def add_tool(self, caller: str, name: str) -> None:
        """Count one tool call."""
        self.tool_calls += 1
        self.tools.add(name)
        self.tool_callers.add(caller)

    def add_llm_error(self, caller: str, model: str | None) -> None:
        """Count one failed model call."""
        self.llm_errors += 1
        self.failed_models.add(model or "unknown")
        self.tool_callers.add(caller)

    def task_started(self, task_id: str, caller: str) -> None:
        """A subagent task started; ``caller`` is its subagent's (``subagent:<name>``)."""
        self.calls_at_task_start[task_id] = self.calls_of(caller)

    def task_ended(self, task_id: str, caller: str, model: str | None, usage: TokenUsage | None,
                   at: datetime | None = None) -> bool:
        """A subagent task ended, reporting ``usage`` (None: nothing reported). Counts it as one call
        when the rule of the class docstring says so; True when it did."""
        seen = self.calls_of(caller) > self.calls_at_task_start.pop(task_id, 0)
        if usage is None or seen or task_id in self.reported_tasks:
            return False
        self.reported_tasks.add(task_id)
        self.add_call(caller, model, usage, at)
        return True

    def calls_of(self, caller: str) -> int:
        """Model calls counted for ``caller``."""
        return sum(totals.llm_calls for (who, _), totals in self.groups.items() if who == caller)

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
        return fold(self.groups.values())

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
        return {name: fold(parts) for name, parts in buckets.items()}

    def copy(self) -> RunTally:
        """A snapshot that later calls do not change (the groups are immutable totals)."""
        return RunTally(self.pricing, dict(self.groups), self.tool_calls, self.tool_errors, self.messages,
                        self.first_human, self.last_ai, dict(self.unpriced) if self.unpriced else {},
                        dict(self.calls_at_task_start) if self.calls_at_task_start else {},
                        set(self.reported_tasks) if self.reported_tasks else set(),
                        set(self.tools), self.llm_errors, set(self.failed_models),
                        set(self.tool_callers))

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
            "models": {model for _, model in self.groups} | self.failed_models,
            "tools": self.tools,
            "callers": {caller for caller, _ in self.groups} | self.tool_callers,
            "llm_error_count": self.llm_errors,
        }


def fold(parts: Iterable[UsageTotals]) -> UsageTotals:
    """The sum of some totals (zero totals for none)."""
    total: UsageTotals | None = None
    for part in parts:
        total = part if total is None else total + part
    return total if total is not None else _NOTHING


_NOTHING: Final = UsageTotals()
