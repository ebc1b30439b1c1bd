"""Store maintenance commands: verify, export, copy, reconcile."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from run_journal.cli.common import (
    PAGE,
    add_command,
    all_threads,
    emit,
    emit_json,
    parse_duration,
    ranges,
    require_thread,
    resolve_run,
    runs_without_row,
    shown_url,
)
from run_journal.cli.otlp import add_otlp_arguments
from run_journal.envelope import RunEvent
from run_journal.projections import find_gaps, iter_events, reconcile_orphans, status_of
from run_journal.runs import STATUS_AFTER
from run_journal.stores.base import RunEventStore
from run_journal.stores.urls import open_store


def add_maintenance_commands(sub: Any) -> None:
    """Register ``verify``, ``export``, ``copy`` and ``reconcile``."""
    add_command(sub, "verify", cmd_verify, "check seq density and every row against the contract") \
        .add_argument("threads", nargs="*", metavar="THREAD")
    export = add_command(sub, "export", cmd_export, "write events as JSONL (to_dict records), or send runs "
                                                    "as OpenTelemetry traces (--format otlp)")
    export.add_argument("threads", nargs="*", metavar="THREAD")
    export.add_argument("--output", "-o", help="file to write (default: stdout)")
    add_otlp_arguments(export)
    copy = add_command(sub, "copy", cmd_copy, "copy events (seq preserved) and run rows to another store")
    copy.add_argument("destination", metavar="DST")
    copy.add_argument("--thread", dest="threads", action="append", default=[], metavar="THREAD")
    add_command(sub, "reconcile", cmd_reconcile, "close runs whose worker died") \
        .add_argument("--older-than", type=parse_duration, required=True, help="e.g. 30m, 2h, 1d, 2w")


async def cmd_verify(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    from run_journal.contract import validate_record  # here: jsonschema takes a while to import

    for thread_id in args.threads:
        await require_thread(store, thread_id)
    threads = args.threads or await all_threads(store)
    problems = events_checked = 0

    def report(where: str, what: str) -> None:
        nonlocal problems
        problems += 1
        emit(out, f"{where}: {what}")

    for damage in await store.check_integrity(args.threads or None):  # before reads repair around it
        report(damage.where, damage.what)
    for thread_id in threads:
        seqs: list[int] = []
        seen_ids: set[str] = set()
        async for event in iter_events(store, thread_id):
            events_checked += 1
            where = f"thread {thread_id} seq {event.seq}"
            if seqs and event.seq <= seqs[-1]:
                report(where, f"seq out of order after {seqs[-1]}")
            seqs.append(event.seq)
            if event.event_id in seen_ids:
                report(where, f"duplicate event_id {event.event_id!r}")
            seen_ids.add(event.event_id)
            for problem in validate_record(event.to_dict()):
                report(f"{where} ({event.event_type})", problem)
        if gaps := find_gaps(seqs):
            report(f"thread {thread_id}", f"missing seq {ranges(gaps)} (lost writes or a deleted run)")
        last = await store.last_seq(thread_id)
        if seqs and last < seqs[-1]:
            report(f"thread {thread_id}", f"last_seq {last} is below the highest stored seq {seqs[-1]}")
    runs = [row for thread_id in threads for row in await store.list_runs(thread_id)] if args.threads \
        else await store.list_runs()
    for row in runs:
        lifecycle = [e async for e in iter_events(
            store, row.thread_id, row.run_id, event_types=sorted(STATUS_AFTER))]
        starts = sum(1 for e in lifecycle if e.event_type == "run.start")
        ends = len(lifecycle) - starts
        where = f"run {row.run_id} (thread {row.thread_id})"
        if starts > 1 or ends > 1:
            report(where, f"{starts} run.start and {ends} terminal events (expected at most one each)")
        folded = status_of(lifecycle)
        if row.is_terminal and lifecycle and folded != row.status:
            report(where, f"row status {row.status} but its events fold to {folded}")
    rowless = [start async for start in runs_without_row(store) if not args.threads
               or start.thread_id in args.threads]
    for start in rowless:
        emit(out, f"run {start.run_id} (thread {start.thread_id}): started at seq {start.seq} "
                  f"({start.created_at.isoformat(timespec='seconds')}) but has no run row: still "
                  "starting, written without rows, or its worker died (`reconcile` closes it)")
    noted = f", {len(rowless)} started run(s) without a row" if rowless else ""
    verdict = "OK" if not problems else f"{problems} problem(s)"
    emit(out, f"verified {events_checked} events in {len(threads)} thread(s), {len(runs)} run(s){noted}: "
              f"{verdict}")
    return 1 if problems else 0


async def cmd_export(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    args.threads = [*args.threads, *args.thread_options]
    if args.format == "otlp":
        from run_journal.cli.otlp import export_otlp

        return await export_otlp(store, args, out)
    for thread_id in args.threads:
        await require_thread(store, thread_id)
    run_id = None
    if args.run:
        run_id, owner = await resolve_run(store, args.run, args.threads)
        args.threads = [owner]
    threads = args.threads or await all_threads(store)
    # A command line owns its process: blocking file writes here do not stall anyone's agent.
    target = open(args.output, "w", encoding="utf-8") if args.output else out  # noqa: SIM115, ASYNC230
    count = 0
    try:
        for thread_id in threads:
            async for event in iter_events(store, thread_id, run_id):
                emit_json(target, event.to_dict())
                count += 1
    finally:
        if target is not out:
            target.close()
    if args.output:
        print(f"exported {count} events from {len(threads)} thread(s) to {args.output}", file=sys.stderr)
    return 0


async def cmd_copy(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    for thread_id in args.threads:  # before the destination is opened (and perhaps created)
        await require_thread(store, thread_id)
    threads = args.threads or await all_threads(store)
    async with open_store(args.destination) as destination:
        written = total = moved = 0
        for thread_id in threads:
            before = await destination.last_seq(thread_id)
            batch: list[RunEvent] = []
            async for event in iter_events(store, thread_id):
                batch.append(event)
                if len(batch) >= PAGE:
                    moved += await _copy_batch(destination, batch)
                    total, batch = total + len(batch), []
            moved += await _copy_batch(destination, batch)
            total += len(batch)
            written += await destination.last_seq(thread_id) - before
        runs = [row for thread_id in threads for row in await store.list_runs(thread_id)]
        for row in runs:
            await destination.put_run(row)
    emit(out, f"copied {total} events ({written} new) and {len(runs)} run rows of {len(threads)} thread(s) "
              f"to {shown_url(args.destination)}")
    if moved:
        emit(out, f"warning: {moved} events got a different seq in the destination "
                  "(it already held other events of those threads, or the source has holes)")
    return 0


async def _copy_batch(destination: RunEventStore, batch: list[RunEvent]) -> int:
    """Write with the same event_id and created_at; return how many landed at another seq."""
    stored = await destination.put_batch([event.as_new_event() for event in batch])
    return sum(1 for source, copy in zip(batch, stored, strict=True) if source.seq != copy.seq)


async def cmd_reconcile(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    closed = await reconcile_orphans(store, older_than=args.older_than)
    for item in closed:
        emit(out, f"closed run {item.row.run_id} (thread {item.row.thread_id}), silent since "
                  f"{item.last_activity.isoformat(timespec='seconds')}: run.cancel at seq {item.event.seq}")
    emit(out, f"{len(closed)} orphaned run(s) closed")
    return 0


