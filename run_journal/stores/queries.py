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
from run_journal.runs import RunRow

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


TAG_KINDS: Final = ("model", "tool", "caller")
"""What a run is tagged with for search: ``model:<name>``, ``tool:<name>``, ``caller:<name>``."""


def run_tags(row: RunRow) -> tuple[str, ...]:
    """The search tags of a run row, sorted: one per model, tool and caller it used."""
    return tuple(sorted({*(f"model:{name}" for name in row.models),
                         *(f"tool:{name}" for name in row.tools),
                         *(f"caller:{name}" for name in row.callers)}))


@dataclasses.dataclass(frozen=True, slots=True)
class SearchQuery:
    """Runs of every thread that match every filter given, newest first (by ``started_at``, else the
    time of the run's first ``put_run``; ties: the greater run id first, as ``list_runs``): the first
    ``limit`` whose place (stamp, run_id) is below ``before``, when given.

    ``since`` / ``until`` (stamps) bound ``started_at``: ``since <= started_at < until`` (a run that
    never started matches no time range). ``min_cost_usd`` / ``min_tokens``: at least that much (a
    run of unknown cost matches no cost bound). ``has_error``: ``RunRow.has_error`` is that value.
    """

    limit: int
    statuses: tuple[str, ...] | None = None
    since: str | None = None
    until: str | None = None
    model: str | None = None
    tool: str | None = None
    caller: str | None = None
    min_cost_usd: float | None = None
    min_tokens: int | None = None
    has_error: bool | None = None
    user_id: str | None = None
    thread_id: str | None = None
    before: tuple[str, str] | None = None

    @property
    def tags(self) -> tuple[str, ...]:
        """The tags a match carries (see ``run_tags``)."""
        named = (("model", self.model), ("tool", self.tool), ("caller", self.caller))
        return tuple(f"{kind}:{value}" for kind, value in named if value is not None)

    def admits(self, row: RunRow, place: str) -> bool:
        """Whether ``row``, at ``place`` (the stamp of its place in the order), is one of the matches
        (the limit aside)."""
        if self.before is not None and (place, row.run_id) >= self.before:
            return False
        if self.since is not None or self.until is not None:
            if row.started_at is None:
                return False
            started = stamp(row.started_at)
            if (self.since is not None and started < self.since) or (
                    self.until is not None and started >= self.until):
                return False
        cost = row.usage.cost_usd
        return (
            (self.statuses is None or str(row.status) in self.statuses)
            and (self.thread_id is None or row.thread_id == self.thread_id)
            and (self.user_id is None or row.user_id == self.user_id)
            and (self.model is None or self.model in row.models)
            and (self.tool is None or self.tool in row.tools)
            and (self.caller is None or self.caller in row.callers)
            and (self.min_cost_usd is None or (cost is not None and cost >= self.min_cost_usd))
            and (self.min_tokens is None or row.usage.total_tokens >= self.min_tokens)
            and (self.has_error is None or row.has_error == self.has_error)
        )


def search_cursor(place: str, run_id: str) -> str:
    """A run's place in the search order as the ``cursor`` of the next page: ``<stamp>/<run_id>``."""
    return f"{place}/{run_id}"


@dataclasses.dataclass(frozen=True, slots=True)
class RunPage:
    """One page of ``search_runs``: its rows, newest first, and the ``cursor`` of the next page
    (None when this one is the last)."""

    rows: tuple[RunRow, ...]
    next_cursor: str | None = None
