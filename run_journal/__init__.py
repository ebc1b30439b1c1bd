"""run-journal: a durable, ordered, append-only record of every LangChain / LangGraph agent run."""

from run_journal.catalog import Category, middleware_event_type
from run_journal.envelope import NewEvent, RunEvent
from run_journal.journal import RunJournal
from run_journal.runs import RunRow, RunStatus, UsageTotals, status_of
from run_journal.stores.base import RunEventStore, StoreError
from run_journal.stores.urls import open_store
from run_journal.subagents import subagent_run_event, wrap_subagent_stream
from run_journal.workspace import (
    WorkspaceLimits,
    WorkspaceSnapshot,
    arecord_workspace_changes,
    record_workspace_changes,
)
from run_journal.writer import JournalError, JournalStats, RetryPolicy

__all__ = [
    "Category",
    "JournalError",
    "JournalStats",
    "NewEvent",
    "RetryPolicy",
    "RunEvent",
    "RunEventStore",
    "RunJournal",
    "RunRow",
    "RunStatus",
    "StoreError",
    "UsageTotals",
    "WorkspaceLimits",
    "WorkspaceSnapshot",
    "arecord_workspace_changes",
    "middleware_event_type",
    "open_store",
    "record_workspace_changes",
    "status_of",
    "subagent_run_event",
    "wrap_subagent_stream",
]
