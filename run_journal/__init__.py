"""run-journal: a durable, ordered, append-only record of every LangChain / LangGraph agent run."""

import importlib
import os
from typing import TYPE_CHECKING, Any

from run_journal.catalog import Category, middleware_event_type
from run_journal.envelope import NewEvent, RunEvent
from run_journal.runs import RunRow, RunStatus, UsageTotals, status_of
from run_journal.stores.base import (
    CorruptStoreError,
    FollowError,
    IncompatibleStoreError,
    RunEventStore,
    RunIdTakenError,
    RunPage,
    StoreClosedError,
    StoreError,
)
from run_journal.stores.urls import open_store
from run_journal.writer import JournalError, JournalStats, RetryPolicy, StoreTimeoutError

if TYPE_CHECKING:
    from run_journal.calls import ModelCall, ModelRequest, model_calls
    from run_journal.checks import record_score
    from run_journal.journal import AsyncRunJournal, RunJournal
    from run_journal.journal.subagents import subagent_run_event, wrap_subagent_stream
    from run_journal.stores.jsonl import JsonlRunEventStore
    from run_journal.stores.memory import MemoryRunEventStore
    from run_journal.stores.redis import RedisRunEventStore
    from run_journal.stores.sql import SqlRunEventStore
    from run_journal.trajectory import (
        RunComparison,
        Trajectory,
        compare_runs,
        read_trajectory,
        trajectory_of,
    )
    from run_journal.trends import UsageBucket, usage_trend
    from run_journal.workspace import (
        WorkspaceLimits,
        WorkspaceSnapshot,
        arecord_workspace_changes,
        record_workspace_changes,
    )

_LAZY = {
    "AsyncRunJournal": "run_journal.journal",
    "RunJournal": "run_journal.journal",
    "subagent_run_event": "run_journal.journal.subagents",
    "wrap_subagent_stream": "run_journal.journal.subagents",
    "WorkspaceLimits": "run_journal.workspace",
    "WorkspaceSnapshot": "run_journal.workspace",
    "arecord_workspace_changes": "run_journal.workspace",
    "record_workspace_changes": "run_journal.workspace",
    "MemoryRunEventStore": "run_journal.stores.memory",
    "JsonlRunEventStore": "run_journal.stores.jsonl",
    "SqlRunEventStore": "run_journal.stores.sql",
    "RedisRunEventStore": "run_journal.stores.redis",
    "RunComparison": "run_journal.trajectory",
    "Trajectory": "run_journal.trajectory",
    "compare_runs": "run_journal.trajectory",
    "read_trajectory": "run_journal.trajectory",
    "trajectory_of": "run_journal.trajectory",
    "record_score": "run_journal.checks",
    "ModelCall": "run_journal.calls",
    "ModelRequest": "run_journal.calls",
    "model_calls": "run_journal.calls",
    "UsageBucket": "run_journal.trends",
    "usage_trend": "run_journal.trends",
}
"""Names that load on first use: LangChain, LangGraph, SQLAlchemy and the Redis client are only paid
for by the programs that use them (the command line starts without them)."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'run_journal' has no attribute {name!r}")


__all__ = [
    "AsyncRunJournal",
    "Category",
    "CorruptStoreError",
    "FollowError",
    "IncompatibleStoreError",
    "JournalError",
    "JournalStats",
    "JsonlRunEventStore",
    "MemoryRunEventStore",
    "ModelCall",
    "ModelRequest",
    "NewEvent",
    "RedisRunEventStore",
    "RetryPolicy",
    "RunComparison",
    "RunEvent",
    "RunEventStore",
    "RunIdTakenError",
    "RunJournal",
    "RunPage",
    "RunRow",
    "RunStatus",
    "SqlRunEventStore",
    "StoreClosedError",
    "StoreError",
    "StoreTimeoutError",
    "Trajectory",
    "UsageBucket",
    "UsageTotals",
    "WorkspaceLimits",
    "WorkspaceSnapshot",
    "arecord_workspace_changes",
    "compare_runs",
    "middleware_event_type",
    "model_calls",
    "open_store",
    "read_trajectory",
    "record_score",
    "record_workspace_changes",
    "status_of",
    "subagent_run_event",
    "trajectory_of",
    "usage_trend",
    "wrap_subagent_stream",
]

if os.environ.get("RUN_JOURNAL_URL"):  # journal every run of this process (loads LangChain only then)
    importlib.import_module("run_journal.activation").activate_from_env()
