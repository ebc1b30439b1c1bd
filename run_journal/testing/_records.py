"""Conformance tests: one normalization on every backend, and fresh copies on every read."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any, cast

from run_journal.envelope import dumps, normalize
from run_journal.runs import RunRow
from run_journal.stores.base import RunEventStore
from run_journal.testing._support import (
    TRICKY_PAYLOAD,
    TRICKY_TEXT,
    StoreSuiteBase,
    body,
    new_event,
    read_all,
)


class RecordTests(StoreSuiteBase):
    """One normalization on every backend, and fresh copies on every read."""

    async def test_the_same_write_reads_back_identically_on_every_backend(
        self, store: RunEventStore
    ) -> None:
        from run_journal.stores.memory import MemoryRunEventStore

        moment = datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=9)))
        events = [
            new_event("same", "r", content=TRICKY_PAYLOAD, metadata={"task_id": "k", "p": TRICKY_PAYLOAD},
                      created_at=moment, event_id="n1", user_id="u\u2028ser"),
            new_event("same", "r", "run.end", "outputs", content=TRICKY_TEXT, metadata={TRICKY_TEXT: 1}),
            new_event("same", "r", "ai_message", content=[TRICKY_TEXT, None, 2**64], created_at=moment),
        ]
        async with MemoryRunEventStore() as reference:
            expected = await reference.put_batch(events)
        written = await store.put_batch(events)
        reads = [
            written, await read_all(store, "same"), await store.list_events("same", "r"),
            [*await store.list_messages("same"), *await store.list_events("same", event_types=["run.end"])],
        ]
        for got in reads:
            assert sorted((body(e) for e in got), key=dumps) == sorted((body(e) for e in expected), key=dumps)
            assert sorted(e.created_at for e in got) == sorted(e.created_at for e in expected)
        content = cast("dict[str, Any]", reads[1][0].content)
        assert content["text"] == TRICKY_TEXT
        assert content[TRICKY_TEXT] == "tricky key"
        assert (content["big"], content["neg_big"], content["int64"]) == (
            str(2**70), str(-(2**64)), [2**63 - 1, -(2**63)]
        )
        assert content["floats"][3:] == ["NaN", "Infinity", "-Infinity"]
        assert content["floats"][0] == 0.1
        assert math.copysign(1, content["floats"][1]) == -1
        assert (content["tuple"], content["1"]) == ([1, "a", None, True], "int key")
        assert content["set"] == [1, 2, 3]
        assert content["lone surrogate"] == "x\ufffdy"
        assert content == normalize(TRICKY_PAYLOAD)
        assert reads[1][1].content == TRICKY_TEXT
        assert reads[1][1].metadata == {TRICKY_TEXT: 1}

    async def test_returned_records_are_fresh_copies(self, store: RunEventStore) -> None:
        content: dict[str, Any] = {"list": [1, 2], "inner": {"k": "v"}}
        metadata: dict[str, Any] = {"task_id": "k", "tags": ["a"]}
        written = await store.put(
            thread_id="t", run_id="r", event_type="llm.ai.response", category="message",
            content=content, metadata=metadata,
        )
        content["list"].append(3)
        metadata["tags"].append("b")
        for record in [written, *await store.list_events("t"), *await store.list_messages("t")]:
            cast("dict[str, Any]", record.content)["list"].append("mutated")
            cast("dict[str, Any]", record.content)["inner"]["k"] = "mutated"
            record.metadata["tags"] = "mutated"
        for read in (await store.list_events("t"), await store.list_messages_by_run("t", "r")):
            assert (read[0].content, read[0].metadata) == (
                {"list": [1, 2], "inner": {"k": "v"}}, {"task_id": "k", "tags": ["a"]},
            )
        row_metadata: dict[str, Any] = {"k": ["v"]}
        await store.put_run(RunRow(run_id="r", thread_id="t", metadata=row_metadata))
        row_metadata["k"].append("changed")
        got = await store.get_run("r")
        assert got is not None
        assert got.metadata == {"k": ["v"]}
        cast("list[str]", got.metadata["k"]).append("mutated")
        again = await store.get_run("r")
        assert again is not None
        assert again.metadata == {"k": ["v"]}

