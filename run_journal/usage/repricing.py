"""Pricing stored runs again (the consumer side): a run's usage folded from its events exactly as the
journal counted it, and a run row with its costs computed again."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeGuard

from run_journal.catalog import LEAD_AGENT
from run_journal.runs import RunRow, UsageTotals
from run_journal.usage.tally import NOTE_REASONS, PricingOption, RunTally, fold, quote, usage_of
from run_journal.usage.tokens import FIELDS, TokenUsage

if TYPE_CHECKING:
    from run_journal.envelope import RunEvent

RELEVANT_EVENTS: Final = ("llm.ai.response", "subagent.start", "subagent.end")
"""The events :func:`replay` reads (a reader may select only these)."""
_COUNTED: Final = (*FIELDS, "llm_calls")


def replay(events: Iterable[RunEvent], pricing: PricingOption = None, *, keep_known: bool = True) -> RunTally:
    """The usage a run's events record, priced again: each ``llm.ai.response`` as the journal counted
    it (its caller, model, provider and usage, priced as of the call's time), and the usage a subagent
    task reported at its end as the journal counts it (see :class:`RunTally`).

    ``keep_known``: a call recorded with a cost keeps it (it may come from a table you no longer
    pass), unless ``pricing`` names its model; False prices every call again.
    """
    tally = RunTally(pricing=pricing)
    for event in events:
        metadata = event.metadata if isinstance(event.metadata, Mapping) else {}
        content = event.content if isinstance(event.content, Mapping) else {}
        caller = str(metadata.get("caller") or LEAD_AGENT)
        if event.event_type == "llm.ai.response":
            model = _text(metadata.get("model_name"))
            usage = TokenUsage.from_dict(metadata.get("usage"))
            recorded = metadata.get("cost_usd")
            named = bool(pricing) and model is not None and model in (pricing or {})
            if keep_known and usage is not None and _is_cost(recorded) and not named:
                tally.add_known(caller, model, usage, float(recorded))
            else:
                tally.add_call(caller, model, usage, event.created_at, _text(metadata.get("model_provider")))
        elif event.event_type == "subagent.start" and isinstance(task_id := content.get("task_id"), str):
            tally.task_started(task_id, caller)
        elif event.event_type == "subagent.end" and isinstance(task_id := content.get("task_id"), str):
            tally.task_ended(task_id, caller, _text(content.get("model")),
                             TokenUsage.from_dict(content.get("usage")), event.created_at)
    return tally


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _is_cost(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


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
    usage = dataclasses.replace(tally.total, cost_usd=fold(by_model.values()).cost_usd)
    return row.replace(usage=usage, usage_by_caller=by_caller, usage_by_model=by_model,
                       cost_note=tally.cost_note if usage.cost_usd is None and usage.llm_calls else None)


def _reprice_totals(row: RunRow, pricing: PricingOption, keep_known: bool) -> RunRow:
    reasons: dict[str, str] = {}

    def priced_as(model: str | None, totals: UsageTotals) -> UsageTotals:
        if not totals.llm_calls:
            return totals
        if keep_known and totals.cost_usd is not None and not (pricing and model in pricing):
            return totals
        cost, reason = quote(usage_of(totals), None if model == "unknown" else model, pricing,
                             row.started_at, totals.llm_calls)
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
    usage = dataclasses.replace(row.usage, cost_usd=fold(by_model.values()).cost_usd) if by_model \
        else unknown(row.usage)
    known = list(dict.fromkeys(reasons.values()))
    note = "; ".join(known[:NOTE_REASONS]) if known and usage.cost_usd is None else None
    return row.replace(usage=usage, usage_by_caller=by_caller, usage_by_model=by_model, cost_note=note)
