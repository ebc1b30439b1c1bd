"""Oversized payloads and secrets through real journaled LangGraph runs.

* A 20 MB tool output and a 5 MB model response are capped to their category limits with a
  truncation note (original size, sha256) and the journal's memory stays bounded (tracemalloc peak
  a small multiple of the input).
* Secrets in tool arguments and run metadata (api_key, password, authorization, token) never reach
  the store with the default redactor: the raw SQLite file, the JSONL files and the PostgreSQL rows
  are searched for the secret strings.
"""

from __future__ import annotations

import hashlib
import tracemalloc
from pathlib import Path

import asyncpg
import pytest
from conftest import backend_url  # the top-level tests/conftest.py
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from run_journal import RunJournal, open_store
from run_journal.envelope import CONTENT_LIMITS, dumps
from run_journal.stores.urls import file_path_of
from run_journal.testing import read_all

from ._support import agent_graph, run_events_exactly_once, tool_call
from .test_store_faults import plain

pytestmark = pytest.mark.reliability

TOOL_BYTES = 20 * 1024 * 1024
MODEL_BYTES = 5 * 1024 * 1024
SECRETS = {
    "api_key": "sk-LEAK-apikey-7f3a9", "password": "LEAK-hunter2-pw", "authorization": "Bearer LEAK-authz-1",
    "token": "LEAK-tok-ens-0042",
}


@pytest.fixture(params=("jsonl", "sqlite", "postgres"))
def file_or_sql_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return backend_url(request.param, request, tmp_path_factory)


async def test_oversized_outputs_are_capped_with_bounded_memory(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/big.db"
    huge = "y" * TOOL_BYTES

    @tool
    def dump(n: int) -> str:
        """Returns a 20 MB tool output."""
        return huge

    replies = [AIMessage("", tool_calls=[tool_call("dump", "d1", n=1)]), AIMessage("z" * MODEL_BYTES)]
    graph = agent_graph(replies, [dump])
    async with open_store(url) as store:
        tracemalloc.start()
        try:
            async with RunJournal(store, thread_id="big") as journal:
                await graph.ainvoke({"messages": [("user", "go")]}, config={"callbacks": [journal]})
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        events = await run_events_exactly_once(store, "big", journal.run_id)
    by_type = {e.event_type: e for e in events}
    result, answer = by_type["llm.tool.result"], events[[e.event_type for e in events].index("run.end") - 1]
    for event, original in ((result, TOOL_BYTES), (by_type["llm.ai.response"], MODEL_BYTES)):
        assert len(dumps(event.content).encode()) <= CONTENT_LIMITS[event.category]
        note = event.metadata["content_truncated"]
        assert isinstance(note, dict)
        assert note["original_bytes"] >= original  # type: ignore[operator]  # an int in the note
        assert len(str(note["sha256"])) == 64
    assert answer.event_type in {"llm.ai.response", "tool.outcome", "llm.tool.result"}
    # The graph itself holds the 20 MB string, its ToolMessage and the 5 MB reply several times over;
    # the journal adds bounded work per event (one serialization, one hash), not copies per reader.
    total = (TOOL_BYTES + MODEL_BYTES) / 2**20
    print(f"oversized: tracemalloc peak {peak / 2**20:.0f} MiB for {total:.0f} MiB of output")
    assert peak < 8 * (TOOL_BYTES + MODEL_BYTES)
    assert hashlib.sha256(huge.encode()).hexdigest() != ""  # the input was real, not optimized away


async def raw_store_text(url: str) -> bytes:
    """Every byte the store holds for this URL, as the backend keeps it."""
    if url.startswith("sqlite"):
        path = file_path_of(url)
        return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
    if url.startswith("jsonl"):
        return b"".join(p.read_bytes() for p in file_path_of(url).rglob("*") if p.is_file())
    schema = url.rsplit("schema=", 1)[1]
    connection = await asyncpg.connect(plain(url))
    try:
        tables = await connection.fetch("SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)
        rows = [await connection.fetch(f'SELECT t::text FROM "{schema}"."{t[0]}" t') for t in tables]
    finally:
        await connection.close()
    return "\n".join(str(row[0]) for table in rows for row in table).encode()


async def test_secrets_never_reach_the_store(file_or_sql_url: str) -> None:
    @tool
    def login(service: str, api_key: str, password: str, authorization: str, token: str) -> str:
        """Logs in with credentials."""
        return f"logged in to {service}"

    replies = [
        AIMessage("", tool_calls=[tool_call("login", "l1", service="db", **SECRETS)]),
        AIMessage("done"),
    ]
    async with open_store(file_or_sql_url) as store:
        async with RunJournal(store, thread_id="secrets") as journal:
            await agent_graph(replies, [login]).ainvoke(
                {"messages": [("user", "log in")]},
                config={"callbacks": [journal], "metadata": {"api_key": SECRETS["api_key"],
                                                             "db": {"password": SECRETS["password"]}}},
            )
        events = await read_all(store, "secrets")
    assert {"tool.call", "llm.tool.result"} <= {e.event_type for e in events}
    raw = await raw_store_text(file_or_sql_url)
    assert b"logged in to db" in raw  # the search really sees the stored rows
    leaked = [name for name, secret in SECRETS.items() if secret.encode() in raw]
    assert leaked == [], f"secrets stored in clear: {leaked}"
