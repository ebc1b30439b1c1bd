"""Run rows, usage totals and the status fold.

``RunRow`` is what a store persists per run and ``status_of`` is how a consumer derives the same status
from events, so the two must agree; ``may_replace`` is the rule every store applies on ``put_run``.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest

from run_journal import catalog
from run_journal.envelope import NewEvent, RunEvent, dumps, loads
from run_journal.runs import (
    STATUS_AFTER,
    TERMINAL_STATUSES,
    RunRow,
    RunStatus,
    UsageTotals,
    may_replace,
    status_of,
)

START = datetime(2025, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)


def full_row(**changes: Any) -> RunRow:
    fields: dict[str, Any] = {
        "run_id": "run-1", "thread_id": "thread-1", "user_id": "user-1", "status": "success",
        "started_at": START, "ended_at": START + timedelta(seconds=3),
        "updated_at": START + timedelta(seconds=4),
        "resumed_from": "run-0", "error": None,
        "usage": UsageTotals(input_tokens=10, output_tokens=5, total_tokens=15, cache_read_tokens=2,
                             cache_creation_tokens=1, reasoning_tokens=3, llm_calls=2, cost_usd=0.25),
        "usage_by_caller": {"lead_agent": UsageTotals(input_tokens=10, llm_calls=2, cost_usd=0.25)},
        "usage_by_model": {"fake-model": UsageTotals(output_tokens=5, llm_calls=2)},
        "tool_call_count": 4, "tool_error_count": 1, "message_count": 6,
        "first_human_message": "hi ü", "last_ai_message": "bye", "metadata": {"k": [1, "two"]},
    }
    fields.update(changes)
    return RunRow(**fields)


# --- UsageTotals ------------------------------------------------------------------------------------


def test_usage_round_trips_and_ignores_unknown_fields() -> None:
    usage = full_row().usage
    assert UsageTotals.from_dict(usage.to_dict()) == usage
    assert UsageTotals.from_dict(loads(dumps(usage.to_dict()))) == usage
    assert UsageTotals.from_dict({**usage.to_dict(), "future_field": 9}) == usage
    assert UsageTotals.from_dict(None) == UsageTotals()
    assert UsageTotals.from_dict({}) == UsageTotals()


def test_usage_adds_every_counter() -> None:
    left = UsageTotals(1, 2, 3, 4, 5, 6, 7, 0.5)
    right = UsageTotals(10, 20, 30, 40, 50, 60, 70, 0.25)
    assert left + right == UsageTotals(11, 22, 33, 44, 55, 66, 77, 0.75)
    assert sum([left, right], UsageTotals()) == left + right


@pytest.mark.parametrize(
    ("left", "right", "cost"),
    [
        (UsageTotals(llm_calls=1, cost_usd=0.5), UsageTotals(llm_calls=2, cost_usd=0.25), 0.75),
        (UsageTotals(llm_calls=1, cost_usd=0.5), UsageTotals(llm_calls=1, cost_usd=None), None),
        (UsageTotals(llm_calls=1, cost_usd=None), UsageTotals(llm_calls=1, cost_usd=0.5), None),
        (UsageTotals(), UsageTotals(llm_calls=1, cost_usd=0.5), 0.5),  # no calls: nothing unknown
        (UsageTotals(llm_calls=3, cost_usd=1.0), UsageTotals(), 1.0),
        (UsageTotals(), UsageTotals(), None),
        (UsageTotals(llm_calls=1, cost_usd=0.0), UsageTotals(llm_calls=1, cost_usd=0.0), 0.0),
    ],
)
def test_cost_of_a_sum_is_unknown_when_any_priced_call_is_unknown(
    left: UsageTotals, right: UsageTotals, cost: float | None
) -> None:
    assert (left + right).cost_usd == (pytest.approx(cost) if cost is not None else None)


def test_an_unknown_cost_stays_unknown_through_later_additions() -> None:
    total = UsageTotals()
    for part in (UsageTotals(llm_calls=1, cost_usd=0.1), UsageTotals(llm_calls=1),
                 UsageTotals(llm_calls=1, cost_usd=0.2)):
        total = total + part
    assert total.llm_calls == 3
    assert total.cost_usd is None


# --- RunRow -----------------------------------------------------------------------------------------


def test_run_row_round_trips_through_dict_and_json_text() -> None:
    row = full_row()
    assert RunRow.from_dict(row.to_dict()) == row
    assert RunRow.from_dict(loads(dumps(row.to_dict()))) == row
    minimal = RunRow(run_id="r", thread_id="t")
    assert RunRow.from_dict(loads(dumps(minimal.to_dict()))) == minimal


def test_run_row_to_dict_is_json_with_normalized_metadata() -> None:
    row = full_row(metadata={"when": START, "ratio": float("nan"), 3: (1, 2)})
    data = row.to_dict()
    assert data["metadata"] == {"when": START.isoformat(), "ratio": "NaN", "3": [1, 2]}
    assert data["status"] == "success"
    assert data["usage_by_caller"] == {"lead_agent": row.usage_by_caller["lead_agent"].to_dict()}
    assert loads(dumps(data)) == data


def test_status_is_coerced_to_the_enum_and_bad_statuses_are_rejected() -> None:
    row = RunRow(run_id="r", thread_id="t", status="interrupted")
    assert row.status is RunStatus.INTERRUPTED
    cancelled = RunRow.from_dict({"run_id": "r", "thread_id": "t", "status": "cancelled"})
    assert cancelled.status is RunStatus.CANCELLED
    assert RunRow.from_dict({"run_id": "r", "thread_id": "t"}).status is RunStatus.PENDING
    assert row.replace(status="running").status is RunStatus.RUNNING
    with pytest.raises(ValueError, match="done"):
        RunRow(run_id="r", thread_id="t", status="done")


def test_run_row_times_are_utc_and_naive_ones_rejected() -> None:
    paris = timezone(timedelta(hours=2))
    row = RunRow(run_id="r", thread_id="t", started_at=datetime(2025, 1, 1, 14, 0, tzinfo=paris))
    assert row.started_at == datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
    assert row.started_at is not None
    assert row.started_at.utcoffset() == timedelta(0)
    assert row.updated_at.tzinfo is not None
    with pytest.raises(ValueError, match="timezone-aware"):
        RunRow(run_id="r", thread_id="t", ended_at=datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        RunRow.from_dict({"run_id": "r", "thread_id": "t", "started_at": "2025-01-01T00:00:00"})


@pytest.mark.parametrize("field", ["run_id", "thread_id", "user_id"])
def test_run_row_ids_are_validated(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        full_row(**{field: "../x"})


def test_run_row_shortcuts_read_the_usage_totals() -> None:
    row = full_row()
    assert (row.llm_call_count, row.total_tokens, row.cost_usd) == (2, 15, 0.25)
    assert row.is_terminal
    assert not row.replace(status=RunStatus.RUNNING).is_terminal


# --- may_replace ------------------------------------------------------------------------------------

TERMINAL = ("success", "error", "interrupted", "cancelled")
OPEN = ("pending", "running")


def test_may_replace_truth_table() -> None:
    for stored, new in itertools.product(OPEN + TERMINAL, repeat=2):
        expected = stored in OPEN or stored == new
        assert may_replace(stored, new) is expected, (stored, new)
        assert may_replace(RunStatus(stored), RunStatus(new)) is expected, (stored, new)
    assert may_replace("running", "success")
    assert may_replace("pending", "running")
    assert not may_replace("success", "running")  # a finished run is never reopened
    assert not may_replace("interrupted", "running")  # a resume is a new run (resumed_from)
    assert not may_replace("error", "success")
    assert may_replace("cancelled", "cancelled")  # the same terminal write again is fine
    assert {status.value for status in TERMINAL_STATUSES} == set(TERMINAL)


# --- status_of --------------------------------------------------------------------------------------


def events(*names: str) -> list[SimpleNamespace]:
    return [SimpleNamespace(event_type=name) for name in names]


@pytest.mark.parametrize(
    ("names", "status"),
    [
        ((), RunStatus.PENDING),
        (("llm.ai.response", "tool.call"), RunStatus.PENDING),  # no lifecycle event
        (("run.start",), RunStatus.RUNNING),
        (("run.start", "llm.ai.response", "llm.tool.result"), RunStatus.RUNNING),  # an orphan looks so
        (("run.start", "llm.ai.response", "run.end"), RunStatus.SUCCESS),
        (("run.start", "run.error"), RunStatus.ERROR),
        (("run.start", "run.interrupt"), RunStatus.INTERRUPTED),
        (("run.start", "run.cancel"), RunStatus.CANCELLED),
        (("run.start", "run.error", "run.cancel"), RunStatus.CANCELLED),  # the last transition wins
        (("run.start", "run.end", "llm.ai.response"), RunStatus.SUCCESS),  # later non-lifecycle rows
        (("run.start", "middleware:guardrail", "ai_message"), RunStatus.RUNNING),
    ],
)
def test_status_of_folds_lifecycle_events(names: tuple[str, ...], status: RunStatus) -> None:
    assert status_of(events(*names)) is status


def test_status_of_reads_stored_records_and_generators() -> None:
    def stored(seq: int, name: str, category: str, content: Any) -> RunEvent:
        written = NewEvent(thread_id="t", run_id="r", event_type=name, category=category, content=content)
        return RunEvent.stored(written, seq)

    rows = [
        stored(1, "run.start", "trace", {"run_name": "g"}),
        stored(2, "run.end", "outputs", {"output": 1}),
    ]
    assert status_of(rows) is RunStatus.SUCCESS
    assert status_of(row for row in rows[:1]) is RunStatus.RUNNING


def test_every_lifecycle_event_of_the_catalog_has_a_transition() -> None:
    assert set(STATUS_AFTER) == catalog.LIFECYCLE_EVENTS
    assert {STATUS_AFTER[name] for name in catalog.TERMINAL_RUN_EVENTS} == TERMINAL_STATUSES
    assert STATUS_AFTER["run.start"] is RunStatus.RUNNING


def test_a_stored_row_reads_back_as_from_dict_reads_it() -> None:
    """``stored_row`` (what the stores read their own rows with) skips the checks, not a field."""
    import json

    from run_journal.runs import UsageTotals, stored_row

    usage = UsageTotals(input_tokens=3, output_tokens=4, total_tokens=7, llm_calls=1, cost_usd=0.25)
    row = RunRow(run_id="r", thread_id="t", user_id="u", status="error",
                 started_at=datetime(2024, 1, 1, tzinfo=UTC), usage=usage, usage_by_model={"gpt-4o": usage},
                 usage_by_caller={"lead_agent": usage},
                 tools=("search", "fetch"), llm_error_count=2, metadata={"run_name": "agent"}, error="boom")
    data = json.loads(json.dumps(row.to_dict()))
    assert stored_row(data) == RunRow.from_dict(data) == row
    assert stored_row(data).to_dict() == row.to_dict()
    assert dict(stored_row(data).usage_by_model) == {"gpt-4o": usage}
    older = {key: value for key, value in data.items() if key not in ("models", "tools", "callers")}
    assert stored_row(older) == RunRow.from_dict(older)
    assert stored_row(older).models == ("gpt-4o",)
    assert stored_row(older).callers == ("lead_agent",)
    assert stored_row(older).has_error
