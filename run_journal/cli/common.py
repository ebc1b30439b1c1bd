"""Shared pieces of the ``run-journal`` commands: errors, output, paged reads."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Final, TextIO

from run_journal.envelope import validate_id
from run_journal.stores.base import MAX_PAGE, RunEventStore

PAGE: Final = 1000


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


Command = Callable[[RunEventStore, argparse.Namespace, TextIO], Coroutine[Any, Any, int]]


# -- helpers -------------------------------------------------------------------------------------
def emit(out: TextIO, line: str = "") -> None:
    out.write(line + "\n")


def emit_json(out: TextIO, value: Any) -> None:
    out.write(json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n")


async def all_threads(store: RunEventStore) -> list[str]:
    """Every thread id, ascending, paged with ``list_threads(after=...)``."""
    threads: list[str] = []
    while True:
        page = await store.list_threads(limit=MAX_PAGE, after=threads[-1] if threads else None)
        threads.extend(page)
        if len(page) < MAX_PAGE:
            return threads


async def require_thread(store: RunEventStore, thread_id: str) -> None:
    """A read of an unknown thread is a mistake to report, not an empty answer to print."""
    validate_id("thread_id", thread_id)  # the same refusal on every backend, before any query
    if await store.last_seq(thread_id) == 0 and not await store.list_runs(thread_id):
        raise CliError(f"thread {thread_id!r} not found")



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


