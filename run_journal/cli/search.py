"""``runs`` (search across threads, newest first), ``threads`` (most recently active first) and
``usage`` (totals, or a trend ``--by day|model|caller``), all with the same run filters."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from typing import Any, TextIO

from run_journal.cli import render
from run_journal.cli.common import (
    add_command,
    emit,
    emit_json,
    non_negative,
    parse_when,
    positive,
    recent_threads,
    require_thread,
)
from run_journal.moments import MOMENT_EXAMPLES
from run_journal.projections import summarize_usage
from run_journal.runs import RunRow, RunStatus
from run_journal.stores.base import MAX_PAGE, RunEventStore, ThreadActivity
from run_journal.trends import TREND_KEYS, usage_by


def _statuses(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    known = {status.value for status in RunStatus}
    for name in names:
        if name not in known:
            raise argparse.ArgumentTypeError(f"not a run status: {name!r} ({', '.join(sorted(known))})")
    return names


def _cost(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError("must be a number >= 0")
    return value


def add_run_filters(parser: argparse.ArgumentParser) -> None:
    """The filters of ``search_runs`` as options (``runs`` and ``usage``)."""
    group = parser.add_argument_group("run filters (every one given must match)")
    group.add_argument("--status", dest="statuses", type=_statuses, action="append", metavar="STATUS",
                       help="one of these statuses (repeatable or comma-separated: error,cancelled)")
    group.add_argument("--since", type=parse_when, metavar="WHEN",
                       help=f"started at or after: {MOMENT_EXAMPLES}")
    group.add_argument("--until", type=parse_when, metavar="WHEN", help="started before (as --since)")
    group.add_argument("--model", help="called this model")
    group.add_argument("--tool", help="called this tool")
    group.add_argument("--caller", help="has calls of this caller (lead_agent, subagent:NAME, ...)")
    group.add_argument("--min-cost", type=_cost, metavar="USD", help="cost at least this (USD)")
    group.add_argument("--min-tokens", type=non_negative, metavar="N", help="total tokens at least N")
    group.add_argument("--errors", action="store_true",
                       help="only runs where something failed (the run, a model call or a tool)")
    group.add_argument("--user", help="only this user's runs")
    group.add_argument("--thread", dest="thread_option", metavar="THREAD", help="only this thread's runs")


def run_filters(args: argparse.Namespace) -> dict[str, Any]:
    """``search_runs`` keyword arguments from the options of ``add_run_filters``."""
    statuses = [name for names in args.statuses for name in names] if args.statuses else None
    return {
        "statuses": statuses, "since": args.since, "until": args.until, "model": args.model,
        "tool": args.tool, "caller": args.caller, "min_cost_usd": args.min_cost,
        "min_tokens": args.min_tokens, "has_error": True if args.errors else None, "user_id": args.user,
        "thread_id": args.thread_option or args.thread,
    }


def add_search_commands(sub: Any) -> None:
    """Register ``threads``, ``runs`` and ``usage``."""
    threads = add_command(sub, "threads", cmd_threads, "list threads, most recently active first",
                          json_flag=True)
    threads.add_argument("--limit", type=positive, help="only the N most recently active threads")
    threads.add_argument("--user", help="only threads holding this user's events")
    runs = add_command(sub, "runs", cmd_runs, "list runs of every thread (or of THREAD), newest first, "
                       "with filters", json_flag=True, ids_flag=True)
    runs.add_argument("thread", nargs="?", help="only this thread's runs (as --thread)")
    runs.add_argument("--limit", type=positive, default=50, help="runs to list (default 50)")
    runs.add_argument("--cursor", help="continue after the page that printed this cursor")
    add_run_filters(runs)
    usage = add_command(sub, "usage", cmd_usage, "token and cost totals per run, model and caller; "
                        "with --by, a trend per day, model or caller", json_flag=True, ids_flag=True)
    usage.add_argument("thread", nargs="?", help="only this thread's runs (as --thread)")
    usage.add_argument("--by", choices=TREND_KEYS,
                       help="one line per day (UTC, of the run's start), model or caller")
    add_run_filters(usage)


async def cmd_threads(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    """Threads by latest activity, most recent first (the store's own order, paged)."""
    rows: list[list[Any]] = []
    async for activity in _threads(store, args.limit, args.user):
        thread_id = activity.thread_id
        newest = await store.list_runs(thread_id, user_id=args.user, newest_first=True, limit=1)
        last = newest[0] if newest else None
        runs = await store.count_runs(thread_id, user_id=args.user)
        rows.append([thread_id, await store.last_seq(thread_id), runs,
                     str(last.status) if last else None,
                     last.started_at.isoformat(timespec="seconds") if last and last.started_at else None,
                     activity.last_activity_at.isoformat(timespec="seconds")])
    if args.json:
        keys = ("thread_id", "events", "runs", "last_status", "last_started_at", "last_activity_at")
        for cells in rows:
            emit_json(out, dict(zip(keys, cells, strict=True)))
    else:
        headers = ("thread", "events", "runs", "last status", "last started", "last activity")
        for line in render.table(headers, rows):
            emit(out, line)
    return 0


async def _threads(
    store: RunEventStore, limit: int | None, user_id: str | None
) -> AsyncIterator[ThreadActivity]:
    """Every thread (or the ``limit`` most recently active), of ``user_id`` when given."""
    if limit is None and user_id is None:
        async for activity in recent_threads(store):
            yield activity
        return
    before: str | None = None
    left = limit
    while left is None or left > 0:
        page = await store.list_recent_threads(limit=min(left or MAX_PAGE, MAX_PAGE), user_id=user_id,
                                               before=before)
        for activity in page:
            yield activity
        if len(page) < MAX_PAGE or not page:
            return
        left = None if left is None else left - len(page)
        before = page[-1].cursor


async def cmd_runs(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    filters = run_filters(args)
    if filters["thread_id"]:
        await require_thread(store, filters["thread_id"])
    page = await store.search_runs(**filters, limit=min(args.limit, MAX_PAGE), cursor=args.cursor)
    if args.json:
        for row in page.rows:
            emit_json(out, row.to_dict())
        return 0
    short = render.ShortIds((row.run_id for row in page.rows), full=args.full_ids)
    rows = [_run_cells(row, short(row.run_id)) for row in page.rows]
    headers = ("run", "thread", "status", "started", "took", "tokens", "cost", "errors", "models", "tools",
               "first message")
    for line in render.table(headers, rows) + render.unknown_costs(page.rows, short):
        emit(out, line)
    if page.next_cursor is not None:
        emit(out, f"more: --cursor {page.next_cursor}")
    return 0


def _run_cells(row: RunRow, short_id: str) -> list[Any]:
    took = row.ended_at - row.started_at if row.started_at and row.ended_at else None
    return [short_id, row.thread_id, str(row.status),
            row.started_at.isoformat(timespec="seconds") if row.started_at else None,
            f"{took.total_seconds():.2f}s" if took is not None else None, row.usage.total_tokens,
            render.cost_text(row.usage.cost_usd), row.error_count,
            render.one_line(",".join(row.models), 30) or None,
            render.one_line(",".join(row.tools), 30) or None,
            render.one_line(row.first_human_message or "", 40)]


async def cmd_usage(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    filters = run_filters(args)
    if filters["thread_id"]:
        await require_thread(store, filters["thread_id"])
    rows = await _every_match(store, filters)
    if args.by is None:
        return _print_summary(rows, args, out)
    buckets = usage_by(rows, args.by)
    if args.json:
        for bucket in buckets:
            emit_json(out, bucket.to_dict())
        return 0
    table = [[bucket.key, bucket.runs, bucket.usage.llm_calls, bucket.usage.input_tokens,
              bucket.usage.output_tokens, bucket.usage.total_tokens, render.cost_text(bucket.usage.cost_usd),
              bucket.unpriced_runs] for bucket in buckets]
    headers = (args.by, "runs", "calls", "input", "output", "total", "cost", "unpriced runs")
    for line in render.table(headers, table):
        emit(out, line)
    return 0


async def _every_match(store: RunEventStore, filters: dict[str, Any]) -> list[RunRow]:
    rows: list[RunRow] = []
    cursor: str | None = None
    while True:
        page = await store.search_runs(**filters, limit=MAX_PAGE, cursor=cursor)
        rows += page.rows
        if page.next_cursor is None:
            return rows
        cursor = page.next_cursor


def _print_summary(rows: list[RunRow], args: argparse.Namespace, out: TextIO) -> int:
    summary = summarize_usage(reversed(rows))  # in start order
    if args.json:
        emit_json(out, summary.to_dict())
        return 0
    short = render.ShortIds((r.run_id for r in summary.runs), full=args.full_ids)
    sections = [("per run", [render.usage_row(short(r.run_id), r.usage) for r in summary.runs]),
                ("per model", [render.usage_row(k, v) for k, v in summary.by_model.items()]),
                ("per caller", [render.usage_row(k, v) for k, v in summary.by_caller.items()])]
    for title, table in sections:
        emit(out, title)
        for line in render.table(render.USAGE_HEADERS, table):
            emit(out, "  " + line)
    emit(out, "total")
    for line in render.table(render.USAGE_HEADERS, [render.usage_row("all runs", summary.total)]):
        emit(out, "  " + line)
    for line in render.unknown_costs(summary.runs, short):
        emit(out, line)
    return 0
