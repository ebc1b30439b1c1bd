"""Conformance tests: pagination, filters, argument checks and user_id scoping of reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import aclosing
from typing import Any, cast

import pytest

from run_journal.envelope import RunEvent
from run_journal.stores.base import MAX_PAGE, RunEventStore
from run_journal.testing._support import (
    GUARD,
    StoreSuiteBase,
    expected_page,
    interleaved_thread,
    new_event,
    read_all,
)


class ReadTests(StoreSuiteBase):
    """Pagination, filters, argument checks and user_id scoping of reads."""

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

    @pytest.mark.parametrize("value", [2**63, 2**64 + 5, -1, True, 1.0, "3"])
    async def test_every_seq_cursor_is_checked_by_name(self, store: RunEventStore, value: object) -> None:
        """A seq cursor is an integer from 0 to 2**63-1 (the SQL stores' signed 64-bit column) on every
        read and ``follow``: anything else is a ValueError naming the parameter, never a failed query."""
        await store.put(thread_id="t", run_id="r", event_type="llm.ai.response", category="message")
        reads: dict[str, Callable[[Any], Awaitable[object]]] = {
            "list_messages(after_seq)": lambda v: store.list_messages("t", after_seq=v),
            "list_messages(before_seq)": lambda v: store.list_messages("t", before_seq=v),
            "list_messages_by_run(after_seq)": lambda v: store.list_messages_by_run("t", "r", after_seq=v),
            "list_messages_by_run(before_seq)": lambda v: store.list_messages_by_run("t", "r", before_seq=v),
            "list_events(after_seq)": lambda v: store.list_events("t", after_seq=v),
            "follow(after_seq)": lambda v: anext(aiter(store.follow("t", after_seq=v))),
        }
        for call, read in reads.items():
            name = call.split("(")[1].rstrip(")")
            with pytest.raises(ValueError, match=rf"{name} must be an integer from 0 to 2\*\*63-1"):
                await read(value)

    async def test_the_highest_seq_cursor_is_an_empty_page(self, store: RunEventStore) -> None:
        await store.put(thread_id="t", run_id="r", event_type="llm.ai.response", category="message")
        highest = 2**63 - 1
        assert await store.list_messages("t", after_seq=highest) == []
        assert [e.seq for e in await store.list_messages("t", before_seq=highest)] == [1]
        assert await store.list_messages_by_run("t", "r", after_seq=highest) == []
        assert await store.list_events("t", after_seq=highest) == []
        assert [e.seq for e in await store.list_messages("t", after_seq=0, before_seq=highest)] == [1]

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
        follower = cast("AsyncGenerator[RunEvent, None]", store.follow("shared", user_id="alice"))
        async with asyncio.timeout(GUARD), aclosing(follower):
            assert [(await anext(follower)).content for _ in range(2)] == [1, 4]

