"""What each endpoint reads, as plain async functions over the store contract (no web framework here).

Every read takes the caller's ``user_id`` scope (``None``: unscoped). A scoped read never returns
another user's row: event reads pass ``user_id`` to the store (which refuses a page holding another
user's row), run rows are kept only when their ``user_id`` is the caller's, and a thread or run the
caller cannot see is reported as unknown (``NotFound``), exactly like one that does not exist.

Two views the public projections do not offer are here: the thread list with each thread's counts
and latest run (``thread_page``), and the scoped form of ``latest_workspace_changes``
(``workspace_review``), which reads the run's ``workspace_changes`` events with the caller's
``user_id`` and shapes them like the projection does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from run_journal.calls import model_calls
from run_journal.catalog import TERMINAL_RUN_EVENTS
from run_journal.checks.scores import SCORE_EVENT, ScoreValue, record_score
from run_journal.envelope import JsonObject, JsonValue, RunEvent
from run_journal.projections import latest_workspace_changes, summarize_usage, thread_history
from run_journal.runs import RunRow, status_of
from run_journal.stores.base import MAX_PAGE, RunEventStore
from run_journal.trajectory import compare_runs, read_trajectory
from run_journal.trends import usage_trend

__all__ = [
    "NotFound",
    "comparison",
    "event_page",
    "find_run",
    "give_feedback",
    "history_page",
    "model_call_list",
    "run_dict",
    "run_message_page",
    "run_page",
    "run_scores",
    "terminal_seq",
    "thread_page",
    "thread_usage",
    "visible_runs",
    "workspace_review",
]

LIFECYCLE: Final = sorted(TERMINAL_RUN_EVENTS | {"run.start"})


class NotFound(LookupError):
    """A thread or run that does not exist, or that the caller's user scope cannot see."""


@dataclasses.dataclass(frozen=True, slots=True)
class RunRef:
    """A run the caller may read: its row, or (for a run with events but no row) None."""

    thread_id: str
    run_id: str
    row: RunRow | None


# -- shapes ----------------------------------------------------------------------------------------
def run_dict(row: RunRow) -> JsonObject:
    """``RunRow.to_dict()`` plus ``duration_ms`` (from start to end, None while it runs)."""
    data = row.to_dict()
    took = row.ended_at - row.started_at if row.started_at and row.ended_at else None
    data["duration_ms"] = round(took.total_seconds() * 1000) if took is not None else None
    return data


def _latest_run(row: RunRow) -> JsonObject:
    data = run_dict(row)
    keep = ("run_id", "status", "started_at", "ended_at", "duration_ms", "first_human_message")
    summary: JsonObject = {key: data[key] for key in keep}
    summary["total_tokens"] = row.usage.total_tokens
    summary["cost_usd"] = row.usage.cost_usd
    summary["cost_note"] = row.cost_note
    return summary


def _owned(rows: Sequence[RunRow], user_id: str | None) -> list[RunRow]:
    return list(rows) if user_id is None else [row for row in rows if row.user_id == user_id]


# -- threads ---------------------------------------------------------------------------------------
async def visible_runs(store: RunEventStore, thread_id: str, user_id: str | None) -> list[RunRow]:
    return _owned(await store.list_runs(thread_id), user_id)


async def require_thread(store: RunEventStore, thread_id: str, user_id: str | None) -> list[RunRow]:
    """The thread's runs the caller may see; ``NotFound`` when the caller can see nothing of it."""
    runs = await visible_runs(store, thread_id, user_id)
    if runs:
        return runs
    if user_id is None:
        if await store.last_seq(thread_id) > 0:
            return runs
    elif await store.list_events(thread_id, limit=1, user_id=user_id):
        return runs
    raise NotFound(f"thread {thread_id!r} not found")


def _thread_summary(thread_id: str, runs: Sequence[RunRow], last_activity_at: str) -> JsonObject:
    usage = summarize_usage(runs).total
    return {
        "thread_id": thread_id,
        "last_activity_at": last_activity_at,
        "run_count": len(runs),
        "message_count": sum(row.message_count for row in runs),
        "total_tokens": usage.total_tokens,
        "cost_usd": usage.cost_usd,
        "cost_note": _cost_note(runs) if usage.cost_usd is None else None,
        "latest_run": _latest_run(runs[-1]) if runs else None,
    }


def _cost_note(runs: Sequence[RunRow]) -> str | None:
    """Why the runs' total cost is unknown: their rows' reasons, each once."""
    notes = dict.fromkeys(row.cost_note or "no reason was recorded" for row in runs
                          if row.usage.cost_usd is None and row.usage.llm_calls)
    return "; ".join(notes) or None


async def thread_page(
    store: RunEventStore, *, limit: int, after: str | None, user_id: str | None
) -> JsonObject:
    """Threads by latest activity, most recent first (the store's ``list_recent_threads``; ``after``
    is the previous page's ``next_after``), each with its run count, message and token totals and
    latest run, from its run rows: one ``list_recent_threads`` call, then one ``list_runs`` per
    thread of the page (one after the other: concurrent calls measured slower on PostgreSQL)."""
    try:
        page = await store.list_recent_threads(limit=min(limit + 1, MAX_PAGE), before=after,
                                               user_id=user_id)
    except ValueError:
        raise ValueError(f"after must be a next_after this listing returned, got {after!r}") from None
    has_more = len(page) > limit
    page = page[:limit]
    data: list[JsonValue] = [
        _thread_summary(item.thread_id, await store.list_runs(item.thread_id, user_id=user_id),
                        item.last_activity_at.isoformat())
        for item in page
    ]
    return {"data": data, "has_more": has_more, "next_after": page[-1].cursor if has_more else None}


def _scoped(filters: Mapping[str, Any], user_id: str | None) -> dict[str, Any] | None:
    """The filters within the caller's user scope (None: they ask for another user's runs)."""
    if user_id is None:
        return dict(filters)
    if filters.get("user_id") not in (None, user_id):
        return None
    return {**filters, "user_id": user_id}


async def search_page(store: RunEventStore, filters: Mapping[str, Any], *, user_id: str | None,
                      limit: int, cursor: str | None) -> JsonObject:
    """``/api/runs``: a page of ``search_runs`` within the caller's user scope."""
    scoped = _scoped(filters, user_id)
    if scoped is None:
        return {"data": [], "has_more": False, "next_cursor": None}
    page = await store.search_runs(**scoped, limit=limit, cursor=cursor)
    return {"data": [run_dict(row) for row in page.rows], "has_more": page.next_cursor is not None,
            "next_cursor": page.next_cursor}


async def usage_trend_of(store: RunEventStore, filters: Mapping[str, Any], *, by: str,
                         user_id: str | None) -> JsonObject:
    """``/api/usage``: ``usage_trend`` within the caller's user scope."""
    scoped = _scoped(filters, user_id)
    buckets = [] if scoped is None else await usage_trend(store, by, **scoped)  # type: ignore[arg-type]
    return {"by": by, "data": [bucket.to_dict() for bucket in buckets]}


async def run_page(
    store: RunEventStore, thread_id: str, *, limit: int, offset: int, after: str | None,
    user_id: str | None,
) -> JsonObject:
    """A thread's runs, newest first (the store's order): ``limit`` from ``offset``, or after the
    run ``after`` (the previous page's ``next_after``)."""
    if after is not None:
        try:
            rows = await store.list_runs(thread_id, user_id=user_id, newest_first=True, limit=limit + 1,
                                         after=after)
        except ValueError:
            raise ValueError(f"after must be a next_after this listing returned, got {after!r}") from None
    else:
        through = offset + limit + 1
        rows = (await store.list_runs(thread_id, user_id=user_id, newest_first=True,
                                      limit=through if through <= MAX_PAGE else None))[offset:]
    if not rows and offset == 0 and after is None:
        await require_thread(store, thread_id, user_id)
    has_more = len(rows) > limit
    chunk = rows[:limit]
    return {
        "data": [run_dict(row) for row in chunk],
        "total": await store.count_runs(thread_id, user_id=user_id),
        "has_more": has_more,
        "next_offset": offset + limit if has_more and after is None else None,
        "next_after": chunk[-1].run_id if has_more else None,
    }


async def thread_usage(store: RunEventStore, thread_id: str, user_id: str | None) -> JsonObject:
    runs = await require_thread(store, thread_id, user_id)
    return summarize_usage(runs).to_dict()


async def history_page(
    store: RunEventStore, thread_id: str, *, limit: int, before_seq: int | None,
    hidden_run_ids: Sequence[str], user_id: str | None,
) -> JsonObject:
    await require_thread(store, thread_id, user_id)
    page = await thread_history(store, thread_id, limit=limit, before_seq=before_seq,
                                hidden_run_ids=hidden_run_ids, user_id=user_id)
    return {"data": [event.to_dict() for event in page.data], "has_more": page.has_more,
            "next_before_seq": page.next_before_seq}


# -- runs ------------------------------------------------------------------------------------------
async def find_run(
    store: RunEventStore, thread_id: str, run_id: str, user_id: str | None
) -> RunRef:
    """The run if the caller may see it in this thread: a row of this thread (and user), or, without
    a row, at least one event of the run (of this user) in the thread."""
    row = await store.get_run(run_id)
    if row is not None:
        if row.thread_id != thread_id or (user_id is not None and row.user_id != user_id):
            raise NotFound(f"run {run_id!r} not found in thread {thread_id!r}")
        return RunRef(thread_id, run_id, row)
    if await store.list_events(thread_id, run_id, limit=1, user_id=user_id):
        return RunRef(thread_id, run_id, None)
    raise NotFound(f"run {run_id!r} not found in thread {thread_id!r}")


async def model_call_list(
    store: RunEventStore, thread_id: str, run_id: str, user_id: str | None
) -> JsonObject:
    """The run's model calls (``model_calls``), read with the caller's scope."""
    await find_run(store, thread_id, run_id, user_id)
    calls = await model_calls(store, thread_id, run_id, user_id=user_id)
    return {"thread_id": thread_id, "run_id": run_id, "data": [call.to_dict() for call in calls]}


async def run_detail(
    store: RunEventStore, thread_id: str, run_id: str, user_id: str | None
) -> JsonObject:
    """The run row with ``duration_ms``; a run with events but no row gets a row-shaped answer with
    its status folded from its lifecycle events and ``"row": false``."""
    ref = await find_run(store, thread_id, run_id, user_id)
    scores = await run_scores(store, thread_id, run_id, user_id)
    if ref.row is not None:
        return {**run_dict(ref.row), "row": True, "scores": scores}
    lifecycle = await store.list_events(thread_id, run_id, event_types=LIFECYCLE, limit=MAX_PAGE,
                                        user_id=user_id)
    first = lifecycle[0] if lifecycle else None
    last = lifecycle[-1] if lifecycle and lifecycle[-1].event_type in TERMINAL_RUN_EVENTS else None
    placeholder = RunRow(run_id=run_id, thread_id=thread_id, user_id=user_id,
                         status=status_of(lifecycle),
                         started_at=first.created_at if first else None,
                         ended_at=last.created_at if last else None)
    return {**run_dict(placeholder), "row": False, "scores": scores}


async def run_scores(
    store: RunEventStore, thread_id: str, run_id: str, user_id: str | None
) -> list[JsonValue]:
    """The run's ``run.score`` events (feedback, check results), oldest first, each as
    ``{seq, created_at, name, value, source, comment}``."""
    found = await store.list_events(thread_id, run_id, event_types=[SCORE_EVENT], limit=MAX_PAGE,
                                    user_id=user_id)
    scores: list[JsonValue] = []
    for event in found:
        content = event.content if isinstance(event.content, dict) else {}
        scores.append({"seq": event.seq, "created_at": event.created_at.isoformat(),
                       **{key: content.get(key) for key in ("name", "value", "source", "comment")}})
    return scores


async def give_feedback(
    store: RunEventStore, thread_id: str, run_id: str, *, value: ScoreValue, comment: str | None,
    name: str, user_id: str | None,
) -> JsonObject:
    """Record feedback on a run the caller may see (``NotFound`` otherwise) as a ``run.score``
    (``record_score``, source ``human``); returns the stored score."""
    await find_run(store, thread_id, run_id, user_id)
    stored = await record_score(store, thread_id, run_id, name, value, comment=comment, source="human")
    content = stored.content if isinstance(stored.content, dict) else {}
    return {"seq": stored.seq, "created_at": stored.created_at.isoformat(),
            **{key: content.get(key) for key in ("name", "value", "source", "comment")}}


async def terminal_seq(
    store: RunEventStore, thread_id: str, run_id: str, user_id: str | None
) -> int | None:
    """The seq of the run's terminal event, or None while it runs."""
    found = await store.list_events(thread_id, run_id, event_types=sorted(TERMINAL_RUN_EVENTS),
                                    limit=1, user_id=user_id)
    return found[0].seq if found else None


async def event_page(
    store: RunEventStore, thread_id: str, run_id: str, *, event_types: Sequence[str] | None,
    task_id: str | None, limit: int, after_seq: int, user_id: str | None,
) -> JsonObject:
    """The run's events above ``after_seq`` (``list_events`` filters), ``limit`` at a time."""
    await find_run(store, thread_id, run_id, user_id)
    rows = await store.list_events(thread_id, run_id, event_types=event_types, task_id=task_id,
                                   limit=limit + 1, after_seq=after_seq, user_id=user_id)
    return _forward_page(rows, limit)


def _forward_page(rows: list[RunEvent], limit: int) -> JsonObject:
    has_more = len(rows) > limit
    data = rows[:limit]
    return {"data": [event.to_dict() for event in data], "has_more": has_more,
            "next_after_seq": data[-1].seq if has_more else None}


async def run_message_page(
    store: RunEventStore, thread_id: str, run_id: str, *, limit: int, before_seq: int | None,
    after_seq: int | None, user_id: str | None,
) -> JsonObject:
    """``list_messages_by_run``: with ``after_seq``, the first ``limit`` messages above it (paging
    forwards, ``next_after_seq``); otherwise the last ``limit`` below ``before_seq`` (paging back,
    ``next_before_seq``)."""
    await find_run(store, thread_id, run_id, user_id)
    rows = await store.list_messages_by_run(thread_id, run_id, limit=limit + 1, before_seq=before_seq,
                                            after_seq=after_seq, user_id=user_id)
    if after_seq is not None:
        return {**_forward_page(rows, limit), "next_before_seq": None}
    has_more = len(rows) > limit
    data = rows[1:] if has_more else rows
    return {"data": [event.to_dict() for event in data], "has_more": has_more,
            "next_before_seq": data[0].seq if has_more else None, "next_after_seq": None}


async def workspace_review(
    store: RunEventStore, thread_id: str, run_id: str, *, include_files: bool, include_diffs: bool,
    user_id: str | None,
) -> dict[str, Any]:
    """``latest_workspace_changes`` for the caller, scoped to ``user_id`` when one is given."""
    await find_run(store, thread_id, run_id, user_id)
    return await latest_workspace_changes(store, thread_id, run_id, include_files=include_files,
                                          include_diffs=include_diffs, user_id=user_id)


async def comparison(
    store: RunEventStore, thread_id: str, run_a: str, run_b: str, user_id: str | None
) -> JsonObject:
    """``compare_runs`` of two runs of one thread, each read as the caller may see it."""
    for run_id in (run_a, run_b):
        await find_run(store, thread_id, run_id, user_id)
    a = await read_trajectory(store, thread_id, run_a, user_id=user_id)
    b = await read_trajectory(store, thread_id, run_b, user_id=user_id)
    return compare_runs(a, b).to_dict()
