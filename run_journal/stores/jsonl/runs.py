"""Run rows of a JSONL store: one file per run, plus the run's owning thread.

A run's row is ``threads/<name>/runs/<name>.json`` (``{"row": ..., "first_put_at": ...}``), replaced
atomically under its thread's lock. ``run_index/<name>`` names the run's owning thread, claimed once
and exclusively across processes, so ``get_run`` needs no scan and no run can move to another
thread. Blocking: ``JsonlRunEventStore`` calls this from worker threads.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
import warnings
from datetime import datetime
from pathlib import Path

from run_journal.envelope import dumps, utc_now
from run_journal.runs import RunRow, may_replace
from run_journal.stores.base import (
    CorruptStoreError,
    RunQuery,
    SearchQuery,
    StorageProblem,
    after_error,
    stamp,
)
from run_journal.stores.jsonl.files import CorruptRecordWarning, locked, write_atomic
from run_journal.stores.jsonl.layout import Layout


class RunFiles:
    """``put_run`` / ``get_run`` / ``list_runs`` and the run side of deletes, over a ``Layout``."""

    def __init__(self, layout: Layout, *, durable: bool) -> None:
        self._layout = layout
        self._durable = durable

    def put(self, row: RunRow) -> RunRow:
        path = self._layout.run_file(row.thread_id, row.run_id)
        pointer = self._layout.run_pointer(row.run_id)
        with locked(path.parent.parent):
            owner = self._claim(pointer, row.thread_id)
            if owner != row.thread_id:
                raise ValueError(f"run {row.run_id!r} belongs to thread {owner!r}, not {row.thread_id!r}")
            try:
                stored = read_run(path)
            except CorruptStoreError as error:  # the row being written replaces the damaged one
                warnings.warn(f"{error}; replaced by the row being written", CorruptRecordWarning,
                              stacklevel=2)
                stored = None
            if stored is not None and not may_replace(stored[0].status, row.status):
                return stored[0]
            first_put_at = stored[1] if stored else utc_now().isoformat()
            path.parent.mkdir(exist_ok=True)
            data = dumps({"row": row.to_dict(), "first_put_at": first_put_at}).encode()
            write_atomic(path, data, durable=self._durable)
        return RunRow.from_dict(json.loads(data)["row"])

    def _claim(self, pointer: Path, thread_id: str) -> str:
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
                if self._durable:
                    with open(temp, "rb") as handle:
                        os.fsync(handle.fileno())
                os.link(temp, pointer)
                return thread_id
            except FileExistsError:
                continue  # another writer claimed it first: read its owner
            finally:
                temp.unlink(missing_ok=True)

    def get(self, run_id: str) -> RunRow | None:
        try:
            thread_id = self._layout.run_pointer(run_id).read_text("utf-8")
        except FileNotFoundError:
            return None
        stored = read_run(self._layout.run_file(thread_id, run_id))
        return stored[0] if stored else None

    def placed(self, thread_id: str | None) -> list[tuple[datetime, str, RunRow]]:
        """Every row of a thread (or of all), each with its place in the order (``started_at``, else
        its first ``put_run``), ascending: one file read per run."""
        found: list[tuple[datetime, str, RunRow]] = []
        for folder in self._layout.run_folders(thread_id):
            for path in folder.glob("*.json") if folder.is_dir() else ():
                try:
                    stored = read_run(path)
                except CorruptStoreError as error:  # only that run is affected
                    warnings.warn(f"{error}; left out", CorruptRecordWarning, stacklevel=2)
                    continue
                if stored is not None:
                    row, first_put_at = stored
                    started = row.started_at or datetime.fromisoformat(first_put_at)
                    found.append((started, row.run_id, row))
        found.sort(key=lambda item: item[:2])
        return found

    def select(self, query: RunQuery) -> list[RunRow]:
        """Every row of the listing read and sorted (one file per run): paged after the cursor."""
        found = self.placed(query.thread_id)
        if query.newest_first:
            found.reverse()
        if query.after is not None:
            at = next((place for place, item in enumerate(found) if item[1] == query.after), None)
            if at is None:
                raise after_error(query.after)
            found = found[at + 1:]
        rows = [row for _, _, row in found if query.admits(row.thread_id, row.status, row.user_id)]
        return rows[: query.limit]

    def search(self, query: SearchQuery) -> list[tuple[str, RunRow]]:
        """A scan: every row of the store (or of the query's thread) read and filtered, newest first."""
        matches: list[tuple[str, RunRow]] = []
        for started, _, row in reversed(self.placed(query.thread_id)):
            place = stamp(started)
            if query.admits(row, place):
                matches.append((place, row))
                if len(matches) == query.limit:
                    break
        return matches

    def drop_thread(self, thread_id: str) -> None:
        """Remove every run of the thread (the caller holds the thread's lock)."""
        folder = self._layout.thread_dir(thread_id) / "runs"
        for path in list(folder.glob("*.json")) if folder.is_dir() else ():
            with contextlib.suppress(CorruptStoreError):  # a damaged row goes too; its pointer stays
                stored = read_run(path)
                if stored is not None:
                    self._layout.run_pointer(stored[0].run_id).unlink(missing_ok=True)
            path.unlink()

    def drop_run(self, thread_id: str, run_id: str) -> None:
        """Remove the run if it belongs to the thread (the caller holds the thread's lock)."""
        self._layout.run_file(thread_id, run_id).unlink(missing_ok=True)
        pointer = self._layout.run_pointer(run_id)
        with contextlib.suppress(FileNotFoundError):
            if pointer.read_text("utf-8") == thread_id:
                pointer.unlink(missing_ok=True)


def read_run(path: Path) -> tuple[RunRow, str] | None:
    """A stored run row and its first ``put_run`` time (ISO text), or None; ``CorruptStoreError``
    naming the file when it is damaged."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        stored = json.loads(data)
        return RunRow.from_dict(stored["row"]), str(stored["first_put_at"])
    except (ValueError, KeyError, TypeError) as error:
        raise CorruptStoreError(f"the run row file {path} is damaged ({type(error).__name__}: {error})") \
            from error


def check_runs(layout: Layout, folders: list[Path]) -> list[StorageProblem]:
    """Every run row file in ``folders`` that cannot be read (``verify``)."""
    problems = []
    for folder in folders:
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
            try:
                read_run(path)
            except CorruptStoreError as error:
                cause = error.__cause__
                problems.append(StorageProblem(path.relative_to(layout.root).as_posix(),
                                               f"damaged run row ({type(cause).__name__}: {cause})"))
    return problems
