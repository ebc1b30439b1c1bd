"""Conformance tests: threads by latest activity, runs newest first, each paged with a cursor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from run_journal.runs import RunRow, RunStatus
from run_journal.stores.base import RunEventStore, ThreadActivity
from run_journal.testing._support import StoreSuiteBase, new_event

T0 = datetime(2024, 5, 1, 13, 0, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


async def write(store: RunEventStore, thread_id: str, *minutes: float, user_id: str | None = None,
                run_id: str = "r") -> None:
    """One event per moment (``minutes`` after ``T0``), in that order, so the last gets the highest seq."""
    await store.put_batch([new_event(thread_id, run_id, created_at=at(m), user_id=user_id) for m in minutes])


def pairs(items: list[ThreadActivity]) -> list[tuple[str, datetime]]:
    return [(item.thread_id, item.last_activity_at) for item in items]


async def every_page(store: RunEventStore, limit: int, user_id: str | None = None) -> list[ThreadActivity]:
    """``list_recent_threads`` paged to its end through the cursor."""
    found: list[ThreadActivity] = []
    while True:
        page = await store.list_recent_threads(limit=limit, user_id=user_id,
                                               before=found[-1].cursor if found else None)
        found += page
        if len(page) < limit:
            return found


class ActivityTests(StoreSuiteBase):
    """``list_recent_threads`` and ``list_runs(newest_first=, limit=, after=)``, on every backend."""

    async def test_recent_threads_are_ordered_by_their_newest_event(self, store: RunEventStore) -> None:
        await write(store, "b", 1, 5)
        await write(store, "a", 3)
        await write(store, "c", 9, 4)  # the newest event (highest seq) decides, not the latest moment
        await write(store, "d", 3)  # a tie with "a": the greater thread id first
        expected = [("b", at(5)), ("c", at(4)), ("d", at(3)), ("a", at(3))]
        assert pairs(await store.list_recent_threads()) == expected
        for limit in (1, 2, 3):
            assert pairs(await every_page(store, limit)) == expected
        await write(store, "a", 10)
        assert pairs(await store.list_recent_threads(limit=2)) == [("a", at(10)), ("b", at(5))]
        await write(store, "a", 0)  # an older moment written later moves the thread back
        assert [item.thread_id for item in await store.list_recent_threads()] == ["b", "c", "d", "a"]
        assert await store.list_threads() == ["a", "b", "c", "d"]  # the id order is unchanged

    async def test_a_users_recent_threads_follow_that_users_own_events(self, store: RunEventStore) -> None:
        await write(store, "shared", 1, user_id="alice")
        await write(store, "shared", 9, user_id="bob")
        await write(store, "hers", 5, user_id="alice")
        await write(store, "nobodys", 7)
        assert pairs(await store.list_recent_threads(user_id="alice")) == [("hers", at(5)), ("shared", at(1))]
        assert pairs(await every_page(store, 1, user_id="alice")) == [("hers", at(5)), ("shared", at(1))]
        assert pairs(await store.list_recent_threads(user_id="bob")) == [("shared", at(9))]
        assert await store.list_recent_threads(user_id="carol") == []
        assert [item.thread_id for item in await store.list_recent_threads()] == ["shared", "nobodys", "hers"]

    async def test_deletes_move_or_remove_a_thread(self, store: RunEventStore) -> None:
        await write(store, "t", 1, 2, user_id="alice", run_id="old")
        await write(store, "t", 8, user_id="bob", run_id="new")
        await write(store, "gone", 5, user_id="alice")
        await write(store, "other", 4, user_id="alice")
        assert [item.thread_id for item in await store.list_recent_threads()] == ["t", "gone", "other"]
        assert await store.delete_by_run("t", "new") == 1  # back to its newest remaining event
        assert pairs(await store.list_recent_threads()) == [("gone", at(5)), ("other", at(4)), ("t", at(2))]
        assert await store.list_recent_threads(user_id="bob") == []
        assert await store.delete_by_thread("gone") == 1
        assert [item.thread_id for item in await store.list_recent_threads()] == ["other", "t"]
        assert [item.thread_id for item in await store.list_recent_threads(user_id="alice")] == ["other", "t"]
        assert await store.delete_by_run("t", "old") == 2
        assert [item.thread_id for item in await store.list_recent_threads()] == ["other"]
        await write(store, "t", 0, user_id="bob")  # the thread id used again starts afresh
        assert pairs(await store.list_recent_threads()) == [("other", at(4)), ("t", at(0))]
        assert pairs(await store.list_recent_threads(user_id="bob")) == [("t", at(0))]

    async def test_recent_threads_check_their_arguments(self, store: RunEventStore) -> None:
        await write(store, "t", 1)
        (item,) = await store.list_recent_threads()
        assert item.cursor == "2024-05-01T13:01:00.000000+00:00/t"
        assert await store.list_recent_threads(before=item.cursor) == []
        later = "2030-01-01T00:00:00.000000+00:00/a"
        assert [x.thread_id for x in await store.list_recent_threads(before=later)] == ["t"]
        for bad in ("t", "2024-05-01T13:01:00/t", "2024-05-01T13:01:00.000000+00:00/", "x/t",
                    "2024-05-01T13:01:00.000000+00:00/a/b", "2024-05-01T13:01:00.000000+02:00/t"):
            with pytest.raises(ValueError, match="before must be the cursor"):
                await store.list_recent_threads(before=bad)
        for limit in (0, 10_001):
            with pytest.raises(ValueError, match="limit"):
                await store.list_recent_threads(limit=limit)
        with pytest.raises(ValueError, match="user_id"):
            await store.list_recent_threads(user_id="a/b")

    async def test_runs_page_newest_first_with_a_cursor(self, store: RunEventStore) -> None:
        statuses = [RunStatus.SUCCESS, RunStatus.ERROR, RunStatus.RUNNING]
        for n in range(7):
            await store.put_run(RunRow(run_id=f"r{n}", thread_id="t", user_id="alice" if n % 2 else "bob",
                                       status=statuses[n % 3], started_at=at(n)))
        await store.put_run(RunRow(run_id="elsewhere", thread_id="u", started_at=at(3.5)))
        oldest = [f"r{n}" for n in range(7)]

        async def ids(thread_id: str | None = "t", **options: object) -> list[str]:
            return [row.run_id for row in await store.list_runs(thread_id, **options)]  # type: ignore[arg-type]

        assert await ids() == oldest
        assert await ids(newest_first=True) == oldest[::-1]
        assert await ids(limit=3) == ["r0", "r1", "r2"]
        assert await ids(limit=3, after="r2") == ["r3", "r4", "r5"]
        assert await ids(limit=3, newest_first=True) == ["r6", "r5", "r4"]
        assert await ids(limit=3, newest_first=True, after="r4") == ["r3", "r2", "r1"]
        assert await ids(limit=3, newest_first=True, after="r1") == ["r0"]
        assert await ids(newest_first=True, after="r0") == []
        assert await ids(user_id="alice", newest_first=True) == ["r5", "r3", "r1"]
        assert await ids(user_id="alice", limit=1, after="r1") == ["r3"]
        assert await ids(statuses=["running"], newest_first=True, limit=1) == ["r5"]
        assert await ids(None, limit=5) == ["r0", "r1", "r2", "r3", "elsewhere"]
        assert await ids(None, newest_first=True, after="r4", limit=2) == ["elsewhere", "r3"]
        assert await ids(user_id="carol") == []
        for missing in ("nope", "elsewhere"):
            with pytest.raises(ValueError, match=f"after={missing!r}"):
                await store.list_runs("t", after=missing, limit=2)
        with pytest.raises(ValueError, match="limit"):
            await store.list_runs("t", limit=0)
        assert await store.count_runs("t") == 7
        assert await store.count_runs() == 8
        assert await store.count_runs("t", user_id="alice") == 3
        assert await store.count_runs(statuses=["running"]) == 2
        assert await store.count_runs("nobody") == 0

    async def test_a_run_row_without_a_start_is_ordered_by_its_first_put(self, store: RunEventStore) -> None:
        await store.put_run(RunRow(run_id="first", thread_id="t"))
        await store.put_run(RunRow(run_id="second", thread_id="t"))
        await store.put_run(RunRow(run_id="first", thread_id="t", status=RunStatus.SUCCESS))  # stays first
        await store.put_run(RunRow(run_id="dated", thread_id="t", started_at=at(-60 * 24 * 365)))
        newest_first = await store.list_runs("t", newest_first=True)
        assert [row.run_id for row in newest_first] == ["second", "first", "dated"]
        assert [row.run_id for row in await store.list_runs("t", limit=1, after="first")] == ["second"]


# -- what a store written before the activity order must show once upgraded --------------------------
async def write_history(store: RunEventStore) -> None:
    """Two threads of two users and two runs, for a backend's upgrade test: write them, make the store
    look as an older release left it, open it again, then ``assert_history``."""
    await write(store, "a", 1, user_id="alice", run_id="r1")
    await write(store, "a", 5, user_id="bob", run_id="r1")
    await write(store, "b", 3, user_id="alice", run_id="r3")
    await store.put_run(RunRow(run_id="r1", thread_id="a", started_at=at(1)))
    await store.put_run(RunRow(run_id="r2", thread_id="a", started_at=at(2), user_id="bob"))


async def assert_history(store: RunEventStore) -> None:
    assert pairs(await store.list_recent_threads()) == [("a", at(5)), ("b", at(3))]
    assert pairs(await store.list_recent_threads(user_id="alice")) == [("b", at(3)), ("a", at(1))]
    assert pairs(await store.list_recent_threads(user_id="bob")) == [("a", at(5))]
    assert await store.list_threads(user_id="alice") == ["a", "b"]
    assert await store.list_threads() == ["a", "b"]
    assert [row.run_id for row in await store.list_runs("a", newest_first=True, limit=1)] == ["r2"]
    assert [row.run_id for row in await store.list_runs("a", user_id="bob")] == ["r2"]
    await write(store, "b", 7, user_id="bob", run_id="r3")  # and it is kept up from here on
    assert pairs(await store.list_recent_threads()) == [("b", at(7)), ("a", at(5))]
    assert pairs(await store.list_recent_threads(user_id="bob")) == [("b", at(7)), ("a", at(5))]
