"""Oversized payloads and secrets through real journaled LangGraph runs.

* A 20 MB tool output and a 5 MB model response are capped to their category limits with a
  truncation note (original size, sha256) and the journal's memory stays bounded (tracemalloc peak
  a small multiple of the input).
* Capped text keeps as much of its beginning as the byte limit allows, whatever its characters: a
  439 KiB Chinese message and a multi-byte tool result through a journaled run, and (hypothesis)
  random CJK, emoji, combining marks, astral-plane and escaped characters, on every backend. The
  stored content is within the limit, its text a prefix of the original (cut between characters)
  and at most one character's JSON short of the limit.
* Secrets in tool arguments and run metadata (api_key, password, authorization, token) never reach
  the store with the default redactor: the raw SQLite file, the JSONL files and the PostgreSQL rows
  are searched for the secret strings.
"""

from __future__ import annotations

import hashlib
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from conftest import backend_url  # the top-level tests/conftest.py
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from run_journal import RunEventStore, RunJournal, open_store
from run_journal.caps import TRUNCATION_MARK
from run_journal.catalog import Category
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


# -- capped text keeps its beginning ------------------------------------------------------------

LONGEST_ESCAPE = 6
"""Bytes of the longest JSON form of one character (``\\u001f``): a cut text is at most one
character short of its limit, so at most this many bytes minus one."""


def kept_text(stored: str, original: str) -> str:
    """The text a capped string kept: a non-empty prefix of ``original``, followed by the mark."""
    assert stored.endswith(TRUNCATION_MARK)
    kept = stored[: -len(TRUNCATION_MARK)]
    assert kept, "the cap emptied the text"
    assert original.startswith(kept)
    return kept


def json_bytes(value: Any) -> int:
    return len(dumps(value).encode("utf-8"))


async def test_a_chinese_message_and_a_multi_byte_tool_result_keep_their_beginnings(
    store: RunEventStore,
) -> None:
    message = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(150_000))  # 439 KiB of CJK
    assert len(message.encode()) // 1024 == 439
    result = ("结果 🧵 é\u0301 " * 400_000)[: 2_000_000]  # 2 M characters, 4.25 MB

    @tool
    def fetch(n: int) -> str:
        """Returns a large multi-byte result."""
        return result

    replies = [AIMessage("", tool_calls=[tool_call("fetch", "f1", n=1)]), AIMessage("done")]
    thread = f"cjk-{uuid.uuid4().hex[:8]}"
    async with RunJournal(store, thread_id=thread) as journal:
        await agent_graph(replies, [fetch]).ainvoke({"messages": [HumanMessage(message)]},
                                                    config={"callbacks": [journal]})
    events = {e.event_type: e for e in await run_events_exactly_once(store, thread, journal.run_id)}
    limit = CONTENT_LIMITS[Category.MESSAGE]
    for event_type, original in (("llm.human.input", message), ("llm.tool.result", result)):
        event = events[event_type]
        content = event.content
        assert isinstance(content, dict)
        stored = content["content"]
        assert isinstance(stored, str)
        size = json_bytes(content)
        assert limit - LONGEST_ESCAPE < size <= limit, (event_type, size)
        kept = kept_text(stored, original)
        note = event.metadata["content_truncated"]
        assert isinstance(note, dict)
        assert note["original_bytes"] > len(original.encode())  # the whole payload, original size
        assert note["limit"] == limit
        print(f"{event_type}: {len(original.encode())} bytes of text capped to {size} bytes, "
              f"{len(kept)} of {len(original)} characters kept")
    assert events["tool.outcome"].content["result_size"] == len(result.encode())  # type: ignore[index, call-overload]


CHARACTERS = st.one_of(
    st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF),  # CJK
    st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF),  # emoji
    st.characters(min_codepoint=0x0300, max_codepoint=0x036F),  # combining marks
    st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF, categories=["Lo", "So", "Cn", "Co"]),
    st.characters(min_codepoint=0x80, max_codepoint=0x7FF),  # two-byte letters
    st.characters(max_codepoint=0x7F),  # ASCII, quotes, backslashes and control characters (escaped)
    st.sampled_from(["\u200d", "\ufe0f", "\u2028", "\U0010ffff"]),  # joiners, selectors, separators
)


@st.composite
def oversized_texts(draw: st.DrawFn) -> tuple[str, str]:
    """A text 1-3 times over the context limit (16 KiB), and the shape it is written in."""
    unit = draw(st.text(CHARACTERS, min_size=1, max_size=80))
    target = CONTENT_LIMITS[Category.CONTEXT] * draw(st.floats(1.0, 3.0))
    repeats = int(target // (json_bytes(unit) - 2)) + 1  # the bytes of its JSON, without the quotes
    text = unit * repeats + draw(st.text(CHARACTERS, max_size=20))
    assert json_bytes(text) > CONTENT_LIMITS[Category.CONTEXT]
    return text, draw(st.sampled_from(["text", "message"]))


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=oversized_texts())
async def test_capped_unicode_text_is_the_longest_prefix_that_fits(
    store: RunEventStore, case: tuple[str, str]
) -> None:
    text, shape = case
    limit = CONTENT_LIMITS[Category.CONTEXT]
    content: Any = text if shape == "text" else {"type": "human", "content": text, "id": "m-1"}
    thread = f"unicode-{uuid.uuid4().hex[:8]}"
    await store.put(thread_id=thread, run_id="r", event_type="note.text", category="context",
                    content=content)
    (event,) = await store.list_events(thread)
    stored = event.content
    size = json_bytes(stored)
    assert limit - LONGEST_ESCAPE < size <= limit
    if shape == "message":
        assert isinstance(stored, dict)
        assert (stored["type"], stored["id"]) == ("human", "m-1")  # the shape is kept
        stored = stored["content"]
    assert isinstance(stored, str)
    kept_text(stored, text)
    assert event.metadata["content_truncated"]["original_bytes"] == json_bytes(content)  # type: ignore[index, call-overload]
