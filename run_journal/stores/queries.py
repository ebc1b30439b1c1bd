"""The frozen queries the store contract hands a backend: every field already checked.

``RunEventStore`` (``stores/base.py``) builds one from each public read's arguments; a backend reads
it and selects, never validating again. They sit below the contract so that clients of the contract
inside this package (``stores/retention.py``) can build them without importing it.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Final

from run_journal.catalog import Category

MESSAGE: Final = Category.MESSAGE.value


def stamp(moment: datetime) -> str:
    """Fixed-width UTC text for a timestamp, ``2024-05-01T13:00:00.000000+00:00``: text order is
    time order (``datetime.fromisoformat`` reads it back exactly)."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


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
class ThreadActivity:
    """A thread and its latest activity: the ``created_at`` of its newest event (highest seq), or,
    in a list scoped to a user, of that user's newest event in the thread."""

    thread_id: str
    last_activity_at: datetime

    @property
    def cursor(self) -> str:
        """This thread's place in the order, as the ``before`` of the next page:
        ``<stamp>/<thread_id>`` (``/`` is never part of an id)."""
        return f"{stamp(self.last_activity_at)}/{self.thread_id}"


@dataclasses.dataclass(frozen=True, slots=True)
class RecentThreadQuery:
    """Threads that hold events (of ``user_id``), most recently active first (ties: the greater
    thread id first): the first ``limit`` after ``before`` = (stamp, thread_id), when given."""

    limit: int
    before: tuple[str, str] | None = None
    user_id: str | None = None

    def admits(self, key: tuple[str, str]) -> bool:
        """Whether a thread at ``key`` = (stamp, thread_id) comes after the cursor."""
        return self.before is None or key < self.before


@dataclasses.dataclass(frozen=True, slots=True)
class StartQuery:
    """``run.start`` events of runs without a run row, ascending by run id: the first ``limit`` with
    a run id greater than ``after``."""

    limit: int
    after: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class RunQuery:
    """Run rows of a thread (or of every thread), with one of ``statuses`` and of ``user_id`` (when
    given), ordered by ``started_at``, else the time of the run's first ``put_run``; ties by
    ``run_id``; ``newest_first`` reverses the order. ``limit`` (None: all) rows, those after the run
    ``after`` names in that order (``after`` is a run of the listing: the store checks it)."""

    thread_id: str | None = None
    statuses: tuple[str, ...] | None = None
    user_id: str | None = None
    limit: int | None = None
    newest_first: bool = False
    after: str | None = None

    def admits(self, thread_id: str, status: str, user_id: str | None) -> bool:
        """Whether a run row with these fields passes the filters (the order and page aside)."""
        return (
            (self.thread_id is None or thread_id == self.thread_id)
            and (self.statuses is None or status in self.statuses)
            and (self.user_id is None or user_id == self.user_id)
        )
