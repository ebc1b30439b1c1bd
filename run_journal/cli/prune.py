"""``run-journal URL prune --older-than 30d [--archive URL] [--dry-run]``: retention.

Removes whole threads whose last event is older than the limit (``RunEventStore.prune``): their
events, run rows and bodies, one run at a time, so writers of other threads are never held up for long.
``--archive`` copies each thread to another store first (same event ids and seqs) and removes only
what was copied. Threads with a running run are kept (``run-journal URL reconcile`` closes runs
whose worker died).
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from run_journal.cli.common import CliError, add_command, emit, emit_json, parse_duration, require_thread
from run_journal.stores.base import PrunedThread, RunEventStore
from run_journal.stores.retention import ArchiveError
from run_journal.stores.urls import display_url


def add_prune_command(sub: Any) -> None:
    """Register ``prune`` on the ``run-journal`` subcommands."""
    text = "remove threads whose last event is older than a limit (events, run rows, indexes)"
    prune = add_command(sub, "prune", cmd_prune, text)
    prune.add_argument("--older-than", type=parse_duration, required=True, metavar="AGE",
                       help="e.g. 30d, 12h, 2w (s, m, h, d, w)")
    prune.add_argument("--archive", metavar="URL",
                       help="copy each thread to this store first (seq kept); remove only what was copied")
    prune.add_argument("--thread", help="only this thread")
    prune.add_argument("--dry-run", action="store_true", help="show what would be removed, change nothing")
    prune.add_argument("--json", action="store_true", help="one JSON object per thread, then a summary")


async def cmd_prune(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    if args.thread:
        await require_thread(store, args.thread)
    try:
        result = await store.prune(older_than=args.older_than, thread_id=args.thread,
                                   archive=args.archive, dry_run=args.dry_run)
    except ArchiveError as error:
        raise CliError(f"archive {display_url(args.archive)}: {error}; nothing more was removed") \
            from error
    for item in result.threads:
        if args.json:
            emit_json(out, _as_json(item))
        else:
            emit(out, _line(item))
    verb = "would prune" if result.dry_run else "pruned"
    summary = {
        "dry_run": result.dry_run, "cutoff": result.cutoff.isoformat(timespec="seconds"),
        "examined": result.examined, "pruned": len(result.pruned), "kept": len(result.kept),
        "events": result.events, "runs": result.runs,
    }
    if args.json:
        emit_json(out, summary)
    else:
        kept = f"; {len(result.kept)} old thread(s) kept" if result.kept else ""
        emit(out, f"{verb} {len(result.pruned)} of {result.examined} thread(s) (last event before "
                  f"{summary['cutoff']}): {summary['events']} events, {result.runs} run rows{kept}")
    return 1 if any(item.outcome == "not_archived" for item in result.threads) else 0


def _line(item: PrunedThread) -> str:
    last = item.last_event_at.isoformat(timespec="seconds")
    what = f"{item.events} events, {item.runs} run rows, seq up to {item.last_seq}, last event {last}"
    if item.outcome == "pruned":
        bodies = f" and {item.archived_bodies} bodies" if item.archived_bodies else ""
        return f"pruned thread {item.thread_id}: {what}" + (
            f" (archived {item.archived} events{bodies})" if item.archived else "")
    if item.outcome == "would_prune":
        return f"would prune thread {item.thread_id}: {what}"
    return f"kept thread {item.thread_id} ({item.outcome}): {item.reason}"


def _as_json(item: PrunedThread) -> dict[str, Any]:
    return {
        "thread_id": item.thread_id, "outcome": item.outcome, "events": item.events, "runs": item.runs,
        "archived": item.archived, "archived_bodies": item.archived_bodies, "last_seq": item.last_seq,
        "last_event_at": item.last_event_at.isoformat(), "reason": item.reason or None,
    }
