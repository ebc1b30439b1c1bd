"""Shared by every part of the conformance kit: helpers, test data and the ``store`` fixtures."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from typing import Any, ClassVar, Final

import pytest
import pytest_asyncio

from run_journal.envelope import NewEvent, RunEvent
from run_journal.stores.base import RunEventStore

StoreFactory = Callable[[], AbstractAsyncContextManager[RunEventStore]]

GUARD: Final = 60.0
"""Seconds after which a waiting test gives up instead of hanging (a guard, never an assertion)."""

MESSAGE_TYPES: Final = ("llm.human.input", "llm.ai.response", "llm.tool.result", "ai_message")

TRICKY_TEXT: Final = 'a\u2028b\u2029c\x00d\x85e\x0bf\x0cg\x1ch\r\ni\té🚀\U0010ffff"\\'
"""Characters that break naive line splitting (U+2028, NEL, VT, FF, FS), NUL, escapes, astral."""
TRICKY_PAYLOAD: Final[dict[Any, Any]] = {
    "text": TRICKY_TEXT,
    "big": 2**70,
    "neg_big": -(2**64),
    "int64": [2**63 - 1, -(2**63)],
    "floats": [0.1, -0.0, 1e308, float("nan"), float("inf"), float("-inf")],
    "tuple": (1, "a", None, True),
    "nested": {"a": [{"b": (False, {"c": []})}], "empty": {}},
    1: "int key",
    "when": datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
    "bytes": b"\x00\xff",
    "set": {3, 1, 2},
    "lone surrogate": "x\ud800y",
    TRICKY_TEXT: "tricky key",
}


def new_event(
    thread_id: str = "t",
    run_id: str = "r",
    event_type: str = "llm.ai.response",
    category: str = "message",
    content: Any = "",
    **fields: Any,
) -> NewEvent:
    """A valid event with test defaults (``fields``: metadata, event_id, user_id, created_at)."""
    return NewEvent(
        thread_id=thread_id, run_id=run_id, event_type=event_type, category=category,
        content=content, **fields,
    )


async def read_all(store: RunEventStore, thread_id: str, **filters: Any) -> list[RunEvent]:
    """Every event of a thread, paging ``list_events`` with ``after_seq``."""
    events: list[RunEvent] = []
    while True:
        page = await store.list_events(
            thread_id, limit=500, after_seq=events[-1].seq if events else 0, **filters
        )
        if not page:
            return events
        events.extend(page)


def body(event: RunEvent) -> dict[str, Any]:
    """The record without what the store assigns (seq) or may re-encode (created_at)."""
    record = dict(event.to_dict())
    del record["seq"], record["created_at"]
    return record


def expected_page(
    rows: Sequence[RunEvent], limit: int, before_seq: int | None, after_seq: int | None
) -> list[int]:
    """The seqs the specification selects from ``rows`` (already filtered, ascending)."""
    if after_seq is not None:
        return [row.seq for row in rows if row.seq > after_seq][:limit]
    below = [row.seq for row in rows if before_seq is None or row.seq < before_seq]
    return below[-limit:]


async def interleaved_thread(store: RunEventStore, thread_id: str = "pages") -> list[RunEvent]:
    """18 events: runs r1/r2 alternate; every third is a trace row, the rest messages."""
    batch = []
    for i in range(18):
        event_type, category = ("tool.call", "trace") if i % 3 == 2 else (MESSAGE_TYPES[i % 4], "message")
        batch.append(new_event(thread_id, f"r{1 + i % 2}", event_type, category, content=f"#{i}"))
    return await store.put_batch(batch)



class StoreSuiteBase:
    """The knobs and fixtures every test mixin of the kit relies on (``store``, ``store_factory``)."""

    concurrent_writers: ClassVar[int] = 8
    events_per_writer: ClassVar[int] = 500

    def make_store(self) -> AbstractAsyncContextManager[RunEventStore]:
        """An async context manager that yields a set-up store (a store object itself will do)."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement make_store() or override the store_factory fixture"
        )

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return self.make_store

    @pytest_asyncio.fixture
    async def store(self, store_factory: StoreFactory) -> AsyncIterator[RunEventStore]:
        async with store_factory() as opened:
            opened.follow_poll_interval = 0.01
            yield opened

