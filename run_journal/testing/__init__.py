"""Testing helpers for users of run-journal.

* :func:`capture_run`: journal a run into memory in your own tests and look at what was recorded
  (with :class:`ScriptedChatModel` and :func:`reply` for a model that answers from a script).
  Needs no pytest.
* :func:`assert_replays` / :func:`replay_run`: replay a recorded run against your graph (the model
  answers from the record, the tools run for real) and assert it went the same way.
* :mod:`run_journal.testing.conformance`: the store conformance kit, the pytest suite every
  ``RunEventStore`` backend passes (yours too); it needs the ``dev`` extra (pytest, pytest-asyncio).
  Its names are importable from here as well, loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from run_journal.testing.capture import CapturedRun, ScriptedChatModel, capture_run, reply

_CONFORMANCE = frozenset({
    "GUARD", "MESSAGE_TYPES", "TRICKY_PAYLOAD", "TRICKY_TEXT", "RunEventStoreConformance", "StoreFactory",
    "body", "expected_page", "interleaved_thread", "new_event", "read_all",
})


_REPLAYING = frozenset({"assert_replays", "replay_run"})


def __getattr__(name: str) -> Any:
    if name in _REPLAYING:
        return getattr(importlib.import_module("run_journal.testing.replaying"), name)
    if name in _CONFORMANCE:
        return getattr(importlib.import_module("run_journal.testing.conformance"), name)
    raise AttributeError(f"module 'run_journal.testing' has no attribute {name!r}")


__all__ = ["CapturedRun", "ScriptedChatModel", "assert_replays", "capture_run", "replay_run", "reply"]
