"""The caller of the model call starting in this context, as the journal attributed it.

``RunJournal`` notes each model call it sees start (``on_chat_model_start`` / ``on_llm_start`` run in
the caller's context, before the model works), so code running inside that model call (a chat model
that answers from a recording) can ask whose call it is: ``lead_agent``, ``subagent:<name>``,
``middleware:<tag>`` or ``agent:<name>``, exactly as the journal records it.
"""

from __future__ import annotations

import uuid
from contextvars import ContextVar

_CURRENT: ContextVar[tuple[uuid.UUID, str] | None] = ContextVar("run_journal_model_call", default=None)


def note_model_call(run_id: uuid.UUID, caller: str) -> None:
    _CURRENT.set((run_id, caller))


def current_model_call() -> tuple[uuid.UUID, str] | None:
    """``(LangChain run id, caller)`` of the model call that last started in this context, if a
    journal saw it."""
    return _CURRENT.get()
