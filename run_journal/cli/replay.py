"""``run-journal URL replay RUN --graph package.module:factory``: a recorded run re-run offline.

The factory takes the replay's chat model (answering from the record) and returns the graph; the run
is invoked on its recorded input, journaled into ``--into`` (a new memory store by default), and
compared with the recording. Exit status 0: the same trajectory and usage; 1: it diverged; 2: a usage
mistake (no such run, a factory that cannot be imported or fails to build the graph).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

from run_journal.cli.common import CliError, blamed, emit, emit_json, require_thread, resolve_run
from run_journal.cli.diff import comparison_lines
from run_journal.cli.reprice import load_pricing
from run_journal.stores.base import RunEventStore
from run_journal.stores.urls import display_url, open_store
from run_journal.writer import JournalError

USAGE = 2
NO_INPUT_GIVEN = object()


def add_replay_command(sub: Any) -> None:
    """Register ``replay`` on the ``run-journal`` subcommands."""
    text = ("re-run a recorded run offline: the model answers from the record, the tools run for real; "
            "print the comparison (exit 0: same trajectory and usage, 1: diverged, 2: usage mistake)")
    replay = sub.add_parser("replay", help=text, description=text)
    replay.set_defaults(handler=cmd_replay)
    replay.add_argument("run", metavar="RUN", help="run id, or a unique prefix of 6 or more characters")
    replay.add_argument("--graph", required=True, metavar="MODULE:FACTORY",
                        help="a function that takes the chat model and returns the graph "
                             "(imported from the current directory too)")
    replay.add_argument("--into", default="memory://", metavar="URL",
                        help="journal the replay into this store (default: memory://)")
    replay.add_argument("--thread", help="the run's thread (to tell runs apart by prefix)")
    replay.add_argument("--match", choices=("request", "order"),
                        help="answer a call by its request, or by each caller's order (default: by request "
                             "when the run recorded its requests)")
    replay.add_argument("--lenient", action="store_true",
                        help="go on past a diverging model call, answering by order (strict=False)")
    replay.add_argument("--input", metavar="JSON",
                        help="invoke the graph with this JSON input instead of the recorded human message")
    replay.add_argument("--whole-thread", action="store_true",
                        help="replay the thread's earlier runs first (a graph with a checkpointer)")
    replay.add_argument("--stream", action="store_true", help="run the graph with astream (models stream)")
    replay.add_argument("--ignore", action="append", default=[], metavar="FIELD",
                        help="leave a field out of the comparison (repeatable)")
    replay.add_argument("--pricing", type=Path, metavar="FILE",
                        help="the JSON pricing table the recording used ({model: {input, output, ...}}, "
                             "USD per million tokens): the replay's costs come from it too")
    replay.add_argument("--json", action="store_true", help="the result as one JSON object")
    replay.add_argument("--full-ids", action="store_true", help="whole run ids")


def load_factory(spec: str) -> Any:
    """``package.module:function`` imported (the current directory first on the path, as ``python -m``
    does), or ``path/to/file.py:function`` loaded from that file."""
    module_name, colon, attribute = spec.rpartition(":")
    if not colon or not module_name or not attribute:
        raise CliError(f"--graph takes MODULE:FACTORY (e.g. myapp.agent:build), got {spec!r}", code=USAGE)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        if module_name.endswith(".py"):
            module = _module_at(module_name)
        else:
            module = importlib.import_module(module_name)
    except Exception as error:
        raise CliError(f"--graph: cannot import {module_name}: {type(error).__name__}: {error}",
                       code=USAGE) from error
    factory: Any = module
    for name in attribute.split("."):
        factory = getattr(factory, name, None)
        if factory is None:
            raise CliError(f"--graph: {module_name} has no {attribute}", code=USAGE)
    if not callable(factory):
        raise CliError(f"--graph: {spec} is not a function", code=USAGE)
    return factory


def _module_at(path: str) -> ModuleType:
    location = Path(path)
    if not location.is_file():
        raise FileNotFoundError(f"no file {location.absolute()}")
    spec = importlib.util.spec_from_file_location(location.stem, location)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(location.stem, module)
    spec.loader.exec_module(module)
    return module


async def cmd_replay(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    from run_journal.replay import RecordedChatModel, replay_run  # LangChain loads only for this command

    factory = load_factory(args.graph)
    inputs: Any = NO_INPUT_GIVEN
    if args.input is not None:
        try:
            inputs = json.loads(args.input)
        except ValueError as error:
            raise CliError(f"--input is not JSON: {error}", code=USAGE) from None
    threads = [args.thread] if args.thread else []
    try:
        if args.thread:
            await require_thread(store, args.thread)
        run_id, thread_id = await resolve_run(store, args.run, threads)
    except CliError as error:
        raise CliError(str(error), code=USAGE) from None

    def build(model: RecordedChatModel) -> Any:
        try:
            return factory(model)
        except Exception as error:
            raise CliError(f"--graph: {args.graph} failed to build the graph: {type(error).__name__}: "
                           f"{error}", code=USAGE) from error

    options: dict[str, Any] = {"match": args.match, "strict": not args.lenient, "ignore": args.ignore,
                               "whole_thread": args.whole_thread, "stream": args.stream,
                               "pricing": load_pricing(args.pricing) if args.pricing else None}
    if inputs is not NO_INPUT_GIVEN:
        options["inputs"] = inputs
    into = open_store(args.into)
    with blamed("replay store", args.into):
        await into.setup()
    try:
        result = await replay_run(store, thread_id, run_id, build, into=into, **options)
    except JournalError as error:  # the replay's journal could not write to --into
        raise CliError(f"replay store {display_url(args.into)}: {error}") from error
    except (LookupError, ValueError) as error:
        raise CliError(str(error), code=USAGE) from None
    finally:
        with blamed("replay store", args.into):
            await into.aclose()
    if args.json:
        emit_json(out, _as_json(result, args.into))
    else:
        _print(result, args, out)
    return 0 if result.same else 1


def _print(result: Any, args: argparse.Namespace, out: TextIO) -> None:
    for line in result.report().splitlines():
        emit(out, line)
    shown = result.comparison
    run = next((r for r in result.runs if r.comparison is shown), None)
    if shown is not None and run is not None and run.replayed is not None:
        emit(out)
        for line in comparison_lines(shown, run.recorded, run.replayed, full_ids=args.full_ids):
            emit(out, line)
    emit(out)
    replayed = [r.replayed.run_id for r in result.runs if r.replayed is not None]
    emit(out, f"replay journaled in {display_url(args.into)}, thread {result.replay_thread_id}"
              + (f", run {replayed[-1]}" if replayed else ""))


def _as_json(result: Any, into: str) -> dict[str, Any]:
    return {
        "same": result.same, "thread_id": result.thread_id, "run_id": result.run_id,
        "into": display_url(into), "replay_thread_id": result.replay_thread_id, "error": result.error,
        "divergences": [divergence.to_dict() for divergence in result.divergences],
        "unused_calls": [{"run_id": c.run_id, "index": c.index, "seq": c.seq, "caller": c.caller}
                         for c in result.unused_calls],
        "runs": [{"recorded_run_id": r.recorded.run_id,
                  "replayed_run_id": r.replayed.run_id if r.replayed is not None else None,
                  "same_usage": r.same_usage,
                  "comparison": r.comparison.to_dict() if r.comparison is not None else None}
                 for r in result.runs],
    }
