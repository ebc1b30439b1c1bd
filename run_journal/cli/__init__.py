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
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TextIO
from urllib.parse import urlsplit

from run_journal.cli.calls import add_calls_command
from run_journal.cli.check import add_check_command
from run_journal.cli.common import CliError, Command, blamed, describe, hide_passwords, is_backend_error
from run_journal.cli.diff import add_diff_command
from run_journal.cli.maintenance import add_maintenance_commands
from run_journal.cli.prune import add_prune_command
from run_journal.cli.reading import add_reading_commands
from run_journal.cli.reprice import add_reprice_command
from run_journal.cli.search import add_search_commands
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="run-journal", description="Inspect, verify, export and copy a run-journal store.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    parser.add_argument("url", metavar="URL", help="the store (source store for copy)")
    parser.add_argument("--traceback", action="store_true", help="show full errors (for bug reports)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in (add_search_commands, add_reading_commands, add_maintenance_commands, add_serve_command,
                     add_reprice_command, add_prune_command, add_check_command, add_diff_command,
                     add_calls_command):
        register(sub)
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
    the store it works on must exist (``copy`` creates only its destination; ``import`` creates the
    store it fills, from a file that must exist)."""
    scheme = urlsplit(url).scheme.lower().split("+", 1)[0]
    if scheme not in {"sqlite", "jsonl"} or url.split("://", 1)[1] in {"", "/"}:
        return
    path = Path(file_path_of(url.split("?", 1)[0]))
    if str(path) not in {":memory:", ""} and not path.exists():
        raise CliError(f"no store at {path.absolute()} (from {display_url(url)})")


def check_file(name: str) -> None:
    """``import`` reads a file that must exist (before the store it fills is created)."""
    if not Path(name).is_file():
        raise CliError(f"no file {Path(name).absolute()} to import")


async def run(args: argparse.Namespace, out: TextIO) -> int:
    if args.command != "import":
        check_location(args.url)
    elif args.file != "-":
        check_file(args.file)
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
