"""The store contract: what every backend does, and the few pieces of logic they all share.

A backend implements the abstract methods below; ``run_journal.testing`` is the conformance suite
that proves it. Stores never import a producer or a consumer.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Final, Self

from run_journal.catalog import LEGACY_ALIASES, TERMINAL_RUN_EVENTS, canonical_event_type
from run_journal.envelope import JsonObject, JsonValue, NewEvent, RunEvent, validate_id
from run_journal.runs import RunRow

CONTRACT_MAJOR: Final = 1
"""Major version of the stored-record contract; a store written by another major is refused."""
CONTRACT_VERSION: Final = "1.0.0"
MAX_PAGE: Final = 10_000


class StoreError(RuntimeError):
    """A store could not do what was asked (unreachable, closed, incompatible, corrupt)."""


class IncompatibleStoreError(StoreError):
    """The store was written by a contract major version this library cannot read."""


class StoreClosedError(StoreError):
    """The store was closed; no further reads or writes are possible."""


EventInput = NewEvent | Mapping[str, Any]


def as_new_event(item: EventInput) -> NewEvent:
    """Accept a ``NewEvent`` or a mapping of ``put()``'s keyword arguments."""
    if isinstance(item, NewEvent):
        return item
    if isinstance(item, RunEvent):
        return item.as_new_event()
    if isinstance(item, Mapping):
        # None means "the default" for every field but content, where it is the JSON value null.
        fields = {
            key: value for key, value in item.items()
            if key != "seq" and (value is not None or key == "content")
        }
        return NewEvent(**fields)
    raise TypeError(f"put_batch takes NewEvent objects or mappings, got {type(item).__name__}")


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be an integer from 1 to {MAX_PAGE}, got {limit!r}")
    return limit


def check_cursor(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def check_user_id(user_id: str | None) -> str | None:
    """A read's ``user_id`` filter: ``None`` or a valid id (ValueError otherwise, on every backend)."""
    return None if user_id is None else validate_id("user_id", user_id)


def check_after_thread(after: str | None) -> str | None:
    """``list_threads``' cursor: ``None`` or a thread id (ValueError otherwise)."""
    return None if after is None else validate_id("after", after)


def check_statuses(statuses: Sequence[str] | None) -> tuple[str, ...] | None:
    """``list_runs``' status filter as a tuple of names; a single string is a TypeError."""
    if statuses is None:
        return None
    if isinstance(statuses, str):
        raise TypeError("statuses must be a sequence of status names, not a single string")
    return tuple(str(status) for status in statuses)


def exclusive_set(event_type: str, exclusive_types: Collection[str] | None) -> tuple[str, ...]:
    """The event types ``put_if_absent`` checks: ``exclusive_types`` plus the event's own, sorted."""
    if exclusive_types is None:
        return (event_type,)
    if exclusive_types is TERMINAL_RUN_EVENTS and event_type in TERMINAL_RUN_EVENTS:
        return _TERMINAL_TYPES  # every run's end: built once
    if isinstance(exclusive_types, str):
        raise TypeError("exclusive_types must be a collection of event types, not a single string")
    names = set(exclusive_types)
    for name in names:
        if not isinstance(name, str) or not name:
            raise TypeError(f"exclusive_types holds event type names, got {name!r}")
    return tuple(sorted(names | {event_type}))


class RunEventStore(abc.ABC):
    """An append-only, per-thread ordered log of ``RunEvent`` records plus one ``RunRow`` per run.

    Ordering guarantee: ``seq`` is assigned inside the step that persists the event, starts at 1 per
    thread and is dense under concurrent writers. ``event_id`` is unique per thread (a retry always
    targets the thread it first went to), which makes every write safe to retry. Reads return fresh
    objects; nothing a caller does to them reaches the store.
    """

    follow_poll_interval: float = 0.2
    """Seconds between polls in the default ``follow`` (backends with a wake-up signal ignore it)."""

    _closed: bool = False

    # -- lifecycle -------------------------------------------------------------------------------
    async def setup(self) -> None:  # noqa: B027 - optional hook: stores without schema do nothing
        """Create or migrate what the store needs; idempotent and safe to run concurrently."""

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> Self:
        await self.setup()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- writes ----------------------------------------------------------------------------------
    async def put(
        self,
        *,
        thread_id: str,
        run_id: str,
        event_type: str,
        category: str,
        content: JsonValue | Any = "",
        metadata: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
        event_id: str | None = None,
        user_id: str | None = None,
    ) -> RunEvent:
        """Append one event and return it with its seq (the stored record if event_id exists)."""
        event = as_new_event(
            {
                "thread_id": thread_id, "run_id": run_id, "event_type": event_type,
                "category": category, "content": content, "metadata": metadata,
                "created_at": created_at, "event_id": event_id, "user_id": user_id,
            }
        )
        (stored,) = await self.put_batch([event])
        return stored

    async def put_batch(self, events: Iterable[EventInput]) -> list[RunEvent]:
        """Append events (of any threads and runs) in order; one result per input, in input order.

        Everything is validated before anything is written. An event whose ``event_id`` is already
        stored (or repeated earlier in the batch) is not written again: its stored record is returned.
        """
        batch = [as_new_event(item) for item in events]
        if not batch:
            return []
        self._check_open()
        return await self._append(batch)

    async def put_if_absent(
        self,
        *,
        thread_id: str,
        run_id: str,
        event_type: str,
        category: str,
        content: JsonValue | Any = "",
        metadata: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
        event_id: str | None = None,
        user_id: str | None = None,
        exclusive_types: Collection[str] | None = None,
    ) -> tuple[RunEvent, bool]:
        """Write a run-scoped singleton: the first event of ``event_type`` in the run wins.

        ``exclusive_types`` widens the singleton to a group: the event is written only if the run has
        no event of ANY of those types (its own ``event_type`` is always included), e.g.
        ``exclusive_types=catalog.TERMINAL_RUN_EVENTS`` gives a run exactly one terminal event. The
        check and the write are one atomic step against concurrent callers in other tasks and
        processes. Returns ``(event, True)`` when this call wrote it; otherwise ``(existing, False)``:
        the stored event with the same ``event_id`` (a retry) if there is one, else the run's first
        event (lowest seq) of those types.
        """
        event = as_new_event(
            {
                "thread_id": thread_id, "run_id": run_id, "event_type": event_type,
                "category": category, "content": content, "metadata": metadata,
                "created_at": created_at, "event_id": event_id, "user_id": user_id,
            }
        )
        return await self.put_event_if_absent(event, exclusive_types=exclusive_types)

    async def put_event_if_absent(
        self, event: NewEvent, *, exclusive_types: Collection[str] | None = None
    ) -> tuple[RunEvent, bool]:
        """``put_if_absent`` for an event that is already built (validated and serialized once):
        what a writer that queued ``NewEvent`` objects calls, so nothing is normalized twice."""
        types = exclusive_set(event.event_type, exclusive_types)
        self._check_open()
        return await self._put_if_absent(event, types)

    @abc.abstractmethod
    async def _append(self, batch: Sequence[NewEvent]) -> list[RunEvent]:
        """Persist a validated batch atomically per thread, assigning seq; dedupe by event_id."""

    @abc.abstractmethod
    async def _put_if_absent(self, event: NewEvent, types: tuple[str, ...]) -> tuple[RunEvent, bool]:
        """Atomically: the stored event with ``event.event_id``, else the run's first event of any of
        ``types`` (which includes ``event.event_type``), else write ``event``."""

    # -- reads -----------------------------------------------------------------------------------
    @abc.abstractmethod
    async def list_messages(
        self,
        thread_id: str,
        *,
        limit: int = 50,
        before_seq: int | None = None,
        after_seq: int | None = None,
        user_id: str | None = None,
    ) -> list[RunEvent]:
        """Category ``message`` rows of a thread, ascending by seq.

        ``after_seq``: the first ``limit`` rows above it. ``before_seq``: the last ``limit`` rows
        below it. Neither: the latest ``limit`` rows. ``user_id`` keeps only that user's rows.
        """

    @abc.abstractmethod
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
        """``list_messages`` restricted to one run."""

    @abc.abstractmethod
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
        """Every category, ascending by seq: the first ``limit`` rows above ``after_seq`` (or 0).

        ``event_types`` filters by name (a legacy alias matches its canonical name and vice versa);
        ``task_id`` keeps rows whose ``metadata.task_id`` equals it.
        """

    @abc.abstractmethod
    async def count_messages(self, thread_id: str, *, user_id: str | None = None) -> int: ...

    @abc.abstractmethod
    async def list_threads(
        self, *, user_id: str | None = None, limit: int = 1000, after: str | None = None
    ) -> list[str]:
        """Thread ids that hold events, ascending: the first ``limit`` strictly greater than ``after``.

        Page through every thread by passing the last id of a page as the next ``after``.
        """

    @abc.abstractmethod
    async def last_seq(self, thread_id: str) -> int:
        """The highest seq ever assigned in the thread (0 for a thread with no events)."""

    async def follow(
        self, thread_id: str, *, after_seq: int = 0, user_id: str | None = None
    ) -> AsyncIterator[RunEvent]:
        """Yield the thread's events above ``after_seq`` as they are written, until closed.

        ``user_id`` is checked like every read's (ValueError for an invalid id). Stops when the
        store is closed or the consumer stops iterating (``aclose()`` on the
        iterator, or leaving an ``async for``). Sees writes from other processes too.
        """
        cursor = check_cursor("after_seq", after_seq) or 0
        check_user_id(user_id)
        while not self._closed:
            page = await self.list_events(thread_id, limit=500, after_seq=cursor, user_id=user_id)
            for event in page:
                cursor = event.seq
                yield event
            if not page:
                await self._wait_for_events(thread_id, cursor)

    async def _wait_for_events(self, thread_id: str, after_seq: int) -> None:
        """Return when events above ``after_seq`` may exist; backends with signals override."""
        await asyncio.sleep(self.follow_poll_interval)

    # -- runs ------------------------------------------------------------------------------------
    @abc.abstractmethod
    async def put_run(self, row: RunRow) -> RunRow:
        """Insert or update a run row; returns the row as stored.

        A finished run is never reopened: if the stored status is terminal and ``row.status``
        differs, nothing is written and the stored row is returned (see ``runs.may_replace``).
        """

    async def put_run_close(self, events: Sequence[NewEvent], terminal: NewEvent, row: RunRow) -> bool:
        """Close a run: its last ``events`` (``put_batch``), its ``terminal`` event
        (``put_event_if_absent`` with ``exclusive_types=TERMINAL_RUN_EVENTS``) and its final ``row``
        (``put_run``), in one transaction where the backend has one (SQLite), so a run's end costs
        one commit. Idempotent like its parts (a retry writes nothing twice).

        False when the run already had another terminal event (``reconcile_orphans`` closed it):
        the events are written, the terminal event and the row are not.
        """
        if events:
            await self.put_batch(events)
        stored, _ = await self.put_event_if_absent(terminal, exclusive_types=TERMINAL_RUN_EVENTS)
        if stored.event_id != terminal.event_id:
            return False
        await self.put_run(row)
        return True

    @abc.abstractmethod
    async def get_run(self, run_id: str) -> RunRow | None: ...

    @abc.abstractmethod
    async def list_runs(
        self, thread_id: str | None = None, *, statuses: Sequence[str] | None = None
    ) -> list[RunRow]:
        """Run rows of a thread (or of every thread), optionally by status (a sequence of names).

        Order, on every backend: by ``started_at``, or for a row without one, by the time of the
        first ``put_run`` of that run (a later update never moves it); ties by ``run_id``.
        """

    # -- deletes ---------------------------------------------------------------------------------
    @abc.abstractmethod
    async def delete_by_thread(self, thread_id: str) -> int:
        """Delete a thread's events and run rows; returns the number of events deleted.

        The thread's seq counter is kept: new events of the thread continue above the highest seq
        ever assigned (``last_seq`` is unchanged), so a follower's cursor never skips them.
        """

    @abc.abstractmethod
    async def delete_by_run(self, thread_id: str, run_id: str) -> int:
        """Delete one run's events and its row; returns the number of events deleted.

        The seq of the remaining events is unchanged, and new events continue above the highest
        seq ever assigned, so a deleted range never comes back with other content.
        """

    # -- helpers for backends --------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{type(self).__name__} is closed")


def expand_event_types(event_types: Sequence[str] | None) -> tuple[str, ...] | None:
    """Names to match for an ``event_types`` filter: each name plus its alias / canonical twin."""
    if event_types is None:
        return None
    if isinstance(event_types, str):
        raise TypeError("event_types must be a sequence of names, not a single string")
    names = {canonical_event_type(name) for name in event_types} | set(event_types)
    names |= {alias for alias, target in LEGACY_ALIASES.items() if target in names}
    return tuple(sorted(names))


def metadata_task_id(metadata: JsonObject) -> str | None:
    """The ``task_id`` a row is filed under (subagent events carry it in metadata)."""
    task_id = metadata.get("task_id")
    return task_id if isinstance(task_id, str) else None


_TERMINAL_TYPES: Final = tuple(sorted(TERMINAL_RUN_EVENTS))
