"""The store contract: the public methods every backend offers, validated here once.

``RunEventStore`` owns the public API. Each public method checks its arguments (ids, ``user_id``,
limits, cursors, event types with their legacy aliases, statuses), makes sure the store is open and
set up, and hands the backend a frozen, already valid query: ``EventQuery`` for every event page
(``list_messages``, ``list_messages_by_run``, ``list_events`` and ``follow``), ``ThreadQuery`` and
``RunQuery`` for the listings. A backend implements only the selection (the ``_select_*`` methods and
the few other underscored hooks below), never the checks. Invariant 8 lives here too: a page read
with a ``user_id`` is refused if the backend returned another user's row, and file backends build
their paths with ``file_name`` / ``path_inside``, so no id can name a path outside the store.

``run_journal.testing`` is the conformance suite that proves a backend. Stores never import a
producer or a consumer.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import dataclasses
import hashlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

from run_journal.catalog import LEGACY_ALIASES, TERMINAL_RUN_EVENTS, Category, canonical_event_type
from run_journal.envelope import JsonObject, JsonValue, NewEvent, RunEvent, validate_id
from run_journal.runs import RunRow

CONTRACT_MAJOR: Final = 1
"""Major version of the stored-record contract; a store written by another major is refused."""
CONTRACT_VERSION: Final = "1.0.0"
MAX_PAGE: Final = 10_000
FOLLOW_PAGE: Final = 500
"""Events a follower reads at a time."""

MESSAGE: Final = Category.MESSAGE.value


class StoreError(RuntimeError):
    """A store could not do what was asked (unreachable, closed, incompatible, corrupt)."""


class IncompatibleStoreError(StoreError):
    """The store was written by a contract major version this library cannot read."""


class StoreClosedError(StoreError):
    """The store was closed; no further reads or writes are possible."""


EventInput = NewEvent | Mapping[str, Any]
Waiter = Callable[[int], Awaitable[None]]
"""``wait(after_seq)``: returns when events above ``after_seq`` may exist (see ``RunEventStore._watch``)."""


# -- argument checks ---------------------------------------------------------------------------------
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


def check_optional_id(name: str, value: str | None) -> str | None:
    """``None`` or a valid id (ValueError naming ``name`` otherwise)."""
    return None if value is None else validate_id(name, value)


def check_statuses(statuses: Sequence[str] | None) -> tuple[str, ...] | None:
    """``list_runs``' status filter as a tuple of names; a single string is a TypeError."""
    if statuses is None:
        return None
    if isinstance(statuses, str):
        raise TypeError("statuses must be a sequence of status names, not a single string")
    return tuple(str(status) for status in statuses)


def expand_event_types(event_types: Sequence[str] | None) -> tuple[str, ...] | None:
    """Names to match for an ``event_types`` filter: each name plus its alias / canonical twin."""
    if event_types is None:
        return None
    if isinstance(event_types, str):
        raise TypeError("event_types must be a sequence of names, not a single string")
    names = {canonical_event_type(name) for name in event_types} | set(event_types)
    names |= {alias for alias, target in LEGACY_ALIASES.items() if target in names}
    return tuple(sorted(names))


def exclusive_set(event_type: str, exclusive_types: Collection[str] | None) -> tuple[str, ...]:
    """The event types ``put_if_absent`` checks: ``exclusive_types`` plus the event's own, sorted."""
    if exclusive_types is None:
        return (event_type,)
    if exclusive_types is TERMINAL_RUN_EVENTS and event_type in TERMINAL_RUN_EVENTS:
        return TERMINAL_TYPES
    if isinstance(exclusive_types, str):
        raise TypeError("exclusive_types must be a collection of event types, not a single string")
    names = set(exclusive_types)
    for name in names:
        if not isinstance(name, str) or not name:
            raise TypeError(f"exclusive_types holds event type names, got {name!r}")
    return tuple(sorted(names | {event_type}))


TERMINAL_TYPES: Final = tuple(sorted(TERMINAL_RUN_EVENTS))


def metadata_task_id(metadata: JsonObject) -> str | None:
    """The ``task_id`` a row is filed under (subagent events carry it in metadata)."""
    task_id = metadata.get("task_id")
    return task_id if isinstance(task_id, str) else None


# -- paths of file backends --------------------------------------------------------------------------
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")


def file_name(identifier: str) -> str:
    """A file name for an id: readable prefix + 16 hex digits of its sha256, unique per id, never
    path syntax (ids that differ only by case or by characters a filesystem dislikes get their own)."""
    digest = hashlib.sha256(identifier.encode("utf-8")).hexdigest()[:16]
    return f"{_UNSAFE.sub('_', identifier)[:48]}-{digest}"


def path_inside(root: Path, *names: str) -> Path:
    """``root / names...``, refused (ValueError) if it resolves outside ``root`` (a symlink swapped
    in, say). Blocking (it resolves the path): call it from a worker thread."""
    path = root.joinpath(*names)
    resolved_root = root.resolve()
    if not path.resolve().is_relative_to(resolved_root):
        raise ValueError(f"{path} resolves outside the store directory {resolved_root}")
    return path


# -- queries -----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class EventQuery:
    """One page of a thread's events, every field already checked.

    The page holds the events with ``after_seq < seq < before_seq`` (a bound that is None is open)
    that match every filter: when ``after_seq`` is given, the first ``limit`` of them; otherwise
    (``newest_first``) the last ``limit``. It is returned in ascending seq order either way.
    """

    thread_id: str
    limit: int
    after_seq: int | None = None
    before_seq: int | None = None
    run_id: str | None = None
    messages_only: bool = False
    event_types: tuple[str, ...] | None = None
    """Every name to match, legacy aliases and their canonical twins included."""
    task_id: str | None = None
    user_id: str | None = None

    @property
    def newest_first(self) -> bool:
        """True when the page is the last ``limit`` matches (read from the newest end)."""
        return self.after_seq is None

    def admits(
        self, run_id: str, category: str, event_type: str, user_id: str | None, task_id: str | None
    ) -> bool:
        """Whether an event with these fields passes the filters (the seq bounds are not checked)."""
        return (
            (self.run_id is None or run_id == self.run_id)
            and (not self.messages_only or category == MESSAGE)
            and (self.event_types is None or event_type in self.event_types)
            and (self.task_id is None or task_id == self.task_id)
            and (self.user_id is None or user_id == self.user_id)
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ThreadQuery:
    """Thread ids that hold events (of ``user_id``, if given), ascending, the first ``limit`` above
    ``after``."""

    limit: int
    after: str | None = None
    user_id: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class RunQuery:
    """Run rows of a thread (or of every thread), with one of ``statuses`` (if given), ordered by
    ``started_at``, else the time of the run's first ``put_run``; ties by ``run_id``."""

    thread_id: str | None = None
    statuses: tuple[str, ...] | None = None


# -- the contract ------------------------------------------------------------------------------------
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
    _set_up: bool = False

    # -- lifecycle -------------------------------------------------------------------------------
    async def setup(self) -> None:
        """Create or migrate what the store needs; idempotent and safe to run concurrently.

        Every operation runs it first if it has not run yet.
        """
        self._check_open()
        await self._setup()
        self._set_up = True

    async def aclose(self) -> None:
        """Close the store: later calls raise ``StoreClosedError``, followers stop. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._release()

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

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{type(self).__name__} is closed")

    async def _ready(self) -> None:
        """Before every operation: refuse a closed store, set up one that is not yet."""
        self._check_open()
        if not self._set_up:
            await self.setup()

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
        event = NewEvent(thread_id, run_id, event_type, category, content, metadata, created_at,
                         event_id, user_id)
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
        await self._ready()
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
        event = NewEvent(thread_id, run_id, event_type, category, content, metadata, created_at,
                         event_id, user_id)
        return await self.put_event_if_absent(event, exclusive_types=exclusive_types)

    async def put_event_if_absent(
        self, event: NewEvent, *, exclusive_types: Collection[str] | None = None
    ) -> tuple[RunEvent, bool]:
        """``put_if_absent`` for an event that is already built (validated and serialized once):
        what a writer that queued ``NewEvent`` objects calls, so nothing is normalized twice."""
        types = exclusive_set(event.event_type, exclusive_types)
        await self._ready()
        return await self._put_if_absent(event, types)

    async def put_run(self, row: RunRow) -> RunRow:
        """Insert or update a run row; returns the row as stored.

        A finished run is never reopened: if the stored status is terminal and ``row.status``
        differs, nothing is written and the stored row is returned (see ``runs.may_replace``). A run
        belongs to the thread of its first ``put_run``: another thread is a ValueError.
        """
        await self._ready()
        return await self._put_run(row)

    async def put_run_close(self, events: Sequence[NewEvent], terminal: NewEvent, row: RunRow) -> bool:
        """Close a run: its last ``events`` (``put_batch``), its ``terminal`` event
        (``put_event_if_absent`` with ``exclusive_types=TERMINAL_RUN_EVENTS``) and its final ``row``
        (``put_run``). Idempotent like its parts (a retry writes nothing twice).

        False when the run already had another terminal event (``reconcile_orphans`` closed it):
        the events are written, the terminal event and the row are not. A row of another thread is
        a ValueError, raised after the events and the terminal event are written.

        This default takes the three steps one after the other, through the public methods; a
        backend that can do them in one step (a transaction: one commit per run end) overrides it,
        starting with ``_ready`` as every public method does.
        """
        if events:
            await self.put_batch(events)
        stored, _ = await self.put_event_if_absent(terminal, exclusive_types=TERMINAL_RUN_EVENTS)
        if stored.event_id != terminal.event_id:
            return False
        await self.put_run(row)
        return True

    # -- reads -----------------------------------------------------------------------------------
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
        return await self._page(EventQuery(
            thread_id=validate_id("thread_id", thread_id), limit=check_limit(limit),
            after_seq=check_cursor("after_seq", after_seq),
            before_seq=check_cursor("before_seq", before_seq),
            messages_only=True, user_id=check_optional_id("user_id", user_id),
        ))

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
        return await self._page(EventQuery(
            thread_id=validate_id("thread_id", thread_id), limit=check_limit(limit),
            after_seq=check_cursor("after_seq", after_seq),
            before_seq=check_cursor("before_seq", before_seq),
            run_id=validate_id("run_id", run_id), messages_only=True,
            user_id=check_optional_id("user_id", user_id),
        ))

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
        return await self._page(EventQuery(
            thread_id=validate_id("thread_id", thread_id), limit=check_limit(limit),
            after_seq=check_cursor("after_seq", after_seq) or 0,
            run_id=check_optional_id("run_id", run_id), event_types=expand_event_types(event_types),
            task_id=task_id, user_id=check_optional_id("user_id", user_id),
        ))

    async def _page(self, query: EventQuery) -> list[RunEvent]:
        await self._ready()
        if query.event_types == ():  # an empty filter matches nothing, on every backend
            return []
        page = await self._select_events(query)
        if query.user_id is not None and any(event.user_id != query.user_id for event in page):
            raise StoreError(f"{type(self).__name__} returned another user's event; nothing is returned")
        return page

    async def count_messages(self, thread_id: str, *, user_id: str | None = None) -> int:
        """How many ``message`` rows the thread holds (of ``user_id``, if given)."""
        validate_id("thread_id", thread_id)
        check_optional_id("user_id", user_id)
        await self._ready()
        return await self._count_messages(thread_id, user_id)

    async def list_threads(
        self, *, user_id: str | None = None, limit: int = 1000, after: str | None = None
    ) -> list[str]:
        """Thread ids that hold events, ascending: the first ``limit`` strictly greater than ``after``.

        Page through every thread by passing the last id of a page as the next ``after``.
        """
        query = ThreadQuery(
            limit=check_limit(limit), after=check_optional_id("after", after),
            user_id=check_optional_id("user_id", user_id),
        )
        await self._ready()
        return await self._select_threads(query)

    async def last_seq(self, thread_id: str) -> int:
        """The highest seq ever assigned in the thread (0 for a thread with no events)."""
        validate_id("thread_id", thread_id)
        await self._ready()
        return await self._last_seq(thread_id)

    async def follow(
        self, thread_id: str, *, after_seq: int = 0, user_id: str | None = None
    ) -> AsyncIterator[RunEvent]:
        """Yield the thread's events above ``after_seq`` as they are written, until closed.

        ``user_id`` is checked like every read's (ValueError for an invalid id). Stops when the
        store is closed or the consumer stops iterating (``aclose()`` on the iterator, or leaving an
        ``async for``). Sees writes from other processes too.
        """
        validate_id("thread_id", thread_id)
        cursor = check_cursor("after_seq", after_seq) or 0
        check_optional_id("user_id", user_id)
        await self._ready()
        async with self._watch(thread_id) as wait:
            while not self._closed:
                page = await self.list_events(
                    thread_id, limit=FOLLOW_PAGE, after_seq=cursor, user_id=user_id
                )
                for event in page:
                    cursor = event.seq
                    yield event
                if not page and not self._closed:
                    await wait(cursor)

    # -- runs ------------------------------------------------------------------------------------
    async def get_run(self, run_id: str) -> RunRow | None:
        validate_id("run_id", run_id)
        await self._ready()
        return await self._get_run(run_id)

    async def list_runs(
        self, thread_id: str | None = None, *, statuses: Sequence[str] | None = None
    ) -> list[RunRow]:
        """Run rows of a thread (or of every thread), optionally by status (a sequence of names).

        Order, on every backend: by ``started_at``, or for a row without one, by the time of the
        first ``put_run`` of that run (a later update never moves it); ties by ``run_id``.
        """
        query = RunQuery(thread_id=check_optional_id("thread_id", thread_id),
                         statuses=check_statuses(statuses))
        await self._ready()
        return await self._select_runs(query)

    # -- deletes ---------------------------------------------------------------------------------
    async def delete_by_thread(self, thread_id: str) -> int:
        """Delete a thread's events and run rows; returns the number of events deleted.

        The thread's seq counter is kept: new events of the thread continue above the highest seq
        ever assigned (``last_seq`` is unchanged), so a follower's cursor never skips them.
        """
        validate_id("thread_id", thread_id)
        await self._ready()
        return await self._delete_thread(thread_id)

    async def delete_by_run(self, thread_id: str, run_id: str) -> int:
        """Delete one run's events and its row; returns the number of events deleted.

        The seq of the remaining events is unchanged, and new events continue above the highest
        seq ever assigned, so a deleted range never comes back with other content.
        """
        validate_id("thread_id", thread_id)
        validate_id("run_id", run_id)
        await self._ready()
        return await self._delete_run(thread_id, run_id)

    # -- what a backend implements ---------------------------------------------------------------
    # Every argument is valid and the store is open and set up when these are called.
    async def _setup(self) -> None:  # noqa: B027 - optional hook: stores without schema do nothing
        """Create or migrate what the store needs (idempotent, safe to run concurrently)."""

    async def _release(self) -> None:  # noqa: B027 - optional hook: nothing to release by default
        """Let go of connections and files, wake waiting followers (``_closed`` is already set)."""

    @abc.abstractmethod
    async def _append(self, batch: Sequence[NewEvent]) -> list[RunEvent]:
        """Persist a batch atomically per thread, assigning seq; dedupe by event_id (a stored id or
        one repeated in the batch returns its stored record, as its own copy)."""

    @abc.abstractmethod
    async def _put_if_absent(self, event: NewEvent, types: tuple[str, ...]) -> tuple[RunEvent, bool]:
        """Atomically: the stored event with ``event.event_id``, else the run's first event of any of
        ``types`` (which includes ``event.event_type``), else write ``event``."""

    @abc.abstractmethod
    async def _put_run(self, row: RunRow) -> RunRow:
        """``put_run``: the guards (owning thread, ``runs.may_replace``) in the same atomic step."""

    @abc.abstractmethod
    async def _select_events(self, query: EventQuery) -> list[RunEvent]:
        """The page ``query`` describes, ascending by seq, as fresh records."""

    @abc.abstractmethod
    async def _count_messages(self, thread_id: str, user_id: str | None) -> int: ...

    @abc.abstractmethod
    async def _select_threads(self, query: ThreadQuery) -> list[str]: ...

    @abc.abstractmethod
    async def _last_seq(self, thread_id: str) -> int: ...

    @abc.abstractmethod
    async def _get_run(self, run_id: str) -> RunRow | None: ...

    @abc.abstractmethod
    async def _select_runs(self, query: RunQuery) -> list[RunRow]: ...

    @abc.abstractmethod
    async def _delete_thread(self, thread_id: str) -> int: ...

    @abc.abstractmethod
    async def _delete_run(self, thread_id: str, run_id: str) -> int: ...

    def _watch(self, thread_id: str) -> AbstractAsyncContextManager[Waiter]:
        """The wait hook of ``follow``: entered once per follower, it gives a ``wait(after_seq)``
        that returns when events above ``after_seq`` may exist (or the store closed). This default
        sleeps ``follow_poll_interval``; backends with a wake-up signal override it."""
        return _polling(self)


@contextlib.asynccontextmanager
async def _polling(store: RunEventStore) -> AsyncIterator[Waiter]:
    async def wait(after_seq: int) -> None:
        await asyncio.sleep(store.follow_poll_interval)

    yield wait
