"""``JsonlRunEventStore``: a directory of append-only JSON Lines files, safe for several processes.

Layout under the root (``setup()`` creates it)::

    store.json                          contract version the directory was written with
    threads/<name>/                     one thread: see ``jsonl_log`` (lock, meta, events, index)
    threads/<name>/runs/<name>.json     run rows of that thread, each replaced atomically
    run_index/<name>                    run id -> thread id, so ``get_run`` needs no scan

``<name>`` is a readable, filesystem-safe prefix of the id plus 16 hex digits of its sha256, so ids
that differ only by case or by characters a filesystem dislikes never share a file, and no id can
name a path outside the root (checked again on the resolved path). Every file operation runs in a
worker thread (``asyncio.to_thread``): the event loop that hosts the journal never blocks on disk.

Seq numbers come from the committed count on disk, read under the thread's ``flock``; the only
in-process state is a cache of facts derived from committed lines (event ids, first event of a type
per run, message counts), revalidated against the file under the lock before each use.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from run_journal.catalog import Category
from run_journal.envelope import NewEvent, RunEvent, validate_id
from run_journal.stores import jsonl_log as log
from run_journal.stores.base import (
    CONTRACT_MAJOR,
    CONTRACT_VERSION,
    IncompatibleStoreError,
    RunEventStore,
    check_after_thread,
    check_cursor,
    check_limit,
    check_user_id,
    expand_event_types,
    metadata_task_id,
)
from run_journal.stores.jsonl_cache import Facts, ThreadFacts, event_line
from run_journal.stores.jsonl_runs import JsonlRuns, read_run

T = TypeVar("T")
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")
_MESSAGE: Final = Category.MESSAGE.value


def file_name(identifier: str) -> str:
    """A file name for an id: readable prefix + hash, unique per id, never path syntax."""
    digest = hashlib.sha256(identifier.encode("utf-8")).hexdigest()[:16]
    return f"{_UNSAFE.sub('_', identifier)[:48]}-{digest}"


class JsonlRunEventStore(JsonlRuns, RunEventStore):
    """Events as JSON Lines under ``path``; several processes on one machine may share it.

    ``durable=True`` fsyncs each commit (survives power loss, costs a disk flush per write); the
    default survives a killed process, which is what the journal's retries need.
    """

    def __init__(self, path: str | os.PathLike[str], *, durable: bool = False) -> None:
        self.root = Path(path)
        self.durable = durable
        self._facts = ThreadFacts()
        self._ready = False
        self._ready_lock = threading.Lock()

    async def setup(self) -> None:
        await asyncio.to_thread(self._setup)

    def _setup(self) -> None:
        with self._ready_lock:
            if self._ready:
                return
            (self.root / "threads").mkdir(parents=True, exist_ok=True)
            (self.root / "run_index").mkdir(exist_ok=True)
            marker = self.root / "store.json"
            if not marker.exists():
                data = json.dumps({"contract_version": CONTRACT_VERSION, "format": "run-journal-jsonl"})
                log.write_atomic(marker, data.encode(), durable=self.durable)
            stored = str(json.loads(marker.read_bytes()).get("contract_version", "?"))
            if stored.split(".", 1)[0] != str(CONTRACT_MAJOR):
                raise IncompatibleStoreError(
                    f"{self.root} was written with contract {stored}; this library reads "
                    f"{CONTRACT_MAJOR}.x (copy it with a matching run-journal version)"
                )
            self._ready = True

    async def _run(self, work: Callable[..., T], *args: Any) -> T:
        """Run blocking file work off the event loop, after the one-time setup."""
        self._check_open()

        def job() -> T:
            self._setup()
            return work(*args)

        return await asyncio.to_thread(job)

    # -- paths -----------------------------------------------------------------------------------
    def _inside(self, path: Path) -> Path:
        root = self.root.resolve()
        if not path.resolve().is_relative_to(root):
            raise ValueError(f"{path} resolves outside the store directory {root}")
        return path

    def _thread_dir(self, thread_id: str) -> Path:
        validate_id("thread_id", thread_id)
        return self._inside(self.root / "threads" / file_name(thread_id))

    def _run_file(self, thread_id: str, run_id: str) -> Path:
        validate_id("run_id", run_id)
        return self._inside(self._thread_dir(thread_id) / "runs" / f"{file_name(run_id)}.json")

    def _run_pointer(self, run_id: str) -> Path:
        validate_id("run_id", run_id)
        return self._inside(self.root / "run_index" / file_name(run_id))

    # -- writes ----------------------------------------------------------------------------------
    async def _append(self, batch: Sequence[NewEvent]) -> list[RunEvent]:
        return await self._run(self._append_sync, batch)

    def _append_sync(self, batch: Sequence[NewEvent]) -> list[RunEvent]:
        by_thread: dict[str, list[int]] = {}
        for position, event in enumerate(batch):
            by_thread.setdefault(event.thread_id, []).append(position)
        results: list[RunEvent | None] = [None] * len(batch)
        for thread_id, positions in by_thread.items():
            stored = self._write_thread(thread_id, [batch[i] for i in positions], exclusive=None)
            for position, (written, _) in zip(positions, stored, strict=True):
                results[position] = written
        return [event for event in results if event is not None]

    async def _put_if_absent(self, event: NewEvent, types: tuple[str, ...]) -> tuple[RunEvent, bool]:
        return await self._run(lambda: self._write_thread(event.thread_id, [event], exclusive=types)[0])

    def _write_thread(
        self, thread_id: str, events: list[NewEvent], *, exclusive: tuple[str, ...] | None
    ) -> list[tuple[RunEvent, bool]]:
        """Under the thread lock: dedupe, assign seqs from the committed count, append, commit.

        ``exclusive`` (``put_if_absent``): an event is not written when its run already has an
        event of one of those types; the first such event is returned instead.
        """
        directory = self._thread_dir(thread_id)
        with log.locked(directory):
            view = log.open_for_write(directory, thread_id, durable=self.durable)
            try:
                facts = self._facts.refresh(directory, view)
                results: list[tuple[RunEvent, bool]] = []
                fresh: dict[str, tuple[NewEvent, int]] = {}
                lines: list[bytes] = []
                for event in events:
                    seq = facts.event_ids.get(event.event_id)
                    if exclusive is not None and seq is None:
                        seq = min(
                            (found for name in exclusive
                             if (found := facts.first_of_type.get((event.run_id, name))) is not None),
                            default=None,
                        )
                    if seq is not None:
                        results.append((_existing(view, seq), False))
                    elif event.event_id in fresh:  # repeated in this batch: a copy of the first
                        earlier = fresh[event.event_id]
                        results.append((RunEvent.stored(earlier[0], earlier[1], copy=True), False))
                    else:
                        written = RunEvent.stored(event, view.count + len(lines) + 1)
                        fresh[event.event_id] = (event, written.seq)
                        lines.append(event_line(event, written.seq))
                        results.append((written, True))
                if lines:
                    log.append(view, lines, durable=self.durable)
                return results
            finally:
                view.close()

    # -- reads -----------------------------------------------------------------------------------
    def _page(
        self,
        thread_id: str,
        keep: log.Predicate,
        limit: int,
        before_seq: int | None,
        after_seq: int | None,
    ) -> list[RunEvent]:
        with log.snapshot(self._thread_dir(thread_id)) as view:
            if view is None:
                return []
            if after_seq is not None:
                records = view.forward(after_seq, limit, keep, stop_before=before_seq)
            else:
                records = view.backward(before_seq, limit, keep)
        return [RunEvent.from_dict(record) for record in records]

    async def list_messages(
        self,
        thread_id: str,
        *,
        limit: int = 50,
        before_seq: int | None = None,
        after_seq: int | None = None,
        user_id: str | None = None,
    ) -> list[RunEvent]:
        keep = _matcher(category=_MESSAGE, user_id=user_id)
        return await self._run(
            self._page, thread_id, keep, check_limit(limit),
            check_cursor("before_seq", before_seq), check_cursor("after_seq", after_seq),
        )

    async def list_messages_by_run(
        self,
        thread_id: str,
        run_id: str,
        *,
        limit: int = 50,
        before_seq: int | None = None,
        after_seq: int | None = None,
        user_id: str | None = None,
    ) -> list[RunEvent]:
        keep = _matcher(category=_MESSAGE, run_id=validate_id("run_id", run_id), user_id=user_id)
        return await self._run(
            self._page, thread_id, keep, check_limit(limit),
            check_cursor("before_seq", before_seq), check_cursor("after_seq", after_seq),
        )

    async def list_events(
        self,
        thread_id: str,
        run_id: str | None = None,
        *,
        event_types: Sequence[str] | None = None,
        task_id: str | None = None,
        limit: int = 500,
        after_seq: int | None = None,
        user_id: str | None = None,
    ) -> list[RunEvent]:
        if run_id is not None:
            validate_id("run_id", run_id)
        keep = _matcher(run_id=run_id, names=expand_event_types(event_types), task_id=task_id,
                        user_id=user_id)
        cursor = check_cursor("after_seq", after_seq) or 0
        return await self._run(self._page, thread_id, keep, check_limit(limit), None, cursor)

    async def count_messages(self, thread_id: str, *, user_id: str | None = None) -> int:
        check_user_id(user_id)
        facts = await self._run(self._current_facts, thread_id)
        return facts.messages if user_id is None else facts.messages_by_user[user_id]

    def _current_facts(self, thread_id: str) -> Facts:
        directory = self._thread_dir(thread_id)
        with log.snapshot(directory) as view:
            return self._facts.refresh(directory, view)

    async def list_threads(
        self, *, user_id: str | None = None, limit: int = 1000, after: str | None = None
    ) -> list[str]:
        check_limit(limit)
        check_user_id(user_id)
        check_after_thread(after)
        return await self._run(self._list_threads, user_id, limit, after)

    def _list_threads(self, user_id: str | None, limit: int, after: str | None) -> list[str]:
        names = []
        for directory in (self.root / "threads").iterdir():
            meta = log.read_meta(directory)
            if meta is None or (after is not None and meta["thread_id"] <= after):
                continue
            facts = self._current_facts(meta["thread_id"])
            if facts.live and (user_id is None or facts.users[user_id] > 0):
                names.append(meta["thread_id"])
        return sorted(names)[:limit]

    async def last_seq(self, thread_id: str) -> int:
        return await self._run(self._last_seq, thread_id)

    def _last_seq(self, thread_id: str) -> int:
        with log.snapshot(self._thread_dir(thread_id)) as view:
            return view.count if view else 0

    # -- deletes ---------------------------------------------------------------------------------
    async def delete_by_thread(self, thread_id: str) -> int:
        return await self._run(self._delete_thread, thread_id)

    def _delete_thread(self, thread_id: str) -> int:
        directory = self._thread_dir(thread_id)
        with log.locked(directory):
            count = 0
            if log.read_meta(directory) is not None:
                # a new generation with every seq kept as an empty span: seq is never reused
                view = log.open_for_write(directory, thread_id, durable=self.durable)
                try:
                    count = log.clear(view, thread_id, durable=self.durable)
                finally:
                    view.close()
            for path in list((directory / "runs").glob("*.json")) if (directory / "runs").is_dir() else ():
                stored = read_run(path)
                if stored is not None:
                    self._run_pointer(stored[0].run_id).unlink(missing_ok=True)
                path.unlink()
        return count

    async def delete_by_run(self, thread_id: str, run_id: str) -> int:
        validate_id("run_id", run_id)
        return await self._run(self._delete_run, thread_id, run_id)

    def _delete_run(self, thread_id: str, run_id: str) -> int:
        directory = self._thread_dir(thread_id)
        with log.locked(directory):
            dropped = 0
            if log.read_meta(directory) is not None:
                view = log.open_for_write(directory, thread_id, durable=self.durable)
                try:
                    drop = _matcher(run_id=run_id)
                    dropped = log.rewrite(view, thread_id, drop, durable=self.durable)
                finally:
                    view.close()
            path = self._run_file(thread_id, run_id)
            if path.exists():
                path.unlink()
            pointer = self._run_pointer(run_id)
            with contextlib.suppress(FileNotFoundError):
                if pointer.read_text("utf-8") == thread_id:
                    pointer.unlink(missing_ok=True)
        return dropped


def _existing(view: log.Snapshot, seq: int) -> RunEvent:
    record = view.record_at(seq)
    if record is None:
        raise log_error(view, seq)
    return RunEvent.from_dict(record)


def log_error(view: log.Snapshot, seq: int) -> RuntimeError:
    return RuntimeError(f"{view.directory}: seq {seq} is indexed but unreadable")


def _matcher(
    *,
    category: str | None = None,
    run_id: str | None = None,
    names: tuple[str, ...] | None = None,
    task_id: str | None = None,
    user_id: str | None = None,
) -> log.Predicate:
    """A predicate over decoded lines for the filters a read asked for."""
    if user_id is not None:
        validate_id("user_id", user_id)

    def keep(record: dict[str, Any]) -> bool:
        return (
            (category is None or record["category"] == category)
            and (run_id is None or record["run_id"] == run_id)
            and (names is None or record["event_type"] in names)
            and (task_id is None or metadata_task_id(record["metadata"]) == task_id)
            and (user_id is None or record.get("user_id") == user_id)
        )

    return keep
