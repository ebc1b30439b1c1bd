"""run-journal: a durable, ordered, append-only record of every LangChain / LangGraph agent run."""

from run_journal.catalog import Category, middleware_event_type
from run_journal.envelope import NewEvent, RunEvent
from run_journal.runs import RunRow, RunStatus, UsageTotals, status_of
from run_journal.stores.base import RunEventStore, StoreError
from run_journal.stores.urls import open_store

__all__ = [
    "Category",
    "NewEvent",
    "RunEvent",
    "RunEventStore",
    "RunRow",
    "RunStatus",
    "StoreError",
    "UsageTotals",
    "middleware_event_type",
    "open_store",
    "status_of",
]
