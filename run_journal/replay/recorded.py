"""The model calls of recorded runs, read back as what a replay answers with.

A ``RecordedCall`` is one model call of a stored run (read with ``model_calls``): who made it (the
caller the journal attributed it to), its position among the run's calls, the reply as it was stored
(``llm.ai.response``) or the failure (``llm.error``), the usage and, when the run recorded its
requests, what the model was sent, in the form a replay compares.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from run_journal.calls import ModelCall, model_calls
from run_journal.envelope import JsonObject
from run_journal.replay.requests import RecordedRequest, shaped_request
from run_journal.stores.base import RunEventStore


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
    request: RecordedRequest | None = None

    @property
    def failed(self) -> bool:
        return self.reply is None

    @property
    def label(self) -> str:
        return f"call {self.index} of run {self.run_id} ({self.caller}, seq {self.seq})"


async def read_recorded_calls(store: RunEventStore, thread_id: str, run_ids: Sequence[str]
                              ) -> list[RecordedCall]:
    """Every model call of the runs that ended (with a reply or a failure), run by run, each run's
    calls in the order they started."""
    calls: list[RecordedCall] = []
    for run_id in run_ids:
        calls += [recorded_call(run_id, call) for call in await model_calls(store, thread_id, run_id)
                  if call.ended]
    return calls


def recorded_call(run_id: str, call: ModelCall) -> RecordedCall:
    """A model call as ``model_calls`` reads it, as a replay answers with it."""
    request = call.request
    compared = None
    if request is not None and request.complete:
        compared = shaped_request(request.messages, request.tools, request.params)
    error = call.error or {}
    seq = call.reply_seq if call.reply_seq is not None else call.request_seq or 0
    return RecordedCall(
        run_id=run_id, index=call.index, seq=seq, caller=call.caller, model=call.model,
        provider=call.provider,
        reply=dict(call.reply) if call.reply is not None else None,
        usage=dict(call.usage) if call.usage is not None else None,
        error_type=_text(error.get("error_type")) or ("Exception" if call.reply is None else None),
        error=(_text(error.get("message")) or "") if call.reply is None else None,
        request=compared,
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
