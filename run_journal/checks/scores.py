"""Scores: a named value recorded on a run as a ``run.score`` event (a check's result, a person's
thumbs up, an evaluator's number), read back with the run like every other event."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from run_journal.catalog import Category
from run_journal.envelope import JsonObject, NewEvent, RunEvent, validate_id
from run_journal.redact import redact_secrets
from run_journal.stores.base import RunEventStore

SCORE_EVENT: Final = "run.score"
NAME_MAX: Final = 200
SOURCE_MAX: Final = 64
TEXT_VALUE_MAX: Final = 1000

ScoreValue = bool | int | float | str


async def record_score(
    store: RunEventStore,
    thread_id: str,
    run_id: str,
    name: str,
    value: ScoreValue,
    *,
    comment: str | None = None,
    source: str = "api",
    seqs: Sequence[int] = (),
    metadata: Mapping[str, Any] | None = None,
    event_id: str | None = None,
) -> RunEvent:
    """Append a score to a recorded run and return the stored event.

    ``value`` is a number, a boolean (pass / fail) or a short label (``"up"``, ``"good"``);
    ``source`` says who gave it (``"human"``, ``"check"``, ``"llm-judge"``, ``"api"``); ``seqs`` are
    the events it is about; ``metadata`` is kept beside (redacted like every payload). The run must
    be in the store (``LookupError`` otherwise); the event carries the run's user, so a user-scoped
    read sees the score with the run. ``event_id`` makes the write idempotent: recording the same id
    again stores nothing new.
    """
    validate_id("thread_id", thread_id)
    validate_id("run_id", run_id)
    _content(name, value, comment, source, seqs)  # a bad score is refused before the store is read
    user_id = await run_owner(store, thread_id, run_id)
    event = score_event(thread_id, run_id, name, value, comment=comment, source=source, seqs=seqs,
                        metadata=metadata, event_id=event_id, user_id=user_id)
    (stored,) = await store.put_batch([event])
    return stored


def score_event(
    thread_id: str, run_id: str, name: str, value: ScoreValue, *, comment: str | None = None,
    source: str = "api", seqs: Sequence[int] = (), metadata: Mapping[str, Any] | None = None,
    event_id: str | None = None, user_id: str | None = None,
) -> NewEvent:
    """The ``run.score`` event ``record_score`` writes, validated (``ValueError`` saying what is
    wrong) and redacted, for a writer that puts many at once."""
    validate_id("thread_id", thread_id)
    validate_id("run_id", run_id)
    content = _content(name, value, comment, source, seqs)
    if metadata is not None and not isinstance(metadata, Mapping):
        raise ValueError(f"score {name!r}: metadata is a mapping, got {type(metadata).__name__}")
    details = redact_secrets(dict(metadata or {}))
    return NewEvent(thread_id, run_id, SCORE_EVENT, Category.TRACE, redact_secrets(content),
                    {**details, "source": source}, None, event_id, user_id)


def _content(name: str, value: Any, comment: Any, source: Any, seqs: Sequence[int]) -> JsonObject:
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX:
        raise ValueError(f"a score's name is a non-empty string of at most {NAME_MAX} characters, "
                         f"got {name!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"score {name!r}: the value must be finite, got {value!r}")
    if isinstance(value, str) and (not value or len(value) > TEXT_VALUE_MAX):
        raise ValueError(f"score {name!r}: a text value is 1-{TEXT_VALUE_MAX} characters")
    if not isinstance(value, bool | int | float | str):
        raise ValueError(f"score {name!r}: the value is a number, a boolean or a short text, got "
                         f"{type(value).__name__}")
    if comment is not None and not isinstance(comment, str):
        raise ValueError(f"score {name!r}: the comment is a string or None, got {type(comment).__name__}")
    if not isinstance(source, str) or not source.strip() or len(source) > SOURCE_MAX:
        raise ValueError(f"score {name!r}: the source is a non-empty string of at most {SOURCE_MAX} "
                         f"characters, got {source!r}")
    if isinstance(seqs, str) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1
                                        for s in seqs):
        raise ValueError(f"score {name!r}: seqs are the seqs (integers from 1) of the events it is about")
    content: JsonObject = {"name": name, "value": value, "source": source, "comment": comment}
    if seqs:
        content["seqs"] = list(seqs)
    return content


async def run_owner(store: RunEventStore, thread_id: str, run_id: str) -> str | None:
    """The run's user; ``LookupError`` when the store knows no such run in the thread."""
    row = await store.get_run(run_id)
    if row is not None and row.thread_id == thread_id:
        return row.user_id
    events = await store.list_events(thread_id, run_id, limit=1)
    if not events:
        raise LookupError(f"no run {run_id!r} in thread {thread_id!r}: a score is recorded on a stored run")
    return events[0].user_id
