"""The model calls of recorded runs, read back as what a replay answers with.

A ``RecordedCall`` is one model call of a stored run: who made it (the caller the journal attributed
it to), its position among the run's calls, the reply as it was stored (``llm.ai.response``) or the
failure (``llm.error``), the usage and, when the run recorded requests, what the model was sent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Final

from run_journal.catalog import LEAD_AGENT, canonical_event_type
from run_journal.envelope import JsonObject, RunEvent
from run_journal.projections import iter_events
from run_journal.stores.base import RunEventStore

CALL_EVENTS: Final = ("llm.ai.response", "llm.error", "ai_message")
"""The events that close a model call (``ai_message``: the legacy name of ``llm.ai.response``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class RecordedRequest:
    """What a model call was sent, in the form a replay compares: its messages (LangChain message
    dicts without what a provider is not sent back: ids, response and usage metadata), the tools
    offered (each ``{"name", "description", "parameters"}``; None when the call's model did not
    report any, then they are not compared) and the call's parameters."""

    messages: tuple[JsonObject, ...]
    tools: tuple[JsonObject, ...] | None = None
    params: JsonObject = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class RecordedCall:
    """One model call of a recorded run.

    ``index`` is the journal's ``llm_call_index`` (the call's position among its run's model calls,
    in the order they started); ``reply`` is the stored ``llm.ai.response`` content (None for a call
    that failed: ``error_type`` and ``error`` say how); ``usage`` is the journal's flat usage.
    """

    run_id: str
    index: int
    seq: int
    caller: str
    model: str | None
    provider: str | None
    reply: JsonObject | None
    usage: JsonObject | None = None
    error_type: str | None = None
    error: str | None = None
    truncated: bool = False
    """The stored reply was cut to the content limit: it is replayed as stored."""
    request: RecordedRequest | None = None

    @property
    def failed(self) -> bool:
        return self.reply is None

    @property
    def label(self) -> str:
        return f"call {self.index} of run {self.run_id} ({self.caller}, seq {self.seq})"


async def read_recorded_calls(store: RunEventStore, thread_id: str, run_ids: Sequence[str]
                              ) -> list[RecordedCall]:
    """Every model call of the runs, run by run, each run's calls in the order they started."""
    calls: list[RecordedCall] = []
    for run_id in run_ids:
        events = iter_events(store, thread_id, run_id, event_types=CALL_EVENTS)
        found = [call_of(event) async for event in events]
        calls += sorted(found, key=lambda call: (call.index, call.seq))
    return calls


def call_of(event: RunEvent) -> RecordedCall:
    """The model call an ``llm.ai.response`` or ``llm.error`` event closed."""
    meta = event.metadata
    index = meta.get("llm_call_index")
    common: dict[str, Any] = {
        "run_id": event.run_id, "index": index if isinstance(index, int) else event.seq, "seq": event.seq,
        "caller": _text(meta.get("caller")) or LEAD_AGENT, "model": _text(meta.get("model_name")),
        "provider": _text(meta.get("model_provider")),
    }
    content = event.content if isinstance(event.content, Mapping) else {}
    if canonical_event_type(event.event_type) == "llm.error":
        return RecordedCall(**common, reply=None, error_type=_text(content.get("error_type")) or "Exception",
                            error=_text(content.get("message")) or "")
    usage = meta.get("usage")
    return RecordedCall(**common, reply=dict(content), truncated="content_truncated" in meta,
                        usage=dict(usage) if isinstance(usage, Mapping) else None)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
