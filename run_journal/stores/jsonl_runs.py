"""Run rows of the JSONL store (a mixin of ``JsonlRunEventStore``).

One file per run under its thread (``threads/<name>/runs/<name>.json``), replaced atomically under
the thread's lock, plus ``run_index/<name>``: the run's owning thread, claimed once and exclusively
across processes, so ``get_run`` needs no scan and no run can move to another thread.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from run_journal.envelope import dumps, utc_now, validate_id
from run_journal.runs import RunRow, may_replace
from run_journal.stores import jsonl_log as log
from run_journal.stores.base import check_statuses

T = TypeVar("T")


class JsonlRuns:
    """``put_run`` / ``get_run`` / ``list_runs`` over the store's directory."""

    root: Path
    durable: bool

    async def _run(self, work: Callable[..., T], *args: Any) -> T:
        raise NotImplementedError

    def _thread_dir(self, thread_id: str) -> Path:
        raise NotImplementedError

    def _run_file(self, thread_id: str, run_id: str) -> Path:
        raise NotImplementedError

    def _run_pointer(self, run_id: str) -> Path:
        raise NotImplementedError

    async def put_run(self, row: RunRow) -> RunRow:
        return await self._run(self._put_run, row)

    def _put_run(self, row: RunRow) -> RunRow:
        path = self._run_file(row.thread_id, row.run_id)
        pointer = self._run_pointer(row.run_id)
        with log.locked(path.parent.parent):
            owner = self._claim_run(pointer, row.thread_id)
            if owner != row.thread_id:
                raise ValueError(f"run {row.run_id!r} belongs to thread {owner!r}, not {row.thread_id!r}")
            stored = read_run(path)
            if stored is not None and not may_replace(stored[0].status, row.status):
                return stored[0]
            first_put_at = stored[1] if stored else utc_now().isoformat()
            path.parent.mkdir(exist_ok=True)
            data = dumps({"row": row.to_dict(), "first_put_at": first_put_at}).encode()
            log.write_atomic(path, data, durable=self.durable)
        return RunRow.from_dict(json.loads(data)["row"])

    def _claim_run(self, pointer: Path, thread_id: str) -> str:
        """The thread that owns the run: the pointer's, or ``thread_id`` if this call created it.

        The pointer is created whole and exclusively (``link`` of a written temp file fails if the
        name exists), so two processes putting one run_id into two threads can not both win: the
        check is atomic across processes, not only under one thread's lock.
        """
        while True:
            try:
                return pointer.read_text("utf-8")
            except FileNotFoundError:
                pass
            temp = pointer.with_name(f".{pointer.name}.{uuid.uuid4().hex}.tmp")
            temp.write_bytes(thread_id.encode())
            try:
                if self.durable:
                    with open(temp, "rb") as handle:
                        os.fsync(handle.fileno())
                os.link(temp, pointer)
                return thread_id
            except FileExistsError:
                continue  # another writer claimed it first: read its owner
            finally:
                temp.unlink(missing_ok=True)

    async def get_run(self, run_id: str) -> RunRow | None:
        return await self._run(self._get_run, run_id)

    def _get_run(self, run_id: str) -> RunRow | None:
        try:
            thread_id = self._run_pointer(run_id).read_text("utf-8")
        except FileNotFoundError:
            return None
        stored = read_run(self._run_file(thread_id, run_id))
        return stored[0] if stored else None

    async def list_runs(
        self, thread_id: str | None = None, *, statuses: Sequence[str] | None = None
    ) -> list[RunRow]:
        statuses = check_statuses(statuses)
        if thread_id is not None:
            validate_id("thread_id", thread_id)
        return await self._run(self._list_runs, thread_id, statuses)

    def _list_runs(self, thread_id: str | None, statuses: Sequence[str] | None) -> list[RunRow]:
        if thread_id is not None:
            folders = [self._thread_dir(thread_id) / "runs"]
        else:
            folders = [directory / "runs" for directory in (self.root / "threads").iterdir()]
        found: list[tuple[datetime, str, RunRow]] = []
        for folder in folders:
            for path in folder.glob("*.json") if folder.is_dir() else ():
                stored = read_run(path)
                if stored is not None and (statuses is None or stored[0].status in statuses):
                    row, first_put_at = stored
                    started = row.started_at or datetime.fromisoformat(first_put_at)
                    found.append((started, row.run_id, row))
        return [row for _, _, row in sorted(found, key=lambda item: item[:2])]


def read_run(path: Path) -> tuple[RunRow, str] | None:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    return RunRow.from_dict(data["row"]), str(data["first_put_at"])
