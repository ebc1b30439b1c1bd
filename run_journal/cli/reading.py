"""Read commands: show (a run as a timeline), events, tail."""

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
    require_thread,
    resolve_run,
)
from run_journal.envelope import RunEvent
from run_journal.projections import find_gaps, iter_events, status_of
from run_journal.stores.base import RunEventStore


def add_reading_commands(sub: Any) -> None:
    """Register ``show``, ``events`` and ``tail`` (``threads``, ``runs`` and ``usage``: ``cli/search.py``)."""
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
