"""``/api/runs`` (search across threads, newest first, a cursor) and ``/api/usage`` (trends) on every
backend, through httpx's ASGI transport: each filter, 400 naming the bad parameter, user scoping."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the HTTP API needs the serve extra")
httpx = pytest.importorskip("httpx", reason="the HTTP tests need httpx (dev extra)")

from run_journal import RunEventStore, UsageTotals  # noqa: E402
from run_journal.http import create_app  # noqa: E402
from run_journal.testing._search import run_row, sample  # noqa: E402
from run_journal.trends import usage_by  # noqa: E402


@pytest.fixture
async def client(store: RunEventStore) -> AsyncIterator[Any]:
    await sample(store)
    transport = httpx.ASGITransport(app=create_app(store))
    async with httpx.AsyncClient(transport=transport, base_url="http://journal") as opened:
        yield opened


async def ids(client: Any, **params: Any) -> list[str]:
    answer = await client.get("/api/runs", params=params)
    assert answer.status_code == 200, answer.text
    return [run["run_id"] for run in answer.json()["data"]]


async def test_runs_are_searched_by_query_parameters(client: Any) -> None:
    assert (await ids(client))[1:] == ["r6", "r5", "r4", "r3", "r2", "r1"]  # r0 never started: newest
    assert await ids(client, status="error") == ["r2"]
    assert await ids(client, status=["success", "running"]) == ["r4", "r3", "r1"]
    assert await ids(client, status="success,running") == ["r4", "r3", "r1"]
    assert await ids(client, since="2024-05-01T13:02:00Z", until="2024-05-01T13:05:00+00:00") == [
        "r4", "r3", "r2"]
    assert await ids(client, since="2024-05-01", until="2024-05-01T13:01:30") == ["r1"]  # UTC
    assert await ids(client, since="1d") == []  # the sample runs are older
    assert await ids(client, model="gpt-4o", tool="search") == ["r3", "r1"]
    assert await ids(client, caller="subagent:researcher") == ["r3"]
    assert await ids(client, min_cost=0.001) == ["r2", "r1"]
    assert await ids(client, min_tokens=100) == ["r3", "r2", "r1"]
    assert await ids(client, errors="true") == ["r5", "r4", "r2"]
    assert "r2" not in await ids(client, errors="false")
    assert await ids(client, user_id="alice") == ["r5", "r3", "r1"]
    assert await ids(client, thread_id="t1") == ["r4", "r3"]


async def test_pages_follow_next_cursor(client: Any) -> None:
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, "tool": "search"} | ({"cursor": cursor} if cursor else {})
        page = (await client.get("/api/runs", params=params)).json()
        seen += [run["run_id"] for run in page["data"]]
        assert {"models", "tools", "callers", "llm_error_count", "duration_ms"} <= set(page["data"][0])
        if not page["has_more"]:
            assert page["next_cursor"] is None
            break
        cursor = page["next_cursor"]
    assert seen == ["r3", "r1"]


@pytest.mark.parametrize(("params", "named"), [
    ({"status": "failed"}, "status"),
    ({"since": "yesterday"}, "since"),
    ({"until": "2024-13-01"}, "until"),
    ({"min_cost": "-1"}, "min_cost"),
    ({"min_cost": "cheap"}, "min_cost"),
    ({"min_tokens": "1.5"}, "min_tokens"),
    ({"errors": "maybe"}, "errors"),
    ({"user_id": "a/b"}, "user_id"),
    ({"thread_id": ""}, "thread_id"),
    ({"model": ""}, "model"),
    ({"limit": 0}, "limit"),
    ({"cursor": "nope"}, "cursor"),
])
async def test_a_bad_parameter_is_a_400_that_names_it(
    client: Any, params: dict[str, Any], named: str
) -> None:
    for path in ("/api/runs", "/api/usage"):
        if path == "/api/usage" and named in ("limit", "cursor"):
            continue
        answer = await client.get(path, params=params)
        assert answer.status_code == 400, (path, answer.text)
        assert answer.json()["error"] == "bad_request"
        assert named in answer.json()["detail"]
    answer = await client.get("/api/usage", params={"by": "week"})
    assert answer.status_code == 400
    assert "by must be one of day, model, caller" in answer.json()["detail"]


async def test_usage_trend_figures_are_the_sums_of_the_run_rows(client: Any, store: RunEventStore) -> None:
    await store.put_run(run_row("r9", minutes=60 * 24, models=["gpt-4o"], tokens=7, cost=0.5))  # next day
    rows = await store.list_runs()
    for by in ("day", "model", "caller"):
        answer = await client.get("/api/usage", params={"by": by})
        assert answer.status_code == 200, answer.text
        expected = [bucket.to_dict() for bucket in usage_by(reversed(rows), by)]
        assert answer.json() == {"by": by, "data": expected}
    days = (await client.get("/api/usage", params={"since": "2024-05-01"})).json()["data"]
    assert [day["key"] for day in days] == ["2024-05-01", "2024-05-02"]
    assert days[1]["usage"]["total_tokens"] == 7
    assert sum(day["usage"]["total_tokens"] for day in days) == sum(
        row.usage.total_tokens for row in rows if row.started_at is not None)
    errors = (await client.get("/api/usage", params={"by": "day", "errors": "true"})).json()["data"]
    assert [day["runs"] for day in errors] == [3]
    # r4's model call has no price: the day's cost is unknown, the known part is r2's
    assert errors[0]["usage"] == UsageTotals(total_tokens=5010, llm_calls=2, cost_usd=None).to_dict()
    assert (errors[0]["known_cost_usd"], errors[0]["unpriced_runs"]) == (0.05, 1)


async def test_a_user_scope_limits_search_and_trends_to_that_user(store: RunEventStore) -> None:
    await sample(store)
    transport = httpx.ASGITransport(app=create_app(store, user_header="X-User"))
    async with httpx.AsyncClient(transport=transport, base_url="http://journal",
                                 headers={"X-User": "alice"}) as client:
        assert await ids(client) == ["r5", "r3", "r1"]
        assert await ids(client, tool="search") == ["r3", "r1"]
        assert await ids(client, user_id="alice", since="2024-05-01T13:02:00Z") == ["r5", "r3"]
        assert await ids(client, user_id="bob") == []  # another user's runs: nothing
        days = (await client.get("/api/usage")).json()["data"]
        assert [(day["key"], day["runs"]) for day in days] == [("2024-05-01", 3)]
        assert (await client.get("/api/usage", params={"user_id": "bob"})).json()["data"] == []
        missing = await client.get("/api/runs", headers={"X-User": ""})
        assert missing.status_code == 401
