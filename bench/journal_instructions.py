"""Machine instructions RunJournal adds to an agent turn, counted by valgrind: C work included.

``journal_work.py`` counts Python bytecodes; this counts what the CPU executes, so JSON encoding,
allocation, dict lookups and garbage collection show up too. It runs ``bench_journal``'s turn under
``valgrind --tool=callgrind`` three times (warm-up only, no-op handler, RunJournal on the memory store;
``PYTHONHASHSEED=0``, in parallel) and prints the journal's instructions per turn, what share of the
no-op turn they are, and where they go. Repeat runs agree within about 1%; the VM's hour-to-hour speed
does not enter. A collection of the oldest generation lands in some turns only: it weighs on this
average, not on bench_journal's median, so it is shown apart.

    .venv/bin/python bench/journal_instructions.py [--turns 100]      (needs valgrind; ~2 minutes)
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from langchain_core.messages import HumanMessage

from run_journal import RunJournal, open_store

sys.path.insert(0, str(Path(__file__).parent))
from bench_journal import NoOp, build_graph  # the benchmark's own turn, imported from beside it

GROUPS = (  # (group, pattern on the C function's file:name), first match wins
    ("garbage collection", r"gcmodule|traverse|visit_|VisitInstance|GC_"),
    ("JSON encoding", r"_json\.c|accu\.c|JoinArray|unicode_count|bytes_translate"),
    ("Python bytecode", r"ceval\.c|frame\.c|initialize_locals|pycore_frame"),
    ("allocation", r"obmalloc|dealloc|_Free|Malloc|alloc|NewReference|Trash"),
    ("dicts and attributes", r"dictobject|typeobject|GetAttr|descrobject|GetMethod"),
    ("strings and datetimes", r"unicodeobject|FromFormat|datetime|vfprintf|longobject"),
)


async def turns(kind: str, count: int) -> None:
    graph = build_graph()
    async with open_store("memory://") as store:
        async def turn(name: str, index: int) -> None:
            inputs = {"messages": [HumanMessage("what is 1+2?")]}
            if name == "noop":
                await graph.ainvoke(inputs, {"callbacks": [NoOp()]})
                return
            journal = RunJournal(store, thread_id=f"{name}-{index}")
            await graph.ainvoke(inputs, {"callbacks": [journal]})
            await journal.aclose()

        for index in range(20):  # the same warm-up in every run: imports, caches
            await turn("noop", -index - 1)
            await turn("journal", -index - 1)
        for index in range(count):
            await turn(kind, index)


def measure(kind: str, count: int, out: Path) -> subprocess.Popen[bytes]:
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__,
               "--child", kind, "--turns", str(count)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def by_function(out: Path) -> dict[str, int]:
    text = subprocess.run(["callgrind_annotate", "--threshold=100", str(out)], check=True,
                          capture_output=True, text=True).stdout
    found: dict[str, int] = {}
    for line in text.splitlines():
        match = re.match(r"\s*([\d,]+) (?:\([^)]*\)\s+)?(\S.*:\S.*)$", line)
        if match:
            found[match.group(2).split(" [")[0]] = int(match.group(1).replace(",", ""))
    return found


def group_of(function: str) -> str:
    return next((name for name, pattern in GROUPS if re.search(pattern, function)), "other C code")


def main(count: int) -> None:
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        sys.exit("valgrind (with callgrind_annotate) is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        outs = {kind: Path(tmp) / f"callgrind.{kind}" for kind in ("none", "noop", "journal")}
        for process in [measure(kind, 0 if kind == "none" else count, out) for kind, out in outs.items()]:
            if process.wait() != 0:
                sys.exit("a run under valgrind failed")
        functions = {kind: by_function(out) for kind, out in outs.items()}
    totals = {kind: sum(found.values()) for kind, found in functions.items()}
    noop = (totals["noop"] - totals["none"]) / count
    added = (totals["journal"] - totals["noop"]) / count
    groups: collections.Counter[str] = collections.Counter()
    with_journal, without = functions["journal"], functions["noop"]
    for function in with_journal.keys() | without.keys():
        groups[group_of(function)] += with_journal.get(function, 0) - without.get(function, 0)
    collected = groups.pop("garbage collection") / count
    print(f"no-op turn: {noop:,.0f} instructions; RunJournal adds {added:,.0f} ({added / noop:.1%}), "
          f"{added - collected:,.0f} ({(added - collected) / noop:.1%}) without garbage collection")
    for name, instructions in groups.most_common():
        print(f"  {instructions / count:>10,.0f}  {name}")
    print(f"  {collected:>10,.0f}  garbage collection (an average: it runs in some turns only)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--child", choices=("none", "noop", "journal"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        asyncio.run(turns(options.child, options.turns))
    else:
        main(options.turns)
