"""Python bytecodes the journal executes per agent turn: a deterministic companion to bench_journal.

The VM this project is measured on changes speed by up to 2x from hour to hour, so small changes to
the hot path drown in timing noise. This script records the callbacks of one real turn of
``bench_journal``'s graph, replays them against fresh journals (each closed, as in the benchmark) and
counts the bytecodes executed on the loop's thread (``sys.settrace`` opcode events): the same count on
every run, on any machine with the same Python and dependencies.

    .venv/bin/python bench/journal_work.py [--store memory://] [--top 25]

It leaves out C work (JSON encoding, ``model_dump``) and the store driver's own thread (aiosqlite), so
it complements the timing benchmark, it does not replace it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage

from run_journal import RunJournal, open_store

sys.path.insert(0, str(Path(__file__).parent))
from bench_journal import build_graph  # the benchmark's own turn, imported from beside it

CALLBACKS = ("on_chain_start", "on_chain_end", "on_chat_model_start", "on_llm_end", "on_tool_start",
             "on_tool_end")


class Recorder(BaseCallbackHandler):
    """Keeps every callback of a run, with its arguments, in order."""

    run_inline = True

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattribute__(self, name: str) -> Any:
        if name in CALLBACKS:
            return lambda *args, **kwargs: self.calls.append((name, args, kwargs))
        return super().__getattribute__(name)


async def main(url: str, turns: int, top: int, record_requests: bool = True) -> None:
    recorder = Recorder()
    await build_graph().ainvoke({"messages": [HumanMessage("what is 1+2?")]}, {"callbacks": [recorder]})
    counts: collections.Counter[tuple[str, str]] = collections.Counter()

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            counts[(code.co_filename.rsplit("site-packages/", 1)[-1], code.co_name)] += 1
        return trace

    async with open_store(url) as store:
        async def turn(index: int) -> None:
            options = {} if record_requests else {"record_requests": False}  # older versions lack it
            journal = RunJournal(store, thread_id=f"work-{index}", **options)
            for name, args, kwargs in recorder.calls:
                getattr(journal, name)(*args, **kwargs)
            await journal.aclose()

        for index in range(50):  # warm-up: caches, lazy imports, the schema
            await turn(-index - 1)
        sys.settrace(trace)
        for index in range(turns):
            await turn(index)
        sys.settrace(None)
    counts.pop((__file__, "turn"), None)
    total = sum(counts.values()) / turns
    ours = sum(n for (path, _), n in counts.items() if "run_journal" in path) / turns
    variant = "" if record_requests else ", requests off"
    print(f"store {url}{variant}: {total:,.0f} bytecodes per turn ({ours:,.0f} in run_journal), "
          f"{len(recorder.calls)} callbacks replayed")
    for (path, name), n in counts.most_common(top):
        print(f"{n / turns:8.0f}  {path.rsplit('/', 2)[-2:][-1]}:{name}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="memory://", help="a store URL (sqlite:///... works too)")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-requests", action="store_true", help="journals with record_requests=False")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store_url = options.store.replace("{tmp}", tmp)
        asyncio.run(main(store_url, options.turns, options.top, not options.no_requests))
