"""The subagent chunk mapper and stream wrapper, importable under their first module name.

They live in :mod:`run_journal.journal.subagents`, beside the journal's other producer helpers;
``run_journal.subagent_run_event`` and ``run_journal.wrap_subagent_stream`` are the public names.
"""

from run_journal.journal.producer import ProducerJournal
from run_journal.journal.subagents import (
    DESCRIPTION_LIMIT,
    ERROR_TEXT_LIMIT,
    MAX_TOOL_CALLS,
    RESULT_TEXT_LIMIT,
    STEP_TEXT_LIMIT,
    TERMINAL_STATUSES,
    TOOL_ARGS_PREVIEW_LIMIT,
    subagent_run_event,
    wrap_subagent_stream,
)

SubagentJournal = ProducerJournal
"""What the stream wrapper needs from a journal (the one producer interface)."""

__all__ = [
    "DESCRIPTION_LIMIT", "ERROR_TEXT_LIMIT", "MAX_TOOL_CALLS", "RESULT_TEXT_LIMIT", "STEP_TEXT_LIMIT",
    "TERMINAL_STATUSES", "TOOL_ARGS_PREVIEW_LIMIT", "SubagentJournal", "subagent_run_event",
    "wrap_subagent_stream",
]
