"""Conformance tests: one limit per indexed field, the same on every backend, checked before any write."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from run_journal.catalog import CATEGORY_MAX_LENGTH, EVENT_TYPE_MAX_LENGTH, ID_MAX_LENGTH, TASK_ID_MAX_LENGTH
from run_journal.envelope import NewEvent
from run_journal.stores.base import RunEventStore
from run_journal.testing._support import StoreSuiteBase, new_event, read_all

# Letters of 1 to 4 UTF-8 bytes, never repeating in a pattern (so no database can compress an index
# entry below its real size): what a limit must hold for, whatever the text.
_ALPHABET = [chr(c) for c in (*range(0x41, 0x5B), *range(0xE9, 0x17F), *range(0x4E00, 0x4F00),
                               *range(0x1F600, 0x1F640))]


def random_text(length: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(_ALPHABET) for _ in range(length))


def _event_with(field: str, value: str) -> NewEvent:
    fields: dict[str, Any] = {"thread_id": "limits", "run_id": "r", "event_type": "subagent.step",
                              "category": "subagent", "content": "x"}
    if field == "task_id":
        fields["metadata"] = {"task_id": value}
    else:
        fields[field] = value
    return NewEvent(**fields)


ID_FIELDS = ("thread_id", "run_id", "event_id", "user_id", "task_id")
"""Fields every backend indexes (or keys, or names files after) whose limit is ``ID_MAX_LENGTH``
characters; ``task_id`` is the ``metadata["task_id"]`` a subagent row is filed under."""


class LimitTests(StoreSuiteBase):
    """Every indexed field has one limit, refused with a ``ValueError`` before anything is written."""

    @pytest.mark.parametrize("field", ID_FIELDS)
    async def test_an_indexed_field_at_its_limit_is_stored_and_one_more_character_is_refused(
        self, store: RunEventStore, field: str
    ) -> None:
        limit = TASK_ID_MAX_LENGTH if field == "task_id" else ID_MAX_LENGTH
        at_limit = random_text(limit, seed=limit)
        stored = (await store.put_batch([_event_with(field, at_limit)]))[0]
        value = stored.metadata["task_id"] if field == "task_id" else getattr(stored, field)
        assert value == at_limit
        thread = at_limit if field == "thread_id" else "limits"
        (read,) = await read_all(store, thread)
        assert read.to_dict() == stored.to_dict()
        if field == "task_id":
            assert [e.seq for e in await store.list_events(thread, task_id=at_limit)] == [stored.seq]
        over = random_text(limit + 1, seed=limit + 1)
        with pytest.raises(ValueError, match=f"{field}.*{limit}"):
            _event_with(field, over)
        fields: dict[str, Any] = {"thread_id": "limits", "run_id": "r", "event_type": "tool.call",
                                  "category": "trace"}
        if field == "task_id":
            fields["metadata"] = {"task_id": over}
        else:
            fields[field] = over
        with pytest.raises(ValueError, match=field):  # a mapping is checked by the store, up front
            await store.put_batch([new_event("limits", "r", event_id="fine"), fields])
        assert await store.last_seq("limits") == (0 if field == "thread_id" else 1)
        assert "fine" not in {e.event_id for e in await read_all(store, "limits")}

    async def test_a_task_id_with_a_nul_character_is_refused_everywhere(self, store: RunEventStore) -> None:
        with pytest.raises(ValueError, match="task_id"):
            _event_with("task_id", "a\x00b")
        with pytest.raises(ValueError, match="task_id"):
            await store.put(thread_id="t", run_id="r", event_type="subagent.step", category="subagent",
                            metadata={"task_id": "a\x00b"})
        assert await store.last_seq("t") == 0

    @pytest.mark.parametrize("bad", ["x" * (TASK_ID_MAX_LENGTH + 1), "a\x00b"])
    async def test_reads_refuse_a_task_id_no_write_accepts(self, store: RunEventStore, bad: str) -> None:
        await store.put(thread_id="t", run_id="r", event_type="subagent.step", category="subagent",
                        metadata={"task_id": "k"})
        with pytest.raises(ValueError, match="task_id"):
            await store.list_events("t", task_id=bad)

    @pytest.mark.parametrize(
        ("field", "limit", "make"),
        [
            ("event_type", EVENT_TYPE_MAX_LENGTH, lambda n: "x" * n),
            ("category", CATEGORY_MAX_LENGTH, lambda n: "m" * n),
        ],
    )
    async def test_names_have_one_limit(
        self, store: RunEventStore, field: str, limit: int, make: Callable[[int], str]
    ) -> None:
        if field == "event_type":
            stored = await store.put(thread_id="t", run_id="r", event_type=make(limit), category="trace")
            assert stored.event_type == make(limit)
        fields: dict[str, Any] = {"thread_id": "t", "run_id": "r", "event_type": "tool.call",
                                  "category": "trace", field: make(limit + 1)}
        with pytest.raises(ValueError, match=field):
            await store.put(**fields)
        assert await store.last_seq("t") == (1 if field == "event_type" else 0)

    async def test_one_bad_event_refuses_its_batch_before_anything_is_written(
        self, store: RunEventStore
    ) -> None:
        good = [new_event("a", "r", content=n) for n in range(3)]
        bad = {"thread_id": "b", "run_id": "r", "event_type": "subagent.step", "category": "subagent",
               "metadata": {"task_id": random_text(TASK_ID_MAX_LENGTH * 4, seed=7)}}
        with pytest.raises(ValueError, match="task_id"):
            await store.put_batch([*good, bad])
        assert await store.list_threads() == []
        assert [e.seq for e in await store.put_batch(good)] == [1, 2, 3]
