"""Live export: each run handed to its exporters once its final row is stored.

The writer tells :meth:`RunExports.row_stored` of every row it stores; the first terminal one starts
each exporter in a task of its own on the writer's loop, off the agent's path. Closing the journal
waits for them (at most :data:`EXPORT_WAIT` seconds); an exporter that fails or hangs fails nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Final, Protocol

from run_journal.runs import TERMINAL_STATUSES, RunRow
from run_journal.stores.base import RunEventStore

EXPORT_WAIT: Final = 30.0
"""Seconds a close waits for the run's exporters to finish."""


class RunExporter(Protocol):
    """Something that sends a run elsewhere once its end is stored (``otel.OtlpExporter``)."""

    async def run_ended(self, store: RunEventStore, thread_id: str, run_id: str) -> None:
        """Called once per run, on the writer's loop, off the agent's path; must not raise."""


class RunExports:
    def __init__(self, exporters: Sequence[RunExporter]) -> None:
        self._exporters = tuple(exporters)
        self._tasks: set[asyncio.Task[None]] = set()
        self._started = False

    def row_stored(self, store: RunEventStore, row: RunRow) -> None:
        if self._started or row.status not in TERMINAL_STATUSES:
            return
        self._started = True
        loop = asyncio.get_running_loop()
        for exporter in self._exporters:
            task = loop.create_task(exporter.run_ended(store, row.thread_id, row.run_id))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def finish(self) -> None:
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=EXPORT_WAIT)
