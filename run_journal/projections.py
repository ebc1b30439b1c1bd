"""Consumers: the views a chat UI, a debugger, an auditor and an operator build from the stream.

Every function here depends only on the store contract (``RunEventStore``), never on a backend, so a
web backend can call them directly on whatever store it opened. Reads are paged and bounded: nothing
here loads a whole thread to answer a question about its last page.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final, Protocol

from run_journal.catalog import MIDDLEWARE_PREFIX, TERMINAL_RUN_EVENTS, canonical_event_type
from run_journal.envelope import JsonObject, RunEvent, utc_now
from run_journal.runs import RunRow, RunStatus, UsageTotals, status_of
from run_journal.stores.base import MAX_PAGE, RunEventStore, check_limit

__all__ = [
    "ClosedRun",
    "HistoryPage",
    "MemoryAudit",
    "StepsPage",
    "UsageSummary",
    "find_gaps",
    "latest_event",
    "latest_workspace_changes",
    "memory_audit",
    "reconcile_orphans",
    "status_of",
    "subtask_steps",
    "thread_history",
    "usage_summary",
]

HISTORY_CHUNK_MIN: Final = 32
HISTORY_CHUNK_MAX: Final = 1000
"""``thread_history`` reads backwards in chunks that start near ``limit`` and double up to this."""
RECONCILE_REASON: Final = "worker lost"
ROWLESS_PAGE: Final = 1000
"""Runs without a row ``reconcile_orphans`` reads per ``list_runs_without_row`` page."""


class _HasSeq(Protocol):
    @property
    def seq(self) -> int: ...


# -- thread history ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class HistoryPage:
    """One page of a thread's visible messages, oldest first.

    ``next_before_seq`` is the ``before_seq`` of the next (older) page, ``None`` when ``has_more`` is
    false: a UI can page back until it is ``None`` and will have seen every visible row exactly once.
    A page read forwards (``after_seq``) continues with ``after_seq=next_after_seq`` instead.
    """

    data: tuple[RunEvent, ...]
    has_more: bool
    next_before_seq: int | None
    next_after_seq: int | None = None


def caller_of(event: RunEvent) -> str:
    """``metadata.caller`` (``lead_agent``, ``agent:<name>``, ``subagent:<name>``,
    ``middleware:<name>``) or ``""``."""
    caller = event.metadata.get("caller")
    return caller if isinstance(caller, str) else ""


def is_visible_message(event: RunEvent, hidden_run_ids: Collection[str] = ()) -> bool:
    """Whether a message row belongs in the thread a user sees.

    Hidden: middleware model calls, subagent AI responses (their steps live in subtask cards, but the
    parent's task tool message stays so a card can restore its terminal status), the routing between
    agents (a handoff tool call without text and its result: ``metadata.handoff``), and rows of runs
    the caller marks superseded (a regenerated answer replaces the old run). The replies of every
    agent (``lead_agent``, ``agent:<name>``) stay.
    """
    if event.category != "message" or event.run_id in hidden_run_ids or event.metadata.get("handoff"):
        return False
    caller = caller_of(event)
    if caller.startswith(MIDDLEWARE_PREFIX):
        return False
    return not (
        caller.startswith("subagent:") and canonical_event_type(event.event_type) == "llm.ai.response"
    )


async def thread_history(
    store: RunEventStore,
    thread_id: str,
    *,
    limit: int = 50,
    before_seq: int | None = None,
    after_seq: int | None = None,
    hidden_run_ids: Iterable[str] = (),
    include_internal: bool = False,
    user_id: str | None = None,
) -> HistoryPage:
    """The page a chat UI renders: the latest ``limit`` visible messages below ``before_seq``.

    Reads backwards through ``list_messages`` in chunks (growing when most rows are filtered out) until
    it has ``limit`` visible rows plus one more (which proves ``has_more``) or reaches the start, so a
    full page costs about ``limit / visible_fraction`` rows however long the thread is.

    ``after_seq`` reads forwards instead: the first ``limit`` visible messages above it (below
    ``before_seq`` when both are given), continued with ``next_after_seq``. ``include_internal=True``
    keeps every message row of the runs not hidden (middleware calls, subagent replies, routing too).
    """
    check_limit(limit)
    hidden = frozenset(hidden_run_ids)

    def keep(event: RunEvent) -> bool:
        if include_internal:
            return event.category == "message" and event.run_id not in hidden
        return is_visible_message(event, hidden)

    if after_seq is not None:
        return await _history_forwards(store, thread_id, limit, after_seq, before_seq, keep, user_id)
    newest_first: list[RunEvent] = []
    has_more = False
    cursor = before_seq
    chunk = min(max(limit + 1, HISTORY_CHUNK_MIN), HISTORY_CHUNK_MAX)
    while not has_more and (cursor is None or cursor > 1):
        rows = await store.list_messages(thread_id, limit=chunk, before_seq=cursor, user_id=user_id)
        for event in reversed(rows):
            if not keep(event):
                continue
            if len(newest_first) == limit:
                has_more = True
                break
            newest_first.append(event)
        if len(rows) < chunk:
            break
        cursor = rows[0].seq
        chunk = min(chunk * 2, HISTORY_CHUNK_MAX)
    data = tuple(reversed(newest_first))
    return HistoryPage(data, has_more, data[0].seq if has_more else None)


async def _history_forwards(
    store: RunEventStore, thread_id: str, limit: int, after_seq: int, before_seq: int | None,
    keep: Callable[[RunEvent], bool], user_id: str | None,
) -> HistoryPage:
    data: list[RunEvent] = []
    has_more = False
    cursor = after_seq
    chunk = min(max(limit + 1, HISTORY_CHUNK_MIN), HISTORY_CHUNK_MAX)
    while not has_more:
        rows = await store.list_messages(thread_id, limit=chunk, after_seq=cursor, user_id=user_id)
        for event in rows:
            if before_seq is not None and event.seq >= before_seq:
                rows = []  # past the upper bound: nothing more to read
                break
            if not keep(event):
                continue
            if len(data) == limit:
                has_more = True
                break
            data.append(event)
        if len(rows) < chunk:
            break
        cursor = rows[-1].seq
        chunk = min(chunk * 2, HISTORY_CHUNK_MAX)
    return HistoryPage(tuple(data), has_more, None, data[-1].seq if has_more else None)


# -- folds over events ---------------------------------------------------------------------------
def find_gaps(events: Iterable[_HasSeq | int]) -> list[int]:
    """Seqs missing between 1 and the highest seq seen (events of one thread, in any order).

    Because the store assigns seq densely, a hole means a lost write or a deleted run.
    """
    seen = {item if isinstance(item, int) else item.seq for item in events}
    if not seen:
        return []
    return [seq for seq in range(1, max(seen) + 1) if seq not in seen]


async def iter_events(
    store: RunEventStore,
    thread_id: str,
    run_id: str | None = None,
    *,
    event_types: Sequence[str] | None = None,
    task_id: str | None = None,
    after_seq: int | None = None,
    user_id: str | None = None,
) -> AsyncIterator[RunEvent]:
    """Every matching event of a thread in seq order, read page by page (bounded memory)."""
    cursor = after_seq
    while True:
        page = await store.list_events(
            thread_id, run_id, event_types=event_types, task_id=task_id, limit=MAX_PAGE,
            after_seq=cursor, user_id=user_id,
        )
        for event in page:
            yield event
        if len(page) < MAX_PAGE:
            return
        cursor = page[-1].seq


async def _all_events(
    store: RunEventStore,
    thread_id: str,
    run_id: str | None,
    *,
    event_types: list[str] | None = None,
    task_id: str | None = None,
    user_id: str | None = None,
) -> list[RunEvent]:
    """Every matching event in seq order (used for small, filtered sets)."""
    return [e async for e in iter_events(store, thread_id, run_id, event_types=event_types,
                                         task_id=task_id, user_id=user_id)]


async def latest_event(
    store: RunEventStore, thread_id: str, run_id: str, event_types: list[str], *,
    user_id: str | None = None,
) -> RunEvent | None:
    """The last event of a run with one of ``event_types`` (aliases match), or None; ``user_id``
    keeps only that user's events."""
    events = await _all_events(store, thread_id, run_id, event_types=event_types, user_id=user_id)
    return events[-1] if events else None


# -- subtask cards -------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class StepsPage:
    """``subagent.step`` rows of one task, oldest first; continue with ``after_seq=next_after_seq``."""

    data: tuple[RunEvent, ...]
    has_more: bool
    next_after_seq: int | None


async def subtask_steps(
    store: RunEventStore,
    thread_id: str,
    run_id: str,
    task_id: str,
    *,
    after_seq: int | None = None,
    limit: int = 100,
) -> StepsPage:
    """The steps a historical subtask card shows, paged forwards by ``after_seq``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit < MAX_PAGE:
        raise ValueError(f"limit must be an integer from 1 to {MAX_PAGE - 1}, got {limit!r}")
    rows = await store.list_events(
        thread_id, run_id, event_types=["subagent.step"], task_id=task_id, limit=limit + 1,
        after_seq=after_seq,
    )
    data = tuple(rows[:limit])
    has_more = len(rows) > limit
    return StepsPage(data, has_more, data[-1].seq if has_more else None)


# -- audits --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class MemoryAudit:
    """Whether the memory context a run recorded is the one the auditor expected."""

    present: bool
    matches: bool
    recorded_sha256: str | None
    expected_sha256: str
    seq: int | None = None


async def memory_audit(
    store: RunEventStore, thread_id: str, run_id: str, expected_sha256: str
) -> MemoryAudit:
    """Compare the run's (latest) ``context:memory`` sha256 with ``expected_sha256``.

    Only the hash is stored, never the memory text, so this is the whole audit.
    """
    expected = expected_sha256.strip().lower()
    event = await latest_event(store, thread_id, run_id, ["context:memory"])
    if event is None:
        return MemoryAudit(False, False, None, expected)
    content = event.content if isinstance(event.content, dict) else {}
    recorded = content.get("content_sha256")
    recorded = recorded if isinstance(recorded, str) else None
    return MemoryAudit(True, recorded == expected, recorded, expected, event.seq)


async def latest_workspace_changes(
    store: RunEventStore,
    thread_id: str,
    run_id: str,
    *,
    include_files: bool = True,
    include_diffs: bool = True,
    user_id: str | None = None,
) -> dict[str, Any]:
    """The workspace review of a run: its latest ``workspace_changes`` payload.

    ``{"available": False, ...}`` when the run changed no files. ``include_files=False`` drops the
    file list (summary only); ``include_diffs=False`` keeps the files but drops each ``diff``.
    """
    result: dict[str, Any] = {"available": False, "thread_id": thread_id, "run_id": run_id,
                              "seq": None, "created_at": None, "summary_text": None,
                              "workspace_changes": None}
    event = await latest_event(store, thread_id, run_id, ["workspace_changes"], user_id=user_id)
    payload = event.metadata.get("workspace_changes") if event else None
    if event is None or not isinstance(payload, dict):
        return result
    changes: JsonObject = dict(payload)
    files = changes.get("files")
    if not include_files:
        changes.pop("files", None)
    elif not include_diffs and isinstance(files, list):
        changes["files"] = [
            {key: value for key, value in entry.items() if key != "diff"} if isinstance(entry, dict)
            else entry
            for entry in files
        ]
    result.update(
        available=True, seq=event.seq, created_at=event.created_at.isoformat(),
        summary_text=event.content if isinstance(event.content, str) else None,
        workspace_changes=changes,
    )
    return result


# -- orphan reconciliation -----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class ClosedRun:
    """A run ``reconcile_orphans`` closed: the ``run.cancel`` it wrote and the row as stored after."""

    event: RunEvent
    row: RunRow
    last_activity: datetime


async def reconcile_orphans(
    store: RunEventStore, *, older_than: timedelta, now: datetime | None = None
) -> list[ClosedRun]:
    """Close runs whose worker died: started, never ended, silent for longer than ``older_than``.

    A candidate is a row with status ``running`` (or ``pending`` with a ``run.start`` event) whose last
    activity (row ``updated_at`` and its last event) is older than ``now - older_than``, or a run with
    a ``run.start`` but no row at all (``list_runs_without_row``: its worker died between the first
    events and the first row) whose last event is that old; such a run gets a ``cancelled`` row. Its terminal
    ``run.cancel`` is written with ``put_if_absent(..., exclusive_types=TERMINAL_RUN_EVENTS)``: it is
    written only if the run has no terminal event of any type, in one atomic step, so when several
    reconcilers race (or a producer writes its terminal event the same way at the same moment)
    exactly one terminal event is written, and only a reconciler that wrote it reports the run. A
    run that already has a terminal event is left alone (except that a row still open after an
    earlier reconciliation's cancel is brought in line).
    """
    moment = now or utc_now()
    cutoff = moment - older_than
    closed: list[ClosedRun] = []
    for row in await store.list_runs(statuses=[RunStatus.RUNNING, RunStatus.PENDING]):
        if row.updated_at > cutoff:
            continue
        result = await _reconcile_one(store, row, cutoff, moment)
        if result is not None:
            closed.append(result)
    after: str | None = None
    while starts := await store.list_runs_without_row(limit=ROWLESS_PAGE, after=after):
        for start in starts:
            if start.created_at <= cutoff:
                result = await _reconcile_one(store, _row_of_start(start), cutoff, moment)
                if result is not None:
                    closed.append(result)
        after = starts[-1].run_id
    return closed


def _row_of_start(start: RunEvent) -> RunRow:
    """What is known of a run that never wrote a row: its ``run.start``."""
    return RunRow(run_id=start.run_id, thread_id=start.thread_id, user_id=start.user_id,
                  status=RunStatus.RUNNING, started_at=start.created_at, updated_at=start.created_at)


async def _reconcile_one(
    store: RunEventStore, row: RunRow, cutoff: datetime, moment: datetime
) -> ClosedRun | None:
    """Close one candidate; ``row`` is the stored row, or for a run without one, made up from its
    ``run.start`` (``_close_row`` then writes the run's first row)."""
    lifecycle = await _all_events(
        store, row.thread_id, row.run_id, event_types=sorted(TERMINAL_RUN_EVENTS | {"run.start"})
    )
    terminal = [event for event in lifecycle if event.event_type in TERMINAL_RUN_EVENTS]
    if terminal:
        first = terminal[0]
        if first.event_type == "run.cancel" and first.metadata.get("reconciled") is True:
            await _close_row(store, row, moment)  # finish an earlier reconciler's interrupted work
        return None  # a run that ended without writing a row is not an orphan: it is left alone
    if row.status == RunStatus.PENDING and not lifecycle:
        return None  # never started: a queued run is not an orphan
    last, seen = await _scan_run(store, row)
    last_activity = max(row.updated_at, last) if last else row.updated_at
    if last_activity > cutoff:
        return None
    event, created = await store.put_if_absent(
        thread_id=row.thread_id, run_id=row.run_id, event_type="run.cancel", category="error",
        content={"reason": RECONCILE_REASON, "last_activity": last_activity.isoformat()},
        metadata={"status": "cancelled", "reconciled": True},
        created_at=moment, event_id=_reconcile_event_id(row.run_id), user_id=row.user_id,
        exclusive_types=TERMINAL_RUN_EVENTS,
    )
    if not created:
        return None
    stored = await _close_row(store, row, moment, seen)
    return ClosedRun(event, stored, last_activity)


def _reconcile_event_id(run_id: str) -> str:
    """One fixed id per run, so even a retried reconciliation write is the same event."""
    name = f"reconcile:{run_id}"
    return name if len(name) <= 255 else "reconcile:" + hashlib.sha256(run_id.encode()).hexdigest()


async def _close_row(store: RunEventStore, row: RunRow, moment: datetime,
                     seen: RunFacts | None = None) -> RunRow:
    current = await store.get_run(row.run_id) or row
    if current.is_terminal:
        return current
    closed = current.replace(status=RunStatus.CANCELLED, ended_at=moment, updated_at=moment,
                             error=current.error or RECONCILE_REASON)
    return await store.put_run(seen.merged_into(closed) if seen is not None else closed)


@dataclasses.dataclass(slots=True)
class RunFacts:
    """What a run's events say it used and what failed: the search fields of its row, for a run
    whose worker died before its last row (``reconcile_orphans`` writes them into the row it closes)."""

    models: set[str] = dataclasses.field(default_factory=set)
    tools: set[str] = dataclasses.field(default_factory=set)
    callers: set[str] = dataclasses.field(default_factory=set)
    llm_errors: int = 0
    tool_errors: int = 0

    def add(self, event: RunEvent) -> None:
        metadata = event.metadata if isinstance(event.metadata, Mapping) else {}
        content = event.content if isinstance(event.content, Mapping) else {}
        kind = event.event_type
        if kind in ("llm.ai.response", "llm.error"):
            model = metadata.get("model_name")
            self.models.add(model if isinstance(model, str) and model else "unknown")
            self.llm_errors += kind == "llm.error"
        elif kind in ("tool.call", "tool.outcome"):
            name = content.get("tool_name")
            if isinstance(name, str) and name:
                self.tools.add(name)
            self.tool_errors += kind == "tool.outcome" and content.get("outcome") == "error"
        else:
            return
        caller = metadata.get("caller")
        if isinstance(caller, str) and caller:
            self.callers.add(caller)

    def merged_into(self, row: RunRow) -> RunRow:
        """``row`` knowing these facts too (names joined, counts the larger of the two)."""
        return row.replace(
            models=(*row.models, *self.models), tools=(*row.tools, *self.tools),
            callers=(*row.callers, *self.callers),
            llm_error_count=max(row.llm_error_count, self.llm_errors),
            tool_error_count=max(row.tool_error_count, self.tool_errors),
        )


async def _scan_run(store: RunEventStore, row: RunRow) -> tuple[datetime | None, RunFacts]:
    """When the run last wrote anything, and what its events say it used."""
    last: RunEvent | None = None
    seen = RunFacts()
    async for last in iter_events(store, row.thread_id, row.run_id):
        seen.add(last)
    return (last.created_at if last else None), seen


# -- usage ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class UsageSummary:
    """Token and cost totals from run rows: per run, per model, per caller, and overall."""

    runs: tuple[RunRow, ...]
    by_model: Mapping[str, UsageTotals]
    by_caller: Mapping[str, UsageTotals]
    total: UsageTotals

    def to_dict(self) -> JsonObject:
        return {
            "runs": [
                {"run_id": row.run_id, "thread_id": row.thread_id, "status": str(row.status),
                 "usage": row.usage.to_dict()}
                for row in self.runs
            ],
            "by_model": {name: totals.to_dict() for name, totals in self.by_model.items()},
            "by_caller": {name: totals.to_dict() for name, totals in self.by_caller.items()},
            "total": self.total.to_dict(),
        }


def summarize_usage(rows: Iterable[RunRow]) -> UsageSummary:
    """Add up run rows (the journal accumulated them while callbacks fired; events are not re-read)."""
    runs = tuple(rows)
    by_model: dict[str, UsageTotals] = {}
    by_caller: dict[str, UsageTotals] = {}
    total = UsageTotals()
    for row in runs:
        total = total + row.usage
        for bucket, source in ((by_model, row.usage_by_model), (by_caller, row.usage_by_caller)):
            for name, totals in source.items():
                bucket[name] = bucket.get(name, UsageTotals()) + totals
    return UsageSummary(runs, dict(sorted(by_model.items())), dict(sorted(by_caller.items())), total)


async def usage_summary(store: RunEventStore, thread_id: str | None = None) -> UsageSummary:
    """Usage totals of one thread's runs, or of every run in the store."""
    return summarize_usage(await store.list_runs(thread_id))
