"""Start-up time: ``import run_journal`` and the command line, each in a fresh interpreter.

Every case runs as its own subprocess, ``--runs`` times, interleaved round by round with the baseline
``python -c pass`` so that machine noise hits them alike. Prints the median (and the fastest) wall
time of each case in milliseconds and its ratio to the baseline's median, with the machine it ran
on. A case whose command fails (for instance ``--version`` on a version of the command line without
it) is reported as n/a.

    .venv/bin/python bench/bench_startup.py [--runs 15]

``RUN_JOURNAL_URL`` is removed from the children's environment: with it set, importing the package
also loads the journal (see docs/activation.md), which is not what a plain import costs.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple


class Case(NamedTuple):
    name: str
    command: list[str]
    target_s: float | None


def cli_command() -> list[str]:
    """The ``run-journal`` script of this interpreter's environment, else the module's ``main``."""
    for name in ("run-journal", "run-journal.exe"):
        script = Path(sys.executable).parent / name
        if script.exists():
            return [str(script)]
    found = shutil.which("run-journal")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from run_journal.cli import main; sys.exit(main())"]


def cases() -> list[Case]:
    cli = cli_command()
    return [
        Case("python -c pass", [sys.executable, "-c", "pass"], None),
        Case("import run_journal", [sys.executable, "-c", "import run_journal"], 0.4),
        Case("run-journal --help", [*cli, "--help"], 0.3),
        Case("run-journal --version", [*cli, "--version"], None),
        # For reference: what a program that journals pays once (LangChain and the journal itself).
        Case("from run_journal import RunJournal",
             [sys.executable, "-c", "from run_journal import RunJournal"], None),
    ]


def time_once(command: list[str], env: dict[str, str]) -> float | None:
    """Wall time of one run in seconds, or None when the command fails."""
    start = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    elapsed = time.perf_counter() - start
    return elapsed if done.returncode == 0 else None


def processor() -> str:
    try:  # Linux names the CPU model here; platform.processor() is often empty there
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown processor"


def machine() -> str:
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPU(s)"
            f" ({processor()}), Python {platform.python_version()}"
            f" ({platform.python_implementation()}), load average "
            + (" ".join(f"{value:.1f}" for value in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh processes per case (default 15)")
    args = parser.parse_args()
    env = {key: value for key, value in os.environ.items() if key != "RUN_JOURNAL_URL"}
    todo = cases()
    print(f"machine: {machine()}")
    print(f"interpreter: {sys.executable}")
    print(f"command line: {' '.join(todo[2].command[:-1])}")
    for case in todo:  # one untimed run each: the file system cache and the .pyc files are warm
        time_once(case.command, env)
    times: dict[str, list[float]] = {case.name: [] for case in todo}
    failed: set[str] = set()
    for _ in range(args.runs):
        for case in todo:
            if case.name in failed:
                continue
            elapsed = time_once(case.command, env)
            if elapsed is None:
                failed.add(case.name)
            else:
                times[case.name].append(elapsed)
    baseline = statistics.median(times[todo[0].name])
    print(f"\nmedian of {args.runs} fresh processes per case\n")
    print(f"{'case':<36} {'median':>9} {'fastest':>9} {'ratio':>7}  target")
    worst = 0
    for case in todo:
        if case.name in failed or not times[case.name]:
            print(f"{case.name:<36} {'n/a':>9} {'n/a':>9} {'n/a':>7}  (the command failed)")
            continue
        median = statistics.median(times[case.name])
        verdict = ""
        if case.target_s is not None:
            ok = median < case.target_s
            worst |= not ok
            verdict = f"< {case.target_s * 1000:.0f} ms: {'ok' if ok else 'MISSED'}"
        print(f"{case.name:<36} {median * 1000:>6.0f} ms {min(times[case.name]) * 1000:>6.0f} ms"
              f" {median / baseline:>6.1f}x  {verdict}")
    return worst


if __name__ == "__main__":
    sys.exit(main())
