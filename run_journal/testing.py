"""The store conformance kit: the one pytest suite every ``RunEventStore`` backend must pass.

Every backend of this package runs it (``tests/test_store_conformance.py``), and so can a third
party's store: subclass ``RunEventStoreConformance`` in a test module, name the subclass ``Test...``
and say how to open the store, either with ``make_store`` or, when opening needs other fixtures,
by overriding the ``store_factory`` fixture::

    class TestMyStore(RunEventStoreConformance):
        def make_store(self) -> AbstractAsyncContextManager[RunEventStore]:
            return MyStore(dsn)          # an async context manager yielding a set-up, empty store

Each test opens one store through the factory (some open a second one and close it themselves, so
``aclose()`` must be idempotent). The suite needs ``pytest`` and ``pytest-asyncio`` (the ``dev``
extra); ``run_journal`` never imports this module, so library users never pay for it.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, aclosing
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, ClassVar, Final, cast

try:
    import pytest
    import pytest_asyncio
except ImportError as error:  # pragma: no cover - only hit when the dev extra is missing
    raise ImportError(
        "run_journal.testing is a pytest suite: pip install 'run-journal[dev]'"
    ) from error

from run_journal.catalog import TERMINAL_RUN_EVENTS, category_of
from run_journal.envelope import NewEvent, RunEvent, dumps, normalize
from run_journal.runs import RunRow, RunStatus, UsageTotals
from run_journal.stores.base import MAX_PAGE, RunEventStore, StoreClosedError

StoreFactory = Callable[[], AbstractAsyncContextManager[RunEventStore]]

GUARD: Final = 60.0
"""Seconds after which a waiting test gives up instead of hanging (a guard, never an assertion)."""

MESSAGE_TYPES: Final = ("llm.human.input", "llm.ai.response", "llm.tool.result", "ai_message")

TRICKY_TEXT: Final = "a\u2028b\u2029c\x00d\x85e\x0bf\x0cg\x1ch\r\ni\té🚀\U0010ffff\"\\"
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


class RunEventStoreConformance:
    """The store contract as tests. Subclass it (``Test...``) and implement ``make_store``."""

    pytestmark: ClassVar = [pytest.mark.asyncio]
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

    # -- seq and writes --------------------------------------------------------------------------
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
            {"created_at": datetime(2024, 1, 1)}, {"metadata": ["not", "a", "mapping"]},
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

    # -- pagination and filters ------------------------------------------------------------------
    async def test_message_pagination_follows_the_specification(self, store: RunEventStore) -> None:
        written = await interleaved_thread(store)
        messages = [e for e in written if e.category == "message"]
        for limit in (1, 2, 5, 50):
            for before, after in [(None, None)] + [
                cursor for n in (0, 1, 2, 7, 17, 18, 19, 100) for cursor in ((n, None), (None, n))
            ]:
                args: dict[str, Any] = {"limit": limit, "before_seq": before, "after_seq": after}
                got = await store.list_messages("pages", **args)
                assert [e.seq for e in got] == expected_page(messages, limit, before, after), args
                for run_id in ("r1", "r2"):
                    rows = [e for e in messages if e.run_id == run_id]
                    got = await store.list_messages_by_run("pages", run_id, **args)
                    assert [e.seq for e in got] == expected_page(rows, limit, before, after), (
                        run_id, args,
                    )

    async def test_list_events_pages_forward_from_after_seq(self, store: RunEventStore) -> None:
        written = await interleaved_thread(store)
        for limit in (1, 4, 50):
            for after in (None, 0, 1, 7, 17, 18, 40):
                got = await store.list_events("pages", limit=limit, after_seq=after)
                assert [e.seq for e in got] == expected_page(written, limit, None, after or 0)
                by_run = await store.list_events("pages", "r2", limit=limit, after_seq=after)
                rows = [e for e in written if e.run_id == "r2"]
                assert [e.seq for e in by_run] == expected_page(rows, limit, None, after or 0)
        assert [e.to_dict() for e in await read_all(store, "pages")] == [e.to_dict() for e in written]

    async def test_list_messages_returns_message_rows_only_with_the_legacy_alias(
        self, store: RunEventStore
    ) -> None:
        plan = [
            ("run.start", "trace"), ("llm.human.input", "message"), ("tool.call", "trace"),
            ("ai_message", "message"), ("llm.tool.result", "message"), ("custom.note", "message"),
            ("llm.ai.response", "message"), ("run.end", "outputs"), ("subagent.step", "subagent"),
        ]
        written = await store.put_batch([new_event("m", "r", t, c) for t, c in plan])
        wanted = [e.to_dict() for e in written if e.category == "message"]
        assert [e.to_dict() for e in await store.list_messages("m")] == wanted
        assert [e.to_dict() for e in await store.list_messages_by_run("m", "r")] == wanted
        assert await store.count_messages("m") == 5
        assert await store.count_messages("nothing-here") == 0
        assert await store.list_messages("nothing-here") == []

    async def test_list_events_filters(self, store: RunEventStore) -> None:
        plan = [
            ("r1", "llm.ai.response", "message", None), ("r1", "ai_message", "message", None),
            ("r2", "subagent.step", "subagent", "k1"), ("r1", "subagent.step", "subagent", "k2"),
            ("r2", "llm.ai.response", "message", None), ("r2", "subagent.step", "subagent", "k1"),
            ("r2", "tool.call", "trace", "k1"), ("r1", "subagent.step", "subagent", "k1"),
        ]
        written = await store.put_batch(
            [
                new_event("f", run, t, c, metadata={"task_id": task} if task else {})
                for run, t, c, task in plan
            ]
        )

        async def seqs(run_id: str | None = None, **filters: Any) -> list[int]:
            return [e.seq for e in await store.list_events("f", run_id, **filters)]

        assert await seqs(event_types=["llm.ai.response"]) == [1, 2, 5]
        assert await seqs(event_types=["ai_message"]) == [1, 2, 5]
        assert await seqs("r1", event_types=["ai_message", "subagent.step"]) == [1, 2, 4, 8]
        assert await seqs(task_id="k1") == [3, 6, 7, 8]
        assert await seqs("r2", task_id="k1", event_types=["subagent.step"]) == [3, 6]
        assert await seqs(task_id="k1", limit=2) == [3, 6]
        assert await seqs(task_id="k1", after_seq=6, limit=1) == [7]
        assert await seqs(event_types=["subagent.step"], after_seq=4) == [6, 8]
        assert await seqs(task_id="missing") == []
        assert await seqs("r3") == []
        assert len(written) == await store.last_seq("f") == 8

    async def test_reads_reject_bad_page_arguments(self, store: RunEventStore) -> None:
        await store.put(thread_id="t", run_id="r", event_type="tool.call", category="trace")
        bad_reads: list[Callable[[], Awaitable[object]]] = [
            lambda: store.list_messages("t", limit=0),
            lambda: store.list_messages("t", limit=MAX_PAGE + 1),
            lambda: store.list_messages("t", before_seq=-1),
            lambda: store.list_messages("t", after_seq=-1),
            lambda: store.list_messages_by_run("t", "r", limit=-5),
            lambda: store.list_events("t", limit=0),
            lambda: store.list_events("t", after_seq=-2),
        ]
        for read in bad_reads:
            with pytest.raises(ValueError):  # noqa: PT011 - the message names the argument
                await read()
        with pytest.raises(TypeError):
            await store.list_events("t", event_types="tool.call")

    async def test_user_id_scopes_every_read(self, store: RunEventStore) -> None:
        plan = [("bob", "a"), ("alice", "a"), (None, "a"), ("bob", "b"), ("alice", "a"), ("bob", "a")]
        await store.put_batch(
            [new_event("shared", f"r-{user}", content=i, user_id=user) for i, (user, _) in enumerate(plan)]
        )
        await store.put_batch([new_event(f"only-{t}", "r", user_id=u) for u, t in plan if u])

        def users(events: Sequence[RunEvent]) -> set[str | None]:
            return {e.user_id for e in events}

        assert users(await store.list_messages("shared", user_id="alice")) == {"alice"}
        assert [e.content for e in await store.list_messages("shared", user_id="alice")] == [1, 4]
        assert [e.content for e in await store.list_messages("shared", user_id="bob", limit=1)] == [5]
        assert await store.list_messages_by_run("shared", "r-bob", user_id="alice") == []
        assert users(await store.list_events("shared", user_id="bob")) == {"bob"}
        assert await store.count_messages("shared", user_id="alice") == 2
        assert await store.count_messages("shared") == 6
        assert await store.list_threads(user_id="alice") == ["only-a", "shared"]
        assert await store.list_threads(user_id="carol") == []
        follower = cast(AsyncGenerator[RunEvent, None], store.follow("shared", user_id="alice"))
        async with asyncio.timeout(GUARD), aclosing(follower):
            assert [(await anext(follower)).content for _ in range(2)] == [1, 4]

    # -- singletons, deletes, runs ---------------------------------------------------------------
    async def test_put_if_absent_is_a_run_scoped_singleton(self, store: RunEventStore) -> None:
        args: dict[str, Any] = {"thread_id": "t", "event_type": "context:memory", "category": "context"}
        first, created = await store.put_if_absent(run_id="r1", content="first", **args)
        again, created_again = await store.put_if_absent(run_id="r1", content="second", **args)
        assert (created, created_again) == (True, False)
        assert again.to_dict() == first.to_dict()
        other_run, created_other = await store.put_if_absent(run_id="r2", content="x", **args)
        assert created_other
        assert other_run.seq == 2
        plain = await store.put(run_id="r3", content="plain", **args)
        existing, created_late = await store.put_if_absent(run_id="r3", content="late", **args)
        assert not created_late
        assert existing.to_dict() == plain.to_dict()
        assert await store.last_seq("t") == 3

    async def test_put_if_absent_under_concurrent_callers(self, store: RunEventStore) -> None:
        results = await asyncio.gather(
            *(
                store.put_if_absent(
                    thread_id="t", run_id="r", event_type="context:memory", category="context",
                    content=i, event_id=f"c{i}",
                )
                for i in range(20)
            )
        )
        assert sum(created for _, created in results) == 1
        winner = next(event for event, created in results if created)
        assert {event.event_id for event, _ in results} == {winner.event_id}
        assert [e.event_id for e in await read_all(store, "t")] == [winner.event_id]

    async def test_put_if_absent_exclusive_types_writes_one_terminal_event(
        self, store: RunEventStore
    ) -> None:
        kinds = sorted(TERMINAL_RUN_EVENTS)
        results = await asyncio.gather(
            *(
                store.put_if_absent(
                    thread_id="t", run_id="r", event_type=kinds[i % len(kinds)],
                    category=category_of(kinds[i % len(kinds)]).value, content=i,
                    event_id=f"end{i}", exclusive_types=TERMINAL_RUN_EVENTS,
                )
                for i in range(20)
            )
        )
        assert sum(created for _, created in results) == 1
        winner = next(event for event, created in results if created)
        assert {event.event_id for event, _ in results} == {winner.event_id}
        stored = await read_all(store, "t")
        assert [e.event_id for e in stored] == [winner.event_id]
        other, created = await store.put_if_absent(  # another run is not affected
            thread_id="t", run_id="r2", event_type="run.cancel", category="error",
            exclusive_types=TERMINAL_RUN_EVENTS,
        )
        assert created
        assert (other.seq, other.run_id) == (2, "r2")
        plain = await store.put(thread_id="t", run_id="r3", event_type="run.error", category="error")
        late, created_late = await store.put_if_absent(
            thread_id="t", run_id="r3", event_type="run.end", category="outputs",
            exclusive_types=["run.error", "run.end"],
        )
        assert not created_late
        assert late.to_dict() == plain.to_dict()
        with pytest.raises(TypeError):
            await store.put_if_absent(
                thread_id="t", run_id="r4", event_type="run.end", category="outputs",
                exclusive_types="run.end",
            )
        assert await store.last_seq("t") == 3

    async def test_put_run_refuses_to_move_a_run_to_another_thread(self, store: RunEventStore) -> None:
        await store.put_run(RunRow(run_id="r", thread_id="home", status=RunStatus.RUNNING))
        for status in (RunStatus.RUNNING, RunStatus.SUCCESS):
            with pytest.raises(ValueError, match=r"home.*elsewhere|elsewhere.*home"):
                await store.put_run(RunRow(run_id="r", thread_id="elsewhere", status=status))
        stored = await store.get_run("r")
        assert stored is not None
        assert (stored.thread_id, stored.status) == ("home", RunStatus.RUNNING)
        assert await store.list_runs("elsewhere") == []
        assert [row.run_id for row in await store.list_runs("home")] == ["r"]
        assert [(row.run_id, row.thread_id) for row in await store.list_runs()] == [("r", "home")]

    async def test_delete_by_thread_never_reuses_a_seq(self, store: RunEventStore) -> None:
        await store.put_batch([new_event("t", "r") for _ in range(3)])
        assert await store.delete_by_thread("t") == 3
        assert await store.last_seq("t") == 3
        assert await store.list_threads() == []
        again = await store.put(thread_id="t", run_id="r2", event_type="tool.call", category="trace")
        assert again.seq == 4
        assert [e.seq for e in await read_all(store, "t")] == [4]
        assert [e.seq for e in await store.list_events("t", after_seq=3)] == [4]

    async def test_list_runs_refuses_a_single_status_string(self, store: RunEventStore) -> None:
        await store.put_run(RunRow(run_id="r", thread_id="t", status=RunStatus.RUNNING))
        with pytest.raises(TypeError):
            await store.list_runs(statuses="running")
        with pytest.raises(TypeError):
            await store.list_runs("t", statuses="running")
        assert [row.run_id for row in await store.list_runs(statuses=("running",))] == ["r"]

    async def test_list_runs_order_is_started_at_else_first_put_then_run_id(
        self, store: RunEventStore
    ) -> None:
        early = datetime(2001, 1, 1, tzinfo=UTC)
        await store.put_run(RunRow(run_id="b-first-put", thread_id="t"))
        await asyncio.sleep(0.01)
        await store.put_run(RunRow(run_id="a-second-put", thread_id="t"))
        await store.put_run(RunRow(run_id="z-started", thread_id="t", started_at=early))
        await store.put_run(RunRow(run_id="y-started", thread_id="t", started_at=early))
        await store.put_run(RunRow(run_id="x-started", thread_id="u", started_at=early - timedelta(1)))
        # a later update of a row without started_at does not move it
        later = datetime.now(UTC) + timedelta(days=365)
        await store.put_run(RunRow(run_id="b-first-put", thread_id="t", updated_at=later))
        expected = ["y-started", "z-started", "b-first-put", "a-second-put"]
        assert [row.run_id for row in await store.list_runs("t")] == expected
        assert [row.run_id for row in await store.list_runs()] == ["x-started", *expected]

    @pytest.mark.parametrize("bad", ["a/b", "", ".."])
    async def test_reads_refuse_an_invalid_user_id(self, store: RunEventStore, bad: str) -> None:
        await store.put(thread_id="t", run_id="r", event_type="llm.ai.response", category="message")
        reads: list[Callable[[], Awaitable[object]]] = [
            lambda: store.list_threads(user_id=bad),
            lambda: store.count_messages("t", user_id=bad),
            lambda: store.list_messages("t", user_id=bad),
            lambda: store.list_messages_by_run("t", "r", user_id=bad),
            lambda: store.list_events("t", user_id=bad),
            lambda: anext(aiter(store.follow("t", user_id=bad))),
        ]
        for read in reads:
            with pytest.raises(ValueError, match="user_id"):
                async with asyncio.timeout(GUARD):
                    await read()

    async def test_list_threads_pages_with_after(self, store: RunEventStore) -> None:
        names = ["a", "b", "bb", "c", "d", "e"]
        await store.put_batch([new_event(name, "r", user_id="u" if name != "c" else "v") for name in names])
        pages: list[list[str]] = []
        cursor: str | None = None
        while True:
            page = await store.list_threads(limit=2, after=cursor)
            if not page:
                break
            pages.append(page)
            cursor = page[-1]
        assert pages == [["a", "b"], ["bb", "c"], ["d", "e"]]
        assert await store.list_threads(after="b") == ["bb", "c", "d", "e"]
        assert await store.list_threads(after="ba", limit=1) == ["bb"]
        assert await store.list_threads(after="e") == []
        assert await store.list_threads(user_id="u", after="bb") == ["d", "e"]
        with pytest.raises(ValueError, match="after"):
            await store.list_threads(after="a/b")

    async def test_delete_by_thread(self, store: RunEventStore) -> None:
        await store.put_batch([new_event("gone", f"r{i % 2}") for i in range(5)])
        keep = await store.put_batch([new_event("kept", "k") for _ in range(2)])
        await store.put_run(RunRow(run_id="r0", thread_id="gone"))
        await store.put_run(RunRow(run_id="k", thread_id="kept"))
        assert await store.delete_by_thread("gone") == 5
        assert await read_all(store, "gone") == []
        assert await store.count_messages("gone") == 0
        assert await store.get_run("r0") is None
        assert await store.list_runs("gone") == []
        assert await store.list_threads() == ["kept"]
        assert [e.to_dict() for e in await read_all(store, "kept")] == [e.to_dict() for e in keep]
        assert await store.get_run("k") is not None
        assert await store.delete_by_thread("gone") == 0
        again = await store.put(thread_id="gone", run_id="new", event_type="tool.call", category="trace")
        assert [e.event_id for e in await read_all(store, "gone")] == [again.event_id]

    async def test_delete_by_run_keeps_seq_above_the_highest_ever_assigned(
        self, store: RunEventStore
    ) -> None:
        written = await store.put_batch([new_event("t", run) for run in ("a", "b", "a", "b")])
        await store.put_run(RunRow(run_id="b", thread_id="t"))
        assert await store.delete_by_run("t", "b") == 2
        assert [e.to_dict() for e in await read_all(store, "t")] == [
            written[0].to_dict(), written[2].to_dict()
        ]
        assert await store.get_run("b") is None
        assert await store.last_seq("t") == 4
        assert (await store.put(thread_id="t", run_id="c", event_type="tool.call", category="trace")).seq == 5
        await store.put_batch([new_event("solo", "only") for _ in range(3)])
        assert await store.delete_by_run("solo", "only") == 3
        assert await store.delete_by_run("solo", "only") == 0
        assert (await store.put_batch([new_event("solo", "next")]))[0].seq == 4

    async def test_run_rows_round_trip_and_list(self, store: RunEventStore) -> None:
        start = datetime(2024, 3, 1, 12, tzinfo=UTC)
        usage = UsageTotals(input_tokens=10, output_tokens=5, total_tokens=15, llm_calls=2, cost_usd=0.25)
        rows = [
            RunRow(
                run_id=f"run-{i}", thread_id="t" if i < 3 else "other", user_id="u",
                status=status, started_at=start + timedelta(minutes=i), usage=usage,
                usage_by_model={"m": usage}, usage_by_caller={"lead": usage}, message_count=i,
                first_human_message="hi\u2028there", metadata={"k": [1, "x"]},
            )
            for i, status in enumerate(["success", "running", "error", "running"])
        ]
        for row in rows:
            assert (await store.put_run(row)).to_dict() == row.to_dict()
        fetched = await store.get_run("run-0")
        assert fetched is not None
        assert fetched.to_dict() == rows[0].to_dict()
        assert await store.get_run("missing") is None
        assert [r.run_id for r in await store.list_runs("t")] == ["run-0", "run-1", "run-2"]
        assert [r.run_id for r in await store.list_runs()] == [r.run_id for r in rows]
        assert [r.run_id for r in await store.list_runs("t", statuses=["running"])] == ["run-1"]
        done = await store.list_runs(statuses=["success", "error"])
        assert [r.run_id for r in done] == ["run-0", "run-2"]

    async def test_a_finished_run_is_never_reopened(self, store: RunEventStore) -> None:
        running = RunRow(run_id="r", thread_id="t", status=RunStatus.RUNNING)
        await store.put_run(running)
        done = running.replace(status=RunStatus.SUCCESS, message_count=3)
        assert (await store.put_run(done)).status == RunStatus.SUCCESS
        for refused in (RunStatus.RUNNING, RunStatus.PENDING, RunStatus.ERROR):
            answer = await store.put_run(running.replace(status=refused, message_count=99))
            assert (answer.status, answer.message_count) == (RunStatus.SUCCESS, 3)
        await store.put_run(done.replace(message_count=5))
        stored = await store.get_run("r")
        assert stored is not None
        assert (stored.status, stored.message_count) == (RunStatus.SUCCESS, 5)

    async def test_list_threads_and_last_seq(self, store: RunEventStore) -> None:
        for thread_id in ("b", "a", "c", "b"):
            await store.put(thread_id=thread_id, run_id="r", event_type="tool.call", category="trace")
        await store.put_run(RunRow(run_id="no-events", thread_id="d"))
        assert await store.list_threads() == ["a", "b", "c"]
        assert await store.list_threads(limit=2) == ["a", "b"]
        assert [await store.last_seq(t) for t in "abcd"] == [1, 2, 1, 0]

    # -- follow ----------------------------------------------------------------------------------
    async def test_follow_yields_existing_then_new_events(self, store: RunEventStore) -> None:
        await store.put_batch([new_event("live", content=i) for i in range(3)])
        follower = cast(AsyncGenerator[RunEvent, None], store.follow("live", after_seq=1))
        async with asyncio.timeout(GUARD), aclosing(follower):
            assert [(await anext(follower)).seq for _ in range(2)] == [2, 3]
            pending = asyncio.ensure_future(anext(follower))
            await asyncio.sleep(0.05)  # let the follower reach its wait before the write
            later = await store.put_batch([new_event("live", content=i) for i in (3, 4)])
            await store.put(thread_id="elsewhere", run_id="r", event_type="tool.call", category="trace")
            assert (await pending).to_dict() == later[0].to_dict()
            assert (await anext(follower)).to_dict() == later[1].to_dict()
        with pytest.raises(StopAsyncIteration):
            await anext(follower)
        written = await store.put(thread_id="live", run_id="r", event_type="tool.call", category="trace")
        assert written.seq == 6

    async def test_follow_stops_when_the_store_is_closed(self, store_factory: StoreFactory) -> None:
        async with store_factory() as other:
            other.follow_poll_interval = 0.01
            await other.put_batch([new_event("closing", content=i) for i in range(2)])
            seen: list[int] = []

            async def consume() -> None:
                async for event in other.follow("closing"):
                    seen.append(event.seq)

            consumer = asyncio.ensure_future(consume())
            async with asyncio.timeout(GUARD):
                while len(seen) < 2:  # noqa: ASYNC110 - polling a list the consumer fills is simplest
                    await asyncio.sleep(0.01)
                await other.aclose()
                await consumer
            assert seen == [1, 2]
            with pytest.raises(StoreClosedError):
                await other.put(thread_id="closing", run_id="r", event_type="tool.call", category="trace")

    # -- one normalization, fresh copies ---------------------------------------------------------
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
        content = cast(dict[str, Any], reads[1][0].content)
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
            cast(dict[str, Any], record.content)["list"].append("mutated")
            cast(dict[str, Any], record.content)["inner"]["k"] = "mutated"
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
        cast(list[str], got.metadata["k"]).append("mutated")
        again = await store.get_run("r")
        assert again is not None
        assert again.metadata == {"k": ["v"]}

    # -- concurrency -----------------------------------------------------------------------------
    async def test_concurrent_writers_give_dense_unique_seq(self, store: RunEventStore) -> None:
        writers, per_writer = self.concurrent_writers, self.events_per_writer
        total = writers * per_writer
        done = asyncio.Event()

        async def write(worker: int) -> None:
            rng, n = random.Random(worker), 0
            while n < per_writer:
                size = min(rng.choice((1, 1, 5, 10, 25)), per_writer - n)
                batch = [new_event("hot", f"w{worker}", content=n + i, event_id=f"w{worker}-{n + i}")
                         for i in range(size)]
                if size == 1:
                    await store.put(
                        thread_id="hot", run_id=f"w{worker}", event_type="llm.ai.response",
                        category="message", content=n, event_id=f"w{worker}-{n}",
                    )
                else:
                    await store.put_batch(batch)
                n += size

        async def poll() -> list[int]:
            seen: list[int] = []
            while len(seen) < total:
                finished = done.is_set()
                page = await store.list_events("hot", limit=500, after_seq=seen[-1] if seen else 0)
                expected = list(range(len(seen) + 1, len(seen) + 1 + len(page)))
                assert [e.seq for e in page] == expected, "a seq appeared below one already seen"
                seen.extend(e.seq for e in page)
                if not page:
                    assert not finished, f"events were lost: {len(seen)} of {total} readable"
                    await asyncio.sleep(0.005)
            return seen

        async def run_writers() -> None:
            await asyncio.gather(*(write(w) for w in range(writers)))
            done.set()

        async with asyncio.timeout(GUARD * 4):
            _, seen = await asyncio.gather(run_writers(), poll())
        events = await read_all(store, "hot")
        assert seen == [e.seq for e in events] == list(range(1, total + 1))
        assert sorted(e.event_id for e in events) == sorted(
            f"w{w}-{n}" for w in range(writers) for n in range(per_writer)
        )
        for worker in range(writers):
            assert [e.content for e in events if e.run_id == f"w{worker}"] == list(range(per_writer))
