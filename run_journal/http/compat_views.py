"""What the DeerFlow-compatible endpoints read, in that gateway's response shapes (no web framework).

Every read goes through the same projections and views as our own API (``thread_history``,
``latest_workspace_changes``, ``summarize_usage``, ``views.run_message_page``); this module only
reshapes their results and adds what that gateway's rows carry besides: the run's duration on its
last AI message (``additional_kwargs.turn_duration``), the caller's feedback on a run's last visible
AI message, the runs a regenerated or edited answer supersedes, the context window in use.

Feedback is a score: a ``run.score`` event named ``feedback`` (``record_score``) whose value is the
rating (+1 / -1, or true / false, or ``"up"`` / ``"down"``); a later one by the same rater replaces
it, one with ``metadata.retracted`` withdraws it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from run_journal.catalog import LEAD_AGENT, MIDDLEWARE_PREFIX, SUBAGENT_PREFIX, canonical_event_type
from run_journal.checks.scores import SCORE_EVENT, record_score
from run_journal.envelope import JsonObject, RunEvent
from run_journal.http import views
from run_journal.http.views import NotFound
from run_journal.projections import (
    is_visible_message,
    iter_events,
    thread_history,
)
from run_journal.redact import redact_secrets
from run_journal.runs import RunRow, RunStatus, UsageTotals
from run_journal.stores.base import RunEventStore

__all__ = [
    "FEEDBACK_SCORE",
    "NO_WORKSPACE_CHANGES",
    "ThreadMarks",
    "context_usage",
    "context_usage_payload",
    "delete_feedback",
    "event_list",
    "feedback_of_run",
    "feedback_stats",
    "history_rows",
    "legacy_messages",
    "message_page",
    "resolve_run",
    "run_response",
    "run_responses",
    "stamp_turn_durations",
    "superseded_runs",
    "thread_marks",
    "token_usage",
    "turn_seconds",
    "workspace_changes",
    "write_feedback",
]

FEEDBACK_SCORE: Final = "feedback"
"""The name of the ``run.score`` events that are feedback."""
MAX_EVENTS: Final = 2000
LAST_AI_WINDOW: Final = 50
"""Message rows read at a time while looking for a run's last visible AI message."""
_STATUSES: Final = {RunStatus.CANCELLED: "interrupted"}
"""Our statuses the gateway does not have, as it names them."""
_FAILED: Final = frozenset({RunStatus.ERROR, RunStatus.INTERRUPTED, RunStatus.CANCELLED})
_OPEN: Final = frozenset({RunStatus.PENDING, RunStatus.RUNNING})
NO_WORKSPACE_CHANGES: Final[JsonObject] = {
    "available": False, "version": 1,
    "summary": {"created": 0, "modified": 0, "deleted": 0, "symlink_created": 0,
                "additions": 0, "deletions": 0, "truncated": False},
    "files": [], "limits": {},
}


# -- runs ------------------------------------------------------------------------------------------
def _caller_group(caller: str) -> str:
    if caller.startswith(SUBAGENT_PREFIX):
        return "subagent"
    if caller.startswith(MIDDLEWARE_PREFIX):
        return "middleware"
    return LEAD_AGENT  # lead_agent, agent:<name> (the agents a user talks to), unattributed


def caller_tokens(rows: Iterable[RunRow]) -> dict[str, int]:
    tokens = {LEAD_AGENT: 0, "subagent": 0, "middleware": 0}
    for row in rows:
        for caller, totals in row.usage_by_caller.items():
            tokens[_caller_group(caller)] += totals.total_tokens
    return tokens


def _token_usage(usage: UsageTotals) -> JsonObject:
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens}


def run_response(row: RunRow) -> JsonObject:
    """A run row as the gateway's ``RunResponse``."""
    callers = caller_tokens([row])
    created = row.started_at or row.updated_at
    metadata = redact_secrets(dict(row.metadata))
    metadata["token_usage"] = _token_usage(row.usage)
    return {
        "run_id": row.run_id, "thread_id": row.thread_id,
        "assistant_id": row.metadata.get("assistant_id") if isinstance(
            row.metadata.get("assistant_id"), str) else None,
        "status": _STATUSES.get(RunStatus(row.status), str(row.status)),
        "metadata": metadata, "kwargs": {}, "multitask_strategy": "reject",
        "created_at": created.isoformat(), "updated_at": row.updated_at.isoformat(),
        "total_input_tokens": row.usage.input_tokens, "total_output_tokens": row.usage.output_tokens,
        "total_tokens": row.usage.total_tokens, "llm_call_count": row.usage.llm_calls,
        "lead_agent_tokens": callers[LEAD_AGENT], "subagent_tokens": callers["subagent"],
        "middleware_tokens": callers["middleware"], "message_count": row.message_count,
        "stop_reason": None,
    }


async def run_responses(store: RunEventStore, thread_id: str, user_id: str | None) -> list[JsonObject]:
    """The thread's runs, newest first (an unknown thread has none)."""
    rows = await views.visible_runs(store, thread_id, user_id)
    return [run_response(row) for row in reversed(rows)]


async def resolve_run(store: RunEventStore, run_id: str, user_id: str | None) -> RunRow:
    """The run's row, for the endpoints that name a run without its thread."""
    row = await store.get_run(run_id)
    if row is None or (user_id is not None and row.user_id != user_id):
        raise NotFound(f"Run {run_id} not found")
    return row


def turn_seconds(row: RunRow) -> int | None:
    """The run's wall-clock time in whole seconds (to now's last update while it runs)."""
    if row.started_at is None:
        return None
    end = row.ended_at or row.updated_at
    return max(int((end - row.started_at).total_seconds()), 0)


# -- message rows ----------------------------------------------------------------------------------
def _is_ai(content: Any) -> bool:
    return isinstance(content, dict) and content.get("type") == "ai"


def stamp_turn_durations(rows: Sequence[JsonObject], durations: Mapping[str, int]) -> None:
    """Put each run's duration on its last AI row of ``rows`` (middleware calls skipped)."""
    stamped: set[str] = set()
    for row in reversed(rows):
        run_id = row.get("run_id")
        if not isinstance(run_id, str) or run_id in stamped or run_id not in durations:
            continue
        metadata = row.get("metadata")
        caller = metadata.get("caller") if isinstance(metadata, dict) else None
        if isinstance(caller, str) and caller.startswith(MIDDLEWARE_PREFIX):
            continue
        content = row.get("content")
        if _is_ai(content):
            assert isinstance(content, dict)
            extra = content.get("additional_kwargs")
            extra = dict(extra) if isinstance(extra, dict) else {}
            extra["turn_duration"] = durations[run_id]
            content["additional_kwargs"] = extra
            stamped.add(run_id)


def _row(event: RunEvent) -> JsonObject:
    return copy.deepcopy(event.to_dict())


async def _durations(
    store: RunEventStore, thread_id: str, run_ids: set[str], user_id: str | None
) -> dict[str, int]:
    if not run_ids:
        return {}
    rows = await views.visible_runs(store, thread_id, user_id)
    found = {row.run_id: turn_seconds(row) for row in rows if row.run_id in run_ids}
    return {run_id: seconds for run_id, seconds in found.items() if seconds is not None}


@dataclasses.dataclass(frozen=True, slots=True)
class ThreadMarks:
    """What a thread's history rows need besides the rows, from one read of its ``run.start`` and
    ``run.score`` events: the superseded runs and each run's standing feedback."""

    superseded: frozenset[str]
    feedback: Mapping[str, list[JsonObject]]

    def current_feedback(self, run_id: str, user_id: str | None) -> JsonObject | None:
        """``{feedback_id, rating, comment}`` of the caller's (unscoped: anyone's) latest feedback."""
        rows = [row for row in self.feedback.get(run_id, ())
                if user_id is None or row["user_id"] == user_id]
        if not rows:
            return None
        latest = rows[-1]
        return {"feedback_id": latest["feedback_id"], "rating": latest["rating"],
                "comment": latest["comment"]}


async def thread_marks(store: RunEventStore, thread_id: str, user_id: str | None) -> ThreadMarks:
    starts: list[RunEvent] = []
    scores: list[RunEvent] = []
    async for event in iter_events(store, thread_id, event_types=["run.start", SCORE_EVENT],
                                   user_id=user_id):
        (starts if event.event_type == "run.start" else scores).append(event)
    rows = {row.run_id: row for row in await views.visible_runs(store, thread_id, user_id)}
    by_run: dict[str, list[RunEvent]] = {}
    for event in scores:
        by_run.setdefault(event.run_id, []).append(event)
    return ThreadMarks(frozenset(_superseded(starts, rows)),
                       {run_id: _standing_feedback(events) for run_id, events in by_run.items()})


async def superseded_runs(store: RunEventStore, thread_id: str, user_id: str | None) -> set[str]:
    """Runs a later answer replaces (see ``_superseded``)."""
    return set((await thread_marks(store, thread_id, user_id)).superseded)


def _superseded(starts: Iterable[RunEvent], rows: Mapping[str, RunRow]) -> set[str]:
    """Runs a later answer replaces, from the ``regenerate_from_run_id`` and ``replay_kind`` the
    gateway puts in a run's metadata (recorded in its ``run.start``): the source of a successful
    regeneration; the source of an edit whose latest attempt succeeded or still runs; a failed edit
    attempt."""
    regenerated: set[str] = set()
    latest_edit: dict[str, str] = {}
    hidden: set[str] = set()
    for start in starts:
        run_metadata = start.metadata.get("run_metadata")
        if not isinstance(run_metadata, dict):
            continue
        source = run_metadata.get("regenerate_from_run_id")
        if not isinstance(source, str) or not source:
            continue
        row = rows.get(start.run_id)
        status = RunStatus(row.status) if row is not None else RunStatus.RUNNING
        regenerated.discard(source)
        if status == RunStatus.SUCCESS:
            regenerated.add(source)
        if run_metadata.get("replay_kind") == "edit":
            latest_edit[source] = status
            if status in _FAILED:
                hidden.add(start.run_id)
    hidden |= {source for source, status in latest_edit.items()
               if status in _OPEN or status == RunStatus.SUCCESS}
    return regenerated | hidden


async def history_rows(
    store: RunEventStore, thread_id: str, *, limit: int, before_seq: int | None,
    hidden_run_ids: Iterable[str], user_id: str | None,
) -> JsonObject:
    """``GET /api/threads/{id}/messages/page``: ``thread_history`` with each run's duration on its
    last AI row and the caller's feedback on the run's last visible AI message; a thread without
    rows is an empty page."""
    marks = await thread_marks(store, thread_id, user_id)
    hidden = set(hidden_run_ids) | marks.superseded
    page = await thread_history(store, thread_id, limit=limit, before_seq=before_seq,
                                hidden_run_ids=hidden, user_id=user_id)
    data = [_row(event) for event in page.data]
    run_ids = {event.run_id for event in page.data}
    feedback = {run_id: found for run_id in run_ids
                if (found := marks.current_feedback(run_id, user_id)) is not None}
    last_ai = {run_id: await _last_visible_ai_seq(store, thread_id, run_id, hidden, user_id)
               for run_id in feedback}  # only a run with feedback needs its last AI row
    for row in data:
        run_id = row["run_id"]
        row["feedback"] = None
        if isinstance(run_id, str) and row["seq"] == last_ai.get(run_id):
            row["feedback"] = feedback.get(run_id)
    stamp_turn_durations(data, await _durations(store, thread_id, run_ids, user_id))
    return {"data": data, "has_more": page.has_more,  # type: ignore[dict-item]  # JSON objects
            "next_before_seq": page.next_before_seq}


async def _last_visible_ai_seq(
    store: RunEventStore, thread_id: str, run_id: str, hidden: set[str], user_id: str | None
) -> int | None:
    before: int | None = None
    while True:
        rows = await store.list_messages_by_run(thread_id, run_id, limit=LAST_AI_WINDOW,
                                                before_seq=before, user_id=user_id)
        for event in reversed(rows):
            if canonical_event_type(event.event_type) == "llm.ai.response" and is_visible_message(
                    event, hidden):
                return event.seq
        if len(rows) < LAST_AI_WINDOW:
            return None
        before = rows[0].seq


async def legacy_messages(
    store: RunEventStore, thread_id: str, *, limit: int, before_seq: int | None,
    after_seq: int | None, user_id: str | None,
) -> list[JsonObject]:
    """``GET /api/threads/{id}/messages``: every message row of the runs not superseded (middleware
    and subagent rows too), feedback on each run's last AI response of the list, durations."""
    marks = await thread_marks(store, thread_id, user_id)
    page = await thread_history(store, thread_id, limit=limit, before_seq=before_seq,
                                after_seq=after_seq, hidden_run_ids=marks.superseded,
                                include_internal=True, user_id=user_id)
    data = [_row(event) for event in page.data]
    last_ai = {event.run_id: index for index, event in enumerate(page.data)
               if event.event_type == "llm.ai.response"}
    for row in data:
        row["feedback"] = None
    for run_id, index in last_ai.items():
        data[index]["feedback"] = marks.current_feedback(run_id, user_id)
    run_ids = {event.run_id for event in page.data}
    stamp_turn_durations(data, await _durations(store, thread_id, run_ids, user_id))
    return data


async def message_page(
    store: RunEventStore, thread_id: str, run_id: str, *, limit: int, before_seq: int | None,
    after_seq: int | None, user_id: str | None,
) -> JsonObject:
    """A run's messages (``views.run_message_page``) as ``{data, has_more}`` with the run's duration
    on its last AI row; a run the caller cannot see has none."""
    try:
        page = await views.run_message_page(store, thread_id, run_id, limit=limit,
                                            before_seq=before_seq, after_seq=after_seq,
                                            user_id=user_id)
    except NotFound:
        return {"data": [], "has_more": False}
    data = page["data"]
    assert isinstance(data, list)
    rows: list[JsonObject] = copy.deepcopy(data)  # type: ignore[arg-type]  # JSON objects
    stamp_turn_durations(rows, await _durations(store, thread_id, {run_id}, user_id))
    return {"data": rows, "has_more": page["has_more"]}  # type: ignore[dict-item]  # JSON objects


# -- events ----------------------------------------------------------------------------------------
def _with_args(content: Any) -> Any:
    """A ``subagent.step``'s tool calls with ``args`` (parsed from ``args_preview``) beside it."""
    calls = content.get("tool_calls") if isinstance(content, dict) else None
    if not isinstance(calls, list):
        return content
    shaped = []
    for call in calls:
        if isinstance(call, dict) and "args" not in call and isinstance(call.get("args_preview"), str):
            call = dict(call)
            try:
                call["args"] = None if call.get("args_truncated") else json.loads(call["args_preview"])
            except ValueError:
                call["args"] = None
        shaped.append(call)
    return {**content, "tool_calls": shaped}


async def event_list(
    store: RunEventStore, thread_id: str, run_id: str, *, event_types: Sequence[str] | None,
    task_id: str | None, limit: int, after_seq: int | None, user_id: str | None,
) -> list[JsonObject]:
    """``GET .../runs/{run_id}/events``: a bare list of the run's events above ``after_seq``
    (``views.event_page``), metadata passed through the redaction, a run the caller cannot see
    empty."""
    try:
        page = await views.event_page(store, thread_id, run_id, event_types=event_types,
                                      task_id=task_id, limit=limit, after_seq=after_seq or 0,
                                      user_id=user_id)
    except NotFound:
        return []
    events = page["data"]
    assert isinstance(events, list)
    shaped: list[JsonObject] = []
    for event in events:
        assert isinstance(event, dict)
        row = dict(event)
        row["metadata"] = redact_secrets(row.get("metadata") or {})
        if row.get("event_type") == "subagent.step":
            row["content"] = _with_args(row.get("content"))
        shaped.append(row)
    return shaped


# -- workspace changes -----------------------------------------------------------------------------
def _unavailable_reason(entry: Mapping[str, Any], max_text_bytes: int | None) -> str | None:
    if entry.get("symlink"):
        return "symlink"
    if entry.get("sensitive"):
        return "sensitive"
    if entry.get("binary"):
        return "binary"
    if entry.get("diff") is None and entry.get("truncated"):
        sizes = [size for size in (entry.get("size_before"), entry.get("size_after"))
                 if isinstance(size, int)]
        if max_text_bytes is not None and any(size > max_text_bytes for size in sizes):
            return "large"
        return "truncated"
    return None


def _file_change(entry: Mapping[str, Any], max_text_bytes: int | None, include_diff: bool) -> JsonObject:
    before, after = entry.get("link_target_before"), entry.get("link_target_after")
    status = entry.get("status")
    if entry.get("symlink") and status != "deleted" and after is not None and before is None:
        status = "symlink_created"  # a link where there was none (a new path, or a file replaced)
    elif entry.get("symlink") and status == "created":
        status = "symlink_created"
    diff = entry.get("diff")
    return {
        "path": entry.get("path"), "root": entry.get("root"), "status": status,
        "binary": bool(entry.get("binary")), "sensitive": bool(entry.get("sensitive")),
        "size_before": entry.get("size_before"), "size_after": entry.get("size_after"),
        "sha256_before": entry.get("sha256_before"), "sha256_after": entry.get("sha256_after"),
        "diff": diff if include_diff and isinstance(diff, str) else "",
        "diff_truncated": bool(entry.get("truncated")) and isinstance(diff, str),
        "diff_unavailable_reason": _unavailable_reason(entry, max_text_bytes),
        "additions": entry.get("additions") or 0, "deletions": entry.get("deletions") or 0,
        "symlink": bool(entry.get("symlink")),
        "symlink_target_before": before, "symlink_target_after": after,
    }


async def workspace_changes(
    store: RunEventStore, thread_id: str, run_id: str, *, include_files: bool, include_diff: bool,
    user_id: str | None,
) -> JsonObject:
    """``GET .../workspace-changes``: ``latest_workspace_changes`` with its payload at the top level,
    each file in the gateway's fields; a run without changes (or unknown) answers ``available:
    false`` with an empty summary."""
    try:
        review = await views.workspace_review(store, thread_id, run_id, include_files=True,
                                              include_diffs=include_diff, user_id=user_id)
    except NotFound:
        return copy.deepcopy(NO_WORKSPACE_CHANGES)
    payload = review.get("workspace_changes")
    if not review.get("available") or not isinstance(payload, dict):
        return copy.deepcopy(NO_WORKSPACE_CHANGES)
    limits = payload.get("limits") if isinstance(payload.get("limits"), dict) else {}
    assert isinstance(limits, dict)
    text_cap = limits.get("max_file_bytes")
    entries = payload.get("files") if isinstance(payload.get("files"), list) else []
    assert isinstance(entries, list)
    files = [_file_change(entry, text_cap if isinstance(text_cap, int) else None, include_diff)
             for entry in entries if isinstance(entry, dict)]
    ours = payload.get("summary") if isinstance(payload.get("summary"), dict) else {}
    assert isinstance(ours, dict)
    links = sum(1 for change in files if change["status"] == "symlink_created")
    created_links = sum(1 for change, entry in zip(files, entries, strict=False)
                        if change["status"] == "symlink_created" and isinstance(entry, dict)
                        and entry.get("status") == "created")
    modified_links = links - created_links
    summary = {
        **NO_WORKSPACE_CHANGES["summary"],  # type: ignore[dict-item]  # a JSON object
        **ours,
        "created": max(int(ours.get("created") or 0) - created_links, 0),
        "modified": max(int(ours.get("modified") or 0) - modified_links, 0),
        "symlink_created": links,
    }
    return {"available": True, "version": payload.get("version", 1), "summary": summary,
            "files": files if include_files else [], "limits": limits}


# -- token usage -----------------------------------------------------------------------------------
_COUNTED: Final = frozenset({RunStatus.SUCCESS, RunStatus.ERROR, RunStatus.INTERRUPTED,
                             RunStatus.CANCELLED})


async def token_usage(
    store: RunEventStore, thread_id: str, *, include_active: bool, user_id: str | None,
    context_windows: Mapping[str, int],
) -> JsonObject:
    """``GET /api/threads/{id}/token-usage`` from the run rows (``summarize_usage``'s buckets): totals
    of the ended runs (and the running ones with ``include_active``), tokens and run counts per model,
    tokens per caller group, and the context in use after the thread's latest model call."""
    counted = _COUNTED | (_OPEN if include_active else frozenset())
    rows = [row for row in await views.visible_runs(store, thread_id, user_id)
            if RunStatus(row.status) in counted]
    total = UsageTotals()
    tokens: dict[str, int] = {}
    runs: dict[str, int] = {}
    for row in rows:
        total = total + row.usage
        for model, usage in row.usage_by_model.items():
            tokens[model] = tokens.get(model, 0) + usage.total_tokens
            runs[model] = runs.get(model, 0) + 1
    by_model: JsonObject = {model: {"tokens": tokens[model], "runs": runs[model]}
                            for model in sorted(tokens)}
    by_caller: JsonObject = {**caller_tokens(rows)}
    return {
        "thread_id": thread_id, "total_tokens": total.total_tokens,
        "total_input_tokens": total.input_tokens, "total_output_tokens": total.output_tokens,
        "total_runs": len(rows), "by_model": by_model, "by_caller": by_caller,
        "context_usage": await context_usage(store, thread_id, user_id, context_windows),
    }


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def context_usage_payload(token_count: int, max_context_tokens: int | None) -> JsonObject:
    percentage = (round(token_count / max_context_tokens * 100, 1)
                  if max_context_tokens and max_context_tokens > 0 else None)
    return {"token_count": token_count, "max_context_tokens": max_context_tokens,
            "percentage": percentage}


async def context_usage(
    store: RunEventStore, thread_id: str, user_id: str | None, context_windows: Mapping[str, int]
) -> JsonObject | None:
    """The tokens of the thread's latest visible model call (its prompt and its reply: what the
    next call starts from), against that model's window in ``context_windows``; None before any
    model call reported usage."""
    cursor: int | None = None
    while True:
        page = await thread_history(store, thread_id, limit=LAST_AI_WINDOW, before_seq=cursor,
                                    user_id=user_id)
        for event in reversed(page.data):
            usage = event.metadata.get("usage")
            if (canonical_event_type(event.event_type) != "llm.ai.response"
                    or not isinstance(usage, dict)):
                continue
            count = _count(usage.get("input_tokens")) + _count(usage.get("output_tokens"))
            model = event.metadata.get("model_name")
            window = context_windows.get(model) if isinstance(model, str) else None
            return context_usage_payload(count, window)
        if not page.has_more:
            return None
        cursor = page.next_before_seq


# -- feedback --------------------------------------------------------------------------------------
def _rating(value: Any) -> int | None:
    if isinstance(value, bool):
        return 1 if value else -1
    if isinstance(value, int | float):
        return 1 if value > 0 else -1 if value < 0 else None
    if isinstance(value, str):
        return {"up": 1, "+1": 1, "1": 1, "good": 1, "down": -1, "-1": -1, "bad": -1}.get(value.lower())
    return None


def _feedback_row(event: RunEvent, rating: int) -> JsonObject:
    content = event.content if isinstance(event.content, dict) else {}
    rater = event.metadata.get("rated_by", event.user_id)
    message_id = event.metadata.get("message_id")
    comment = content.get("comment")
    return {
        "feedback_id": str(event.metadata.get("feedback_id") or event.event_id),
        "run_id": event.run_id, "thread_id": event.thread_id,
        "user_id": rater if isinstance(rater, str) else None,
        "message_id": message_id if isinstance(message_id, str) else None,
        "rating": rating, "comment": comment if isinstance(comment, str) else None,
        "created_at": event.created_at.isoformat(),
    }


async def feedback_of_run(
    store: RunEventStore, thread_id: str, run_id: str, user_id: str | None
) -> list[JsonObject]:
    """The run's standing feedback, oldest first (one per feedback id: the latest word wins)."""
    return _standing_feedback([event async for event in iter_events(
        store, thread_id, run_id, event_types=[SCORE_EVENT], user_id=user_id)])


def _standing_feedback(scores: Iterable[RunEvent]) -> list[JsonObject]:
    standing: dict[str, JsonObject] = {}
    for event in scores:
        content = event.content if isinstance(event.content, dict) else {}
        if content.get("name") != FEEDBACK_SCORE:
            continue
        key = str(event.metadata.get("feedback_id") or event.event_id)
        standing.pop(key, None)
        rating = _rating(content.get("value"))
        if event.metadata.get("retracted") or rating is None:
            continue
        standing[key] = _feedback_row(event, rating)
    return list(standing.values())


async def write_feedback(
    store: RunEventStore, thread_id: str, run_id: str, *, rating: int, comment: str | None,
    message_id: str | None, user_id: str | None, replace: bool,
) -> JsonObject:
    """Record feedback as a score; ``replace`` keeps the rater's earlier feedback id (an upsert)."""
    if isinstance(rating, bool) or rating not in (1, -1):
        raise ValueError("rating must be +1 or -1")
    await views.find_run(store, thread_id, run_id, user_id)
    feedback_id = str(uuid.uuid4())
    if replace:
        mine = [row for row in await feedback_of_run(store, thread_id, run_id, user_id)
                if row["user_id"] == user_id]
        if mine:
            feedback_id = str(mine[-1]["feedback_id"])
    metadata: dict[str, Any] = {"feedback_id": feedback_id, "rated_by": user_id}
    if message_id is not None:
        metadata["message_id"] = message_id
    event = await record_score(store, thread_id, run_id, FEEDBACK_SCORE, rating, comment=comment,
                               source="human", metadata=metadata)
    return _feedback_row(event, rating)


async def delete_feedback(
    store: RunEventStore, thread_id: str, run_id: str, *, feedback_id: str | None,
    user_id: str | None,
) -> bool:
    """Withdraw the rater's feedback (or the one named): a retracting score; False if none stands."""
    await views.find_run(store, thread_id, run_id, user_id)
    standing = [row for row in await feedback_of_run(store, thread_id, run_id, user_id)
                if (feedback_id is None and row["user_id"] == user_id)
                or (feedback_id is not None and row["feedback_id"] == feedback_id
                    and (user_id is None or row["user_id"] == user_id))]
    for row in standing:
        await record_score(store, thread_id, run_id, FEEDBACK_SCORE, 0, source="human",
                           metadata={"feedback_id": row["feedback_id"], "rated_by": row["user_id"],
                                     "retracted": True})
    return bool(standing)


def feedback_stats(run_id: str, rows: Sequence[JsonObject]) -> JsonObject:
    return {"run_id": run_id, "total": len(rows),
            "positive": sum(1 for row in rows if row["rating"] == 1),
            "negative": sum(1 for row in rows if row["rating"] == -1)}

