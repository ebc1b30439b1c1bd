"""Run the long part of the reliability suite (issue 7) with one command.

    .venv/bin/python bench/reliability_long.py          # fast + slow: 20 kills per backend, 300 examples
    .venv/bin/python bench/reliability_long.py --quick  # only the fast part (what CI runs)

It runs ``pytest tests/reliability -m reliability`` with ``RUN_JOURNAL_SLOW=1`` and prints the figures
the tests report (events written, kills survived, retries, events lost) from their ``-s`` output.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURE_PREFIXES = ("crash ", "connection loss:", "store down:", "contention ", "oversized:")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the fast part")
    args = parser.parse_args()
    env = dict(os.environ)
    if not args.quick:
        env["RUN_JOURNAL_SLOW"] = "1"
    command = [sys.executable, "-m", "pytest", "tests/reliability", "-m", "reliability", "-s", "-q",
               "-p", "no:cacheprovider"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    for line in result.stdout.splitlines():
        stripped = line.lstrip(".sFE")
        if stripped.startswith(FIGURE_PREFIXES):
            print(stripped)
    print("\n".join(result.stdout.splitlines()[-3:]))
    if result.returncode:
        print(result.stdout[-20000:], result.stderr[-5000:], sep="\n")
    return result.returncode


if __name__ == "__main__":
    raise SystemExit(main())
