"""What a writer promises and reports: its retry policy, its counters and its errors."""

from __future__ import annotations

import dataclasses
from typing import Final


class JournalError(RuntimeError):
    """Events or the run row could not be written (the message says how many and why)."""


class StoreTimeoutError(TimeoutError):
    """A store call did not answer within ``store_timeout`` seconds."""


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


DEFAULT_RETRY: Final = RetryPolicy()


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
    store_calls: int = 0
    """Calls made to the store (every attempt counts): 1 per run is the common case."""
