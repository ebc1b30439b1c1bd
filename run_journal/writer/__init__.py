"""The journal's writer: one queue, one drain task, one loop (see :mod:`run_journal.writer.core`)."""

from run_journal.writer.core import STALL_TIMEOUT, Deferred, EventWriter, Item, RowStored, WithBodies
from run_journal.writer.loops import LoopThread, writer_thread
from run_journal.writer.policy import JournalError, JournalStats, RetryPolicy, StoreTimeoutError
from run_journal.writer.sources import (
    OPEN_TIMEOUT,
    REOPEN_INTERVAL,
    SharedStore,
    StoreUnavailableError,
    shared_store,
)

__all__ = [
    "OPEN_TIMEOUT",
    "REOPEN_INTERVAL",
    "STALL_TIMEOUT",
    "Deferred",
    "EventWriter",
    "Item",
    "JournalError",
    "JournalStats",
    "LoopThread",
    "RetryPolicy",
    "RowStored",
    "SharedStore",
    "StoreTimeoutError",
    "StoreUnavailableError",
    "WithBodies",
    "shared_store",
    "writer_thread",
]
