"""``run-journal URL export --format otlp --endpoint URL``: send runs to an OpenTelemetry collector.

Each run becomes one trace (see ``run_journal.otel``), sent in one OTLP/HTTP request. The trace and
span ids are derived from the run and its events, so sending a run again gives the same trace.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from run_journal.cli.common import CliError, all_threads, emit, require_thread, resolve_run
from run_journal.projections import iter_events
from run_journal.stores.base import RunEventStore

DEFAULT_ENDPOINT = "http://127.0.0.1:4318"


def add_otlp_arguments(export: Any) -> None:
    """The ``export`` command's OTLP options."""
    export.add_argument("--format", choices=("jsonl", "otlp"), default="jsonl",
                        help="jsonl: events as JSON lines (default); otlp: runs as traces to --endpoint")
    export.add_argument("--endpoint", default=DEFAULT_ENDPOINT,
                        help=f"OTLP/HTTP collector for --format otlp (default {DEFAULT_ENDPOINT}; "
                             "/v1/traces is added)")
    export.add_argument("--thread", dest="thread_options", action="append", default=[], metavar="THREAD",
                        help="only this thread (repeatable; same as the THREAD arguments)")
    export.add_argument("--run", help="only this run (a whole id or a unique prefix of 6 or more characters)")
    export.add_argument("--header", dest="headers", action="append", default=[], metavar="NAME=VALUE",
                        help="an HTTP header for the collector, e.g. an API key (repeatable)")


async def export_otlp(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    try:
        from run_journal.otel import OtlpExporter, OtlpExportError
    except ImportError as error:
        raise CliError(str(error), code=2) from None
    if args.output:
        raise CliError("--output is for --format jsonl; --format otlp sends to --endpoint", code=2)
    headers = dict(_header(text) for text in args.headers)
    exporter = OtlpExporter(args.endpoint, headers=headers)
    runs = await _runs(store, args)
    spans = 0
    try:
        for done, (thread_id, run_id) in enumerate(runs):
            try:
                spans += await exporter.export_run(store, thread_id, run_id)
            except OtlpExportError as error:
                raise CliError(f"{error} (run {run_id}, thread {thread_id}; {done} run(s) sent before it)") \
                    from None
    finally:
        exporter.shutdown()
    emit(out, f"exported {len(runs)} run(s) as {spans} span(s) to {exporter.endpoint}")
    return 0


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise CliError(f"--header takes NAME=VALUE, not {text!r}", code=2)
    return name.strip(), value.strip()


async def _runs(store: RunEventStore, args: argparse.Namespace) -> list[tuple[str, str]]:
    """(thread, run) of every run to send: one, a few threads' or the store's, in start order."""
    threads: list[str] = args.threads or []
    for thread_id in threads:
        await require_thread(store, thread_id)
    if args.run:
        run_id, owner = await resolve_run(store, args.run, threads)
        return [(owner, run_id)]
    runs: list[tuple[str, str]] = []
    for thread_id in threads or await all_threads(store):
        known = [row.run_id for row in await store.list_runs(thread_id)]
        started = [event.run_id async for event in iter_events(store, thread_id, event_types=["run.start"])]
        runs += [(thread_id, run_id) for run_id in dict.fromkeys(known + started)]
    return runs
