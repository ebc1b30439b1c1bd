"""Shared pieces of the ``run-journal`` commands: errors, output, paged reads, finding threads and runs."""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, Final, TextIO
from urllib.parse import unquote, urlsplit

from run_journal.envelope import RunEvent, validate_id
from run_journal.moments import parse_age, parse_moment
from run_journal.projections import iter_events
from run_journal.stores.base import MAX_PAGE, RunEventStore, StoreError
from run_journal.stores.queries import ThreadActivity
from run_journal.stores.urls import display_url

PAGE: Final = 1000
MIN_PREFIX: Final = 6
"""The shortest run id prefix a command accepts in place of the whole id."""
CANDIDATES_SHOWN: Final = 5
MIN_SECRET: Final = 8
"""A password this long is hidden wherever it appears in a message, not only inside its URL."""
_BACKEND_MODULES: Final = ("sqlalchemy", "asyncpg", "aiosqlite", "sqlite3", "redis")


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


Command = Callable[[RunEventStore, argparse.Namespace, TextIO], Coroutine[Any, Any, int]]



def add_command(sub: Any, name: str, handler: Command, help_text: str, *, json_flag: bool = False,
                ids_flag: bool = False) -> argparse.ArgumentParser:
    """Register one ``run-journal`` subcommand (every command module registers its own this way)."""
    child: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text)
    child.set_defaults(handler=handler)
    if json_flag:
        child.add_argument("--json", action="store_true", help="one JSON object per line (whole ids)")
    if ids_flag:
        child.add_argument("--full-ids", action="store_true",
                           help="whole run ids (by default the first 8 characters, more if needed)")
    return child


def parse_duration(text: str) -> timedelta:
    """``90s``, ``30m``, ``2h``, ``1d``, ``2w`` (a bare number is seconds): the one duration syntax of
    every command (``prune --older-than``, ``reconcile --older-than``, ``--since``)."""
    try:
        return parse_age(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parse_when(text: str) -> datetime:
    """``--since`` / ``--until``: an age (that long before now) or an ISO date or time
    (``moments.parse_moment``)."""
    try:
        return parse_moment(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def positive(text: str) -> int:
    value = non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


# -- helpers -------------------------------------------------------------------------------------
def emit(out: TextIO, line: str = "") -> None:
    out.write(line + "\n")


def emit_json(out: TextIO, value: Any) -> None:
    out.write(json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n")


def describe(error: BaseException) -> str:
    """``Type: first line of the message``."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def is_backend_error(error: BaseException) -> bool:
    """A failure of a store (its server, its files, its driver), not a mistake of the command."""
    module = type(error).__module__.split(".", 1)[0]
    return isinstance(error, StoreError | OSError | TimeoutError) or module in _BACKEND_MODULES


def hide_passwords(text: str, urls: Iterable[str | None]) -> str:
    """``text`` with every given URL in its display form and their passwords replaced by ``***``
    wherever they appear (a driver's message may quote them)."""
    for url in urls:
        if not url:
            continue
        text = text.replace(url, display_url(url))
        try:
            password = urlsplit(url).password
        except ValueError:
            password = None
        for form in {password or "", unquote(password or "")} - {""}:
            text = text.replace(f":{form}@", ":***@")
            if len(form) >= MIN_SECRET:  # short ones could be any word of the message
                text = text.replace(form, "***")
    return text


@contextlib.contextmanager
def blamed(role: str, url: str) -> Iterator[None]:
    """A store failure inside becomes one line naming the store: ``archive sqlite:///a.db: OSError: ...``
    (the URL without its password)."""
    try:
        yield
    except (CliError, BrokenPipeError):  # a closed output (``| head``) is no store's failure
        raise
    except Exception as error:
        if not is_backend_error(error):
            raise
        raise CliError(f"{role} {display_url(url)}: {describe(error)}") from error


async def all_threads(store: RunEventStore) -> list[str]:
    """Every thread id, ascending, paged with ``list_threads(after=...)``."""
    threads: list[str] = []
    while True:
        page = await store.list_threads(limit=MAX_PAGE, after=threads[-1] if threads else None)
        threads.extend(page)
        if len(page) < MAX_PAGE:
            return threads


async def recent_threads(store: RunEventStore) -> AsyncIterator[ThreadActivity]:
    """Every thread holding events, most recently active first (``list_recent_threads``, paged)."""
    before: str | None = None
    while page := await store.list_recent_threads(limit=MAX_PAGE, before=before):
        for activity in page:
            yield activity
        if len(page) < MAX_PAGE:
            return
        before = page[-1].cursor


async def require_thread(store: RunEventStore, thread_id: str) -> None:
    """A read of an unknown thread is a mistake to report, not an empty answer to print."""
    validate_id("thread_id", thread_id)  # the same refusal on every backend, before any query
    if await store.last_seq(thread_id) == 0 and not await store.list_runs(thread_id):
        raise CliError(f"thread {thread_id!r} not found")


async def runs_without_row(store: RunEventStore) -> AsyncIterator[RunEvent]:
    """The ``run.start`` of every run that has no run row, paged by run id."""
    after: str | None = None
    while starts := await store.list_runs_without_row(limit=PAGE, after=after):
        for start in starts:
            yield start
        after = starts[-1].run_id


async def known_runs(store: RunEventStore, thread_id: str | None) -> dict[str, str]:
    """Run id -> thread of every run with a row or a ``run.start`` (of one thread, if given)."""
    runs = {row.run_id: row.thread_id for row in await store.list_runs(thread_id)}
    if thread_id is None:
        async for start in runs_without_row(store):
            runs.setdefault(start.run_id, start.thread_id)
    else:
        async for start in iter_events(store, thread_id, event_types=["run.start"]):
            runs.setdefault(start.run_id, thread_id)
    return runs


async def resolve_run(store: RunEventStore, text: str, threads: Sequence[str] = ()) -> tuple[str, str]:
    """(run id, thread) of the run that ``text`` names: a whole run id, or a prefix of at least
    ``MIN_PREFIX`` characters that starts exactly one run id (of one of ``threads``, if given).

    A whole id is looked up directly; a prefix is matched against every run row and every row-less
    ``run.start`` (of the thread, when there is one: the store has no prefix query).
    """
    validate_id("run_id", text)
    where = f" in thread {', '.join(map(repr, threads))}" if threads else ""
    run_id, thread_id = await _resolve(store, text, threads, where)
    if threads and thread_id not in threads:
        raise CliError(f"run {text!r} not found{where}")
    return run_id, thread_id


async def _resolve(store: RunEventStore, text: str, threads: Sequence[str], where: str) -> tuple[str, str]:
    thread_id = threads[0] if len(threads) == 1 else None
    row = await store.get_run(text)
    if row is not None and thread_id in {None, row.thread_id}:
        return text, row.thread_id
    if thread_id is not None and await store.list_events(thread_id, text, limit=1):
        return text, thread_id  # events without a row or a run.start: only a whole id finds them
    runs = await known_runs(store, thread_id)
    if threads:
        runs = {run_id: owner for run_id, owner in runs.items() if owner in threads}
    if text in runs:
        return text, runs[text]
    if len(text) < MIN_PREFIX:
        raise CliError(f"run {text!r} not found{where} (a run id prefix needs at least {MIN_PREFIX} "
                       "characters)")
    matches = sorted(run_id for run_id in runs if run_id.startswith(text))
    if not matches:
        raise CliError(f"run {text!r} not found{where}")
    if len(matches) > 1:
        shown = ", ".join(matches[:CANDIDATES_SHOWN]) + (", ..." if len(matches) > CANDIDATES_SHOWN else "")
        narrow = "" if threads else " or name the run's thread"
        raise CliError(f"run id prefix {text!r} is ambiguous: {len(matches)} runs match ({shown}); "
                       f"give more characters{narrow}", code=2)
    return matches[0], runs[matches[0]]


def ranges(seqs: Sequence[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``1-3, 7`` (at most 10 ranges)."""
    spans: list[list[int]] = []
    for seq in seqs:
        if spans and seq == spans[-1][1] + 1:
            spans[-1][1] = seq
        else:
            spans.append([seq, seq])
    text = [f"{a}-{b}" if a != b else str(a) for a, b in spans[:10]]
    return ", ".join(text) + (f" and {len(spans) - 10} more" if len(spans) > 10 else "")
