"""Helpers shared by the reliability modules (workers, the CLI, raw store contents)."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from run_journal import RunEvent, RunEventStore
from run_journal.testing import read_all

WORKER = Path(__file__).with_name("_worker.py")
ROOT = Path(__file__).resolve().parents[2]


async def spawn_worker(*args: str) -> asyncio.subprocess.Process:
    """Start ``_worker.py`` with its stdout as the acknowledgement pipe."""
    return await asyncio.create_subprocess_exec(
        sys.executable, str(WORKER), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(ROOT),
    )


async def run_cli(*args: str) -> tuple[int, str]:
    """Run the ``run-journal`` console script; returns its exit code and combined output."""
    script = Path(sys.executable).with_name("run-journal")
    process = await asyncio.create_subprocess_exec(
        str(script), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, output.decode(errors="replace")


class TcpProxy:
    """A real TCP proxy on 127.0.0.1 in front of a server: ``stop()`` is an outage, ``start()`` ends it.

    Stopping closes the listening socket and every open connection, so clients see what a crashed or
    unreachable server looks like: refused connects and broken pooled connections. ``frozen = True``
    is a frozen network instead: connections stay open and accept bytes, but nothing is forwarded
    either way, so a client waits for an answer that never comes.
    """

    frozen = False

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_writer.transport.abort()
            return
        self._writers |= {client_writer, server_writer}
        await asyncio.gather(
            self._pipe(client_reader, server_writer), self._pipe(server_reader, client_writer),
            return_exceptions=True,
        )
        for writer in (client_writer, server_writer):
            self._writers.discard(writer)
            writer.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            if self.frozen:
                continue  # dropped on the floor
            writer.write(data)
            await writer.drain()
        writer.transport.abort()


def tool_call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def agent_graph(replies: list[AIMessage], tools: list[Any]) -> Any:
    """agent -> (tools -> agent)*: the classic tool loop on an offline fake chat model, compiled."""
    model = GenericFakeChatModel(messages=iter(replies))

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


async def run_events_exactly_once(store: RunEventStore, thread_id: str, run_id: str) -> list[RunEvent]:
    """The run's events; fails on a duplicate event_id, a seq hole or a lifecycle miscount."""
    events = [e for e in await read_all(store, thread_id) if e.run_id == run_id]
    assert [n for n in Counter(e.event_id for e in events).values() if n > 1] == []
    kinds = Counter(e.event_type for e in events)
    assert kinds["run.start"] == 1
    assert sum(kinds[t] for t in ("run.end", "run.error", "run.cancel", "run.interrupt")) == 1
    return events
