"""Conformance tests: seq assignment, writes, batches and event_id idempotency."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from run_journal.stores.base import RunEventStore
from run_journal.testing._support import StoreSuiteBase, new_event, read_all


class WriteTests(StoreSuiteBase):
    """Seq assignment, writes, batches and event_id idempotency."""

    async def test_seq_starts_at_one_and_is_dense_per_thread(self, store: RunEventStore) -> None:
        seqs: dict[str, list[int]] = {"a": [], "b": [], "c": []}
        for thread_id in "abacabbca":
            written = await store.put(
                thread_id=thread_id, run_id="r", event_type="tool.call", category="trace"
            )
            seqs[thread_id].append(written.seq)
        assert seqs == {"a": [1, 2, 3, 4], "b": [1, 2, 3], "c": [1, 2]}
        for thread_id, expected in seqs.items():
            assert [e.seq for e in await read_all(store, thread_id)] == expected
            assert await store.last_seq(thread_id) == len(expected)
        assert await store.last_seq("never-written") == 0

    async def test_put_returns_the_stored_record(self, store: RunEventStore) -> None:
        moment = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=-5)))
        written = await store.put(
            thread_id="t", run_id="r", event_type="llm.ai.response", category="message",
            content={"text": "hi", "n": (1, 2)}, metadata={"task_id": "k", "x": 1},
            created_at=moment, event_id="e-1", user_id="u",
        )
        assert (written.seq, written.event_id, written.user_id) == (1, "e-1", "u")
        assert written.content == {"text": "hi", "n": [1, 2]}
        assert written.created_at == moment
        assert written.created_at.utcoffset() == timedelta(0)
        (read,) = await store.list_events("t")
        assert read.to_dict() == written.to_dict()
        assert read.created_at == moment

    async def test_put_batch_across_threads_and_runs_keeps_input_order(
        self, store: RunEventStore
    ) -> None:
        plan = [("x", "r1"), ("y", "r2"), ("x", "r3"), ("z", "r1"), ("y", "r2"), ("x", "r1")]
        batch = [new_event(t, r, content=i, event_id=f"e{i}") for i, (t, r) in enumerate(plan)]
        results = await store.put_batch(batch)
        assert [e.event_id for e in results] == [f"e{i}" for i in range(len(plan))]
        assert [(e.thread_id, e.run_id, e.seq) for e in results] == [
            ("x", "r1", 1), ("y", "r2", 1), ("x", "r3", 2), ("z", "r1", 1), ("y", "r2", 2),
            ("x", "r1", 3),
        ]
        for thread_id in "xyz":
            stored = await read_all(store, thread_id)
            assert [e.to_dict() for e in stored] == [
                e.to_dict() for e in results if e.thread_id == thread_id
            ]
        assert await store.put_batch([]) == []
        mapping = {"thread_id": "x", "run_id": "r9", "event_type": "tool.call", "category": "trace"}
        (from_mapping,) = await store.put_batch([mapping])
        assert (from_mapping.seq, from_mapping.run_id) == (4, "r9")

    @pytest.mark.parametrize(
        "bad",
        [
            {"thread_id": ".."}, {"thread_id": "a/b"}, {"thread_id": ""}, {"thread_id": "a\x00b"},
            {"thread_id": "x" * 256}, {"run_id": "."}, {"event_id": "a\\b"}, {"user_id": "\n"},
            {"event_type": "bad type"}, {"event_type": "x" * 33}, {"category": "nope"},
            {"event_type": "run.start", "category": "message"},
            {"created_at": datetime(2024, 1, 1)}, {"metadata": ["not", "a", "mapping"]},  # noqa: DTZ001 - refused
            {"metadata": {"huge": "m" * (1024 * 1024 + 1)}},
        ],
    )
    async def test_invalid_event_in_a_batch_writes_nothing(
        self, store: RunEventStore, bad: dict[str, Any]
    ) -> None:
        valid = {"thread_id": "v", "run_id": "r", "event_type": "tool.call", "category": "trace"}
        batch = [valid, {**valid, "thread_id": "w"}, {**valid, **bad}]
        with pytest.raises(ValueError):  # noqa: PT011 - any message naming the field will do
            await store.put_batch(batch)
        with pytest.raises(ValueError):  # noqa: PT011 - same
            await store.put(**{**valid, **bad})
        assert await store.list_threads() == []
        assert (await store.last_seq("v"), await store.last_seq("w")) == (0, 0)

    async def test_event_id_retry_returns_the_stored_record_and_writes_nothing(
        self, store: RunEventStore
    ) -> None:
        first = await store.put(
            thread_id="t", run_id="r", event_type="llm.ai.response", category="message",
            content="original", event_id="same",
        )
        await store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")
        again = await store.put(
            thread_id="t", run_id="r", event_type="llm.ai.response", category="message",
            content="retry", event_id="same",
        )
        assert again.to_dict() == first.to_dict()
        assert [(e.seq, e.content) for e in await read_all(store, "t")] == [(1, "original"), (2, "")]
        assert await store.last_seq("t") == 2

    async def test_event_id_repeated_within_one_batch_is_written_once(
        self, store: RunEventStore
    ) -> None:
        batch = [
            new_event(content="a", event_id="dup"), new_event(content="b", event_id="other"),
            new_event(content="a-again", event_id="dup"),
        ]
        results = await store.put_batch(batch)
        assert [(e.seq, e.content) for e in results] == [(1, "a"), (2, "b"), (1, "a")]
        replay = await store.put_batch([*batch, new_event(content="c", event_id="new")])
        assert [(e.seq, e.content) for e in replay] == [(1, "a"), (2, "b"), (1, "a"), (3, "c")]
        assert [e.event_id for e in await read_all(store, "t")] == ["dup", "other", "new"]

    async def test_threads_interleaved_in_one_batch_with_repeats_and_a_retry(
        self, store: RunEventStore
    ) -> None:
        batch = [new_event("A", event_id="a1"), new_event("B", event_id="b1"), new_event("A", event_id="a2"),
                 new_event("A", event_id="a1"), new_event("B", event_id="b2"),
                 new_event("B", event_id="b1"), new_event("A", event_id="a3")]
        results = await store.put_batch(batch)
        assert [(e.thread_id, e.event_id, e.seq) for e in results] == [
            ("A", "a1", 1), ("B", "b1", 1), ("A", "a2", 2), ("A", "a1", 1), ("B", "b2", 2),
            ("B", "b1", 1), ("A", "a3", 3),
        ]
        again = await store.put_batch(batch)
        assert [(e.event_id, e.seq) for e in again] == [(e.event_id, e.seq) for e in results]
        assert [e.seq for e in await read_all(store, "A")] == [1, 2, 3]
        assert [e.seq for e in await read_all(store, "B")] == [1, 2]

    async def test_a_repeat_in_one_batch_gets_its_own_copy_of_the_payload(
        self, store: RunEventStore
    ) -> None:
        first_write = new_event(content={"k": [1]}, event_id="dup")
        first_write.content  # noqa: B018 - decoded, as a producer that read its event has it
        first, repeat = await store.put_batch([first_write, new_event(content={"k": [2]}, event_id="dup")])
        assert first.seq == repeat.seq == 1
        first.content["k"].append(99)  # type: ignore[call-overload, index, union-attr]  # a dict here
        assert repeat.content == {"k": [1]}  # the stored payload, untouched by the first result's reader
        assert repeat.metadata is not first.metadata

