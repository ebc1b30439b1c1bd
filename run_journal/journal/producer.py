"""What a producer helper needs from a journal: the one interface ``RunJournal`` offers them.

The subagent stream wrapper (:func:`~run_journal.journal.subagents.wrap_subagent_stream`), the
workspace recorder (:func:`~run_journal.workspace.record_workspace_changes`) and producers of your
own take any object with these two recorders, so they can be tested with a stand-in.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class ProducerJournal(Protocol):
    """The recorders a producer writes through (``RunJournal`` provides both; ``isinstance`` checks
    that an object has them)."""

    def record(self, event_type: str, *, content: Any = "", metadata: Any = None) -> Any:
        """Queue a catalog event in run order."""

    def record_subagent_chunk(self, chunk: Any) -> Any:
        """Journal one ``task_*`` stream chunk (malformed ones are ignored)."""
