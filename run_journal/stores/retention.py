"""Retention: ``RunEventStore.prune`` removes whole threads whose last event is older than a limit.

A client of the store contract: it reads through the public methods (``list_threads``, ``last_seq``,
``list_events``, ``list_runs``, ``list_bodies``), copies to an archive through ``put_bodies`` /
``put_batch`` / ``put_run`` (bodies first, read back), and removes through the deletion hooks a
backend may specialise (``_delete_thread_through``, one cheap step for a whole thread with its
bodies, or else ``_delete_run_through``, one run at a time, and ``_drop_bodies`` once the runs are
gone). ``stores/base.py`` owns the public ``prune`` method, checks its arguments, and delegates here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import AsyncIterator, Awaitable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

from run_journal.envelope import RunEvent
from run_journal.runs import STATUS_AFTER, RunRow, RunStatus
from run_journal.stores.queries import EventQuery
from run_journal.stores.urls import open_store

if TYPE_CHECKING:
    from run_journal.stores.base import RunEventStore

PRUNE_PAGE: Final = 1000
"""Threads examined per ``list_threads`` page, and events read or copied per step, by ``prune``."""
BODY_PAGE: Final = 100
"""Bodies copied to an archive per step (each may hold up to ``BODY_LIMIT`` bytes)."""
LIFECYCLE_TYPES: Final = tuple(sorted(STATUS_AFTER))
T = TypeVar("T")


DURABLE_ONLY: Final = frozenset({"memory"})
"""URL schemes an archive may not have: the store is gone when the process ends."""


def check_archive_url(url: str) -> str:
    """An archive given as a URL must outlive the call: ``memory://`` is refused."""
    scheme = url.partition("://")[0].lower().split("+", 1)[0] if isinstance(url, str) else ""
    if scheme in DURABLE_ONLY:
        raise ValueError(f"an archive must be a durable store, not {url}: a {scheme}:// store is "
                         "gone when the process ends (use jsonl:///archive, sqlite:///archive.db, "
                         "postgresql://... or redis://...)")
    return url


def prune_cutoff(older_than: timedelta | datetime) -> datetime:
    """The moment a thread's last event must be older than: now minus an age, or a given moment."""
    if isinstance(older_than, datetime):
        if older_than.tzinfo is None:
            raise ValueError("older_than as a datetime must be timezone-aware")
        return older_than.astimezone(UTC)
    if not isinstance(older_than, timedelta) or older_than < timedelta(0):
        raise ValueError(f"older_than is a non-negative timedelta or an aware datetime, got {older_than!r}")
    return datetime.now(UTC) - older_than


@dataclasses.dataclass(frozen=True, slots=True)
class PrunedThread:
    """What ``prune`` did with one thread whose last event is older than the limit."""

    thread_id: str
    outcome: str
    """``pruned``; ``would_prune`` (a dry run); or kept: ``running`` (a run still running),
    ``resumed`` (written to while being pruned: what was removed before stays removed) or
    ``not_archived`` (the archive could not take a copy with the same seqs)."""
    last_event_at: datetime
    last_seq: int
    events: int = 0
    """Events removed (or that a dry run would remove)."""
    runs: int = 0
    """Run rows removed (or that a dry run would remove)."""
    archived: int = 0
    """Events copied to the archive."""
    archived_bodies: int = 0
    """Bodies (``run_journal.bodies``) copied to the archive."""
    reason: str = ""
    """Why the thread was kept."""


@dataclasses.dataclass(frozen=True, slots=True)
class PruneResult:
    """The threads ``prune`` found older than ``cutoff``, and what it did with each."""

    cutoff: datetime
    dry_run: bool
    examined: int
    """Threads looked at (young ones included)."""
    threads: tuple[PrunedThread, ...]

    @property
    def pruned(self) -> list[PrunedThread]:
        """Threads removed (or, in a dry run, that would be)."""
        return [item for item in self.threads if item.outcome in {"pruned", "would_prune"}]

    @property
    def kept(self) -> list[PrunedThread]:
        """Old threads left in place, with the reason."""
        return [item for item in self.threads if item.outcome not in {"pruned", "would_prune"}]

    @property
    def events(self) -> int:
        return sum(item.events for item in self.threads)

    @property
    def runs(self) -> int:
        return sum(item.runs for item in self.threads)


class ArchiveError(RuntimeError):
    """The archive failed (could not be opened, or refused a write or a read): ``prune`` stops and
    removes nothing more; threads already copied and removed stay so. The message says where it
    failed; the archive's own error is the ``__cause__``."""


def _archive_failure(what: str, error: BaseException) -> ArchiveError:
    lines = str(error).strip().splitlines()
    return ArchiveError(f"{what}: {type(error).__name__}" + (f": {lines[0]}" if lines else ""))


class _Resumed(Exception):
    """The thread got events above the seq ``prune`` took as its last."""


class _Pruner:
    """One ``prune`` call, composed from the public contract; removals go through
    ``_delete_thread_through`` (a backend that deletes a thread in one cheap step) or else
    ``_delete_run_through``, one run at a time (each a short step of its own)."""

    def __init__(
        self, store: RunEventStore, cutoff: datetime, archive: RunEventStore | None, dry_run: bool
    ) -> None:
        self.store, self.cutoff, self.archive, self.dry_run = store, cutoff, archive, dry_run

    async def run(self, thread_id: str | None) -> PruneResult:
        if self.archive is not None and await asyncio.to_thread(_same_storage, self.store, self.archive):
            raise ValueError("the archive is the store being pruned")
        found: list[PrunedThread] = []
        examined = 0
        after: str | None = None
        while True:
            if thread_id is not None:
                page = [thread_id]
            else:
                page = await self.store.list_threads(limit=PRUNE_PAGE, after=after)
            for name in page:
                examined += 1
                outcome = await self.thread(name)
                if outcome is not None:
                    found.append(outcome)
                await asyncio.sleep(0)  # a store that never awaits I/O still lets others run
            if thread_id is not None or len(page) < PRUNE_PAGE:
                return PruneResult(self.cutoff, self.dry_run, examined, tuple(found))
            after = page[-1]

    async def thread(self, thread_id: str) -> PrunedThread | None:
        """Prune one thread if its last event is older than the cutoff (None: it is not)."""
        store = self.store
        through = await store.last_seq(thread_id)
        newest = await store._page(EventQuery(thread_id=thread_id, limit=1))  # newest first
        if not newest or newest[-1].seq > through or newest[-1].created_at >= self.cutoff:
            return None
        kept = functools.partial(PrunedThread, thread_id, last_event_at=newest[-1].created_at,
                                 last_seq=through)
        rows = await store.list_runs(thread_id)
        if (running := await self.running_run(thread_id, rows, through)) is not None:
            return kept("running", reason=f"run {running!r} is still running")
        if self.dry_run:
            count = sum([len(page) async for page in _pages(store, thread_id, through)])
            return kept("would_prune", events=count, runs=len(rows))
        archived = bodies = 0
        if self.archive is not None:
            bodies, problem = await copy_bodies(store, self.archive, thread_id)
            if not problem:
                archived, problem = await self.copy(self.archive, thread_id, through, rows)
            if problem:
                return kept("not_archived", archived=archived, archived_bodies=bodies, reason=problem)
        kept = functools.partial(kept, archived=archived, archived_bodies=bodies)
        whole = await store._delete_thread_through(thread_id, through, [row.run_id for row in rows])
        if whole is not None:
            return kept("pruned", events=whole, runs=len(rows))
        removed = runs = 0
        try:
            for row in rows:
                removed += await self.remove_run(thread_id, row.run_id, through)
                runs += 1
            async for page in _pages(store, thread_id, through):  # events of runs without a row
                for run_id in dict.fromkeys(event.run_id for event in page):
                    removed += await self.remove_run(thread_id, run_id, through)
            if not await store._drop_bodies(thread_id, through):
                raise _Resumed
        except _Resumed:
            return kept("resumed", events=removed, runs=runs, reason="written to while it was being pruned")
        return kept("pruned", events=removed, runs=runs)

    async def running_run(self, thread_id: str, rows: Sequence[RunRow], through: int) -> str | None:
        """A run that may still be running: its row says so (``pending`` only when touched after the
        cutoff), or its last lifecycle event is ``run.start``."""
        for row in rows:
            if row.status == RunStatus.RUNNING or (
                row.status == RunStatus.PENDING and row.updated_at >= self.cutoff
            ):
                return row.run_id
        last: dict[str, str] = {}
        async for page in _pages(self.store, thread_id, through, event_types=LIFECYCLE_TYPES):
            last.update((event.run_id, event.event_type) for event in page)
        return next((run_id for run_id, kind in last.items() if kind == "run.start"), None)

    async def remove_run(self, thread_id: str, run_id: str, through: int) -> int:
        if await self.store.last_seq(thread_id) != through:
            raise _Resumed
        return await self.store._delete_run_through(thread_id, run_id, through)

    async def copy(
        self, archive: RunEventStore, thread_id: str, through: int, rows: Sequence[RunRow]
    ) -> tuple[int, str]:
        """Copy the thread's events up to ``through`` and its run rows; (events copied, problem).

        Every event keeps its seq or nothing of it is written: seqs the archive has assigned
        already must hold these very events (an earlier prune that stopped half-way), and the
        rest must continue the archive's thread without a gap. A failure of the archive itself
        (not a refusal of the copy) is an ``ArchiveError``.
        """
        on_archive = functools.partial(_on_archive, f"while copying thread {thread_id!r}")
        expected = await on_archive(archive.last_seq(thread_id))
        copied = 0
        lowest: int | None = None
        async for page in _pages(self.store, thread_id, through):
            lowest = page[0].seq if lowest is None else lowest
            held = [event for event in page if event.seq <= expected]
            if held:
                there = await on_archive(_ids_between(archive, thread_id, held[0].seq - 1, held[-1].seq))
                wrong = next((event for event in held if there.get(event.seq) != event.event_id), None)
                if wrong is not None:
                    return copied, f"seq {wrong.seq} of this thread holds another event in the archive"
            fresh = page[len(held):]
            for event in fresh:
                if event.seq != expected + 1:
                    return copied, (f"seq {expected + 1} is missing here (a deleted run?) or taken in "
                                    f"the archive: seq {event.seq} would be renumbered")
                expected = event.seq
            try:
                stored = await on_archive(archive.put_batch([event.as_new_event() for event in fresh]))
            except ValueError as error:  # RunIdTakenError: the archive has that run id elsewhere
                return copied, str(error)
            moved = next((event for event, copy in zip(fresh, stored, strict=True)
                          if copy.seq != event.seq), None)
            if moved is not None:
                return copied, f"seq {moved.seq} got another seq in the archive (a concurrent writer?)"
            copied += len(page)
        for row in rows:
            try:
                stored_row = await on_archive(archive.put_run(row))
            except ValueError as error:
                return copied, f"run {row.run_id!r}: {error}"
            if stored_row.status != row.status:
                return copied, f"the archive holds run {row.run_id!r} as {stored_row.status}"
        return copied, await self.read_back(archive, thread_id, (lowest or 1) - 1, through, copied, rows)

    async def read_back(
        self, archive: RunEventStore, thread_id: str, after: int, through: int, copied: int,
        rows: Sequence[RunRow],
    ) -> str:
        """The archive's copy read back before anything is removed: as many events in the seqs the
        source holds (``after`` < seq <= ``through``) as the source, and every run row; otherwise
        the problem."""
        on_archive = functools.partial(_on_archive, f"while reading back thread {thread_id!r}")
        held = await on_archive(_count_between(archive, thread_id, after, through))
        if held != copied:
            return (f"the archive holds {held} of the {copied} events it took (read back before "
                    "removing anything)")
        kept = {row.run_id for row in await on_archive(archive.list_runs(thread_id))}
        missing = [row.run_id for row in rows if row.run_id not in kept]
        if missing:
            return f"the archive lost run row {missing[0]!r} it took (read back before removing anything)"
        return ""


async def _on_archive(what: str, call: Awaitable[T]) -> T:
    """An archive call whose failure (anything but the contract's refusals, ``ValueError`` and
    ``TypeError``) becomes an ``ArchiveError`` saying ``what`` was being done."""
    try:
        return await call
    except (ValueError, TypeError):
        raise
    except Exception as error:
        raise _archive_failure(what, error) from error


async def _count_between(store: RunEventStore, thread_id: str, after: int, through: int) -> int:
    return sum([1 async for _ in _between(store, thread_id, after, through)])


async def _ids_between(store: RunEventStore, thread_id: str, after: int, through: int) -> dict[int, str]:
    return {event.seq: event.event_id async for event in _between(store, thread_id, after, through)}


async def copy_bodies(store: RunEventStore, archive: RunEventStore, thread_id: str) -> tuple[int, str]:
    """Copy the thread's bodies to ``archive`` and read each page back; (bodies copied, problem)."""
    copied = 0
    after: str | None = None
    while page := await store.list_bodies(thread_id, after=after, limit=BODY_PAGE):
        await archive.put_bodies(page)
        there = await archive.get_bodies(thread_id, [body.digest for body in page])
        lost = next((body for body in page if there.get(body.digest) != body.data), None)
        if lost is not None:
            return copied, f"body {lost.digest} of this thread did not reach the archive"
        copied += len(page)
        after = page[-1].digest
    return copied, ""


async def _pages(
    store: RunEventStore, thread_id: str, through: int, *, event_types: Sequence[str] | None = None
) -> AsyncIterator[list[RunEvent]]:
    """The thread's events with seq <= ``through``, a page at a time, ascending."""
    cursor = 0
    while True:
        page = await store.list_events(thread_id, event_types=event_types, limit=PRUNE_PAGE,
                                       after_seq=cursor)
        kept = [event for event in page if event.seq <= through]
        if kept:
            yield kept
        if len(kept) < PRUNE_PAGE:
            return
        cursor = kept[-1].seq


async def _between(store: RunEventStore, thread_id: str, after: int, through: int) -> AsyncIterator[RunEvent]:
    """The thread's events with ``after < seq <= through``."""
    while True:
        page = await store.list_events(thread_id, limit=PRUNE_PAGE, after_seq=after)
        for event in page:
            if event.seq > through:
                return
            yield event
        if len(page) < PRUNE_PAGE:
            return
        after = page[-1].seq


def _same_storage(store: RunEventStore, other: RunEventStore) -> bool:
    """Whether two store objects are one store: the same object, or the same ``location`` (file
    stores on one path, resolved; server stores naming one database and namespace). Blocking (it
    resolves paths): call it from a worker thread."""
    if store is other:
        return True
    mine, theirs = store.location, other.location
    if isinstance(mine, Path) and isinstance(theirs, Path):
        return mine.resolve() == theirs.resolve()
    return mine is not None and mine == theirs


async def prune(
    store: RunEventStore, cutoff: datetime, archive: RunEventStore | str | None, *, dry_run: bool,
    thread_id: str | None,
) -> PruneResult:
    """``store.prune``, its arguments checked: an archive given as a URL is opened for the call."""
    if not isinstance(archive, str):
        return await _Pruner(store, cutoff, archive, dry_run).run(thread_id)
    opened = open_store(archive)  # a URL it cannot use is a ValueError, as for any store
    await _on_archive("cannot be opened", opened.setup())
    try:
        return await _Pruner(store, cutoff, opened, dry_run).run(thread_id)
    finally:
        await opened.aclose()
