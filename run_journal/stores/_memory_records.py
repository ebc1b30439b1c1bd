"""The memory store's records: a thread's events and indexes, and a stored run row.

Each thread keeps its events in a list ordered by seq, plus the same for its messages and for each of
its runs, so a page is a ``bisect`` and a short walk, never a scan of the store. Nothing here locks:
``MemoryRunEventStore`` calls it with its lock held.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import itertools
import operator
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import datetime
from typing import Final, NamedTuple

from run_journal.catalog import Category
from run_journal.envelope import NewEvent, RunEvent, loads
from run_journal.runs import RunRow

_MESSAGE: Final = Category.MESSAGE.value


class Record(NamedTuple):
    """One stored event: its seq and the ``NewEvent`` written (payload kept as JSON text)."""

    seq: int
    event: NewEvent

    def to_event(self) -> RunEvent:
        return RunEvent.stored(self.event, self.seq, copy=True)


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


_SEQ: Final = operator.itemgetter(0)


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
        if event.category == _MESSAGE:
            self.messages.records.append(record)
            self.run_messages[run_id].records.append(record)
        self.by_event_id[event.event_id] = record
        self.first_of_type.setdefault((run_id, event.event_type), record)
        self.users[event.user_id] += 1
        return record

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


@dataclasses.dataclass(frozen=True, slots=True)
class StoredRun:
    row_json: str
    first_put_at: datetime
    thread_id: str
    status: str
    run_id: str
    started_at: datetime | None

    def row(self) -> RunRow:
        return RunRow.from_dict(loads(self.row_json))

    def sort_key(self) -> tuple[datetime, str]:
        return (self.started_at or self.first_put_at, self.run_id)
