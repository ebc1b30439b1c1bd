"""Conformance tests: ``search_runs`` (every filter, newest first, the cursor, bad arguments) and a
property test: on random stores, every search equals a brute-force filter over every run row."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from run_journal.catalog import LEAD_AGENT
from run_journal.runs import RunRow, RunStatus, UsageTotals
from run_journal.stores.base import RunEventStore, stamp
from run_journal.testing._support import StoreSuiteBase, new_event

T0: Final = datetime(2024, 5, 1, 13, 0, 0, tzinfo=UTC)
THREADS: Final = ("t0", "t1", "t2")
USERS: Final = (None, "alice", "bob")
MODELS: Final = ("gpt-4o", "claude", "unknown")
TOOLS: Final = ("search", "read_file", "web:fetch")
CALLERS: Final = (LEAD_AGENT, "subagent:researcher")


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def run_row(run_id: str, *, thread_id: str = "t0", minutes: float | None = 0, status: str = "success",
            user_id: str | None = None, models: Sequence[str] = (), tools: Sequence[str] = (),
            callers: Sequence[str] = (), tokens: int = 0, cost: float | None = None,
            llm_errors: int = 0, tool_errors: int = 0) -> RunRow:
    """A run row with the fields search reads."""
    return RunRow(
        run_id=run_id, thread_id=thread_id, user_id=user_id, status=status,
        started_at=None if minutes is None else at(minutes), updated_at=at(minutes or 0),
        usage=UsageTotals(total_tokens=tokens, llm_calls=1 if models else 0, cost_usd=cost),
        models=tuple(models), tools=tuple(tools), callers=tuple(callers),
        llm_error_count=llm_errors, tool_error_count=tool_errors,
    )


async def every_page(store: RunEventStore, limit: int, **filters: Any) -> list[str]:
    """The run ids of ``search_runs`` paged to its end through ``next_cursor``."""
    found: list[str] = []
    cursor: str | None = None
    while True:
        page = await store.search_runs(limit=limit, cursor=cursor, **filters)
        assert len(page.rows) <= limit
        found += [row.run_id for row in page.rows]
        if page.next_cursor is None:
            return found
        assert len(page.rows) == limit
        cursor = page.next_cursor


async def ids(store: RunEventStore, **filters: Any) -> list[str]:
    return [row.run_id for row in (await store.search_runs(limit=100, **filters)).rows]


async def sample(store: RunEventStore) -> None:
    """Six runs: r1 oldest ... r6 newest (r0 never started)."""
    rows = [
        run_row("r1", minutes=1, status="success", user_id="alice", models=["gpt-4o"], tools=["search"],
                callers=[LEAD_AGENT], tokens=100, cost=0.001),
        run_row("r2", minutes=2, status="error", user_id="bob", models=["claude"], callers=[LEAD_AGENT],
                tokens=5000, cost=0.05),
        run_row("r3", thread_id="t1", minutes=3, status="success", user_id="alice",
                models=["gpt-4o", "claude"], tools=["read_file", "search"],
                callers=[LEAD_AGENT, "subagent:researcher"], tokens=20000, cost=None),
        run_row("r4", thread_id="t1", minutes=4, status="running", models=["gpt-4o"], llm_errors=1,
                callers=[LEAD_AGENT], tokens=10),
        run_row("r5", minutes=5, status="interrupted", user_id="alice", tools=["web:fetch"], tool_errors=2),
        run_row("r6", thread_id="t2", minutes=6, status="cancelled", user_id="bob", tokens=0, cost=0.0),
        run_row("r0", thread_id="t2", minutes=None, status="pending"),
    ]
    for row in rows:
        await store.put_run(row)


class SearchTests(StoreSuiteBase):
    """``search_runs``: every filter, the order and its cursor, bad arguments, on every backend."""

    async def test_each_filter_selects_the_runs_that_match_it(self, store: RunEventStore) -> None:
        await sample(store)
        every = await ids(store)  # r0 never started: it is placed by its first put_run
        assert sorted(every) == ["r0", "r1", "r2", "r3", "r4", "r5", "r6"]
        started = [run_id for run_id in every if run_id != "r0"]
        assert started == ["r6", "r5", "r4", "r3", "r2", "r1"]
        assert await ids(store, statuses=["error"]) == ["r2"]
        assert await ids(store, statuses=["success", "running"]) == ["r4", "r3", "r1"]
        assert await ids(store, statuses=[]) == []
        assert await ids(store, since=at(2), until=at(5)) == ["r4", "r3", "r2"]
        assert await ids(store, since=at(5)) == ["r6", "r5"]
        assert await ids(store, until=at(1.5)) == ["r1"]
        assert await ids(store, model="gpt-4o") == ["r4", "r3", "r1"]
        assert await ids(store, model="claude", tool="search") == ["r3"]
        assert await ids(store, tool="search") == ["r3", "r1"]
        assert await ids(store, tool="web:fetch") == ["r5"]
        assert await ids(store, tool="nothing") == []
        assert await ids(store, caller="subagent:researcher") == ["r3"]
        assert await ids(store, min_cost_usd=0.001) == ["r2", "r1"]  # r3's cost is unknown
        assert await ids(store, min_cost_usd=0) == ["r6", "r2", "r1"]
        assert await ids(store, min_tokens=100) == ["r3", "r2", "r1"]
        assert await ids(store, has_error=True) == ["r5", "r4", "r2"]
        assert set(await ids(store, has_error=False)) == {"r6", "r3", "r1", "r0"}
        assert await ids(store, user_id="alice") == ["r5", "r3", "r1"]
        assert await ids(store, user_id="alice", tool="search", since=at(2)) == ["r3"]
        assert await ids(store, thread_id="t1") == ["r4", "r3"]
        assert await ids(store, thread_id="t1", has_error=False) == ["r3"]
        assert await ids(store, user_id="carol") == []

    async def test_pages_follow_the_cursor_newest_first(self, store: RunEventStore) -> None:
        for n in range(12):  # pairs share a start: the greater run id comes first
            await store.put_run(run_row(f"r{n:02}", thread_id=THREADS[n % 3], minutes=n // 2,
                                        tools=["search"] if n % 3 else [], status="success"))
        newest_first = sorted((f"r{n:02}" for n in range(12)), key=lambda r: (int(r[1:]) // 2, r),
                              reverse=True)
        for limit in (1, 2, 5, 12, 50):
            assert await every_page(store, limit) == newest_first
        tooled = [run_id for run_id in newest_first if int(run_id[1:]) % 3]
        for limit in (1, 3, 8):
            assert await every_page(store, limit, tool="search") == tooled
        page = await store.search_runs(limit=12)
        assert page.next_cursor is None
        assert len(page.rows) == 12

    async def test_a_cursor_outlives_the_run_it_names(self, store: RunEventStore) -> None:
        for n in range(5):
            await store.put_run(run_row(f"r{n}", thread_id=f"t{n}", minutes=n))
        first = await store.search_runs(limit=2)
        assert [row.run_id for row in first.rows] == ["r4", "r3"]
        await store.delete_by_thread("t3")
        assert first.next_cursor is not None
        rest = await store.search_runs(limit=5, cursor=first.next_cursor)
        assert [row.run_id for row in rest.rows] == ["r2", "r1", "r0"]

    async def test_a_row_written_again_is_found_by_what_it_holds_now(self, store: RunEventStore) -> None:
        await store.put_run(run_row("r1", status="running", minutes=1, models=["gpt-4o"]))
        await store.put_run(run_row("r2", status="running", minutes=2))
        assert await ids(store, tool="search") == []
        await store.put_run(run_row("r1", status="error", minutes=1, models=["claude"], tools=["search"],
                                    tokens=50))
        assert await ids(store, tool="search") == ["r1"]
        assert await ids(store, model="gpt-4o") == []
        assert await ids(store, model="claude", statuses=["error"], min_tokens=50) == ["r1"]
        assert await ids(store, statuses=["running"]) == ["r2"]
        # a finished run is never reopened: the refused row changes nothing search sees
        await store.put_run(run_row("r1", status="running", minutes=1, tools=["other"]))
        assert await ids(store, tool="other") == []
        assert await ids(store, tool="search") == ["r1"]

    async def test_a_run_that_starts_later_moves_to_its_start(self, store: RunEventStore) -> None:
        await store.put_run(run_row("late", minutes=None, status="pending", tools=["search"]))
        await store.put_run(run_row("early", minutes=0, tools=["search"]))
        assert await ids(store, tool="search", since=at(-1)) == ["early"]
        await store.put_run(run_row("late", minutes=-5, status="running", tools=["search"]))
        assert await ids(store, tool="search") == ["early", "late"]
        assert await ids(store, tool="search", until=at(-1)) == ["late"]

    async def test_deleted_runs_are_not_found(self, store: RunEventStore) -> None:
        await store.put_batch([new_event("t0", "r1", created_at=at(1)),
                               new_event("t1", "r2", created_at=at(1))])
        await store.put_run(run_row("r1", thread_id="t0", minutes=1, tools=["search"], user_id="alice"))
        await store.put_run(run_row("r2", thread_id="t1", minutes=2, tools=["search"], user_id="alice"))
        await store.put_run(run_row("r3", thread_id="t1", minutes=3, tools=["search"], user_id="alice"))
        await store.delete_by_run("t0", "r1")
        await store.delete_by_thread("t1")
        assert await ids(store, tool="search") == []
        assert await ids(store, user_id="alice") == []
        assert await ids(store) == []

    @pytest.mark.parametrize(("arguments", "named"), [
        ({"statuses": "error"}, "statuses"),
        ({"statuses": ["failed"]}, "statuses"),
        ({"since": datetime(2024, 1, 1)}, "since"),  # noqa: DTZ001 - naive on purpose: refused
        ({"until": "yesterday"}, "until"),
        ({"model": ""}, "model"),
        ({"tool": 3}, "tool"),
        ({"caller": "x" * 256}, "caller"),
        ({"min_cost_usd": -1}, "min_cost_usd"),
        ({"min_cost_usd": float("nan")}, "min_cost_usd"),
        ({"min_cost_usd": True}, "min_cost_usd"),
        ({"min_tokens": 1.5}, "min_tokens"),
        ({"has_error": "yes"}, "has_error"),
        ({"user_id": "a/b"}, "user_id"),
        ({"thread_id": ""}, "thread_id"),
        ({"limit": 0}, "limit"),
        ({"cursor": "nonsense"}, "cursor"),
        ({"cursor": "2024-05-01T13:00:00+00:00/r1"}, "cursor"),
    ])
    async def test_bad_arguments_are_refused_by_name(
        self, store: RunEventStore, arguments: dict[str, Any], named: str
    ) -> None:
        with pytest.raises((ValueError, TypeError), match=named):
            await store.search_runs(**arguments)

    @settings(max_examples=12, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(data=st.data())
    async def test_search_equals_a_filter_over_every_run(
        self, store: RunEventStore, data: st.DataObject
    ) -> None:
        for thread_id in THREADS:  # one store for every example: start from an empty one
            await store.delete_by_thread(thread_id)
        rows = data.draw(st.lists(rows_strategy(), min_size=0, max_size=25, unique_by=lambda r: r.run_id))
        for row in rows:
            await store.put_run(row)
        stored = {row.run_id: row for row in await store.list_runs()}
        assert set(stored) == {row.run_id for row in rows}
        for _ in range(4):
            filters = data.draw(filters_strategy())
            limit = data.draw(st.integers(1, 7))
            expected = sorted((row for row in stored.values() if matches(row, filters)),
                              key=lambda row: (stamp(row.started_at or at(0)), row.run_id), reverse=True)
            assert await every_page(store, limit, **filters) == [row.run_id for row in expected], filters


def rows_strategy() -> st.SearchStrategy[RunRow]:
    names = st.lists
    return st.builds(
        run_row,
        run_id=st.text("abcdef", min_size=1, max_size=4).map(lambda text: f"run-{text}"),
        thread_id=st.sampled_from(THREADS),
        minutes=st.integers(0, 8),  # few distinct starts: ties are common
        status=st.sampled_from([status.value for status in RunStatus]),
        user_id=st.sampled_from(USERS),
        models=names(st.sampled_from(MODELS), max_size=2),
        tools=names(st.sampled_from(TOOLS), max_size=2),
        callers=names(st.sampled_from(CALLERS), max_size=2),
        tokens=st.integers(0, 200),
        cost=st.one_of(st.none(), st.sampled_from([0.0, 0.01, 0.02, 0.5])),
        llm_errors=st.integers(0, 1),
        tool_errors=st.integers(0, 1),
    )


def filters_strategy() -> st.SearchStrategy[dict[str, Any]]:
    optional = {
        "statuses": st.lists(st.sampled_from([status.value for status in RunStatus]), max_size=2),
        "since": st.integers(0, 8).map(at),
        "until": st.integers(0, 9).map(at),
        "model": st.sampled_from(MODELS),
        "tool": st.sampled_from(TOOLS),
        "caller": st.sampled_from(CALLERS),
        "min_cost_usd": st.sampled_from([0.0, 0.01, 0.3]),
        "min_tokens": st.integers(0, 200),
        "has_error": st.booleans(),
        "user_id": st.sampled_from(["alice", "bob"]),
        "thread_id": st.sampled_from(THREADS),
    }
    return st.fixed_dictionaries({}, optional=optional)


def matches(row: RunRow, filters: dict[str, Any]) -> bool:
    """The brute force: each filter as its docstring says, on the stored row."""
    return all(_holds(row, name, value) for name, value in filters.items())


def _holds(row: RunRow, name: str, value: Any) -> bool:
    started, cost = row.started_at, row.usage.cost_usd
    if name in ("since", "until"):
        return started is not None and (started >= value if name == "since" else started < value)
    if name in ("model", "tool", "caller"):
        return bool(value in getattr(row, name + "s"))
    if name == "min_cost_usd":
        return cost is not None and cost >= value
    if name == "min_tokens":
        return bool(row.usage.total_tokens >= value)
    if name == "has_error":
        return bool(row.has_error == value)
    if name == "statuses":
        return str(row.status) in value
    return bool(getattr(row, name) == value)  # user_id, thread_id
