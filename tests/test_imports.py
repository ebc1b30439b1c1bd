"""Every module of the package imports on its own, in a fresh interpreter: no import cycle can hide
behind an import order that happens to work, and no module needs another to be imported first."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "run_journal"


def modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] != "__main__":  # a program, run by ``python -m``, not imported
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def import_alone(name: str) -> tuple[str, int, str]:
    done = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True,
                          check=False, timeout=120)
    return name, done.returncode, done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""


def test_every_module_imports_alone_in_a_fresh_interpreter() -> None:
    names = modules()
    assert len(names) > 50
    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = [(name, error) for name, code, error in pool.map(import_alone, names) if code != 0]
    assert failures == []
