"""The journal's cost now against an earlier version of the package, interleaved in one process.

The earlier version is taken from git (``--before REV``, default ``main``), copied into a temporary
directory as the package ``run_journal_before`` (its imports rewritten), and both journals record the
same turns as bench_journal.py's (CPU-bound, then with a model that awaits ``--latency`` ms), in
turn, beside a no-op handler. Prints each variant's median per turn, its ratio to the no-op handler
and its cost above it: the difference between the two versions is measured under the same noise.

    .venv/bin/python bench/bench_ab.py [--before main] [--turns 400] [--latency 20] [--sync]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_journal import NoOp, build_graph, build_sync_graph
from langchain_core.messages import HumanMessage

import run_journal

ROOT = Path(__file__).resolve().parent.parent


def load_before(revision: str, into: Path) -> Any:
    """``run_journal`` as of ``revision``, importable as ``run_journal_before``."""
    files = subprocess.run(["git", "ls-tree", "-r", "--name-only", revision, "run_journal"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        text = subprocess.run(["git", "show", f"{revision}:{name}"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout
        target = into / name.replace("run_journal", "run_journal_before", 1)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(re.sub(r"\brun_journal\b(?=[.\s])", "run_journal_before", text), encoding="utf-8")
    sys.path.insert(0, str(into))
    return importlib.import_module("run_journal_before")


def variants(before: Any, tmp: Path) -> dict[str, tuple[Any, Any]]:
    """name -> (journal class, store) for the two versions, memory and SQLite."""
    return {
        "after memory": (run_journal.RunJournal, run_journal.open_store("memory://")),
        "after memory, requests off": (functools.partial(run_journal.RunJournal, record_requests=False),
                                       run_journal.open_store("memory://")),
        "before memory": (before.RunJournal, before.open_store("memory://")),
        "after sqlite": (run_journal.RunJournal, run_journal.open_store(f"sqlite:///{tmp / 'after.db'}")),
        "after sqlite, requests off": (functools.partial(run_journal.RunJournal, record_requests=False),
                                       run_journal.open_store(f"sqlite:///{tmp / 'after-off.db'}")),
        "before sqlite": (before.RunJournal, before.open_store(f"sqlite:///{tmp / 'before.db'}")),
    }


async def run_async(before: Any, turns: int, latency: float, tmp: Path) -> dict[str, list[float]]:
    graph = build_graph(latency)
    journals = variants(before, tmp)
    for _, store in journals.values():
        await store.setup()
    times: dict[str, list[float]] = {"noop": [], **{name: [] for name in journals}}
    inputs = {"messages": [HumanMessage("what is 1+2?")]}

    async def turn(kind: str, index: int) -> None:
        started = time.perf_counter()
        if kind == "noop":
            await graph.ainvoke(inputs, {"callbacks": [NoOp()]})
        else:
            journal_class, store = journals[kind]
            journal = journal_class(store, thread_id=f"{kind.replace(' ', '-')}-{index}")
            await graph.ainvoke(inputs, {"callbacks": [journal]})
            await journal.aclose()
        times[kind].append(time.perf_counter() - started)

    kinds = list(times)
    for index in range(20):  # warm-up
        for kind in kinds:
            await turn(kind, -index - 1)
    for values in times.values():
        values.clear()
    for index in range(turns):
        for kind in rotated(kinds, index):
            await turn(kind, index)
    for _, store in journals.values():
        await store.aclose()
    return times


def run_sync(before: Any, turns: int, tmp: Path) -> dict[str, list[float]]:
    """Sync turns (``invoke``), each journal given a SQLite URL: the form sync code uses."""
    graph = build_sync_graph()
    urls = {"after url": (run_journal.RunJournal, f"sqlite:///{tmp / 'after-sync.db'}"),
            "before url": (before.RunJournal, f"sqlite:///{tmp / 'before-sync.db'}")}
    times: dict[str, list[float]] = {"noop": [], **{name: [] for name in urls}}
    inputs = {"messages": [HumanMessage("what is 1+2?")]}

    def turn(kind: str, index: int) -> None:
        started = time.perf_counter()
        if kind == "noop":
            graph.invoke(inputs, {"callbacks": [NoOp()]})
        else:
            journal_class, url = urls[kind]
            with journal_class(url, thread_id=f"{kind.replace(' ', '-')}-{index}") as journal:
                graph.invoke(inputs, {"callbacks": [journal]})
        times[kind].append(time.perf_counter() - started)

    kinds = list(times)
    for index in range(5):
        for kind in kinds:
            turn(kind, -index - 1)
    for values in times.values():
        values.clear()
    for index in range(turns):
        for kind in rotated(kinds, index):
            turn(kind, index)
    return times


def rotated(kinds: list[str], index: int) -> list[str]:
    """Each round starts with another variant, so none is always first after a pause."""
    start = index % len(kinds)
    return kinds[start:] + kinds[:start]


def report(title: str, times: dict[str, list[float]]) -> None:
    base = statistics.median(times["noop"])
    print(title)
    for kind, values in times.items():
        median = statistics.median(values)
        print(f"{kind:>14}: median {median * 1000:7.3f} ms/turn  ratio {median / base:5.3f}x  "
              f"(+{(median - base) * 1e6:.0f} us)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="main", help="git revision of the earlier version")
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--latency", type=float, default=20.0)
    parser.add_argument("--sync", action="store_true", help="also sync turns with a URL journal")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = load_before(args.before, Path(tmp) / "before")
        report(f"CPU-bound turn, {args.turns} turns per variant",
               asyncio.run(run_async(before, args.turns, 0.0, Path(tmp))))
        report(f"model awaiting {args.latency:g} ms, {args.turns // 3} turns per variant",
               asyncio.run(run_async(before, args.turns // 3, args.latency / 1000, Path(tmp))))
        if args.sync:
            report(f"sync turn, a SQLite URL per journal, {args.turns // 4} turns per variant",
                   run_sync(before, args.turns // 4, Path(tmp)))


if __name__ == "__main__":
    main()
