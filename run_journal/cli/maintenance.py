"""Store maintenance commands: verify, export, import, copy, reconcile.

Bodies (``run_journal.bodies``) travel with their thread: ``copy`` puts a thread's bodies into the
destination before its events, ``export`` writes them as lines of their own before the thread's
events (``{"body": digest, "thread_id": ..., "data": canonical JSON text}``), and ``import`` reads
both kinds of line back.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import AsyncIterator
from typing import Any, Final, TextIO

from run_journal.bodies import Body, check_body
from run_journal.calls import request_problems
from run_journal.cli.common import (
    PAGE,
    CliError,
    add_command,
    all_threads,
    blamed,
    emit,
    emit_json,
    parse_duration,
    ranges,
    require_thread,
    resolve_run,
    runs_without_row,
)
from run_journal.cli.otlp import add_otlp_arguments
from run_journal.envelope import RunEvent
from run_journal.projections import find_gaps, iter_events, reconcile_orphans, status_of
from run_journal.runs import STATUS_AFTER
from run_journal.stores.base import RunEventStore
from run_journal.stores.urls import display_url, open_store


def add_maintenance_commands(sub: Any) -> None:
    """Register ``verify``, ``export``, ``import``, ``copy`` and ``reconcile``."""
    add_command(sub, "verify", cmd_verify, "check seq density and every row against the contract") \
        .add_argument("threads", nargs="*", metavar="THREAD")
    export = add_command(sub, "export", cmd_export, "write events as JSONL (to_dict records), or send runs "
                                                    "as OpenTelemetry traces (--format otlp)")
    export.add_argument("threads", nargs="*", metavar="THREAD")
    export.add_argument("--output", "-o", help="file to write (default: stdout)")
    add_otlp_arguments(export)
    add_command(sub, "import", cmd_import, "write an export's bodies and events into the store (seq kept "
                                           "where the thread is free)") \
        .add_argument("file", metavar="FILE", help="a file written by export (- for stdin)")
    copy = add_command(sub, "copy", cmd_copy, "copy bodies, events (seq preserved) and run rows to another "
                                              "store")
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
        for seq, problem in await request_problems(store, thread_id):  # the chains resolve
            report(f"thread {thread_id} seq {seq}", problem)
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
    try:
        target = open(args.output, "w", encoding="utf-8") if args.output else out  # noqa: SIM115, ASYNC230
    except OSError as error:  # the output file's fault, not the store's
        raise CliError(f"cannot write {args.output}: {error.strerror or error}", code=2) from None
    count = bodies = 0
    try:
        for thread_id in threads:  # a run's export carries its thread's bodies: they are shared
            async for body in thread_bodies(store, thread_id):
                emit_json(target, body_record(body))
                bodies += 1
            async for event in iter_events(store, thread_id, run_id):
                emit_json(target, event.to_dict())
                count += 1
    finally:
        if target is not out:
            target.close()
    if args.output:
        with_bodies = f" and {bodies} bodies" if bodies else ""
        print(f"exported {count} events{with_bodies} from {len(threads)} thread(s) to {args.output}",
              file=sys.stderr)
    return 0


BODY_PAGE: Final = 100
"""Bodies read or written at a time (each may be up to ``BODY_LIMIT`` bytes)."""


async def thread_bodies(store: RunEventStore, thread_id: str) -> AsyncIterator[Body]:
    after: str | None = None
    while page := await store.list_bodies(thread_id, after=after, limit=BODY_PAGE):
        for body in page:
            yield body
        after = page[-1].digest


def body_record(body: Body) -> dict[str, str]:
    """An export line for a body: its data is UTF-8 JSON text, written as a string so that the
    bytes, and so the digest, come back exactly."""
    return {"body": body.digest, "thread_id": body.thread_id, "data": body.data.decode("utf-8")}


async def cmd_import(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    """Write an export's bodies and events into the store (seq kept where the thread is free, as
    ``copy`` does); each thread's bodies before its events."""
    # A command line owns its process: a blocking read here stalls nobody's agent.
    source = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115, ASYNC230
    bodies: list[Body] = []
    events: list[RunEvent] = []
    counts = {"events": 0, "new": 0, "bodies": 0, "moved": 0}

    async def flush() -> None:
        if bodies:
            await store.put_bodies(bodies)
            counts["bodies"] += len(bodies)
            bodies.clear()
        if events:
            threads = {event.thread_id for event in events}
            before = {thread_id: await store.last_seq(thread_id) for thread_id in threads}
            counts["moved"] += await _copy_batch(store, events)
            for thread_id, seq in before.items():
                counts["new"] += await store.last_seq(thread_id) - seq
            counts["events"] += len(events)
            events.clear()

    try:
        for number, line in enumerate(source, 1):
            if not line.strip():
                continue
            record = _export_line(args.file, number, line)
            if "body" in record:
                if events:
                    await flush()
                bodies.append(_body_of(args.file, number, record))
            else:
                if len(events) >= PAGE or bodies:
                    await flush()
                events.append(_event_of(args.file, number, record))
            if len(bodies) >= BODY_PAGE:
                await flush()
        await flush()
    finally:
        if source is not sys.stdin:
            source.close()
    emit(out, f"imported {counts['events']} events ({counts['new']} new) and {counts['bodies']} bodies "
              f"from {args.file}")
    if counts["moved"]:
        emit(out, f"warning: {counts['moved']} events got a different seq in this store "
                  "(it already held other events of those threads, or the export has holes)")
    return 0


def _export_line(name: str, number: int, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError as error:
        raise CliError(f"{name}:{number}: not a JSON line ({error})") from None
    if not isinstance(record, dict):
        raise CliError(f"{name}:{number}: not an exported event or body (a JSON object)")
    return record


def _body_of(name: str, number: int, record: dict[str, Any]) -> Body:
    data = record.get("data")
    if not isinstance(data, str) or not isinstance(record.get("thread_id"), str):
        raise CliError(f"{name}:{number}: a body line needs its thread_id and data (text)")
    body = Body(record["thread_id"], record["body"], data.encode("utf-8"))
    try:
        check_body(body)
    except (TypeError, ValueError) as error:
        raise CliError(f"{name}:{number}: {error}") from None
    return body


def _event_of(name: str, number: int, record: dict[str, Any]) -> RunEvent:
    try:
        return RunEvent.from_dict(record)
    except (KeyError, TypeError, ValueError) as error:
        raise CliError(f"{name}:{number}: not an exported event ({type(error).__name__}: {error})") from None


async def cmd_copy(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    for thread_id in args.threads:  # before the destination is opened (and perhaps created)
        await require_thread(store, thread_id)
    threads = args.threads or await all_threads(store)
    to = functools.partial(blamed, "destination", args.destination)
    destination = open_store(args.destination)
    with to():
        await destination.setup()
    try:
        written = total = moved = bodies = 0
        for thread_id in threads:
            page: list[Body] = []
            async for body in thread_bodies(store, thread_id):  # before the events that use them
                page.append(body)
                if len(page) >= BODY_PAGE:
                    with to():
                        await destination.put_bodies(page)
                    bodies, page = bodies + len(page), []
            with to():
                await destination.put_bodies(page)
                bodies += len(page)
                before = await destination.last_seq(thread_id)
            batch: list[RunEvent] = []
            async for event in iter_events(store, thread_id):
                batch.append(event)
                if len(batch) >= PAGE:
                    with to():
                        moved += await _copy_batch(destination, batch)
                    total, batch = total + len(batch), []
            with to():
                moved += await _copy_batch(destination, batch)
                total += len(batch)
                written += await destination.last_seq(thread_id) - before
        runs = [row for thread_id in threads for row in await store.list_runs(thread_id)]
        for row in runs:
            with to():
                await destination.put_run(row)
    finally:
        with to():
            await destination.aclose()
    with_bodies = f", {bodies} bodies" if bodies else ""
    emit(out, f"copied {total} events ({written} new){with_bodies} and {len(runs)} run rows of "
              f"{len(threads)} thread(s) to {display_url(args.destination)}")
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


