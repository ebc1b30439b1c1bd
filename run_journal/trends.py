"""Usage trends: token and cost totals of the runs ``search_runs`` finds, per day, model or caller.

Every figure is a sum of run rows (the totals the journal accumulated while the runs ran; no event
is read again): per day, the ``usage`` of the runs that started that day (UTC); per model and per
caller, the runs' ``usage_by_model`` and ``usage_by_caller`` buckets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final, Literal

from run_journal.envelope import JsonObject
from run_journal.runs import RunRow, UsageTotals
from run_journal.stores.base import MAX_PAGE, RunEventStore

TrendKey = Literal["day", "model", "caller"]
TREND_KEYS: Final = ("day", "model", "caller")
NOT_STARTED: Final = "not started"
"""The day of a run without ``started_at``."""


@dataclasses.dataclass(frozen=True, slots=True)
class UsageBucket:
    """One day's, model's or caller's totals: ``runs`` that count in it and their ``usage``.

    ``usage.cost_usd`` is None when any call in the bucket has an unknown price; ``known_cost_usd``
    is the sum of the costs that are known, and ``unpriced_runs`` how many runs have calls without one.
    """

    key: str
    runs: int
    usage: UsageTotals
    known_cost_usd: float
    unpriced_runs: int

    def to_dict(self) -> JsonObject:
        return {"key": self.key, "runs": self.runs, "usage": self.usage.to_dict(),
                "known_cost_usd": self.known_cost_usd, "unpriced_runs": self.unpriced_runs}


def usage_by(rows: Iterable[RunRow], by: TrendKey) -> list[UsageBucket]:
    """The buckets of ``rows``: days in time order, models and callers by name."""
    if by not in TREND_KEYS:
        raise ValueError(f"by must be one of {', '.join(TREND_KEYS)}, got {by!r}")
    totals: dict[str, list[Any]] = {}  # key -> [runs, usage, known cost, unpriced runs]
    for row in rows:
        for key, usage in _parts(row, by):
            bucket = totals.setdefault(key, [0, UsageTotals(), 0.0, 0])
            bucket[0] += 1
            bucket[1] = bucket[1] + usage
            if usage.cost_usd is not None:
                bucket[2] += usage.cost_usd
            elif usage.llm_calls:
                bucket[3] += 1
    order = sorted(totals, key=lambda key: (key == NOT_STARTED, key))
    return [UsageBucket(key, *totals[key]) for key in order]


def _parts(row: RunRow, by: TrendKey) -> Iterable[tuple[str, UsageTotals]]:
    if by == "day":
        return [(row.started_at.date().isoformat() if row.started_at else NOT_STARTED, row.usage)]
    buckets: Mapping[str, UsageTotals] = row.usage_by_model if by == "model" else row.usage_by_caller
    return buckets.items()


async def usage_trend(
    store: RunEventStore, by: TrendKey = "day", *, since: datetime | None = None,
    until: datetime | None = None, **filters: Any,
) -> list[UsageBucket]:
    """The usage of the runs ``store.search_runs(since=, until=, **filters)`` finds, per ``by``:
    ``day`` (UTC day of ``started_at``), ``model`` or ``caller``. Reads every matching row, a page of
    10,000 at a time."""
    if by not in TREND_KEYS:
        raise ValueError(f"by must be one of {', '.join(TREND_KEYS)}, got {by!r}")
    rows: list[RunRow] = []
    cursor: str | None = None
    while True:
        page = await store.search_runs(since=since, until=until, limit=MAX_PAGE, cursor=cursor, **filters)
        rows += page.rows
        if page.next_cursor is None:
            return usage_by(rows, by)
        cursor = page.next_cursor
