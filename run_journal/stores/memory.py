"""``MemoryRunEventStore``: the whole contract in one process, for tests, notebooks and examples.

Records are kept as the serialized JSON the envelope produced, and every read decodes a fresh copy, so
nothing a caller does to a returned event (or to the ``NewEvent`` it wrote) can reach the store.

Each thread keeps its events in a list ordered by seq, plus the same for its messages and for each of
its runs, so a page is a ``bisect`` and a short walk, never a scan of the store. One ``threading.Lock``
guards every mutation; no critical section awaits, so the lock is safe on one event loop and also when
sync callbacks write from worker threads. ``follow`` sleeps on a per-thread set of futures that writers
wake (thread-safely), so a tail costs nothing while the thread is idle.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from collections.abc import Sequence

from run_journal.catalog import TERMINAL_RUN_EVENTS
from run_journal.envelope import NewEvent, RunEvent, dumps, utc_now, validate_id
from run_journal.runs import RunRow, may_replace
from run_journal.stores._memory_records import Column, Record, StoredRun, ThreadEvents
from run_journal.stores.base import (
    RunEventStore,
    as_new_event,
    check_after_thread,
    check_cursor,
    check_limit,
    check_statuses,
    check_user_id,
    exclusive_set,
    expand_event_types,
)


class MemoryRunEventStore(RunEventStore):
    """An in-process store: fast, exact, and gone when the process exits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # [id] on writes (creates the thread), .get on reads
        self._threads: defaultdict[str, ThreadEvents] = defaultdict(ThreadEvents)
        self._runs: dict[str, StoredRun] = {}

    async def aclose(self) -> None:
        await super().aclose()
        with self._lock:
            for thread in self._threads.values():
                thread.wake()

    # -- writes ----------------------------------------------------------------------------------
    async def _append(self, batch: Sequence[NewEvent]) -> list[RunEvent]:
        with self._lock:
            self._check_open()
            return self._append_locked(batch)

    async def _put_if_absent(self, event: NewEvent, types: tuple[str, ...]) -> tuple[RunEvent, bool]:
        with self._lock:
            self._check_open()
            return self._put_if_absent_locked(event, types)

    async def put_run_close(self, events: Sequence[NewEvent], terminal: NewEvent, row: RunRow) -> bool:
        """One locked step: no reader sees the run's last events without its end and its row."""
        batch = [as_new_event(item) for item in events]
        types = exclusive_set(terminal.event_type, TERMINAL_RUN_EVENTS)
        row_json = dumps(row.to_dict())
        with self._lock:
            self._check_open()
            if batch:
                self._append_locked(batch, results=False)
            stored, _ = self._record_if_absent(terminal, types)
            if stored.event.event_id != terminal.event_id:
                return False
            self._check_run_owner(row)  # as put_run: the events are written, the row is refused
            self._put_run_locked(row, row_json)
        return True

    def _append_locked(self, batch: Sequence[NewEvent], *, results: bool = True) -> list[RunEvent]:
        touched: dict[str, ThreadEvents] = {}
        written = []
        threads = self._threads
        for event in batch:
            thread = threads[event.thread_id]
            record = thread.by_event_id.get(event.event_id)
            if record is None:  # a new write: its result may share the writer's payload objects
                record = thread.add(event)
                touched[event.thread_id] = thread
                if results:
                    written.append(RunEvent.stored(event, record.seq))
            elif results:
                written.append(record.to_event())
        for thread in touched.values():
            thread.wake()
        return written

    def _put_if_absent_locked(self, event: NewEvent, types: tuple[str, ...]) -> tuple[RunEvent, bool]:
        record, written = self._record_if_absent(event, types)
        return record.to_event(), written

    def _record_if_absent(self, event: NewEvent, types: tuple[str, ...]) -> tuple[Record, bool]:
        thread = self._threads[event.thread_id]
        existing = thread.by_event_id.get(event.event_id)
        if existing is None:
            firsts = [
                record for name in types
                if (record := thread.first_of_type.get((event.run_id, name))) is not None
            ]
            existing = min(firsts, key=lambda record: record.seq, default=None)
        if existing is not None:
            return existing, False
        record = thread.add(event)
        thread.wake()
        return record, True

    # -- reads -----------------------------------------------------------------------------------
    def _thread(self, thread_id: str) -> ThreadEvents | None:
        validate_id("thread_id", thread_id)
        self._check_open()
        return self._threads.get(thread_id)

    async def list_messages(
        self,
        thread_id: str,
        *,
        limit: int = 50,
        before_seq: int | None = None,
        after_seq: int | None = None,
        user_id: str | None = None,
    ) -> list[RunEvent]:
        check_user_id(user_id)
        with self._lock:
            thread = self._thread(thread_id)
            column = thread.messages if thread else None
            return _page(column, limit, before_seq, after_seq, user_id)

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
        validate_id("run_id", run_id)
        check_user_id(user_id)
        with self._lock:
            thread = self._thread(thread_id)
            column = thread.run_messages.get(run_id) if thread else None
            return _page(column, limit, before_seq, after_seq, user_id)

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
        check_limit(limit)
        cursor = check_cursor("after_seq", after_seq) or 0
        names = expand_event_types(event_types)
        if run_id is not None:
            validate_id("run_id", run_id)
        check_user_id(user_id)
        with self._lock:
            thread = self._thread(thread_id)
            if thread is None:
                return []
            column = thread.events if run_id is None else thread.run_events.get(run_id)
            found: list[Record] = []
            for record in column.forward(cursor) if column else ():
                if (
                    (names is None or record.event.event_type in names)
                    and (task_id is None or record.event.task_id == task_id)
                    and (user_id is None or record.event.user_id == user_id)
                ):
                    found.append(record)
                    if len(found) == limit:
                        break
        return [record.to_event() for record in found]

    async def count_messages(self, thread_id: str, *, user_id: str | None = None) -> int:
        check_user_id(user_id)
        with self._lock:
            thread = self._thread(thread_id)
            if thread is None:
                return 0
            if user_id is None:
                return len(thread.messages.records)
            return sum(1 for record in thread.messages.records if record.event.user_id == user_id)

    async def list_threads(
        self, *, user_id: str | None = None, limit: int = 1000, after: str | None = None
    ) -> list[str]:
        check_limit(limit)
        check_user_id(user_id)
        check_after_thread(after)
        self._check_open()
        with self._lock:
            names = [
                name
                for name, thread in self._threads.items()
                if thread.events.records
                and (user_id is None or thread.users[user_id] > 0)
                and (after is None or name > after)
            ]
        return sorted(names)[:limit]

    async def last_seq(self, thread_id: str) -> int:
        with self._lock:
            thread = self._thread(thread_id)
            return thread.last_seq if thread else 0

    async def _wait_for_events(self, thread_id: str, after_seq: int) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            thread = self._threads[thread_id]
            if self._closed or thread.last_seq > after_seq:
                return
            thread.waiters.append((loop, future))
        await future

    # -- runs ------------------------------------------------------------------------------------
    async def put_run(self, row: RunRow) -> RunRow:
        self._check_open()
        row_json = dumps(row.to_dict())
        with self._lock:
            self._check_run_owner(row)
            stored = self._put_run_locked(row, row_json)
        return row if stored is None else stored.row()  # the caller's frozen row is what was stored

    def _check_run_owner(self, row: RunRow) -> None:
        stored = self._runs.get(row.run_id)
        if stored is not None and (owner := stored.thread_id) != row.thread_id:
            raise ValueError(f"run {row.run_id!r} belongs to thread {owner!r}, not {row.thread_id!r}")

    def _put_run_locked(self, row: RunRow, row_json: str) -> StoredRun | None:
        """Store ``row`` unless it would reopen a finished run (then: the stored run, kept)."""
        stored = self._runs.get(row.run_id)
        if stored is not None and not may_replace(stored.status, row.status):
            return stored
        first_put_at = stored.first_put_at if stored else utc_now()
        self._runs[row.run_id] = StoredRun(
            row_json, first_put_at, row.thread_id, row.status, row.run_id, row.started_at
        )
        return None

    async def get_run(self, run_id: str) -> RunRow | None:
        validate_id("run_id", run_id)
        self._check_open()
        with self._lock:
            stored = self._runs.get(run_id)
        return stored.row() if stored else None

    async def list_runs(
        self, thread_id: str | None = None, *, statuses: Sequence[str] | None = None
    ) -> list[RunRow]:
        if thread_id is not None:
            validate_id("thread_id", thread_id)
        statuses = check_statuses(statuses)
        self._check_open()
        with self._lock:
            stored = [
                item for item in self._runs.values()
                if (thread_id is None or item.thread_id == thread_id)
                and (statuses is None or item.status in statuses)
            ]
        return [item.row() for item in sorted(stored, key=StoredRun.sort_key)]

    # -- deletes ---------------------------------------------------------------------------------
    async def delete_by_thread(self, thread_id: str) -> int:
        validate_id("thread_id", thread_id)
        self._check_open()
        with self._lock:
            thread = self._threads.get(thread_id)
            for run_id in [key for key, item in self._runs.items() if item.thread_id == thread_id]:
                del self._runs[run_id]
            if thread is None:
                return 0
            emptied = ThreadEvents()
            emptied.last_seq = thread.last_seq  # seq is never reused: the counter outlives the events
            self._threads[thread_id] = emptied
            thread.wake()
            return len(thread.events.records)

    async def delete_by_run(self, thread_id: str, run_id: str) -> int:
        validate_id("thread_id", thread_id)
        validate_id("run_id", run_id)
        self._check_open()
        with self._lock:
            stored = self._runs.get(run_id)
            if stored is not None and stored.thread_id == thread_id:
                del self._runs[run_id]
            thread = self._threads.get(thread_id)
            return thread.drop_run(run_id) if thread else 0


def _page(
    column: Column | None,
    limit: int,
    before_seq: int | None,
    after_seq: int | None,
    user_id: str | None,
) -> list[RunEvent]:
    """One page of messages: first ``limit`` above ``after_seq`` or last ``limit`` below ``before_seq``."""
    check_limit(limit)
    before = check_cursor("before_seq", before_seq)
    after = check_cursor("after_seq", after_seq)
    if column is None:
        return []
    records = column.forward(after) if after is not None else column.backward(before)
    found: list[Record] = []
    for record in records:
        if before is not None and after is not None and record.seq >= before:
            break
        if user_id is None or record.event.user_id == user_id:
            found.append(record)
            if len(found) == limit:
                break
    if after is None:
        found.reverse()
    return [record.to_event() for record in found]
