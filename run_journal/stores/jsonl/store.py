"""``JsonlRunEventStore``: a directory of append-only JSON Lines files, safe for several processes.

Where things are: ``layout``. One thread's files and how a batch is committed: ``log`` (on
``files``' whole writes and locks). Damaged files, found and contained: ``damage``. Run rows:
``runs``; which run.start holds each run id: ``starts``. Every file operation runs in a worker thread
(``asyncio.to_thread``): the event loop that hosts the journal never blocks on disk.

Seq numbers come from the committed count on disk, read under the thread's ``flock``; the only
in-process state is a cache of facts derived from committed lines (``facts``: event ids, first event
of a type per run, message counts), revalidated against the file under the lock before each use.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, TypeVar

from run_journal.bodies import Body
from run_journal.envelope import NewEvent, RunEvent
from run_journal.runs import RunRow
from run_journal.stores.base import (
    RUN_START,
    CorruptStoreError,
    EventQuery,
    RecentThreadQuery,
    RunEventStore,
    RunQuery,
    SearchQuery,
    StartQuery,
    StorageProblem,
    ThreadActivity,
    ThreadQuery,
    metadata_task_id,
    stamp,
)
from run_journal.stores.jsonl import bodies as body_files
from run_journal.stores.jsonl import damage, log
from run_journal.stores.jsonl.activity import Activity, newest_of_batch
from run_journal.stores.jsonl.facts import Facts, ThreadFacts
from run_journal.stores.jsonl.layout import Layout
from run_journal.stores.jsonl.runs import RunFiles, check_runs
from run_journal.stores.jsonl.starts import RunStarts
from run_journal.stores.urls import file_path_of

T = TypeVar("T")


class JsonlRunEventStore(RunEventStore):
    """Events as JSON Lines under ``path``; several processes on one machine may share it.

    ``durable=True`` fsyncs each commit (survives power loss, costs a disk flush per write); the
    default survives a killed process, which is what the journal's retries need.
    """

    def __init__(self, path: str | os.PathLike[str], *, durable: bool = False) -> None:
        self.root = Path(path)
        self.durable = durable
        self._layout = Layout(self.root)
        self._runs = RunFiles(self._layout, durable=durable)
        self._facts = ThreadFacts()
        self._starts = RunStarts(self._layout, self._facts, durable=durable)
        self._activity = Activity(self._layout)
        self._checked: set[tuple[Path, str, tuple[int, int]]] = set()
        """Index files a reader found damaged lines in and asked to repair (once each)."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> JsonlRunEventStore:
        """``jsonl:///relative/dir`` or ``jsonl:////absolute/dir``; options: ``durable``."""
        return cls(file_path_of(url), **options)

    @property
    def location(self) -> Path:
        return self.root

    async def _setup(self) -> None:
        await self._run(self._setup_sync)

    def _setup_sync(self) -> None:
        self._layout.create(durable=self.durable)
        self._activity.build()

    @staticmethod
    async def _run(work: Callable[..., T], *args: Any) -> T:
        """Blocking file work, off the event loop."""
        return await asyncio.to_thread(work, *args)

    # -- writes ----------------------------------------------------------------------------------
    async def _append(self, batch: Sequence[NewEvent], bodies: Sequence[Body] = ()) -> list[RunEvent]:
        return await self._run(self._append_sync, batch, bodies)

    def _append_sync(self, batch: Sequence[NewEvent], bodies: Sequence[Body] = ()) -> list[RunEvent]:
        """Each thread's bodies are written in its step, before its events' line; bodies of threads
        without events here, after every thread's events (none of them references those)."""
        by_thread: dict[str, list[int]] = {}
        for position, event in enumerate(batch):
            by_thread.setdefault(event.thread_id, []).append(position)
        bodies_of: dict[str, list[Body]] = {}
        for body in bodies:
            bodies_of.setdefault(body.thread_id, []).append(body)
        if len(by_thread) > 1:
            self._starts.check(batch)  # one thread's refusal must not come after another's write
        results: list[RunEvent] = [None] * len(batch)  # type: ignore[list-item]  # every slot is filled below
        for thread_id, positions in by_thread.items():
            stored = self._write_thread(thread_id, [batch[i] for i in positions], exclusive=None,
                                        bodies=bodies_of.pop(thread_id, ()))
            for position, (written, _) in zip(positions, stored, strict=True):
                results[position] = written
        for held in bodies_of.values():
            self._put_bodies_sync(held)
        return results

    async def _put_if_absent(self, event: NewEvent, types: tuple[str, ...]) -> tuple[RunEvent, bool]:
        return await self._run(lambda: self._write_thread(event.thread_id, [event], exclusive=types)[0])

    def _write_thread(
        self, thread_id: str, events: list[NewEvent], *, exclusive: tuple[str, ...] | None,
        bodies: Sequence[Body] = (),
    ) -> list[tuple[RunEvent, bool]]:
        """Under the thread lock: dedupe, assign seqs from the committed count, take the run ids,
        write the bodies, append, commit.

        ``exclusive`` (``put_if_absent``): an event is not written when its run already has an
        event of one of those types; the first such event is returned instead.
        """
        directory = self._layout.thread_dir(thread_id)
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
                        lines.append(log.event_line(event, written.seq))
                        results.append((written, True))
                for event, _ in fresh.values():  # before anything is appended
                    if event.event_type == RUN_START:
                        self._starts.claim(event, facts)
                body_files.keep(directory, bodies, durable=self.durable)
                if lines:
                    log.append(view, lines, durable=self.durable)
                    moments = ((event.user_id, stamp(event.created_at)) for event, _ in fresh.values())
                    for user_id, moment in newest_of_batch(moments).items():
                        self._activity.place(thread_id, directory, user_id, moment)
                return results
            finally:
                view.close()

    async def _put_run(self, row: RunRow) -> RunRow:
        return await self._run(self._runs.put, row)

    # -- bodies ----------------------------------------------------------------------------------
    async def _put_bodies(self, bodies: Sequence[Body]) -> None:
        await self._run(self._put_bodies_sync, bodies)

    def _put_bodies_sync(self, bodies: Sequence[Body]) -> None:
        bodies_of: dict[str, list[Body]] = {}
        for body in bodies:
            bodies_of.setdefault(body.thread_id, []).append(body)
        for thread_id, held in bodies_of.items():
            directory = self._layout.thread_dir(thread_id)
            with log.locked(directory):
                body_files.keep(directory, held, durable=self.durable)

    async def _drop_bodies(self, thread_id: str, through_seq: int) -> bool:
        return await self._run(self._drop_bodies_sync, thread_id, through_seq)

    def _drop_bodies_sync(self, thread_id: str, through_seq: int) -> bool:
        directory = self._layout.thread_dir(thread_id)
        with log.locked(directory):
            with log.snapshot(directory) as view:
                if (view.count if view else 0) != through_seq:
                    return False
            body_files.drop(directory)
        return True

    async def _get_bodies(self, thread_id: str, digests: tuple[str, ...]) -> dict[str, bytes]:
        return await self._run(lambda: body_files.read(self._layout.thread_dir(thread_id), digests))

    async def _list_bodies(self, thread_id: str, after: str | None, limit: int) -> list[Body]:
        return await self._run(
            lambda: body_files.page(self._layout.thread_dir(thread_id), thread_id, after, limit))

    # -- reads -----------------------------------------------------------------------------------
    async def _select_events(self, query: EventQuery) -> list[RunEvent]:
        return await self._run(self._select_sync, query)

    def _select_sync(self, query: EventQuery) -> list[RunEvent]:
        def keep(record: log.Record) -> bool:
            return query.admits(record["run_id"], record["category"], record["event_type"],
                                record.get("user_id"), metadata_task_id(record["metadata"]))

        directory = self._layout.thread_dir(query.thread_id)
        for _ in range(2):
            with log.snapshot(directory) as view:
                if view is None:
                    return []
                if query.after_seq is not None:
                    records = view.forward(query.after_seq, query.limit, keep, stop_before=query.before_seq)
                else:
                    records = view.backward(query.before_seq, query.limit, keep)
                damaged = (directory, view.generation, view.index_id) if view.damaged else None
            if damaged is None or damaged in self._checked or not self._repair(query.thread_id, damaged):
                break
        return [RunEvent.from_dict(record) for record in records]

    def _repair(self, thread_id: str, seen: tuple[Path, str, tuple[int, int]]) -> bool:
        """A read met damaged lines: let a writer's repair look at the thread once (lines that moved
        are found again); True when it rebuilt the index, so the read is worth doing again."""
        self._checked.add(seen)
        directory, generation, index_id = seen
        with log.locked(directory):
            meta = log.read_meta(directory)
            if meta is None or meta["generation"] != generation:
                return True  # rewritten meanwhile
            log.open_for_write(directory, thread_id, durable=self.durable).close()
        with log.snapshot(directory) as view:
            return view is not None and view.index_id != index_id

    async def _count_messages(self, thread_id: str, user_id: str | None) -> int:
        facts = await self._run(lambda: self._facts_of(self._layout.thread_dir(thread_id)))
        return facts.messages if user_id is None else facts.messages_by_user[user_id]

    def _facts_of(self, directory: Path) -> Facts:
        """The facts of the thread's committed lines (caught up from the file)."""
        with log.snapshot(directory) as view:
            return self._facts.refresh(directory, view)

    async def _select_threads(self, query: ThreadQuery) -> list[str]:
        return await self._run(self._select_threads_sync, query)

    def _select_threads_sync(self, query: ThreadQuery) -> list[str]:
        names = []
        for thread_id, directory in self._layout.threads():
            if query.after is not None and thread_id <= query.after:
                continue
            facts = self._facts_of(directory)
            if facts.live and (query.user_id is None or facts.users[query.user_id] > 0):
                names.append(thread_id)
        return sorted(names)[: query.limit]

    async def _select_recent_threads(self, query: RecentThreadQuery) -> list[ThreadActivity]:
        return await self._run(self._activity.page, query)

    async def _last_seq(self, thread_id: str) -> int:
        return await self._run(self._last_seq_sync, thread_id)

    def _last_seq_sync(self, thread_id: str) -> int:
        with log.snapshot(self._layout.thread_dir(thread_id)) as view:
            return view.count if view else 0

    async def _get_run(self, run_id: str) -> RunRow | None:
        return await self._run(self._runs.get, run_id)

    async def _select_runs(self, query: RunQuery) -> list[RunRow]:
        return await self._run(self._runs.select, query)

    async def _search_runs(self, query: SearchQuery) -> list[tuple[str, RunRow]]:
        return await self._run(self._runs.search, query)

    async def _select_starts_without_row(self, query: StartQuery) -> list[RunEvent]:
        return await self._run(self._starts.without_row, query, self._has_row)

    def _has_row(self, run_id: str) -> bool:
        try:
            return self._runs.get(run_id) is not None
        except CorruptStoreError:
            return True  # a damaged row is a row (verify reports it)

    async def _check_integrity(self, thread_ids: tuple[str, ...] | None) -> list[StorageProblem]:
        return await self._run(self._check_sync, thread_ids)

    def _check_sync(self, thread_ids: tuple[str, ...] | None) -> list[StorageProblem]:
        if thread_ids is None:
            directories = sorted((self.root / "threads").iterdir())
        else:
            directories = [self._layout.thread_dir(thread_id) for thread_id in thread_ids]
        problems: list[StorageProblem] = []
        for directory in directories:
            problems += damage.check_thread(directory, self.root)
        return problems + check_runs(self._layout, [directory / "runs" for directory in directories])

    # -- deletes ---------------------------------------------------------------------------------
    async def _delete_thread(self, thread_id: str) -> int:
        return await self._run(self._delete_sync, thread_id, None)

    async def _delete_run(self, thread_id: str, run_id: str) -> int:
        return await self._run(self._delete_sync, thread_id, run_id)

    async def _delete_thread_through(
        self, thread_id: str, through_seq: int, run_ids: Collection[str]
    ) -> int | None:
        """``prune``'s delete: the whole thread in one rewrite, under its lock. Run by run, each
        delete rewrote what was left of the thread: 304 s for a thread of 200 runs and 100,000
        events (``bench/bench_prune.py --backend jsonl --shape long-threads``)."""
        return await self._run(self._prune_sync, thread_id, through_seq, frozenset(run_ids))

    def _prune_sync(self, thread_id: str, through_seq: int, run_ids: frozenset[str]) -> int | None:
        directory = self._layout.thread_dir(thread_id)
        with log.locked(directory):
            if log.read_meta(directory) is None:
                return None
            if any(row.run_id not in run_ids for row in self._runs.select(RunQuery(thread_id=thread_id))):
                return None  # a run row put since prune looked
            view = log.open_for_write(directory, thread_id, durable=self.durable)
            try:
                if view.count != through_seq:
                    return None  # written to since prune looked
                started = [run for run, kind in self._facts.refresh(directory, view).first_of_type
                           if kind == RUN_START]
                deleted = log.clear(view, thread_id, durable=self.durable)
            finally:
                view.close()
            self._activity.replace_from(thread_id, directory, None)
            self._starts.release(thread_id, started)
            self._runs.drop_thread(thread_id)
            body_files.drop(directory)
        return deleted

    def _delete_sync(self, thread_id: str, run_id: str | None) -> int:
        """Under the thread lock: a new generation without the thread's (or the run's) events, every
        seq kept as an empty span (seq is never reused); then the run rows."""
        directory = self._layout.thread_dir(thread_id)
        with log.locked(directory):
            deleted = 0
            if log.read_meta(directory) is not None:
                view = log.open_for_write(directory, thread_id, durable=self.durable)
                try:
                    started = [run for run, kind in self._facts.refresh(directory, view).first_of_type
                               if kind == RUN_START and run_id in (None, run)]
                    if run_id is None:
                        deleted = log.clear(view, thread_id, durable=self.durable)
                    else:
                        deleted = log.rewrite(view, thread_id, lambda record: record["run_id"] == run_id,
                                              durable=self.durable)
                finally:
                    view.close()
                if deleted:
                    with log.snapshot(directory) as rest:
                        self._activity.replace_from(thread_id, directory, rest)
                self._starts.release(thread_id, started)
            if run_id is None:
                self._runs.drop_thread(thread_id)
                body_files.drop(directory)  # a run's delete keeps them: other runs share them
            else:
                self._runs.drop_run(thread_id, run_id)
        return deleted


def _existing(view: log.Snapshot, seq: int) -> RunEvent:
    record = view.record_at(seq)
    if record is None:
        raise CorruptStoreError(f"{view.directory}/events-{view.generation}.jsonl: the stored event "
                                f"at seq {seq} is damaged, so it can not be returned")
    return RunEvent.from_dict(record)
