"""``run-journal URL reprice``: compute the costs of stored run rows again from their usage.

A run recorded before a model had a price (or with ``pricing=False``, or a price that changed) keeps
the cost it was given; this command prices its usage with today's price data and writes the row
back. Runs still going are left alone: their own journal is still writing their row.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from run_journal.cli.common import CliError, add_command, emit, require_thread
from run_journal.cli.render import cost_text
from run_journal.envelope import utc_now
from run_journal.projections import iter_events
from run_journal.runs import RunRow
from run_journal.stores.base import RunEventStore

if TYPE_CHECKING:
    from run_journal.usage.tally import Pricing


def add_reprice_command(sub: Any) -> None:
    """Register ``reprice`` on the ``run-journal`` subcommands."""
    text = "compute stored run rows' costs again from their usage (today's prices)"
    reprice = add_command(sub, "reprice", cmd_reprice, text)
    reprice.add_argument("--thread", help="only this thread's runs")
    reprice.add_argument("--since", type=parse_since, metavar="DATE",
                         help="only runs started at or after this date or time (ISO 8601, UTC if no zone)")
    reprice.add_argument("--pricing", type=Path, metavar="FILE",
                         help="a JSON pricing table ({model: {input, output, cache_read, cache_write, "
                              "cache_write_1h}}, USD per million tokens) that overrides the price database")
    reprice.add_argument("--all", dest="keep_known", action="store_false",
                         help="price every call again (by default a cost already known is kept, unless "
                              "--pricing names its model)")
    reprice.add_argument("--dry-run", action="store_true", help="show what would change, write nothing")


def parse_since(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        try:
            moment = datetime.combine(date.fromisoformat(text.strip()), datetime.min.time())
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a date: {text!r} (e.g. 2026-11-30 or "
                                             "2026-11-30T12:00)") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def load_pricing(path: Path) -> Pricing:
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CliError(f"cannot read the pricing table {path}: {error}", code=2) from None
    if not isinstance(table, dict) or not all(isinstance(entry, dict) for entry in table.values()):
        raise CliError(f"{path}: a pricing table is a JSON object of model -> {{input, output, ...}}", code=2)
    return table


async def cmd_reprice(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    from run_journal.usage.repricing import RELEVANT_EVENTS, reprice_row  # only this command prices

    pricing = load_pricing(args.pricing) if args.pricing else None
    if args.thread:
        await require_thread(store, args.thread)
    rows = await store.list_runs(args.thread)
    if args.since is not None:
        rows = [row for row in rows if row.started_at is not None and row.started_at >= args.since]
    changed = unknown = running = 0
    for row in rows:
        if not row.is_terminal:
            running += 1
            continue
        events = [event async for event in iter_events(store, row.thread_id, row.run_id,
                                                        event_types=RELEVANT_EVENTS)]
        repriced = reprice_row(row, events, pricing, keep_known=args.keep_known)
        if repriced.usage.llm_calls and repriced.cost_usd is None:
            unknown += 1
        if _same_costs(row, repriced):
            continue
        changed += 1
        why = f" ({repriced.cost_note})" if repriced.cost_note else ""
        emit(out, f"run {row.run_id} (thread {row.thread_id}): {cost_text(row.cost_usd)} -> "
                  f"{cost_text(repriced.cost_usd)}{why}")
        if not args.dry_run:
            await store.put_run(repriced.replace(updated_at=utc_now()))
    verb = "would change" if args.dry_run else "changed"
    summary = f"repriced {len(rows) - running} run(s): {changed} {verb}, {unknown} still unknown"
    emit(out, summary + (f", {running} still running (skipped)" if running else ""))
    return 0


def _same_costs(before: RunRow, after: RunRow) -> bool:
    def costs(row: RunRow) -> tuple[Any, ...]:
        return (row.usage.cost_usd, row.cost_note,
                sorted((key, value.cost_usd) for key, value in row.usage_by_caller.items()),
                sorted((key, value.cost_usd) for key, value in row.usage_by_model.items()))

    return costs(before) == costs(after)
