"""Replay a recorded run: a chat model answering from the record, and where a replay diverges.

- ``RecordedChatModel.from_store(store, thread_id, run_id, *, match="request")``: a LangChain chat
  model answering each model call with the recorded reply (content, tool calls, usage, response
  metadata), for the lead agent, its middleware and every subagent at once.
- ``ReplayDivergence``: raised at the first call the recording does not answer, naming the call, the
  caller and the first difference between the closest recorded request and the new one.
- ``replay_run(store, thread_id, run_id, build_graph)``: the whole loop: the graph built on a
  recorded model, run on the recorded input, journaled, and its trajectory compared with the
  recorded one (``run_journal.testing.assert_replays`` asserts it in a test).

See ``docs/replay.md``.
"""

from __future__ import annotations

from run_journal.replay.divergence import CallDivergence, ReplayDivergence, RequestDifference
from run_journal.replay.model import RecordedChatModel
from run_journal.replay.recorded import RecordedCall
from run_journal.replay.replies import RecordedModelError
from run_journal.replay.requests import RecordedRequest
from run_journal.replay.running import ReplayedRun, ReplayResult, recorded_input, replay_run

__all__ = [
    "CallDivergence",
    "RecordedCall",
    "RecordedChatModel",
    "RecordedModelError",
    "RecordedRequest",
    "ReplayDivergence",
    "ReplayResult",
    "ReplayedRun",
    "RequestDifference",
    "recorded_input",
    "replay_run",
]
