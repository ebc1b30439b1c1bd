"""Replay a recorded run against your graph in a test, and assert it went the same way.

::

    async def test_yesterdays_run_still_goes_the_same_way():
        async with open_store("sqlite:///recorded.db") as store:
            await assert_replays(store, "support-42", run_id, lambda model: build_agent(model))

``assert_replays`` raises ``AssertionError`` with a short report (the divergence: which model call,
whose, which message and field differs; else the first step that differs) unless the replayed run has
the recorded trajectory and usage; it returns the ``ReplayResult`` either way it passes. Options are
``replay_run``'s (``match``, ``strict``, ``inputs``, ``whole_thread``, ``stream``, ``pricing``,
``ignore``...).
"""

from __future__ import annotations

from typing import Any

from run_journal.replay import ReplayResult, replay_run
from run_journal.replay.running import GraphFactory
from run_journal.stores.base import RunEventStore


async def assert_replays(store: RunEventStore, thread_id: str, run_id: str, build_graph: GraphFactory,
                         **options: Any) -> ReplayResult:
    """Replay the run against ``build_graph(model)``; ``AssertionError`` (with the report) unless it
    went the same way: same trajectory, same usage, every model call answered, every one asked for."""
    result = await replay_run(store, thread_id, run_id, build_graph, **options)
    if not result.same:
        raise AssertionError(result.report())
    return result


__all__ = ["assert_replays", "replay_run"]
