"""Hostile ids and ``user_id`` isolation on every backend.

Ids become paths (JSONL), keys (Redis) and bound parameters (SQL). Path syntax, NUL, 10,000
characters, SQL metacharacters and unicode must be refused with ``ValueError`` or stored inertly
(read back unchanged, nothing else affected): no file outside the JSONL directory, every SQL table
still there. Every read that takes ``user_id`` returns only that user's rows.
"""

from __future__ import annotations

import inspect
import sqlite3
from typing import Any

import asyncpg
import pytest

from run_journal import RunEventStore, RunRow, open_store
from run_journal.stores.urls import file_path_of
from run_journal.testing import read_all

from .test_store_faults import plain

pytestmark = pytest.mark.reliability

HOSTILE_IDS = [
    "../escape", "../../etc/passwd", "/abs", "a/b", "..", ".", "a\\b", "nul\x00byte", "x" * 10_000,
    "'; DROP TABLE run_events; --", '" OR 1=1 --', "%s%s%n", "*", "?", "t{1}",
    "\u202e\u0644\u00e9\U0001f916",
    "CON", "name with spaces", "run\u2028id", "\ud800",
]
ID_FIELDS = ("thread_id", "run_id", "user_id", "event_id")


async def table_names(url: str) -> set[str]:
    if url.startswith("sqlite"):
        with sqlite3.connect(file_path_of(url)) as connection:
            return {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if url.startswith("postgres"):
        schema = url.rsplit("schema=", 1)[1]
        connection = await asyncpg.connect(plain(url))
        try:
            rows = await connection.fetch("SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)
        finally:
            await connection.close()
        return {row[0] for row in rows}
    return set()


async def test_hostile_ids_are_refused_or_stored_inertly(store_url: str) -> None:
    async with open_store(store_url) as store:
        await store.put(thread_id="keep", run_id="keep", event_type="tool.call", category="trace",
                        content={"kept": True})
        tables = await table_names(store_url)
        accepted = refused = 0
        for field in ID_FIELDS:
            for value in HOSTILE_IDS:
                ids: dict[str, Any] = {"thread_id": "hostile-ids", "run_id": "r", "user_id": "u"}
                ids[field] = value
                try:
                    stored = await store.put(
                        event_type="tool.call", category="trace", content={"f": field}, **ids
                    )
                except ValueError:
                    refused += 1
                    continue
                accepted += 1
                assert getattr(stored, field) == value
                events = await read_all(store, ids["thread_id"])
                assert any(getattr(e, field) == value and e.event_id == stored.event_id for e in events)
            for value in HOSTILE_IDS:  # reads with a hostile id: refused or empty, never a crash
                try:
                    assert {e.thread_id for e in await store.list_events(value)} <= {value}
                    row = await store.get_run(value)
                    assert row is None or row.run_id == value
                except ValueError:
                    pass
        assert refused > 0
        assert accepted > 0
        assert [e.content for e in await read_all(store, "keep")] == [{"kept": True}]
        assert await table_names(store_url) == tables
    if store_url.startswith("jsonl"):
        root = file_path_of(store_url)
        assert [p.name for p in root.parent.iterdir()] == [root.name]  # nothing beside the store
        assert all(path.resolve().is_relative_to(root.resolve()) for path in root.rglob("*"))


def user_reads(store: RunEventStore) -> list[str]:
    """Every public read of the store contract that takes ``user_id``."""
    return sorted(
        name for name, member in inspect.getmembers(type(store), inspect.isfunction)
        if not name.startswith("_") and "user_id" in inspect.signature(member).parameters
        and not name.startswith("put")
    )


async def test_user_id_isolation_on_every_read(store: RunEventStore) -> None:
    for n in range(12):
        user = ("alice", "bob", "mallory")[n % 3]
        await store.put(thread_id="shared", run_id=f"run-{user}", event_type="llm.human.input",
                        category="message", content={"n": n}, user_id=user)
        await store.put(thread_id=f"only-{user}", run_id=f"solo-{user}", event_type="tool.call",
                        category="trace", user_id=user)
    checked: set[str] = set()

    async def scoped(name: str, *args: Any, **kwargs: Any) -> Any:
        checked.add(name)
        return await getattr(store, name)(*args, user_id="alice", **kwargs)

    for page in (
        await scoped("list_messages", "shared"),
        await scoped("list_messages", "shared", before_seq=20),
        await scoped("list_messages", "shared", after_seq=0, limit=2),
        await scoped("list_messages_by_run", "shared", "run-bob"),
        await scoped("list_messages_by_run", "shared", "run-alice"),
        await scoped("list_events", "shared"),
        await scoped("list_events", "shared", "run-mallory"),
        await scoped("list_events", "only-bob"),
    ):
        assert {e.user_id for e in page} <= {"alice"}
    assert await scoped("count_messages", "shared") == 4
    assert await scoped("list_threads") == ["only-alice", "shared"]
    assert {item.thread_id for item in await scoped("list_recent_threads")} == {"only-alice", "shared"}
    for user in ("alice", "bob", "mallory"):
        await store.put_run(RunRow(run_id=f"run-{user}", thread_id="shared", user_id=user))
    assert [row.run_id for row in await scoped("list_runs", "shared")] == ["run-alice"]
    assert [row.run_id for row in await scoped("list_runs", newest_first=True, limit=5)] == ["run-alice"]
    assert await scoped("count_runs") == 1
    assert [row.run_id for row in (await scoped("search_runs")).rows] == ["run-alice"]
    assert [row.run_id for row in (await scoped("search_runs", thread_id="shared")).rows] == ["run-alice"]
    follower = store.follow("shared", user_id="alice")
    checked.add("follow")
    followed = [await anext(follower) for _ in range(4)]
    await follower.aclose()
    assert {e.user_id for e in followed} == {"alice"}
    assert set(user_reads(store)) <= checked, "a read that takes user_id is not covered here"
