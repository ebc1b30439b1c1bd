"""The journal writer's vocabulary: its error, retry policy, counters and deferred events.

Kept apart from ``writer.py`` (the machinery) so that what users configure and read (``RetryPolicy``,
``JournalStats``, ``JournalError``) is found in one small place.
"""

from __future__ import annotations

import abc
import dataclasses

from run_journal.envelope import NewEvent
from run_journal.stores.base import RunEventStore


class JournalError(RuntimeError):
    """Events or the run row could not be written (the message says how many and why)."""


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a failed write is retried before the writer reports failure."""

    attempts: int = 5
    initial_delay: float = 0.05
    max_delay: float = 2.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.initial_delay < 0 or self.max_delay < 0 or self.multiplier < 1:
            raise ValueError("RetryPolicy needs attempts >= 1, delays >= 0 and multiplier >= 1")

    def delay(self, attempt: int) -> float:
        return float(min(self.max_delay, self.initial_delay * self.multiplier**attempt))


@dataclasses.dataclass(frozen=True, slots=True)
class JournalStats:
    """A snapshot of the writer's counters (``journal.stats``)."""

    submitted: int = 0
    written: int = 0
    pending: int = 0
    retried: int = 0
    failed_batches: int = 0
    batches: int = 0
    row_writes: int = 0
    over_limit: int = 0
    superseded: int = 0
    """Terminal events not written because the run was already closed (by ``reconcile_orphans``)."""
    callback_errors: int = 0
    last_error: str | None = None


class DeferredEvent(abc.ABC):
    """An event whose payload needs a store read; resolved once, by the writer, in queue order."""

    _event: NewEvent | None = None

    _resolved: bool = False

    async def event(self, store: RunEventStore) -> NewEvent | None:
        if not self._resolved:
            self._event, self._resolved = await self.resolve(store), True
        return self._event

    def known_event(self) -> NewEvent | None:
        """The event as far as it is known before it is resolved (for ``unwritten_events``)."""
        return self._event

    @abc.abstractmethod
    async def resolve(self, store: RunEventStore) -> NewEvent | None:
        """The event to write, or None when the store shows it must not be written."""
