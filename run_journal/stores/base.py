"""The store contract: the public methods every backend offers, validated here once.

``RunEventStore`` owns the public API. Each public method checks its arguments (ids, ``user_id``,
limits, cursors, event types with their legacy aliases, statuses), makes sure the store is open and
set up, and hands the backend a frozen, already valid query: ``EventQuery`` for every event page
(``list_messages``, ``list_messages_by_run``, ``list_events`` and ``follow``), ``ThreadQuery`` and
``RunQuery`` for the listings (``stores/queries.py``). A backend implements only the selection (the
``_select_*`` methods and the few other underscored hooks below), never the checks. Invariant 8 lives
here too: a page read with a ``user_id`` is refused if the backend returned another user's row (file
backends also derive every path from ids so that none escapes the store: ``stores/jsonl/layout.py``).

Retention (``prune``) is a client of this contract: ``stores/retention.py``, which the public
``prune`` method delegates to. ``run_journal.testing`` is the conformance suite that proves a backend.
Stores never import a producer or a consumer.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

from run_journal.bodies import (
    BODIES_KEY,
    BODY_LIMIT,
    MAX_BODY_READ,
    Body,
    check_bodies,
    check_digest,
    digest_of,
    is_digest,
)
from run_journal.catalog import LEGACY_ALIASES, TERMINAL_RUN_EVENTS, canonical_event_type
from run_journal.envelope import JsonObject, JsonValue, NewEvent, RunEvent, validate_id, validate_task_id
from run_journal.runs import RunRow, RunStatus
from run_journal.stores import retention
from run_journal.stores.queries import (
    MESSAGE,
    EventQuery,
    RecentThreadQuery,
    RunPage,
    RunQuery,
    SearchQuery,
    StartQuery,
    ThreadActivity,
    ThreadQuery,
    run_tags,
    search_cursor,
    stamp,
)
from run_journal.stores.retention import PrunedThread, PruneResult, prune_cutoff

CONTRACT_MAJOR: Final = 1
"""Major version of the stored-record contract; a store written by another major is refused."""
CONTRACT_VERSION: Final = "1.0.0"
MAX_PAGE: Final = 10_000
FOLLOW_PAGE: Final = 500
"""Events a follower reads at a time."""

__all__ = [  # with the contract, the names its modules below it define, where callers import them
    "BODY_LIMIT", "CONTRACT_MAJOR", "CONTRACT_VERSION", "FOLLOW_PAGE", "MAX_BODY_READ", "MAX_PAGE",
    "MAX_SEQ", "MESSAGE", "RUN_START", "TERMINAL_TYPES", "Body", "CorruptStoreError", "EventInput",
    "EventQuery", "FollowError", "IncompatibleStoreError", "PruneResult", "PrunedThread",
    "RecentThreadQuery", "RunEventStore", "RunIdTakenError", "RunPage", "RunQuery", "SearchQuery",
    "StartQuery", "StorageProblem", "StoreClosedError", "StoreError", "ThreadActivity", "ThreadQuery",
    "Waiter", "after_error", "as_new_event", "check_cursor", "check_limit", "check_optional_id",
    "check_run_starts", "check_statuses", "check_task_id", "check_thread_cursor", "exclusive_set",
    "expand_event_types", "metadata_task_id", "prune_cutoff", "run_tags", "search_cursor", "stamp",
]


class StoreError(RuntimeError):
    """A store could not do what was asked (unreachable, closed, incompatible, corrupt)."""


class IncompatibleStoreError(StoreError):
    """The store was written by a contract major version this library cannot read."""


class StoreClosedError(StoreError):
    """The store was closed; no further reads or writes are possible."""


class RunIdTakenError(StoreError, ValueError):
    """A ``run.start`` for a run id that already names another run (a ``run.start`` with another
    ``event_id``, in any thread). Nothing of the write was stored. It is a ``ValueError`` too: the
    store refuses what it was given, so the journal reports it at once instead of retrying."""

    def __init__(self, run_id: str, thread_id: str | None = None, event_id: str | None = None) -> None:
        self.run_id, self.thread_id, self.event_id = run_id, thread_id, event_id
        where = f" (its run.start {event_id!r} is in thread {thread_id!r})" if thread_id else ""
        super().__init__(
            f"run id {run_id!r} is already used by another run{where}; nothing was written. A new "
            "run needs a new run_id; only a retry of the same run.start (same event_id) is accepted"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.run_id, self.thread_id, self.event_id))


class CorruptStoreError(StoreError):
    """Something the store keeps on disk is damaged; the message names the file (and where in it)."""


class FollowError(StoreError):
    """``follow`` could not read the thread ``follow_attempts`` times in a row (a connection that
    does not come back). The message names the last seq it yielded: follow again after it."""


@dataclasses.dataclass(frozen=True, slots=True)
class StorageProblem:
    """Damage a store found in its own storage: ``where`` (a file, with a byte offset when there is
    one) and ``what`` is wrong there."""

    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


EventInput = NewEvent | Mapping[str, Any]
Waiter = Callable[[int], Awaitable[int | None]]
"""``wait(after_seq)``: returns when events above ``after_seq`` may exist, with a seq up to which
every event is visible to the next read (the thread's last seq, as the waiter learned it), or None
when it does not know one (see ``RunEventStore._watch``)."""


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


MAX_SEQ: Final = 2**63 - 1
"""The highest seq a store can hold (a signed 64-bit column on the SQL stores), so the highest cursor."""


def check_cursor(name: str, value: int | None) -> int | None:
    """A seq cursor (``after_seq``, ``before_seq``): None or an integer from 0 to ``MAX_SEQ``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQ:
        raise ValueError(f"{name} must be an integer from 0 to 2**63-1, got {value!r}")
    return value


def check_thread_cursor(before: str | None) -> tuple[str, str] | None:
    """``list_recent_threads``' ``before``: a ``ThreadActivity.cursor`` (``<stamp>/<thread_id>``),
    as (stamp, thread_id)."""
    if before is None:
        return None
    when, slash, thread_id = before.partition("/") if isinstance(before, str) else ("", "", "")
    try:
        moment = datetime.fromisoformat(when)
        if not slash or moment.tzinfo is None or stamp(moment) != when:
            raise ValueError(when)
        return when, validate_id("thread_id", thread_id)
    except ValueError:
        raise ValueError(f"before must be the cursor of a listed thread (ThreadActivity.cursor), "
                         f"got {before!r}") from None


def check_place_cursor(name: str, cursor: str | None, id_name: str) -> tuple[str, str] | None:
    """A ``<stamp>/<id>`` cursor as (stamp, id); a ValueError naming ``name`` otherwise."""
    if cursor is None:
        return None
    when, slash, key = cursor.partition("/") if isinstance(cursor, str) else ("", "", "")
    try:
        moment = datetime.fromisoformat(when)
        if not slash or moment.tzinfo is None or stamp(moment) != when:
            raise ValueError(when)
        return when, validate_id(id_name, key)
    except ValueError:
        raise ValueError(f"{name} must be a cursor this listing returned, got {cursor!r}") from None


def check_moment(name: str, value: datetime | None) -> str | None:
    """A timezone-aware ``datetime`` bound as its stamp."""
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {value!r}")
    return stamp(value)


def check_name(name: str, value: str | None) -> str | None:
    """A model, tool or caller name to search for: a non-empty string of at most 255 characters."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 255 or "\x00" in value:
        raise ValueError(f"{name} must be a non-empty name of at most 255 characters, got {value!r}")
    return value


def check_bound(name: str, value: float | None, kind: type[int | float]) -> Any:
    """A ``min_*`` bound: None or a finite number >= 0 (an integer for token counts)."""
    if value is None:
        return None
    allowed = (int,) if kind is int else (int, float)
    if isinstance(value, bool) or not isinstance(value, allowed) or not 0 <= value < float("inf"):
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"{name} must be {what} >= 0, got {value!r}")
    return kind(value)


def check_search_statuses(statuses: Sequence[str] | None) -> tuple[str, ...] | None:
    names = check_statuses(statuses)
    known = {status.value for status in RunStatus}
    for status in names or ():
        if status not in known:
            raise ValueError(f"statuses: {status!r} is not a run status ({', '.join(sorted(known))})")
    return names


def after_error(run_id: str) -> ValueError:
    """``list_runs(after=...)`` named a run that is not in the listing."""
    return ValueError(f"after={run_id!r} is not a run of this listing (deleted, or of another thread)")


def _check_flag(name: str, value: bool | None) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{name} must be True, False or None, got {value!r}")
    return value


def check_optional_id(name: str, value: str | None) -> str | None:
    """``None`` or a valid id (ValueError naming ``name`` otherwise)."""
    return None if value is None else validate_id(name, value)


def check_task_id(task_id: str | None) -> str | None:
    """A ``task_id`` read filter is held to the limit writes are (``envelope.validate_task_id``)."""
    if task_id is None:
        return None
    if not isinstance(task_id, str):
        raise ValueError(f"task_id must be a string, got {type(task_id).__name__}")
    return validate_task_id(task_id)


RUN_START: Final = "run.start"


def check_run_starts(batch: Iterable[NewEvent]) -> None:
    """A write may hold one ``run.start`` per run (repeats of the same event are one event): two
    with different event ids are two runs under one run id, refused before anything is written."""
    seen: dict[str, NewEvent] = {}
    for event in batch:
        if event.event_type == RUN_START:
            first = seen.setdefault(event.run_id, event)
            if first.event_id != event.event_id:
                raise RunIdTakenError(event.run_id, first.thread_id, first.event_id)


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
    follow_attempts: int = 6
    """Failed reads (or waits) in a row after which ``follow`` gives up with ``FollowError``."""
    follow_retry_delay: float = 0.1
    """Seconds ``follow`` waits after its first failure; doubled after each next one, at most 5 s."""

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

    @property
    def location(self) -> Path | str | None:
        """Where the store keeps its records: the directory or file of a file store (a ``Path``), a
        URL naming a server store's database and namespace (no password), or None for a store that
        lives in this process only. Two store objects with the same location are one store
        (``prune`` refuses such an archive)."""
        return None

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

    async def put_batch(
        self, events: Iterable[EventInput], *, bodies: Sequence[Body] = ()
    ) -> list[RunEvent]:
        """Append events (of any threads and runs) in order; one result per input, in input order.

        Everything is validated before anything is written. An event whose ``event_id`` is already
        stored (or repeated earlier in the batch) is not written again: its stored record is returned.

        ``bodies`` (``run_journal.bodies.Body``) are written in the same step as the events, and no
        event is ever visible before the bodies written with it: a refused write (an invalid body, a
        ``RunIdTakenError``) stores none of them; a write that fails half-way stores none on the
        backends with transactions or scripts, and on JSONL may leave bodies without their events
        (a retry puts them again at no cost). A body its thread already holds is left as it is.
        """
        batch = [as_new_event(item) for item in events]
        checked = check_bodies(bodies)
        if not batch:
            if checked:
                await self._ready()
                await self._put_bodies(checked)
            return []
        check_run_starts(batch)
        await self._ready()
        return await (self._append(batch, checked) if checked else self._append(batch))

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

    async def put_run_close(
        self, events: Sequence[NewEvent], terminal: NewEvent, row: RunRow, *, bodies: Sequence[Body] = ()
    ) -> bool:
        """Close a run: its last ``events`` (``put_batch``), its ``terminal`` event
        (``put_event_if_absent`` with ``exclusive_types=TERMINAL_RUN_EVENTS``) and its final ``row``
        (``put_run``). Idempotent like its parts (a retry writes nothing twice). ``bodies`` are
        written with the events, as ``put_batch`` writes them.

        False when the run already had another terminal event (``reconcile_orphans`` closed it):
        the events and bodies are written, the terminal event and the row are not. A row of another
        thread is a ValueError, raised after the events and the terminal event are written.
        """
        batch = [as_new_event(item) for item in events]
        check_run_starts(batch)
        checked = check_bodies(bodies)
        types = exclusive_set(terminal.event_type, TERMINAL_RUN_EVENTS)
        await self._ready()
        if checked:
            return await self._put_run_close(batch, terminal, types, row, checked)
        return await self._put_run_close(batch, terminal, types, row)

    # -- bodies ----------------------------------------------------------------------------------
    async def put_bodies(self, bodies: Sequence[Body]) -> None:
        """Store bodies (of any threads) on their own. Idempotent: a digest the thread already holds
        is left as it is, so putting a body again costs a lookup, never a second copy. Everything
        is checked first (each digest against its data, ``BODY_LIMIT``, the thread ids)."""
        checked = check_bodies(bodies)
        if checked:
            await self._ready()
            await self._put_bodies(checked)

    async def get_bodies(self, thread_id: str, digests: Iterable[str]) -> dict[str, bytes]:
        """The thread's bodies with these digests, as ``{digest: data}``; a digest the thread does
        not hold is absent. At most ``MAX_BODY_READ`` (1,000) distinct digests per call."""
        validate_id("thread_id", thread_id)
        if isinstance(digests, str):
            raise TypeError("digests is a collection of digests, not a single string")
        wanted = tuple(dict.fromkeys(check_digest("digest", digest) for digest in digests))
        if len(wanted) > MAX_BODY_READ:
            raise ValueError(f"get_bodies reads at most {MAX_BODY_READ} digests per call, got {len(wanted)}")
        if not wanted:
            return {}
        await self._ready()
        return await self._get_bodies(thread_id, wanted)

    async def list_bodies(
        self, thread_id: str, *, after: str | None = None, limit: int = MAX_BODY_READ
    ) -> list[Body]:
        """The thread's bodies ascending by digest: the first ``limit`` (1 to 1,000) with a digest
        greater than ``after`` (page on with the last one's digest)."""
        validate_id("thread_id", thread_id)
        cursor = None if after is None else check_digest("after", after)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_BODY_READ:
            raise ValueError(f"limit must be an integer from 1 to {MAX_BODY_READ}, got {limit!r}")
        await self._ready()
        return await self._list_bodies(thread_id, cursor, limit)

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
            task_id=check_task_id(task_id), user_id=check_optional_id("user_id", user_id),
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

    async def list_recent_threads(
        self, *, user_id: str | None = None, limit: int = 50, before: str | None = None
    ) -> list[ThreadActivity]:
        """Threads that hold events, most recently active first, each with its latest activity: the
        ``created_at`` of its newest event; with ``user_id``, only threads holding that user's
        events, by that user's newest event. Ties: the greater thread id first.

        Page on by passing the last item's ``cursor`` as the next ``before``. Every backend reads
        this order from an index, so a page costs the same however many threads the store holds.
        """
        query = RecentThreadQuery(
            limit=check_limit(limit), before=check_thread_cursor(before),
            user_id=check_optional_id("user_id", user_id),
        )
        await self._ready()
        return await self._select_recent_threads(query)

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

        A follower waits on the last seq it has *seen*, not the last it yielded: the events of other
        users (with ``user_id``) and deleted seqs are passed over once, so an idle follower costs
        nothing but its wait, whatever the filter.
        """
        validate_id("thread_id", thread_id)
        seen = check_cursor("after_seq", after_seq) or 0
        check_optional_id("user_id", user_id)
        await self._ready()
        failures = 0
        async with contextlib.AsyncExitStack() as watching:
            wait: Waiter | None = None
            visible: int | None = None  # every event up to this seq is visible to the next read
            while not self._closed:
                try:
                    if wait is None:
                        wait = await watching.enter_async_context(self._watch(thread_id))
                        visible = None
                    if visible is None:  # read before the page: the page then holds all up to it
                        visible = await self._last_seq(thread_id)
                    page = await self.list_events(
                        thread_id, limit=FOLLOW_PAGE, after_seq=seen, user_id=user_id
                    )
                    failures = 0
                    if len(page) < FOLLOW_PAGE:  # read to the end: nothing up to `visible` is left
                        seen = max(seen, visible)
                    if not page:
                        visible = None if self._closed else await wait(seen)
                        continue
                except StoreClosedError:
                    return
                except Exception as error:  # noqa: BLE001 - a lost connection: start again below
                    failures += 1
                    await self._follow_failed(error, failures, thread_id, seen)
                    with contextlib.suppress(Exception):  # the watch's connection is gone too
                        await watching.aclose()
                    wait = None
                    continue
                for event in page:
                    seen = max(seen, event.seq)
                    yield event

    async def _follow_failed(self, error: Exception, failures: int, thread_id: str, cursor: int) -> None:
        """After a failed read or wait of ``follow``: pause before it starts again after ``cursor``
        (reconnecting, resubscribing), or give up with ``FollowError`` after ``follow_attempts``."""
        if isinstance(error, ValueError) and not isinstance(error, StoreError):
            raise error  # not a connection problem: asking again cannot help
        if failures >= self.follow_attempts:
            raise FollowError(
                f"follow of thread {thread_id!r} failed {failures} times in a row "
                f"({type(error).__name__}: {error}); it yielded every event up to seq {cursor} it "
                f"was to yield: follow again with after_seq={cursor} to resume"
            ) from error
        await asyncio.sleep(min(self.follow_retry_delay * 2 ** (failures - 1), 5.0))

    # -- runs ------------------------------------------------------------------------------------
    async def get_run(self, run_id: str) -> RunRow | None:
        validate_id("run_id", run_id)
        await self._ready()
        return await self._get_run(run_id)

    async def list_runs_without_row(self, *, limit: int = 1000, after: str | None = None) -> list[RunEvent]:
        """The ``run.start`` events of runs that have no run row, ascending by run id: the first
        ``limit`` with a run id greater than ``after`` (page with the last one's ``run_id``).

        The journal stores a run's first events before its first row, so a worker that died in
        between leaves such a run (``reconcile_orphans`` closes it); a producer that writes events
        without rows leaves one for each of its runs.
        """
        query = StartQuery(limit=check_limit(limit), after=check_optional_id("after", after))
        await self._ready()
        return await self._select_starts_without_row(query)

    async def check_integrity(self, thread_ids: Sequence[str] | None = None) -> list[StorageProblem]:
        """Damage the store can see in its own storage (a file whose contents disagree with its
        index, an unreadable record), each with the file and offset; empty when there is none.
        On every backend also: a body whose data does not hash to its digest, and an event whose
        ``metadata["bodies"]`` names a digest its thread does not hold (or is not a list of
        digests). ``thread_ids``: only those threads (and their run rows). ``run-journal URL
        verify`` reports them. Nothing is changed by it."""
        threads = None if thread_ids is None else tuple(validate_id("thread_id", t) for t in thread_ids)
        await self._ready()
        problems = await self._check_integrity(threads)
        async for thread_id in self._threads_of(threads):
            problems += await check_bodies_of(self, thread_id)
        return problems

    async def _threads_of(self, thread_ids: tuple[str, ...] | None) -> AsyncIterator[str]:
        if thread_ids is not None:
            for thread_id in thread_ids:
                yield thread_id
            return
        query = ThreadQuery(limit=MAX_PAGE)
        while names := await self._select_threads(query):
            for thread_id in names:
                yield thread_id
            query = dataclasses.replace(query, after=names[-1])

    async def list_runs(
        self,
        thread_id: str | None = None,
        *,
        statuses: Sequence[str] | None = None,
        user_id: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
        after: str | None = None,
    ) -> list[RunRow]:
        """Run rows of a thread (or of every thread), optionally by status (a sequence of names) and
        by ``user_id``.

        Order, on every backend: by ``started_at``, or for a row without one, by the time of the
        first ``put_run`` of that run (a later update never moves it); ties by ``run_id``.
        ``newest_first`` reverses it. ``limit`` rows (all when None); ``after`` the run id of the
        previous page's last row: the page continues after it (a ValueError when it is not a run
        of this listing). Every backend pages this order from an index.
        """
        query = RunQuery(
            thread_id=check_optional_id("thread_id", thread_id), statuses=check_statuses(statuses),
            user_id=check_optional_id("user_id", user_id),
            limit=None if limit is None else check_limit(limit), newest_first=bool(newest_first),
            after=check_optional_id("after", after),
        )
        await self._ready()
        return await self._select_runs(query)

    async def count_runs(
        self, thread_id: str | None = None, *, statuses: Sequence[str] | None = None,
        user_id: str | None = None,
    ) -> int:
        """How many rows ``list_runs`` with these filters lists."""
        query = RunQuery(thread_id=check_optional_id("thread_id", thread_id),
                         statuses=check_statuses(statuses), user_id=check_optional_id("user_id", user_id))
        await self._ready()
        return await self._count_runs(query)

    async def search_runs(
        self,
        *,
        statuses: Sequence[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        model: str | None = None,
        tool: str | None = None,
        caller: str | None = None,
        min_cost_usd: float | None = None,
        min_tokens: int | None = None,
        has_error: bool | None = None,
        user_id: str | None = None,
        thread_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> RunPage:
        """Runs of every thread that match every filter given, newest first, one page at a time.

        ``statuses``: one of these (names of ``RunStatus``); ``since`` / ``until``: started within
        ``[since, until)`` (timezone-aware; a run that never started matches no time range);
        ``model`` / ``tool`` / ``caller``: used that model, called that tool, has calls of that
        caller (``RunRow.models``, ``tools``, ``callers``); ``min_cost_usd`` / ``min_tokens``: cost
        or total tokens at least that (an unknown cost matches no cost bound); ``has_error``:
        ``RunRow.has_error`` is that value; ``user_id``, ``thread_id``: of that user, that thread.

        The order is ``list_runs``' reversed: by ``started_at`` (else the first ``put_run``), ties by
        run id. ``limit`` rows; the page's ``next_cursor``, passed as ``cursor``, continues after its
        last row (None: there is nothing after it). A ValueError names a bad argument.
        """
        query = SearchQuery(
            limit=check_limit(limit) + 1, statuses=check_search_statuses(statuses),
            since=check_moment("since", since), until=check_moment("until", until),
            model=check_name("model", model), tool=check_name("tool", tool),
            caller=check_name("caller", caller),
            min_cost_usd=check_bound("min_cost_usd", min_cost_usd, float),
            min_tokens=check_bound("min_tokens", min_tokens, int),
            has_error=_check_flag("has_error", has_error),
            user_id=check_optional_id("user_id", user_id),
            thread_id=check_optional_id("thread_id", thread_id),
            before=check_place_cursor("cursor", cursor, "run_id"),
        )
        await self._ready()
        found = [] if query.statuses == () else await self._search_runs(query)
        if query.user_id is not None and any(row.user_id != query.user_id for _, row in found):
            raise StoreError(f"{type(self).__name__} returned another user's run; nothing is returned")
        page = found[:limit]
        more = len(found) > limit
        return RunPage(tuple(row for _, row in page),
                       search_cursor(page[-1][0], page[-1][1].run_id) if more else None)

    # -- deletes ---------------------------------------------------------------------------------
    async def delete_by_thread(self, thread_id: str) -> int:
        """Delete a thread's events, run rows and bodies; returns the number of events deleted.

        The thread's seq counter is kept: new events of the thread continue above the highest seq
        ever assigned (``last_seq`` is unchanged), so a follower's cursor never skips them.
        """
        validate_id("thread_id", thread_id)
        await self._ready()
        return await self._delete_thread(thread_id)

    async def delete_by_run(self, thread_id: str, run_id: str) -> int:
        """Delete one run's events and its row; returns the number of events deleted. The thread's
        bodies are kept (its other runs may reference them).

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
    async def _append(self, batch: Sequence[NewEvent], bodies: Sequence[Body] = ()) -> list[RunEvent]:
        """Persist a batch atomically per thread, assigning seq; dedupe by event_id (a stored id or
        one repeated in the batch returns its stored record, as its own copy). ``bodies`` go in the
        same step (``_put_bodies``' rules), never after the events."""

    @abc.abstractmethod
    async def _put_if_absent(self, event: NewEvent, types: tuple[str, ...]) -> tuple[RunEvent, bool]:
        """Atomically: the stored event with ``event.event_id``, else the run's first event of any of
        ``types`` (which includes ``event.event_type``), else write ``event``."""

    @abc.abstractmethod
    async def _put_run(self, row: RunRow) -> RunRow:
        """``put_run``: the guards (owning thread, ``runs.may_replace``) in the same atomic step."""

    async def _put_run_close(
        self, batch: Sequence[NewEvent], terminal: NewEvent, types: tuple[str, ...], row: RunRow,
        bodies: Sequence[Body] = (),
    ) -> bool:
        """``put_run_close``: ``types`` are the terminal's exclusive types. This default takes the
        three steps one after the other (``_append``, ``_put_if_absent``, ``_put_run``); a backend
        that can do them in one step (one transaction, one locked step) overrides it."""
        if batch:
            await (self._append(batch, bodies) if bodies else self._append(batch))
        elif bodies:
            await self._put_bodies(bodies)
        stored, _ = await self._put_if_absent(terminal, types)
        if stored.event_id != terminal.event_id:
            return False
        await self._put_run(row)
        return True

    @abc.abstractmethod
    async def _put_bodies(self, bodies: Sequence[Body]) -> None:
        """Store each body unless its thread already holds its digest (one per (thread, digest),
        checked). Concurrent writers of the same digest both succeed."""

    @abc.abstractmethod
    async def _get_bodies(self, thread_id: str, digests: tuple[str, ...]) -> dict[str, bytes]:
        """The stored data of those of ``digests`` (distinct, at most ``MAX_BODY_READ``) the thread holds."""

    @abc.abstractmethod
    async def _list_bodies(self, thread_id: str, after: str | None, limit: int) -> list[Body]:
        """The thread's bodies ascending by digest, above ``after``, at most ``limit``."""

    @abc.abstractmethod
    async def _drop_bodies(self, thread_id: str, through_seq: int) -> bool:
        """``prune``'s last step for a thread it emptied run by run: delete the thread's bodies if
        its last seq is still ``through_seq``, checked in the same step against writers of the
        thread (False, nothing deleted, when it was written to)."""

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
    async def _select_runs(self, query: RunQuery) -> list[RunRow]:
        """The rows of ``query`` in its order; with ``query.after``, a ValueError (``after_error``)
        when that run is not one of the listing's."""

    async def _count_runs(self, query: RunQuery) -> int:
        """``count_runs``. This default lists the rows; the backends here count in their index."""
        return len(await self._select_runs(query))

    async def _search_runs(self, query: SearchQuery) -> list[tuple[str, RunRow]]:
        """``search_runs``: the first ``query.limit`` matches (``SearchQuery.admits``), newest first,
        each with the stamp of its place in the order. This default reads every row (slow on a large
        store), placing a row that never started at its ``updated_at``; the backends here override
        it with their own order (and indexes, where they have them)."""
        placed = [(stamp(row.started_at or row.updated_at), row)
                  for row in await self._select_runs(RunQuery(thread_id=query.thread_id))]
        placed.sort(key=lambda item: (item[0], item[1].run_id), reverse=True)
        return [item for item in placed if query.admits(item[1], item[0])][: query.limit]

    async def _select_recent_threads(self, query: RecentThreadQuery) -> list[ThreadActivity]:
        """``list_recent_threads``. This default reads every thread's newest event and sorts them
        (slow on a large store); every backend here keeps an index of the order instead."""
        found: list[ThreadActivity] = []
        threads = ThreadQuery(limit=MAX_PAGE, user_id=query.user_id)
        while names := await self._select_threads(threads):
            for thread_id in names:
                newest = await self._select_events(EventQuery(thread_id, 1, user_id=query.user_id))
                if newest and query.admits((stamp(newest[-1].created_at), thread_id)):
                    found.append(ThreadActivity(thread_id, newest[-1].created_at))
            threads = dataclasses.replace(threads, after=names[-1])
        found.sort(key=lambda item: (item.last_activity_at, item.thread_id), reverse=True)
        return found[: query.limit]

    @abc.abstractmethod
    async def _delete_thread(self, thread_id: str) -> int: ...

    @abc.abstractmethod
    async def _delete_run(self, thread_id: str, run_id: str) -> int: ...

    async def _select_starts_without_row(self, query: StartQuery) -> list[RunEvent]:
        """``list_runs_without_row``. This default pages through every thread's ``run.start``
        events (slow on a large store); every backend here keeps an index of run starts instead."""
        found: dict[str, RunEvent] = {}
        threads = ThreadQuery(limit=MAX_PAGE)
        while names := await self._select_threads(threads):
            for thread_id in names:
                page = EventQuery(thread_id, MAX_PAGE, after_seq=0, event_types=(RUN_START,))
                while events := await self._select_events(page):
                    for event in events:
                        run_id = event.run_id
                        if (query.after is None or run_id > query.after) and run_id not in found \
                                and await self._get_run(run_id) is None:
                            found[run_id] = event
                    page = dataclasses.replace(page, after_seq=events[-1].seq)
            threads = dataclasses.replace(threads, after=names[-1])
        return [found[run_id] for run_id in sorted(found)[: query.limit]]

    async def _check_integrity(self, thread_ids: tuple[str, ...] | None) -> list[StorageProblem]:
        """``check_integrity``: a backend that keeps its own files checks them; none by default."""
        return []

    def _watch(self, thread_id: str) -> AbstractAsyncContextManager[Waiter]:
        """The wait hook of ``follow``: entered once per follower, it gives a ``wait(after_seq)``
        that returns when events above ``after_seq`` may exist (or the store closed), with the
        thread's last seq when it knows it (see ``Waiter``). This default reads ``_last_seq`` every
        ``follow_poll_interval`` seconds until it is above ``after_seq``; backends with a wake-up
        signal override it."""
        return _polling(self, thread_id)

    # -- retention -------------------------------------------------------------------------------
    async def prune(
        self,
        *,
        older_than: timedelta | datetime,
        thread_id: str | None = None,
        archive: RunEventStore | str | None = None,
        dry_run: bool = False,
    ) -> PruneResult:
        """Remove whole threads whose last event is older than ``older_than`` (an age, or a
        timezone-aware moment): their events and run rows, one run at a time.

        ``thread_id`` limits it to that thread. ``archive`` (a store or a URL) gets a copy of each
        thread first, its bodies (read back from the archive), then its events with the same event
        ids and seqs, and only what was copied is removed; a thread whose copy would get other seqs
        is kept. A thread removed loses its bodies too. A thread with a running run (row ``running``, or
        ``pending`` and touched after the limit, or a run whose last lifecycle event is
        ``run.start``) is kept, and so is a thread written to while it is being pruned. The thread's
        seq counter is kept, as ``delete_by_thread`` keeps it: a thread id used again later
        continues above its old seqs. ``dry_run`` reports what would go and changes nothing.
        (The engine is ``stores/retention.py``.)
        """
        cutoff = prune_cutoff(older_than)
        check_optional_id("thread_id", thread_id)
        if isinstance(archive, str):
            retention.check_archive_url(archive)
        if dry_run:  # nothing is copied: the archive is not even opened
            archive = None
        if archive is not None and not isinstance(archive, RunEventStore | str):
            raise TypeError(f"archive is a store or a store URL, got {type(archive).__name__}")
        await self._ready()
        return await retention.prune(self, cutoff, archive, dry_run=dry_run, thread_id=thread_id)

    async def _delete_run_through(self, thread_id: str, run_id: str, through_seq: int) -> int:
        """Delete one finished run's events with seq <= ``through_seq`` and its row; the number of
        events deleted. ``prune`` calls it after checking that the thread holds nothing above
        ``through_seq``; this default deletes the whole run (``delete_by_run``: one step). A
        backend overrides it to bound the delete by seq and split a large run into short steps."""
        return await self._delete_run(thread_id, run_id)

    async def _delete_thread_through(
        self, thread_id: str, through_seq: int, run_ids: Collection[str]
    ) -> int | None:
        """``prune``'s delete of a whole thread in one step, for a backend where that is cheap and
        deleting run by run is not: the thread's events, run rows and bodies, provided that, checked in the
        same step, its last seq is still ``through_seq`` and its run rows are among ``run_ids``;
        the number of events deleted. None (nothing deleted): not done, ``prune`` goes run by run
        (and finds the thread written to, if it was). This default always returns None."""
        return None


async def check_bodies_of(store: RunEventStore, thread_id: str) -> list[StorageProblem]:
    """``check_integrity``'s look at one thread's bodies and the digests its events reference."""
    problems: list[StorageProblem] = []
    held: set[str] = set()
    after: str | None = None
    while page := await store._list_bodies(thread_id, after, 100):
        for body in page:
            held.add(body.digest)
            if digest_of(body.data) != body.digest:
                problems.append(StorageProblem(f"thread {thread_id} body {body.digest}",
                                               "its data does not hash to its digest (damaged)"))
        after = page[-1].digest
    query = EventQuery(thread_id, MAX_PAGE, after_seq=0)
    while events := await store._select_events(query):
        for event in events:
            listed = event.metadata.get(BODIES_KEY)
            if listed is None:
                continue
            where = f"thread {thread_id} seq {event.seq}"
            if not isinstance(listed, list) or not all(isinstance(item, str) and is_digest(item)
                                                       for item in listed):
                problems.append(StorageProblem(where, f'metadata["{BODIES_KEY}"] is not a list of digests'))
                continue
            problems += [StorageProblem(where, f"references body {digest}, which the thread does not hold")
                         for digest in listed if digest not in held]
        query = dataclasses.replace(query, after_seq=events[-1].seq)
    return problems


@contextlib.asynccontextmanager
async def _polling(store: RunEventStore, thread_id: str) -> AsyncIterator[Waiter]:
    async def wait(after_seq: int) -> int | None:
        return await poll_last_seq(store, thread_id, after_seq)

    yield wait


async def poll_last_seq(store: RunEventStore, thread_id: str, after_seq: int) -> int | None:
    """Sleep ``follow_poll_interval`` between reads of the thread's last seq until it is above
    ``after_seq`` (returned), or the store is closed (None): one cheap read per interval."""
    while True:
        await asyncio.sleep(store.follow_poll_interval)
        if store._closed:
            return None
        last = await store._last_seq(thread_id)
        if last > after_seq:
            return last
