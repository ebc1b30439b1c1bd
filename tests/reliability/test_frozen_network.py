"""A frozen network: the server's packets are silently dropped while the sockets stay open.

A real TCP proxy on 127.0.0.1 stands between the store and PostgreSQL or Redis. Once the run is
journaled the proxy stops forwarding; ``flush()`` must raise ``JournalError`` within the store
deadline and its retries (not hang for minutes), the agent's run is untouched, and once the network
thaws a later ``aclose()`` writes everything exactly once.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit, urlunsplit

import pytest
from langchain_core.messages import AIMessage

from run_journal import JournalError, RetryPolicy, RunJournal, open_store, status_of

from ._support import TcpProxy, agent_graph, run_events_exactly_once

pytestmark = [pytest.mark.reliability]

RETRY = RetryPolicy(attempts=2, initial_delay=0.05, max_delay=0.1)
DEADLINE = 0.5


def through(url: str, proxy: TcpProxy) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{proxy.port}"))


@pytest.fixture(params=["postgres", "redis"])
def server_url(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        request.applymarker(pytest.mark.postgres)
        database: str = request.getfixturevalue("postgres_database_url")
        return f"{database}?schema=frozen"
    request.applymarker(pytest.mark.redis)
    prefix: str = request.getfixturevalue("redis_prefix_url")
    return f"{prefix}frozen:"


async def test_a_frozen_network_fails_the_flush_within_the_deadline_and_loses_nothing(
    server_url: str,
) -> None:
    parts = urlsplit(server_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 0)
    await proxy.start()
    store = open_store(through(server_url, proxy))
    await store.setup()
    try:
        journal = RunJournal(store, thread_id="frozen", retry=RETRY, store_timeout=DEADLINE)
        result = await agent_graph([AIMessage("before the freeze")], []).ainvoke(
            {"messages": [("user", "hi")]}, config={"callbacks": [journal]}
        )
        assert result["messages"][-1].content == "before the freeze"
        proxy.frozen = True
        began = time.monotonic()
        with pytest.raises(JournalError, match="did not answer"):
            await journal.flush()
        waited = time.monotonic() - began
        assert waited < DEADLINE + 1.0, waited  # a store that does not answer is not retried
        assert [e.event_type for e in journal.unwritten_events()][-1] == "run.end"
        proxy.frozen = False
        await proxy.stop()  # the frozen connections are dead; the store reconnects
        await proxy.start()
        await journal.aclose()
        events = await run_events_exactly_once(store, "frozen", journal.run_id)
        assert status_of(events) == "success"
        assert journal.unwritten_events() == []
    finally:
        await asyncio.wait_for(store.aclose(), 10)
        await proxy.stop()
