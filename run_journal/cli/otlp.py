"""``run-journal URL export --format otlp --endpoint URL``: send runs to an OpenTelemetry collector.

Each run becomes one trace (see ``run_journal.otel``), sent in one OTLP/HTTP request. The trace and
span ids are derived from the run and its events, so sending a run again gives the same trace.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any, Final, TextIO
from urllib.parse import urlsplit

from run_journal.cli.common import CliError, all_threads, emit, require_thread, resolve_run
from run_journal.projections import iter_events
from run_journal.stores.base import RunEventStore
from run_journal.stores.urls import display_url

DEFAULT_ENDPOINT = "http://127.0.0.1:4318"
CONNECT_SECONDS: Final = 3.0
"""How long the collector's address may take to accept a connection before the export gives up."""
SDK_LOGGER: Final = "opentelemetry.exporter.otlp"


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
    shown = display_url(exporter.endpoint)
    runs = await _runs(store, args)
    spans = 0
    try:
        if runs:
            await reach(args.endpoint)
        with _sdk_quiet():
            for done, (thread_id, run_id) in enumerate(runs):
                try:
                    spans += await exporter.export_run(store, thread_id, run_id)
                except OtlpExportError:
                    raise CliError(f"the OTLP collector at {shown} did not take run {run_id} (thread "
                                   f"{thread_id}; {done} run(s) sent before it)") from None
    finally:
        with _sdk_quiet():
            exporter.shutdown()
    emit(out, f"exported {len(runs)} run(s) as {spans} span(s) to {shown}")
    return 0


async def reach(endpoint: str) -> None:
    """Fail fast, in one line, when nothing listens at the collector's address (the SDK would retry
    with back-off for its whole timeout, printing a warning each time)."""
    parts = urlsplit(endpoint)
    try:
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as error:
        raise CliError(f"--endpoint {display_url(endpoint)!r} is not a URL: {error}", code=2) from None
    if parts.scheme not in {"http", "https"} or not host:
        raise CliError(f"--endpoint takes an http:// or https:// URL, not {display_url(endpoint)!r}", code=2)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_SECONDS)
    except (OSError, TimeoutError) as error:
        if isinstance(error, TimeoutError):
            why = f"no answer within {CONNECT_SECONDS:g} s"
        else:
            number = error.errno or 0  # negative for a name that does not resolve
            why = os.strerror(number) if number > 0 else (error.strerror or str(error))
        raise CliError(f"the OTLP collector at {display_url(endpoint)} cannot be reached: {why}") from None
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


@contextlib.contextmanager
def _sdk_quiet() -> Iterator[None]:
    """The OTLP exporter's own log lines (a warning per retry) are left out: the command says what
    failed in one line of its own."""
    logger = logging.getLogger(SDK_LOGGER)
    previous = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(previous)


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
