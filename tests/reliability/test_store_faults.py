"""Connection loss and store outages during a journaled LangGraph run on PostgreSQL.

* Connection loss: a tool terminates every server connection of the test database
  (``pg_terminate_backend``) several times in the middle of the run; the journal's retries reconnect
  and every event is stored exactly once.
* Store down: a real TCP proxy in front of PostgreSQL is stopped by a tool; the agent's run still
  completes, the journal keeps every event in memory, ``flush()`` raises a clear ``JournalError``
  while the store is gone, and writes everything once the proxy is back. Nothing is dropped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from run_journal import JournalError, RetryPolicy, RunJournal, open_store

from ._support import TcpProxy, agent_graph, run_events_exactly_once, tool_call

pytestmark = [pytest.mark.reliability, pytest.mark.postgres]

FAST_RETRY = RetryPolicy(attempts=4, initial_delay=0.02, max_delay=0.2)


def plain(url: str) -> str:
    """The asyncpg form of a test database URL (no driver suffix, no ?schema=)."""
    parts = urlsplit(url.replace("postgresql+asyncpg", "postgresql"))
    return urlunsplit(parts._replace(query=""))


async def terminate_connections(database_url: str) -> int:
    """Kill every other server connection to the database, as an admin or a failover would."""
    admin = await asyncpg.connect(plain(database_url))
    try:
        rows = await admin.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await admin.close()
    return sum(1 for row in rows if row[0])


def severing_replies(turns: int) -> list[AIMessage]:
    replies = [AIMessage(f"step {n}", tool_calls=[tool_call("sever", f"s{n}", n=n)]) for n in range(turns)]
    return [*replies, AIMessage("all steps done")]


async def test_connections_terminated_mid_run_are_retried_exactly_once(
    postgres_database_url: str,
) -> None:
    url = f"{postgres_database_url}?schema=connloss"
    killed: list[int] = []
    async with open_store(url) as store:
        journal = RunJournal(store, thread_id="connloss", retry=FAST_RETRY, flush_interval=0.01)

        @tool
        async def sever(n: int) -> str:
            """Make what came before durable, then cut every database connection."""
            await journal.flush()
            killed.append(await terminate_connections(postgres_database_url))
            return f"severed {n}"

        result = await agent_graph(severing_replies(4), [sever]).ainvoke(
            {"messages": [("user", "go")]}, config={"callbacks": [journal]}
        )
        assert result["messages"][-1].content == "all steps done"
        await journal.aclose()
        events = await run_events_exactly_once(store, "connloss", journal.run_id)
        stats = journal.stats
    assert all(n >= 1 for n in killed), killed  # each cut hit at least the writer's pooled connection
    assert stats.retried >= 1
    assert stats.failed_batches == 0
    assert stats.written == stats.submitted == len(events)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    print(f"connection loss: {len(events)} events, {sum(killed)} connections killed, {stats.retried} retries")


@pytest.fixture
async def proxy(postgres_database_url: str) -> AsyncIterator[TcpProxy]:
    upstream = urlsplit(postgres_database_url)
    running = TcpProxy(upstream.hostname or "127.0.0.1", upstream.port or 5432)
    await running.start()
    yield running
    await running.stop()


def through(proxy: TcpProxy, database_url: str, schema: str) -> str:
    parts = urlsplit(database_url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{proxy.port}"
    netloc[-1] = host
    return urlunsplit(parts._replace(netloc="@".join(netloc), query=f"schema={schema}"))


async def test_store_down_during_a_run_loses_nothing(proxy: TcpProxy, postgres_database_url: str) -> None:
    url = through(proxy, postgres_database_url, "outage")
    async with open_store(url) as store:
        journal = RunJournal(store, thread_id="outage", retry=FAST_RETRY, flush_interval=0.01)

        @tool
        async def outage(n: int) -> str:
            """The store becomes unreachable from here on."""
            await journal.flush()
            await proxy.stop()
            return f"outage {n}"

        @tool
        def work(n: int) -> str:
            """Ordinary work while the store is down."""
            return "x" * n

        replies = [
            AIMessage("cut", tool_calls=[tool_call("outage", "o1", n=1)]),
            *[AIMessage(f"w{n}", tool_calls=[tool_call("work", f"w{n}", n=n)]) for n in range(5)],
            AIMessage("finished without the store"),
        ]
        result: Any = await agent_graph(replies, [outage, work]).ainvoke(
            {"messages": [("user", "go")]}, config={"callbacks": [journal]}
        )
        assert result["messages"][-1].content == "finished without the store"
        with pytest.raises(JournalError, match=r"could not write \d+ event\(s\) to the store"):
            await journal.flush()
        down = journal.stats
        held = journal.unwritten_events()
        assert down.pending == len(held) > 0
        assert down.written + down.pending == down.submitted  # nothing dropped, only held
        assert down.failed_batches >= 1
        assert down.last_error

        await proxy.start()  # the store is back
        await journal.aclose()
        events = await run_events_exactly_once(store, "outage", journal.run_id)
        up = journal.stats
    assert up.pending == 0
    assert up.written == up.submitted == len(events)
    assert {e.event_id for e in held} <= {e.event_id for e in events}
    assert events[-1].event_type == "run.end"
    print(f"store down: {len(held)} events held during the outage, {up.retried} retries, 0 lost")
