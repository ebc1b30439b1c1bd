"""Shared by the ports of DeerFlow's gateway router tests: a client of ``deerflow_router`` on a real
store, message rows in the shapes that gateway's journal writes, and real journaled agent runs."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from fastapi import FastAPI
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from run_journal import RunEvent, RunEventStore, RunJournal, RunRow
from run_journal.http import deerflow_router
from run_journal.testing import ScriptedChatModel, reply

THREAD = "thread-1"
START = datetime(2026, 1, 1, tzinfo=UTC)


@contextlib.asynccontextmanager
async def gateway(store: RunEventStore, *, headers: dict[str, str] | None = None,
                  **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an app that includes ``deerflow_router(store, **options)`` (the drop-in mount)."""
    app = FastAPI()
    app.include_router(deerflow_router(store, **options))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway",
                                 headers=headers or {}) as client:
        yield client


async def put_message(
    store: RunEventStore, run_id: str, message_type: str, message_id: str, *,
    caller: str = "lead_agent", thread: str = THREAD, user: str | None = None,
    event_type: str | None = None, **content: Any,
) -> RunEvent:
    """One message row as the gateway's journal writes it (a LangChain message dict)."""
    kind = event_type or {"ai": "llm.ai.response", "human": "llm.human.input",
                          "tool": "llm.tool.result"}[message_type]
    body = {"type": message_type, "id": message_id, "content": message_id, "additional_kwargs": {},
            **content}
    return await store.put(thread_id=thread, run_id=run_id, event_type=kind, category="message",
                           content=body, metadata={"caller": caller}, user_id=user)


async def put_messages(store: RunEventStore, run_id: str, count: int, *, thread: str = THREAD) -> None:
    """``count`` alternating human / AI rows of one run."""
    await store.put_batch([
        {"thread_id": thread, "run_id": run_id, "category": "message",
         "event_type": "llm.human.input" if i % 2 == 0 else "llm.ai.response",
         "content": {"type": "human" if i % 2 == 0 else "ai", "id": f"m-{i}", "content": f"msg-{i}"},
         "metadata": {"caller": "lead_agent"}}
        for i in range(count)
    ])


async def put_row(store: RunEventStore, run_id: str, *, seconds: float = 0, thread: str = THREAD,
                  status: str = "success", user: str | None = None, **fields: Any) -> RunRow:
    """A run row that started at ``START`` and ended ``seconds`` later."""
    ended = START + timedelta(seconds=seconds) if status not in {"running", "pending"} else None
    return await store.put_run(RunRow(run_id=run_id, thread_id=thread, user_id=user, status=status,
                                      started_at=START, ended_at=ended,
                                      updated_at=ended or START + timedelta(seconds=seconds),
                                      **fields))


@tool
def search(query: str) -> str:
    """Search the web."""
    return "18 C and sunny" if "weather" in query else f"nothing about {query}"


@tool
def boom(x: int) -> int:
    """Always fails."""
    raise ValueError(f"no such thing as {x}")


async def record_turn(
    store: RunEventStore, question: str, script: Sequence[AIMessage], *, thread: str = THREAD,
    user: str | None = None, metadata: dict[str, Any] | None = None, run_id: str | None = None,
) -> str:
    """One real ``create_agent`` run on a scripted model, journaled; its run id. A script whose tool
    call names ``boom`` makes the run fail (recorded as an error run)."""
    agent = create_agent(ScriptedChatModel(script), [search, boom])
    async with RunJournal(store, thread_id=thread, user_id=user, run_id=run_id) as journal:
        config: dict[str, Any] = {"callbacks": [journal], "metadata": metadata or {}}
        with contextlib.suppress(ValueError):
            await agent.ainvoke({"messages": [{"role": "user", "content": question}]}, config)
    return journal.run_id


def answers(text: str) -> list[AIMessage]:
    return [reply(text)]


def searches_then_answers(query: str, text: str) -> list[AIMessage]:
    return [reply("", tool_calls=[("search", {"query": query}, "call-1")]), reply(text)]


def fails() -> list[AIMessage]:
    return [reply("", tool_calls=[("boom", {"x": 1}, "call-1")])]


def seqs(rows: list[dict[str, Any]]) -> list[int]:
    return [row["seq"] for row in rows]
