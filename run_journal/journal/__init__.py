"""The journal: callbacks in (``handler``), events and row snapshots out (``recorder``).

``payloads`` is the toolkit every producer shapes its payloads with; ``subagents`` maps ``task_*``
stream chunks and wraps such streams; ``producer`` is what those helpers need from a journal;
``state`` is the recorder's bookkeeping. The journal classes and ``RunRecorder`` load on first use, so a
helper (the workspace recorder names ``producer``) can import this package without the callback stack.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from run_journal.journal.handler import AsyncRunJournal, RunJournal, UnwrittenEvents
    from run_journal.journal.recorder import RunRecorder

_LAZY = {
    "AsyncRunJournal": "run_journal.journal.handler",
    "RunJournal": "run_journal.journal.handler",
    "UnwrittenEvents": "run_journal.journal.handler",
    "RunRecorder": "run_journal.journal.recorder",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'run_journal.journal' has no attribute {name!r}")


__all__ = ["AsyncRunJournal", "RunJournal", "RunRecorder", "UnwrittenEvents"]
