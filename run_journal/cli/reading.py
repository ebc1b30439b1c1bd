"""Read commands: threads, runs, show (a run as a timeline), events, tail, usage."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

from run_journal.cli import render
from run_journal.cli.common import (
    add_command,
    emit,
    emit_json,
    non_negative,
    positive,
    ranges,
    recent_threads,
    require_thread,
    resolve_run,
)
from run_journal.envelope import RunEvent
from run_journal.projections import find_gaps, iter_events, status_of, summarize_usage
from run_journal.stores.base import RunEventStore


def add_reading_commands(sub: Any) -> None:
    """Register ``threads``, ``runs``, ``show``, ``events``, ``tail`` and ``usage``."""
    add_command(sub, "threads", cmd_threads, "list threads, most recently active first, with their event "
                                             "and run counts", json_flag=True)
    add_command(sub, "runs", cmd_runs, "list a thread's runs, newest first", json_flag=True, ids_flag=True) \
        .add_argument("thread")
    show = add_command(sub, "show", cmd_show, "a run as a timeline, then its totals")
    show.add_argument("run", metavar="RUN", help="run id, or a unique prefix of 6 or more characters")
    show.add_argument("--thread", help="the run's thread: to tell runs apart by prefix, or to find a run "
                                       "that has events but no run row nor run.start")
    events = add_command(sub, "events", cmd_events, "a thread's events (list_events filters)", json_flag=True,
                         ids_flag=True)
    events.add_argument("thread")
    events.add_argument("--run", help="only this run (a whole id or a unique prefix)")
    events.add_argument("--type", dest="types", action="append", metavar="TYPE",
                        help="event type (repeatable)")
    events.add_argument("--task", help="subagent task_id")
    events.add_argument("--limit", type=positive, default=500)
    events.add_argument("--after-seq", type=non_negative)
    tail = add_command(sub, "tail", cmd_tail, "follow a thread's new events until Ctrl-C", json_flag=True,
                       ids_flag=True)
    tail.add_argument("thread")
    tail.add_argument("--last", type=non_negative, default=10, help="events of history first")
    tail.add_argument("--after-seq", type=non_negative, help="start after this seq instead")
    tail.add_argument("--wait", action="store_true",
                      help="a thread that has no event yet is waited for instead of not found")
    add_command(sub, "usage", cmd_usage, "token and cost totals per run, model and caller", json_flag=True,
                ids_flag=True) \
        .add_argument("thread", nargs="?")


async def cmd_threads(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    """Threads by latest activity, most recent first (the store's own order, paged)."""
    rows: list[list[Any]] = []
    async for activity in recent_threads(store):
        thread_id = activity.thread_id
        newest = await store.list_runs(thread_id, newest_first=True, limit=1)
        last = newest[0] if newest else None
        rows.append([thread_id, await store.last_seq(thread_id), await store.count_runs(thread_id),
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


async def cmd_runs(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    await require_thread(store, args.thread)
    runs = await store.list_runs(args.thread, newest_first=True)
    if args.json:
        for row in runs:
            emit_json(out, row.to_dict())
        return 0
    short = render.ShortIds((row.run_id for row in runs), full=args.full_ids)
    rows: list[list[Any]] = []
    for row in runs:
        took = row.ended_at - row.started_at if row.started_at and row.ended_at else None
        duration = took.total_seconds() if took else None
        rows.append([short(row.run_id), str(row.status),
                     row.started_at.isoformat(timespec="seconds") if row.started_at else None,
                     f"{duration:.2f}s" if duration is not None else None, row.usage.llm_calls,
                     row.usage.total_tokens, render.cost_text(row.usage.cost_usd),
                     render.one_line(row.first_human_message or "", 40)])
    headers = ("run", "status", "started", "took", "calls", "tokens", "cost", "first message")
    for line in render.table(headers, rows) + render.unknown_costs(runs, short):
        emit(out, line)
    return 0


async def cmd_show(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    if args.thread:
        await require_thread(store, args.thread)
    run_id, thread_id = await resolve_run(store, args.run, [args.thread] if args.thread else [])
    row = await store.get_run(run_id)
    row = row if row is not None and row.thread_id == thread_id else None
    events = [event async for event in iter_events(store, thread_id, run_id)]
    style = render.Style(out)
    start = events[0].created_at if events else row.started_at if row else None
    emit(out, style(f"run {run_id}", "bold") + f"  thread {thread_id}"
         + (f"  {start.date().isoformat()} UTC" if start else ""))
    for event in events:
        emit(out, render.event_line(event, style))
    emit(out)
    if row is not None:
        for line in render.run_totals(row) + render.unknown_costs([row]):
            emit(out, line)
    else:
        emit(out, f"status {status_of(events)} (folded from events; no run row)")
    for event in (event for event in events if event.event_type == "run.score"):
        emit(out, f"score {render.one_line(render.score_text(event.content))}")
    gaps = [event.seq for event in events]
    if events and (holes := [s for s in find_gaps(gaps) if s >= events[0].seq]):
        emit(out, f"note: this run's events skip thread seq {ranges(holes)} (other runs or lost rows)")
    return 0


async def cmd_events(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    await require_thread(store, args.thread)
    run_id = (await resolve_run(store, args.run, [args.thread]))[0] if args.run else None
    lines = await _listing(store, args, out)
    count = 0
    async for event in iter_events(store, args.thread, run_id, event_types=args.types,
                                   task_id=args.task, after_seq=args.after_seq):
        lines(event, with_run=run_id is None)
        count += 1
        if count >= args.limit:
            break
    return 0


async def cmd_tail(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    if not args.wait:
        await require_thread(store, args.thread)
    lines = await _listing(store, args, out)
    after = args.after_seq
    if after is None:
        after = max(0, await store.last_seq(args.thread) - args.last)
    async for event in store.follow(args.thread, after_seq=after):
        lines(event, with_run=True)
        out.flush()
    return 0


async def _listing(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> Callable[..., None]:
    """How ``events`` and ``tail`` print an event: a JSON line, or a dated text line with a short
    run id (unique among the thread's runs)."""
    if args.json:
        return lambda event, with_run: emit_json(out, event.to_dict())
    style = render.Style(out)
    dated = render.DatedLines(out, style)
    short = render.ShortIds([row.run_id for row in await store.list_runs(args.thread)], full=args.full_ids)

    def line(event: RunEvent, with_run: bool) -> None:
        dated.write(event, render.listing_line(event, style, short(event.run_id) if with_run else None))

    return line


async def cmd_usage(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    if args.thread:
        await require_thread(store, args.thread)
    run_rows = await store.list_runs(args.thread)
    summary = summarize_usage(run_rows)
    if args.json:
        emit_json(out, summary.to_dict())
        return 0
    short = render.ShortIds((r.run_id for r in summary.runs), full=args.full_ids)
    sections = [("per run", [render.usage_row(short(r.run_id), r.usage) for r in summary.runs]),
                ("per model", [render.usage_row(k, v) for k, v in summary.by_model.items()]),
                ("per caller", [render.usage_row(k, v) for k, v in summary.by_caller.items()])]
    for title, rows in sections:
        emit(out, title)
        for line in render.table(render.USAGE_HEADERS, rows):
            emit(out, "  " + line)
    emit(out, "total")
    for line in render.table(render.USAGE_HEADERS, [render.usage_row("all runs", summary.total)]):
        emit(out, "  " + line)
    for line in render.unknown_costs(run_rows, short):
        emit(out, line)
    return 0


