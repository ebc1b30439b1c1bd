"""The payload encoder and decoder against an older revision of them and plain ``json``, in one process.

``run_journal.normalization`` (``encode``, ``dumps``, ``loads``) is timed interleaved with the same
module as it was at ``--baseline`` (read with ``git show``; default: the last revision that drove the
C accelerator's private entry points) and with plain ``json.dumps`` / ``json.loads`` on the same
values, so machine noise hits them alike. Payloads: a small metadata object, a chat message as
``model_dump`` gives it, a tool call's arguments with a datetime and a UUID (the non-JSON leaves go
through ``normalize``), a 20 kB tool result, and two values with more containers than ``MAX_DEPTH``
(so ``encode`` checks their nesting on its text): a 20-message state and 50 documents. Prints the
median time per call and the ratios current / baseline and current / plain ``json``.

    .venv/bin/python bench/bench_encode.py [--rounds 31] [--calls 2000] [--baseline REV]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from langchain_core.messages import AIMessage

from run_journal import normalization

ROOT = Path(__file__).resolve().parent.parent
BASELINE = "69a61df"


def load_revision(revision: str) -> ModuleType:
    """``run_journal/normalization.py`` as it was at ``revision``, as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{revision}:run_journal/normalization.py"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    spec = importlib.util.spec_from_loader(f"normalization_{revision}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and typing resolve names through sys.modules
    exec(compile(source, f"{revision}:run_journal/normalization.py", "exec"), module.__dict__)
    return module


def payloads() -> dict[str, Any]:
    message = AIMessage(
        "the answer is 3",
        tool_calls=[{"name": "add", "args": {"a": 1, "b": 2}, "id": "call_1"}],
        response_metadata={"model_name": "gpt-4o", "finish_reason": "tool_calls"},
        usage_metadata={"input_tokens": 120, "output_tokens": 14, "total_tokens": 134},
    )
    return {
        "metadata": {"caller": "lead_agent", "model": "gpt-4o", "node": "agent", "step": 3},
        "message": message.model_dump(),
        "tool args": {"path": "/tmp/report.md", "at": datetime(2024, 5, 1, 12, 30, tzinfo=UTC),
                      "request": uuid.UUID(int=7), "lines": [1, 2, 3]},
        "tool result": {"content": "lorem ipsum dolor sit amet, ü " * 700, "status": "success"},
        # more than MAX_DEPTH brackets: the one pass also checks the nesting on the text
        "20-message state": {"messages": [dict(message.model_dump(), content="a line\n" * 40)] * 20},
        "50 docs of 2 kB": [{"id": n, "text": "lorem ipsum " * 170, "tags": ["a", "b"]} for n in range(50)],
    }


def _dumps_with_str(value: Any) -> str:
    return json.dumps(value, default=str)


def timed(call: Callable[[Any], Any], value: Any, calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        call(value)
    return (time.perf_counter_ns() - start) / calls / 1000  # microseconds per call


def main(rounds: int, calls: int, baseline: str) -> None:
    old = load_revision(baseline)
    print(f"python {sys.version.split()[0]}; baseline {baseline}; {rounds} rounds x up to {calls} calls; "
          "median microseconds per call")
    print(f"{'operation':<28}{'current':>10}{'baseline':>10}{'json':>10}{'cur/base':>10}{'cur/json':>10}")
    for name, value in payloads().items():
        normalized = normalization.normalize(value)
        text = normalization.dumps(normalized)
        assert old.encode(value) == normalization.encode(value) == text
        assert old.loads(text) == normalization.loads(text) == json.loads(text)
        plain: Callable[[Any], str] = json.dumps
        if normalized != value:  # non-JSON leaves: what plain json needs to write them at all
            plain = _dumps_with_str
        cases = [
            ("encode", normalization.encode, old.encode, plain, value),
            ("dumps", normalization.dumps, old.dumps, json.dumps, normalized),
            ("loads", normalization.loads, old.loads, json.loads, text),
        ]
        repeat = max(1, calls * 200 // max(200, len(text)))  # fewer calls for big values
        for operation, current, before, reference, argument in cases:
            samples: dict[str, list[float]] = {"current": [], "baseline": [], "json": []}
            variants = [("current", current), ("baseline", before), ("json", reference)]
            for round_ in range(rounds):  # interleaved: each round times the three back to back,
                for key, call in variants[:: 1 if round_ % 2 else -1]:  # in turn first and last
                    samples[key].append(timed(call, argument, repeat))
            cur, base, ref = (statistics.median(samples[key]) for key in ("current", "baseline", "json"))
            print(f"{operation + ' ' + name:<28}{cur:>10.2f}{base:>10.2f}{ref:>10.2f}"
                  f"{cur / base:>10.2f}{cur / ref:>10.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--baseline", default=BASELINE, help="git revision to compare with")
    arguments = parser.parse_args()
    main(arguments.rounds, arguments.calls, arguments.baseline)
