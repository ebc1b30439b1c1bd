"""Search and trends on real recorded runs (LangChain agents on fake chat models, journaled) on every
backend; the ``runs``, ``threads`` and ``usage --by`` commands; trend figures equal the sum of the
run rows; reconcile fills the search fields of a run whose worker died."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from _recorded_runs import MODEL, Recorded, Shared, record_runs
from conftest import CLI_BACKENDS, backend_url

from run_journal import NewEvent, RunRow, UsageTotals, open_store, usage_trend
from run_journal.projections import reconcile_orphans
from run_journal.stores.base import RunEventStore
from run_journal.trends import usage_by


async def found(store: RunEventStore, **filters: Any) -> set[str]:
    return {row.run_id for row in (await store.search_runs(limit=100, **filters)).rows}


@pytest.mark.asyncio(loop_scope="module")
async def test_recorded_runs_are_found_by_what_they_did(shared: Shared) -> None:
    store, runs = shared
    every = {runs.run(name) for name in ("tool", "deep", "middleware", "failed", "interrupted", "resumed")}
    assert await found(store) == every
    weather = await store.get_run(runs.tool)
    assert weather is not None
    assert weather.tools == ("search", "write_file")
    assert MODEL in weather.models
    assert weather.callers == ("lead_agent",)
    assert await found(store, tool="search") == {runs.tool, runs.deep}
    assert await found(store, tool="write_file") == {runs.tool}
    assert await found(store, tool="boom") == {runs.failed}
    assert await found(store, caller="subagent:researcher") == {runs.deep}
    assert await found(store, statuses=["error"]) == {runs.failed}
    assert await found(store, statuses=["interrupted"]) == {runs.interrupted}
    # the middleware run succeeded after its first model failed: an error all the same
    names = {runs.run(name): name for name in Recorded.THREADS}
    assert {names[run_id] for run_id in await found(store, has_error=True)} == {"failed", "middleware"}
    middleware = await store.get_run(runs.middleware)
    assert middleware is not None
    assert middleware.llm_error_count >= 1
    assert middleware.status == "success"
    assert await found(store, model=MODEL, tool="search") == {runs.tool, runs.deep}
    assert await found(store, model="unknown", caller="middleware:summarization") == {runs.middleware}
    priced = {run_id for run_id in every if ((row := await store.get_run(run_id)) and row.cost_usd)}
    assert await found(store, min_cost_usd=1e-12) == priced
    assert priced
    tokens = (await store.get_run(runs.tool)).usage.total_tokens  # type: ignore[union-attr]
    assert runs.tool in await found(store, min_tokens=tokens)
    assert runs.tool not in await found(store, min_tokens=tokens + 1)
    assert await found(store, thread_id="approval") == {runs.interrupted, runs.resumed}


@pytest.mark.asyncio(loop_scope="module")
async def test_trend_figures_are_the_sums_of_the_run_rows(shared: Shared) -> None:
    store, _ = shared
    rows = await store.list_runs()
    for by in ("day", "model", "caller"):
        buckets = await usage_trend(store, by)
        assert buckets == usage_by(reversed(rows), by)  # summed in the order search reads them
        expected: dict[str, UsageTotals] = {}
        for row in rows:
            parts = {"day": {row.started_at.date().isoformat(): row.usage} if row.started_at else {},
                     "model": row.usage_by_model, "caller": row.usage_by_caller}[by]
            for key, usage in parts.items():
                expected[key] = expected.get(key, UsageTotals()) + usage
        assert {bucket.key: same_sum(bucket.usage) for bucket in buckets} == {
            key: same_sum(usage) for key, usage in expected.items()}
        assert sum(bucket.usage.total_tokens for bucket in buckets) == sum(
            row.usage.total_tokens for row in rows)
    (today,) = await usage_trend(store, "day", since=datetime.now(UTC) - timedelta(days=1))
    assert today.runs == len(rows)
    assert await usage_trend(store, "day", until=datetime(2000, 1, 1, tzinfo=UTC)) == []
    with pytest.raises(ValueError, match="by must be one of"):
        await usage_trend(store, "week")  # type: ignore[arg-type]


def same_sum(usage: UsageTotals) -> dict[str, Any]:
    """The totals, the cost rounded: floats added in another order differ in their last bits."""
    return {**usage.to_dict(), "cost_usd": None if usage.cost_usd is None else round(usage.cost_usd, 12)}


# -- reconcile ----------------------------------------------------------------------------------
async def test_reconcile_fills_what_a_dead_workers_run_did(store_url: str) -> None:
    """A worker died after its first row: the row reconcile closes holds the tools, models and
    errors the run's events show."""
    start = datetime(2024, 1, 1, tzinfo=UTC)
    async with open_store(store_url) as store:
        def event(event_type: str, category: str, content: Any = "", seconds: int = 0,
                  **metadata: Any) -> NewEvent:
            return NewEvent("t", "dead", event_type, category, content, metadata,
                            start + timedelta(seconds=seconds))

        await store.put_batch([
            event("run.start", "trace"),
            event("llm.ai.response", "message", "", 1, caller="lead_agent", model_name="gpt-4o"),
            event("tool.call", "trace", {"tool_call_id": "c1", "tool_name": "search"}, 2,
                  caller="lead_agent"),
            event("tool.outcome", "trace", {"tool_call_id": "c1", "tool_name": "search", "outcome": "error"},
                  3, caller="lead_agent"),
            event("llm.error", "trace", {"message": "down"}, 4, caller="subagent:helper",
                  model_name="claude"),
        ])
        await store.put_run(RunRow(run_id="dead", thread_id="t", status="running", started_at=start,
                                   updated_at=start))
        (closed,) = await reconcile_orphans(store, older_than=timedelta(minutes=5))
        row = closed.row
        assert (row.status, row.tools, row.models) == ("cancelled", ("search",), ("claude", "gpt-4o"))
        assert row.callers == ("lead_agent", "subagent:helper")
        assert (row.llm_error_count, row.tool_error_count, row.has_error) == (1, 1, True)
        assert {r.run_id for r in (await store.search_runs(tool="search", has_error=True)).rows} == {"dead"}


# -- the command line ---------------------------------------------------------------------------
@pytest.fixture(scope="module", params=CLI_BACKENDS)
def cli_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    url = backend_url(request.param, request, tmp_path_factory)

    async def record() -> Recorded:
        async with open_store(url) as store:
            return await record_runs(store, tmp_path_factory.mktemp("workspace"))

    RECORDED[url] = asyncio.run(record())
    return url


RECORDED: dict[str, Recorded] = {}


def listed(out: str) -> list[str]:
    return [json.loads(line)["run_id"] for line in out.splitlines()]


def test_runs_lists_every_thread_newest_first_with_filters(cli: Any, cli_url: str) -> None:
    runs = RECORDED[cli_url]
    every = cli(cli_url, "runs", "--json")
    assert every.code == 0, every.err
    rows = [RunRow.from_dict(json.loads(line)) for line in every.out.splitlines()]
    assert len(rows) == 6
    starts = [row.started_at for row in rows]
    assert starts == sorted(starts, reverse=True)  # type: ignore[type-var]
    assert set(listed(cli(cli_url, "runs", "--tool", "search", "--json").out)) == {runs.tool, runs.deep}
    assert listed(cli(cli_url, "runs", "--status", "error", "--since", "1d", "--json").out) == [runs.failed]
    assert listed(cli(cli_url, "runs", "--status", "error", "--until", "2000-01-01", "--json").out) == []
    assert set(listed(cli(cli_url, "runs", "--errors", "--json").out)) == {runs.failed, runs.middleware}
    assert listed(cli(cli_url, "runs", "--model", MODEL, "--tool", "write_file", "--json").out) == [runs.tool]
    assert listed(cli(cli_url, "runs", "--caller", "subagent:researcher", "--json").out) == [runs.deep]
    assert listed(cli(cli_url, "runs", "approval", "--status", "success,interrupted", "--json").out) == [
        runs.resumed, runs.interrupted]
    assert set(listed(cli(cli_url, "runs", "--min-cost", "0.0000001", "--min-tokens", "1",
                          "--json").out)) <= {runs.tool, runs.deep, runs.middleware, runs.failed,
                                               runs.interrupted, runs.resumed}
    first = cli(cli_url, "runs", "--limit", "4")
    lines = first.out.splitlines()
    assert lines[0].split()[:3] == ["run", "thread", "status"]
    assert len(lines) == 6
    assert lines[-1].startswith("more: --cursor ")
    rest = cli(cli_url, "runs", "--limit", "4", "--cursor", lines[-1].split()[-1], "--json")
    assert len(listed(rest.out)) == 2


@pytest.mark.parametrize(("arguments", "message"), [
    (["--status", "failed"], "not a run status: 'failed'"),
    (["--since", "yesterday"], "not an age or a date: 'yesterday'"),
    (["--min-cost", "-1"], "must be a number >= 0"),
    (["--min-tokens", "many"], "not an integer: 'many'"),
    (["--cursor", "nope"], "cursor must be a cursor this listing returned"),
    (["--thread", "nope"], "thread 'nope' not found"),
])
def test_runs_refuses_bad_filters_by_name(cli: Any, cli_url: str, arguments: list[str], message: str) -> None:
    result = cli(cli_url, "runs", *arguments)
    assert result.code in (1, 2)
    assert message in result.err


def test_usage_by_day_model_and_caller_sums_the_run_rows(cli: Any, cli_url: str) -> None:
    async def rows() -> list[RunRow]:
        async with open_store(cli_url) as store:
            return await store.list_runs()

    stored = asyncio.run(rows())
    for by in ("day", "model", "caller"):
        result = cli(cli_url, "usage", "--by", by, "--since", "30d", "--json")
        assert result.code == 0, result.err
        printed = {item["key"]: item for item in map(json.loads, result.out.splitlines())}
        assert printed == {bucket.key: bucket.to_dict() for bucket in usage_by(reversed(stored), by)}
        assert sum(item["usage"]["total_tokens"] for item in printed.values()) == sum(
            row.usage.total_tokens for row in stored)
    text = cli(cli_url, "usage", "--by", "model", "--tool", "search").out.splitlines()
    assert text[0].split()[:3] == ["model", "runs", "calls"]
    assert any(line.startswith(MODEL) for line in text[1:])
    assert cli(cli_url, "usage", "--by", "week").code == 2


def test_threads_are_listed_most_recently_active_first(cli: Any, cli_url: str, tmp_path: Path) -> None:
    rows = [json.loads(line) for line in cli(cli_url, "threads", "--json").out.splitlines()]
    moments = [row["last_activity_at"] for row in rows]
    assert moments == sorted(moments, reverse=True)
    assert {row["thread_id"] for row in rows} == set(Recorded.THREADS.values())
    assert len(cli(cli_url, "threads", "--limit", "2", "--json").out.splitlines()) == 2
