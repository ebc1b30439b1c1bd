"""``search_runs`` on the SQL stores: each filtered page reads an index in its order (the query plans,
read with EXPLAIN), and a store written before search (schema version 5) gains it, its rows included."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Final

import pytest
from conftest import backend_url
from sqlalchemy import text
from test_sql_store import database, search_gone, set_meta

from run_journal import open_store
from run_journal.stores.queries import SearchQuery
from run_journal.stores.sql import SqlWork, engine_url
from run_journal.testing._search import ids, run_row, sample

SINCE: Final = "2024-05-01T13:01:00.000000+00:00"
PAGES: Final = {
    "every run": SearchQuery(51),
    "a tool": SearchQuery(51, tool="search"),
    "a model and a tool": SearchQuery(51, model="gpt-4o", tool="search"),
    "a caller after a cursor": SearchQuery(51, caller="lead_agent", before=(SINCE, "r3")),
    "a user": SearchQuery(51, user_id="alice"),
    "a status": SearchQuery(51, statuses=("error",)),
    "errors": SearchQuery(51, has_error=True),
    "a thread": SearchQuery(51, thread_id="t1"),
    "a time range": SearchQuery(51, since=SINCE, until="2024-05-01T13:05:00.000000+00:00"),
    "a user's tool in a time range": SearchQuery(51, user_id="alice", tool="search", since=SINCE),
    "a cost bound": SearchQuery(51, min_cost_usd=0.01),
}


@pytest.mark.parametrize("page", PAGES)
async def test_a_sqlite_search_page_reads_an_index_in_its_order(tmp_path: Path, page: str) -> None:
    path = tmp_path / "journal.db"
    async with open_store(f"sqlite:///{path}") as store:
        await sample(store)
    sql, params = SqlWork().search_sql(PAGES[page])
    with sqlite3.connect(path) as connection:
        plan = [str(row[3]) for row in connection.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    assert not any("TEMP B-TREE" in step for step in plan), plan  # no sort: the index is the order
    driving = plan[0]
    assert "USING INDEX" in driving or "USING COVERING INDEX" in driving, plan
    if PAGES[page].tags:
        assert "ix_run_journal_run_tags_order" in driving, plan


@pytest.fixture
def postgres_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return backend_url("postgres", request, tmp_path_factory)


@pytest.mark.parametrize("page", PAGES)
async def test_a_postgres_search_page_can_be_read_from_an_index_in_its_order(
    postgres_url: str, page: str
) -> None:
    """A few rows make any plan cheap, so the planner is told to avoid scans and sorts where it can:
    the plan it then finds has no sort, so an index gives the page in its order."""
    url = postgres_url
    async with open_store(url) as store:
        await sample(store)
    schema = engine_url(url)[1]
    sql, params = SqlWork(schema, lateral_joins=True).search_sql(PAGES[page])
    async with database(url) as conn:
        await conn.execute(text("SET LOCAL enable_seqscan = off"))
        await conn.execute(text("SET LOCAL enable_sort = off"))
        plan = "\n".join(str(row[0]) for row in await conn.execute(text(f"EXPLAIN {sql}"), params))
    assert "Sort" not in plan, plan
    assert "Index" in plan, plan
    assert "Seq Scan" not in plan, plan


@pytest.fixture(params=("sqlite", "postgres"))
def sql_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return backend_url(request.param, request, tmp_path_factory)


async def test_a_store_written_before_search_gains_it_with_its_rows(sql_url: str) -> None:
    async with open_store(sql_url) as store:
        await sample(store)
    async with database(sql_url) as conn:  # make it look like a store of schema version 5
        for statement in search_gone(sql_url):
            await conn.execute(text(statement))
    await set_meta(sql_url, "schema_version", "5")
    async with open_store(sql_url) as store:
        assert await ids(store, tool="search") == ["r3", "r1"]
        assert await ids(store, model="claude", min_tokens=10000) == ["r3"]
        assert await ids(store, has_error=True, user_id="alice") == ["r5"]
        assert await ids(store, min_cost_usd=0.01) == ["r2"]
        await store.put_run(run_row("r7", minutes=7, tools=["search"]))
        assert await ids(store, tool="search") == ["r7", "r3", "r1"]
