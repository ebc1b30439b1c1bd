"""``MemoryRunEventStore``: the whole contract in one process, for tests, notebooks and examples.

Records are kept as the ``NewEvent`` written (its payload as the serialized JSON the envelope
produced), and every read decodes a fresh copy, so nothing a caller does to a returned event (or to
the ``NewEvent`` it wrote) can reach the store.

Each thread keeps its events in a list ordered by seq, plus the same for its messages and for each of
its runs, so a page is a ``bisect`` and a short walk, never a scan of the store. One ``threading.Lock``
guards every mutation; no critical section awaits, so the lock is safe on one event loop and also when
sync callbacks write from worker threads. ``follow`` sleeps on a per-thread set of futures that writers
wake (thread-safely), so a tail costs nothing while the thread is idle. A thread's bodies are a dict
by digest plus the digests sorted (``ThreadBodies``), written under the same lock as the events.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import itertools
import operator
import threading
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, Final, NamedTuple

from run_journal.bodies import Body
from run_journal.envelope import NewEvent, RunEvent, dumps, loads, utc_now
from run_journal.runs import RunRow, may_replace, stored_row
from run_journal.stores.base import (
    MESSAGE,
    RUN_START,
    EventQuery,
    RecentThreadQuery,
    RunEventStore,
    RunIdTakenError,
    RunQuery,
    SearchQuery,
    StartQuery,
    ThreadActivity,
    ThreadQuery,
    Waiter,
    after_error,
    stamp,
)


class Record(NamedTuple):
    """One stored event: its seq and the ``NewEvent`` written (payload kept as JSON text)."""

    seq: int
    event: NewEvent

    def to_event(self) -> RunEvent:
        return RunEvent.stored(self.event, self.seq, copy=True)


_SEQ: Final = operator.itemgetter(0)


class Column:
    """Records in seq order (``bisect`` finds a cursor by each record's seq)."""

    __slots__ = ("records",)

    def __init__(self, records: list[Record] | None = None) -> None:
        self.records: list[Record] = records if records is not None else []

    def forward(self, after_seq: int) -> Iterator[Record]:
        start = bisect.bisect_right(self.records, after_seq, key=_SEQ)
        return itertools.islice(self.records, start, None)

    def backward(self, before_seq: int | None) -> Iterator[Record]:
        records = self.records
        stop = len(records) if before_seq is None else bisect.bisect_left(records, before_seq, key=_SEQ)
        return (records[i] for i in range(stop - 1, -1, -1))

    def without_run(self, run_id: str) -> Column:
        return Column([record for record in self.records if record.event.run_id != run_id])


class ThreadEvents:
    """A thread's events, indexes and its never-decreasing seq counter."""

    def __init__(self) -> None:
        self.last_seq = 0
        self.events = Column()
        self.messages = Column()
        self.run_events: defaultdict[str, Column] = defaultdict(Column)
        self.run_messages: defaultdict[str, Column] = defaultdict(Column)
        self.by_event_id: dict[str, Record] = {}
        self.first_of_type: dict[tuple[str, str], Record] = {}
        self.users: Counter[str | None] = Counter()
        self.waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def add(self, event: NewEvent) -> Record:
        self.last_seq = seq = self.last_seq + 1
        record = Record(seq, event)
        run_id = event.run_id
        self.events.records.append(record)
        self.run_events[run_id].records.append(record)
        if event.category == MESSAGE:
            self.messages.records.append(record)
            self.run_messages[run_id].records.append(record)
        self.by_event_id[event.event_id] = record
        self.first_of_type.setdefault((run_id, event.event_type), record)
        self.users[event.user_id] += 1
        return record

    def column(self, query: EventQuery) -> Column | None:
        """The narrowest index that holds every row ``query`` can select."""
        if query.run_id is None:
            return self.messages if query.messages_only else self.events
        runs = self.run_messages if query.messages_only else self.run_events
        return runs.get(query.run_id)

    def drop_run(self, run_id: str) -> int:
        removed = self.run_events.pop(run_id, Column()).records
        self.run_messages.pop(run_id, None)
        if removed:
            self.events = self.events.without_run(run_id)
            self.messages = self.messages.without_run(run_id)
            for record in removed:
                del self.by_event_id[record.event.event_id]
                self.first_of_type.pop((run_id, record.event.event_type), None)
                self.users[record.event.user_id] -= 1
            self.users = +self.users  # drop zero counts
        return len(removed)

    def wake(self) -> None:
        waiters, self.waiters = self.waiters, []
        for loop, future in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Recent:
    """Threads by latest activity: keys (stamp, thread_id) kept sorted, so a page is a ``bisect``
    and a walk down the list, never a sort of every thread."""

    __slots__ = ("keys", "of")

    def __init__(self) -> None:
        self.keys: list[tuple[str, str]] = []
        self.of: dict[str, str] = {}
        """thread_id -> its stamp in ``keys``."""

    def set(self, thread_id: str, moment: str | None) -> None:
        """Place the thread at ``moment`` (None: take it out)."""
        old = self.of.pop(thread_id, None)
        if old is not None:
            del self.keys[bisect.bisect_left(self.keys, (old, thread_id))]
        if moment is not None:
            self.of[thread_id] = moment
            bisect.insort(self.keys, (moment, thread_id))

    def page(self, query: RecentThreadQuery) -> list[ThreadActivity]:
        keys = self.keys
        stop = len(keys) if query.before is None else bisect.bisect_left(keys, query.before)
        newest_first = (keys[i] for i in range(stop - 1, max(stop - 1 - query.limit, -1), -1))
        return [ThreadActivity(thread, datetime.fromisoformat(moment)) for moment, thread in newest_first]


class ThreadBodies:
    """A thread's bodies by digest, and the digests sorted (``list_bodies`` pages them by bisect)."""

    __slots__ = ("data", "digests")

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.digests: list[str] = []

    def keep(self, digest: str, data: bytes) -> None:
        if digest not in self.data:
            self.data[digest] = data
            bisect.insort(self.digests, digest)


@dataclasses.dataclass(frozen=True, slots=True)
class StoredRun:
    row_json: str
    first_put_at: datetime
    thread_id: str
    status: str
    run_id: str
    started_at: datetime | None
    user_id: str | None
    facts: RunRow
    """The row as written, never handed out (reads decode ``row_json``): what search filters read."""

    def row(self) -> RunRow:
        return stored_row(loads(self.row_json))

    def sort_key(self) -> tuple[datetime, str]:
        return (self.started_at or self.first_put_at, self.run_id)


class MemoryRunEventStore(RunEventStore):
    """An in-process store: fast, exact, and gone when the process exits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # [id] on writes (creates the thread), .get on reads
        self._threads: defaultdict[str, ThreadEvents] = defaultdict(ThreadEvents)
        self._runs: dict[str, StoredRun] = {}
        self._run_starts: dict[str, tuple[str, str]] = {}
        """run_id -> (thread_id, event_id) of its run.start; stale once that event is deleted."""
        self._recent = Recent()
        self._recent_of_user: defaultdict[str, Recent] = defaultdict(Recent)
        self._bodies: defaultdict[str, ThreadBodies] = defaultdict(ThreadBodies)

    @classmethod
    def from_url(cls, url: str = "memory://", **options: Any) -> MemoryRunEventStore:
        """``memory://``: a new, empty store (it takes no options)."""
        if options:
            raise TypeError(f"MemoryRunEventStore takes no options, got {sorted(options)}")
        return cls()

    async def _release(self) -> None:
        with self._lock:
            for thread in self._threads.values():
                thread.wake()

    # -- writes ----------------------------------------------------------------------------------
    async def _append(self, batch: Sequence[NewEvent], bodies: Sequence[Body] = ()) -> list[RunEvent]:
        with self._lock:
            self._check_open()
            self._check_starts(batch)
            self._keep_bodies(bodies)
            written = [self._record(event) for event in batch]
            self._note_activity(record.event for record, new in written if new)
        # a new write's result may share the writer's payload objects; a repeat gets its own copy
        return [RunEvent.stored(record.event, record.seq) if new else record.to_event()
                for record, new in written]

    def _record(self, event: NewEvent, types: tuple[str, ...] = ()) -> tuple[Record, bool]:
        """Under the lock: the stored event with ``event.event_id``, else the run's first of
        ``types``, else ``event`` stored now (True). The caller then notes the activity of what it
        wrote (:meth:`_note_activity`), once per write."""
        thread = self._threads[event.thread_id]
        existing = thread.by_event_id.get(event.event_id)
        if existing is None and types:
            firsts = [
                record for name in types
                if (record := thread.first_of_type.get((event.run_id, name))) is not None
            ]
            existing = min(firsts, key=_SEQ, default=None)
        if existing is not None:
            return existing, False
        if event.event_type == RUN_START:
            self._check_start(event)
            self._run_starts[event.run_id] = (event.thread_id, event.event_id)
        return thread.add(event), True

    def _note_activity(self, written: Iterable[NewEvent]) -> None:
        """Under the lock, after a write: each thread's (and user's) newest event is the last one
        written to it, and its followers wake."""
        newest: dict[str, NewEvent] = {}
        of_user: dict[tuple[str, str], NewEvent] = {}
        for event in written:
            newest[event.thread_id] = event
            if event.user_id is not None:
                of_user[event.user_id, event.thread_id] = event
        for thread_id, event in newest.items():
            self._recent.set(thread_id, stamp(event.created_at))
            self._threads[thread_id].wake()
        for (user_id, thread_id), event in of_user.items():
            self._recent_of_user[user_id].set(thread_id, stamp(event.created_at))

    def _replace_activity(self, thread_id: str, thread: ThreadEvents, users: Iterable[str | None]) -> None:
        """Under the lock, after a delete: the thread's (and ``users``') newest remaining event."""
        records = thread.events.records
        self._recent.set(thread_id, stamp(records[-1].event.created_at) if records else None)
        for user_id in users:
            if user_id is None:
                continue
            newest = next((record for record in reversed(records) if record.event.user_id == user_id), None)
            self._recent_of_user[user_id].set(thread_id, stamp(newest.event.created_at) if newest else None)

    def _check_starts(self, batch: Sequence[NewEvent]) -> None:
        """Under the lock, before anything of ``batch`` is written: its new run.starts are free."""
        for event in batch:
            if event.event_type == RUN_START:
                thread = self._threads.get(event.thread_id)
                if thread is None or event.event_id not in thread.by_event_id:
                    self._check_start(event)

    def _check_start(self, event: NewEvent) -> None:
        """Under the lock: refuse a run.start whose run id another stored run.start holds."""
        claim = self._run_starts.get(event.run_id)
        if claim is None or claim == (event.thread_id, event.event_id):
            return
        owner = self._threads.get(claim[0])
        if owner is not None and claim[1] in owner.by_event_id:
            raise RunIdTakenError(event.run_id, *claim)

    async def _put_if_absent(self, event: NewEvent, types: tuple[str, ...]) -> tuple[RunEvent, bool]:
        with self._lock:
            self._check_open()
            record, written = self._record(event, types)
            if written:
                self._note_activity((event,))
        return record.to_event(), written

    async def _put_run_close(
        self, batch: Sequence[NewEvent], terminal: NewEvent, types: tuple[str, ...], row: RunRow,
        bodies: Sequence[Body] = (),
    ) -> bool:
        """One locked step: no reader sees the run's last events without its end and its row."""
        row_json = dumps(row.to_dict())
        with self._lock:
            self._check_open()
            self._check_starts([*batch, terminal])
            self._keep_bodies(bodies)
            written = [record.event for record, new in map(self._record, batch) if new]
            stored, new = self._record(terminal, types)
            self._note_activity([*written, terminal] if new else written)
            if stored.event.event_id != terminal.event_id:
                return False
            self._check_run_owner(row)  # as put_run: the events are written, the row is refused
            self._put_run_locked(row, row_json)
        return True

    async def _put_run(self, row: RunRow) -> RunRow:
        row_json = dumps(row.to_dict())
        with self._lock:
            self._check_open()
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
            row_json, first_put_at, row.thread_id, row.status, row.run_id, row.started_at, row.user_id, row
        )
        return None

    # -- bodies ----------------------------------------------------------------------------------
    def _keep_bodies(self, bodies: Sequence[Body]) -> None:
        """Under the lock: each body its thread does not hold yet."""
        for body in bodies:
            self._bodies[body.thread_id].keep(body.digest, body.data)

    async def _put_bodies(self, bodies: Sequence[Body]) -> None:
        with self._lock:
            self._check_open()
            self._keep_bodies(bodies)

    async def _get_bodies(self, thread_id: str, digests: tuple[str, ...]) -> dict[str, bytes]:
        with self._lock:
            held = self._bodies.get(thread_id)
            if held is None:
                return {}
            return {digest: data for digest in digests if (data := held.data.get(digest)) is not None}

    async def _drop_bodies(self, thread_id: str, through_seq: int) -> bool:
        with self._lock:
            thread = self._threads.get(thread_id)
            if (thread.last_seq if thread is not None else 0) != through_seq:
                return False
            self._bodies.pop(thread_id, None)
            return True

    async def _list_bodies(self, thread_id: str, after: str | None, limit: int) -> list[Body]:
        with self._lock:
            held = self._bodies.get(thread_id)
            if held is None:
                return []
            digests = held.digests
            start = 0 if after is None else bisect.bisect_right(digests, after)
            return [Body(thread_id, digest, held.data[digest]) for digest in digests[start:start + limit]]

    # -- reads -----------------------------------------------------------------------------------
    async def _select_events(self, query: EventQuery) -> list[RunEvent]:
        after, before = query.after_seq, query.before_seq
        found: list[Record] = []
        with self._lock:
            thread = self._threads.get(query.thread_id)
            column = thread.column(query) if thread is not None else None
            if column is None:
                return []
            for record in column.forward(after) if after is not None else column.backward(before):
                if after is not None and before is not None and record.seq >= before:
                    break
                event = record.event
                if query.admits(event.run_id, event.category, event.event_type, event.user_id,
                                event.task_id):
                    found.append(record)
                    if len(found) == query.limit:
                        break
        if query.newest_first:
            found.reverse()
        return [record.to_event() for record in found]

    async def _count_messages(self, thread_id: str, user_id: str | None) -> int:
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None:
                return 0
            records = thread.messages.records
            if user_id is None:
                return len(records)
            return sum(1 for record in records if record.event.user_id == user_id)

    async def _select_threads(self, query: ThreadQuery) -> list[str]:
        with self._lock:
            names = [
                name
                for name, thread in self._threads.items()
                if thread.events.records
                and (query.user_id is None or thread.users[query.user_id] > 0)
                and (query.after is None or name > query.after)
            ]
        return sorted(names)[: query.limit]

    async def _select_recent_threads(self, query: RecentThreadQuery) -> list[ThreadActivity]:
        with self._lock:
            if query.user_id is None:
                return self._recent.page(query)
            recent = self._recent_of_user.get(query.user_id)
            return recent.page(query) if recent is not None else []

    async def _last_seq(self, thread_id: str) -> int:
        with self._lock:
            thread = self._threads.get(thread_id)
            return thread.last_seq if thread else 0

    def _watch(self, thread_id: str) -> AbstractAsyncContextManager[Waiter]:
        return self._woken_by_writes(thread_id)

    @contextlib.asynccontextmanager
    async def _woken_by_writes(self, thread_id: str) -> AsyncIterator[Waiter]:
        """Waits on a future that the next write of the thread (or ``aclose``) resolves."""

        async def wait(after_seq: int) -> int | None:
            loop = asyncio.get_running_loop()
            future: asyncio.Future[None] = loop.create_future()
            with self._lock:
                thread = self._threads[thread_id]
                if self._closed:
                    return None
                if thread.last_seq > after_seq:
                    return thread.last_seq
                thread.waiters.append((loop, future))
            await future
            with self._lock:
                return None if self._closed else self._threads[thread_id].last_seq

        yield wait

    # -- runs ------------------------------------------------------------------------------------
    async def _get_run(self, run_id: str) -> RunRow | None:
        with self._lock:
            stored = self._runs.get(run_id)
        return stored.row() if stored else None

    async def _select_starts_without_row(self, query: StartQuery) -> list[RunEvent]:
        found: list[Record] = []
        with self._lock:
            for run_id, (thread_id, event_id) in sorted(self._run_starts.items()):
                thread = self._threads.get(thread_id)
                record = thread.by_event_id.get(event_id) if thread is not None else None
                after = query.after is not None and run_id <= query.after
                if record is None or run_id in self._runs or after:
                    continue
                found.append(record)
                if len(found) == query.limit:
                    break
        return [record.to_event() for record in found]

    async def _select_runs(self, query: RunQuery) -> list[RunRow]:
        with self._lock:
            listed = (item for item in self._runs.values()
                      if query.admits(item.thread_id, item.status, item.user_id))
            stored = sorted(listed, key=StoredRun.sort_key, reverse=query.newest_first)
            if query.after is not None:
                cursor = self._runs.get(query.after)
                if cursor is None or query.thread_id not in (None, cursor.thread_id):
                    raise after_error(query.after)
                key = cursor.sort_key()
                stored = [item for item in stored if (item.sort_key() < key if query.newest_first
                                                      else item.sort_key() > key)]
        return [item.row() for item in stored[: query.limit]]

    async def _search_runs(self, query: SearchQuery) -> list[tuple[str, RunRow]]:
        """A scan: every run's place and row read and filtered (no index), newest first."""
        with self._lock:
            placed = [(stamp(item.sort_key()[0]), item) for item in self._runs.values()]
        placed.sort(key=lambda pair: (pair[0], pair[1].run_id), reverse=True)
        found = [(place, item) for place, item in placed if query.admits(item.facts, place)][: query.limit]
        return [(place, item.row()) for place, item in found]

    async def _count_runs(self, query: RunQuery) -> int:
        with self._lock:
            return sum(1 for item in self._runs.values()
                       if query.admits(item.thread_id, item.status, item.user_id))

    # -- deletes ---------------------------------------------------------------------------------
    async def _delete_thread(self, thread_id: str) -> int:
        with self._lock:
            thread = self._threads.get(thread_id)
            for run_id in [key for key, item in self._runs.items() if item.thread_id == thread_id]:
                del self._runs[run_id]
            self._bodies.pop(thread_id, None)
            if thread is None:
                return 0
            emptied = ThreadEvents()
            emptied.last_seq = thread.last_seq  # seq is never reused: the counter outlives the events
            self._threads[thread_id] = emptied
            self._replace_activity(thread_id, emptied, list(thread.users))
            thread.wake()
            return len(thread.events.records)

    async def _delete_run(self, thread_id: str, run_id: str) -> int:
        with self._lock:
            stored = self._runs.get(run_id)
            if stored is not None and stored.thread_id == thread_id:
                del self._runs[run_id]
            thread = self._threads.get(thread_id)
            if thread is None:
                return 0
            users = list(thread.users)
            dropped = thread.drop_run(run_id)
            if dropped:
                self._replace_activity(thread_id, thread, users)
            return dropped
