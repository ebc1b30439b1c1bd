"""``run-journal URL COMMAND ...``: look at a store from a terminal or a script.

Every command reads through the store contract (plus ``run_journal.projections``), so it works on any
backend ``open_store`` knows. Mistakes (bad URL, unknown thread) are one line on stderr with exit status
2 (usage) or 1 (not found / problem found); ``--traceback`` shows the full error instead. Ctrl-C ends any
command quietly with status 130. Modules that take long to import (LangChain for prices, jsonschema for
the contract, the store drivers) are imported by the command that needs them, so ``--help`` is quick.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, TextIO
from urllib.parse import urlsplit

from run_journal.cli.check import add_check_command
from run_journal.cli.common import CliError, Command, blamed, describe, hide_passwords, is_backend_error
from run_journal.cli.diff import add_diff_command
from run_journal.cli.maintenance import cmd_copy, cmd_export, cmd_reconcile, cmd_verify
from run_journal.cli.otlp import add_otlp_arguments
from run_journal.cli.prune import add_prune_command
from run_journal.cli.reading import cmd_events, cmd_runs, cmd_show, cmd_tail, cmd_threads, cmd_usage
from run_journal.cli.reprice import add_reprice_command
from run_journal.cli.serve import add_serve_command
from run_journal.stores.urls import display_url, file_path_of, open_store

__all__ = ["build_parser", "main"]

INTERRUPTED: Final = 130
"""Exit status after Ctrl-C (128 + SIGINT), whatever the command was doing."""
EPILOG: Final = """\
URL names the store:
  memory://                  this process only (empty in a new one)
  jsonl:///dir               a JSONL directory, relative to the current directory
  jsonl:////abs/dir          a JSONL directory, absolute path (four slashes)
  sqlite:///file.db          a SQLite file, relative to the current directory
  sqlite:////abs/file.db     a SQLite file, absolute path (four slashes)
  postgresql://user@host:5432/db[?schema=NAME]
  redis://host:6379/0[?prefix=KEYS]
RUN: a whole run id or a unique prefix of at least 6 characters.
Exit status: 0 done, 1 not found or a problem found, 2 a usage mistake, 130 interrupted (Ctrl-C)."""


def parse_duration(text: str) -> timedelta:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 30m, 2h, 1d)")
    unit = {"s": "seconds", "": "seconds", "m": "minutes", "h": "hours", "d": "days"}[match[2]]
    return timedelta(**{unit: float(match[1])})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="run-journal", description="Inspect, verify, export and copy a run-journal store.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    parser.add_argument("url", metavar="URL", help="the store (source store for copy)")
    parser.add_argument("--traceback", action="store_true", help="show full errors (for bug reports)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, handler: Command, help_text: str, *, json_flag: bool = False,
                ids_flag: bool = False) -> Any:
        child = sub.add_parser(name, help=help_text, description=help_text)
        child.set_defaults(handler=handler)
        if json_flag:
            child.add_argument("--json", action="store_true", help="one JSON object per line (whole ids)")
        if ids_flag:
            child.add_argument("--full-ids", action="store_true",
                               help="whole run ids (by default the first 8 characters, more if needed)")
        return child

    command("threads", cmd_threads, "list threads with their event and run counts", json_flag=True)
    command("runs", cmd_runs, "list a thread's runs", json_flag=True, ids_flag=True).add_argument("thread")
    show = command("show", cmd_show, "a run as a timeline, then its totals")
    show.add_argument("run", metavar="RUN", help="run id, or a unique prefix of 6 or more characters")
    show.add_argument("--thread", help="the run's thread: to tell runs apart by prefix, or to find a run "
                                       "that has events but no run row nor run.start")
    events = command("events", cmd_events, "a thread's events (list_events filters)", json_flag=True,
                     ids_flag=True)
    events.add_argument("thread")
    events.add_argument("--run", help="only this run (a whole id or a unique prefix)")
    events.add_argument("--type", dest="types", action="append", metavar="TYPE",
                        help="event type (repeatable)")
    events.add_argument("--task", help="subagent task_id")
    events.add_argument("--limit", type=_positive, default=500)
    events.add_argument("--after-seq", type=_non_negative)
    tail = command("tail", cmd_tail, "follow a thread's new events until Ctrl-C", json_flag=True,
                   ids_flag=True)
    tail.add_argument("thread")
    tail.add_argument("--last", type=_non_negative, default=10, help="events of history first")
    tail.add_argument("--after-seq", type=_non_negative, help="start after this seq instead")
    tail.add_argument("--wait", action="store_true",
                      help="a thread that has no event yet is waited for instead of not found")
    command("verify", cmd_verify, "check seq density and every row against the contract") \
        .add_argument("threads", nargs="*", metavar="THREAD")
    export = command("export", cmd_export, "write events as JSONL (to_dict records), or send runs as "
                                           "OpenTelemetry traces (--format otlp)")
    export.add_argument("threads", nargs="*", metavar="THREAD")
    export.add_argument("--output", "-o", help="file to write (default: stdout)")
    add_otlp_arguments(export)
    copy = command("copy", cmd_copy, "copy events (seq preserved) and run rows to another store")
    copy.add_argument("destination", metavar="DST")
    copy.add_argument("--thread", dest="threads", action="append", default=[], metavar="THREAD")
    command("usage", cmd_usage, "token and cost totals per run, model and caller", json_flag=True,
            ids_flag=True) \
        .add_argument("thread", nargs="?")
    command("reconcile", cmd_reconcile, "close runs whose worker died") \
        .add_argument("--older-than", type=parse_duration, required=True, help="e.g. 30m, 2h")
    add_serve_command(sub)
    add_reprice_command(sub)
    add_prune_command(sub)
    add_check_command(sub)
    add_diff_command(sub)
    parser.set_defaults(commands=tuple(sub.choices))
    return parser


class _Version(argparse.Action):
    """``--version``: ``run-journal <version>`` (looked up only when asked: it is not free)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **_: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("run-journal")
        except PackageNotFoundError:  # a source tree that was never installed
            number = "unknown"
        print(f"run-journal {number}")
        parser.exit()


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


# -- entry point ---------------------------------------------------------------------------------
def command_line_mistake(parser: argparse.ArgumentParser, args_list: Sequence[str]) -> str | None:
    """What a newcomer's command line gets wrong before argparse sees it: the command before the
    URL, or a file URL without its slashes (``sqlite:journal.db``). None when it looks right."""
    if any(word in {"-h", "--help", "--version"} for word in args_list):
        return None
    words = [word for word in args_list if not word.startswith("-")]
    if not words:
        return None
    first = words[0]
    if first in parser.get_default("commands"):
        at = list(args_list).index(first)
        before, after = list(args_list[:at]), list(args_list[at + 1:])
        url = next((word for word in words[1:] if "://" in word or corrected_file_url(word)), None)
        if url is not None:
            after.remove(url)
        line = " ".join([*before, display_url(url) if url else "URL", first, *after])
        return f"the store URL comes first, then the command: run-journal {line}"
    if (fixed := corrected_file_url(first)) is not None:
        return (f"{first!r} is not a store URL: did you mean {fixed}? (a file store takes three "
                "slashes and a path relative to the current directory, four for an absolute one)")
    return None


def corrected_file_url(url: str) -> str | None:
    """The ``sqlite:`` or ``jsonl:`` URL meant by one without its three slashes (None: not such a
    URL, or right already): ``sqlite:journal.db`` -> ``sqlite:///journal.db``, ``jsonl:/var/j``
    -> ``jsonl:////var/j``, ``sqlite://j.db`` -> ``sqlite:///j.db``, ``sqlite:`` ->
    ``sqlite:///journal.db`` (a path to put in)."""
    scheme, colon, rest = url.partition(":")
    if not colon or scheme.lower() not in {"sqlite", "jsonl"}:
        return None
    default = "journal.db" if scheme.lower() == "sqlite" else "journal"
    if rest.startswith("///"):
        return None if len(rest) > 3 else f"{scheme}:///{default}"
    if rest.startswith("//"):
        return f"{scheme}:///{rest[2:] or default}"
    return f"{scheme}:///{rest or default}"  # "/abs/path" -> "////abs/path"


def check_location(url: str) -> None:
    """No command creates an empty SQLite file or JSONL directory by accident (a mistyped path):
    the store it works on must exist (``copy`` creates only its destination)."""
    scheme = urlsplit(url).scheme.lower().split("+", 1)[0]
    if scheme not in {"sqlite", "jsonl"} or url.split("://", 1)[1] in {"", "/"}:
        return
    path = Path(file_path_of(url.split("?", 1)[0]))
    if str(path) not in {":memory:", ""} and not path.exists():
        raise CliError(f"no store at {path.absolute()} (from {display_url(url)})")


async def run(args: argparse.Namespace, out: TextIO) -> int:
    check_location(args.url)
    command: Command = args.handler
    store = open_store(args.url)
    role = "source store" if args.command == "copy" else "store"
    with blamed(role, args.url):
        await store.setup()
    try:
        with blamed(role, args.url):  # the command names any other store that fails (blamed too)
            return await command(store, args, out)
    finally:
        with blamed(role, args.url):
            await store.aclose()


def urls_of(args: argparse.Namespace) -> list[str | None]:
    """Every URL of the command line (stores, a collector): their passwords are never printed."""
    return [getattr(args, name, None) for name in ("url", "destination", "archive", "endpoint")]


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:  # Ctrl-C, wherever it landed: no traceback
        return INTERRUPTED


def _main(args_list: list[str]) -> int:
    if len(args_list) >= 3 and args_list[0] == "copy":  # also accept ``copy SRC DST``
        args_list = [args_list[1], "copy", *args_list[2:]]
    parser = build_parser()
    if (mistake := command_line_mistake(parser, args_list)) is not None:
        print(f"run-journal: {mistake}", file=sys.stderr)
        return 2
    args = parser.parse_args(args_list)
    try:
        return asyncio.run(run(args, sys.stdout))
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, and keep Python's exit flush quiet too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except CliError as error:
        if args.traceback:
            raise
        _say(str(error), args)
        return error.code
    except (ValueError, ImportError) as error:
        if args.traceback:
            raise
        _say(str(error).strip() or describe(error), args)
        return 2
    except Exception as error:
        if args.traceback or not is_backend_error(error):
            raise
        _say(f"store {display_url(args.url)}: {describe(error)}", args)
        return 1


def _say(message: str, args: argparse.Namespace) -> None:
    print(f"run-journal: {hide_passwords(message, urls_of(args))}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
