"""The envelope, the limits checked before every write and the one normalization.

Every backend stores what ``NewEvent`` serialized, so these tests pin down, once, what every store
returns for awkward input: each documented normalization rule, the content caps and the id and name
limits. The property tests check that normalizing is a fixed point and survives a JSON round trip.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import enum
import hashlib
import itertools
import json
import math
import pickle
import sys
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import PurePosixPath
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from pydantic import BaseModel, field_serializer

from run_journal import normalization
from run_journal.catalog import Category, middleware_event_type, validate_event_type
from run_journal.contract import validate_record
from run_journal.envelope import (
    CONTENT_LIMITS,
    MAX_DEPTH,
    METADATA_LIMIT,
    NewEvent,
    RunEvent,
    dumps,
    loads,
    normalize,
    validate_id,
)
from run_journal.normalization import encode

MOMENT = datetime(2025, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
MB = 1024 * 1024


def new_event(**changes: Any) -> NewEvent:
    fields: dict[str, Any] = {
        "thread_id": "thread-1", "run_id": "run-1", "event_type": "run.cancel", "category": "error",
        "content": {"reason": "user"}, "metadata": {"status": "cancelled"}, "created_at": MOMENT,
    }
    fields.update(changes)
    return NewEvent(**fields)


# --- limits -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("tag", ["", "t" * 22, "has space", "a/b", "ünï", "tag\n", None, 7])
def test_middleware_event_type_rejects_bad_tags_with_a_clear_message(tag: Any) -> None:
    with pytest.raises(ValueError, match=r"middleware tag .* 1-21 characters"):
        middleware_event_type(tag)


@pytest.mark.parametrize("tag", ["a", "t" * 21, "skill_secrets", "safety_termination", "v1.2-beta"])
def test_middleware_event_type_accepts_1_to_21_characters(tag: str) -> None:
    event_type = middleware_event_type(tag)
    assert event_type == f"middleware:{tag}"
    assert len(event_type) <= 32
    validate_event_type(event_type, "middleware")


@pytest.mark.parametrize(
    ("event_type", "category", "message"),
    [
        ("x" * 33, "trace", "1-32 characters"),
        ("", "trace", "1-32 characters"),
        ("has space", "trace", "1-32 characters"),
        ("ünicode", "trace", "1-32 characters"),
        (None, "trace", "1-32 characters"),
        ("brand.new", "c" * 17, "at most 16 characters"),
        ("brand.new", "chat", "is not one of"),
        ("brand.new", "", "is not one of"),
        ("brand.new", None, "at most 16 characters"),
        ("run.start", "message", "belongs to category 'trace', not 'message'"),
        ("llm.ai.response", "trace", "belongs to category 'message'"),
        ("ai_message", "trace", "belongs to category 'message'"),  # the alias keeps its target's category
        ("middleware:guardrail", "trace", "belongs to category 'middleware'"),
        ("middleware:", "middleware", "1-21 characters"),
        ("middleware:" + "t" * 22, "middleware", "1-32 characters"),  # 33 characters in all
    ],
)
def test_validate_event_type_says_what_is_wrong(event_type: Any, category: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_event_type(event_type, category)


def test_validate_event_type_allows_unknown_names_within_the_limits() -> None:
    validate_event_type("x" * 32, "trace")
    validate_event_type("plugin:thing-1.2", "c" * 0 + "workspace")
    validate_event_type("middleware:" + "t" * 21, "middleware")


def test_a_write_with_bad_names_fails_when_the_event_is_built() -> None:
    with pytest.raises(ValueError, match="belongs to category"):
        new_event(event_type="run.start", category="error")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "non-empty string"),
        (None, "non-empty string"),
        (42, "non-empty string"),
        ("x" * 256, "256 characters long; the limit is 255"),
        ("a\x00b", "not allowed"),
        ("a/b", "not allowed"),
        ("a\\b", "not allowed"),
        (".", "not allowed"),
        ("..", "not allowed"),
        ("tab\there", "not allowed"),
        ("line\nbreak", "not allowed"),
        ("del\x7f", "not allowed"),
        ("c1\x9bcontrol", "not allowed"),
        ("lone\ud800surrogate", "lone surrogate"),
    ],
)
def test_validate_id_rejects_with_a_clear_message(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        validate_id("thread_id", value)
    assert str(caught.value).startswith("thread_id")


@pytest.mark.parametrize("value", ["x" * 255, "a", "...", "a..b", "thread é 🧵", "u\u2028v", "-"])
def test_validate_id_accepts_ordinary_ids(value: str) -> None:
    assert validate_id("run_id", value) == value


@pytest.mark.parametrize("field", ["thread_id", "run_id", "event_id", "user_id"])
def test_every_id_of_an_event_is_checked(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        new_event(**{field: "../escape"})


# --- the envelope -----------------------------------------------------------------------------------


def test_run_event_is_frozen_and_reads_are_fresh_copies() -> None:
    written = new_event(content={"reason": "user", "items": [1, 2]})
    first = RunEvent.stored(written, 1, copy=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.seq = 2  # type: ignore[misc]  # the point of the test is that assignment fails
    assert isinstance(first.content, dict)
    first.content["items"].append(3)  # type: ignore[union-attr]  # mutating a reader's own copy
    second = RunEvent.stored(written, 1, copy=True)
    assert second.content == {"reason": "user", "items": [1, 2]}
    assert written.content == {"reason": "user", "items": [1, 2]}


def test_a_record_over_a_stored_row_decodes_lazily_and_survives_pickle_and_copy() -> None:
    row = (
        "t-1", "r-1", 3, "run.start", "lifecycle", '{"input": "hi"}', '{"caller": "lead_agent"}',
        "2026-11-30T06:00:00.000001+00:00", "e-1", None,
    )
    record = RunEvent.from_row(row)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.content = {}  # type: ignore[misc]  # assignment must fail
    assert (record.thread_id, record.seq, record.event_type, record.user_id) == ("t-1", 3, "run.start", None)
    assert record.created_at == datetime(2026, 11, 30, 6, 0, 0, 1, tzinfo=UTC)
    assert record.content == {"input": "hi"}
    assert record.metadata == {"caller": "lead_agent"}
    assert record.content is record.content  # decoded once, then kept
    for copied in (pickle.loads(pickle.dumps(record)), copy.deepcopy(record), copy.copy(record)):
        assert copied == record
        assert copied is not record
    assert RunEvent.from_row(row).content is not record.content  # each record its own copy


def test_a_write_result_shares_the_writers_payload_but_never_the_stored_bytes() -> None:
    written = new_event(content={"items": [1, 2]})
    assert written.content == {"items": [1, 2]}  # decoded by the writer: the result shares it
    result = RunEvent.stored(written, 1)
    assert result.content is written.content  # no second decode on the write path
    result.content["items"].append(3)  # type: ignore[index,union-attr]  # the writer's own object
    assert RunEvent.stored(written, 1, copy=True).content == {"items": [1, 2]}
    untouched = new_event(content={"items": [1, 2]})
    assert RunEvent.stored(untouched, 1).content == {"items": [1, 2]}  # decoded when first read


def test_a_new_event_decodes_its_payload_only_when_read_and_stays_frozen() -> None:
    event = new_event(content={"items": [1, 2]}, metadata={"task_id": "t-9", "n": 1})
    assert event.content_json == '{"items":[1,2]}'
    assert event.task_id == "t-9"
    assert event.content is event.content
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.content = {}  # type: ignore[misc]  # assignment must fail
    assert pickle.loads(pickle.dumps(event)) == event
    assert new_event(metadata={"task_id": 5}).task_id is None


def test_to_dict_validates_against_the_record_schema() -> None:
    event = RunEvent.stored(new_event(event_id="e-1", user_id="u-1"), 7)
    record = event.to_dict()
    assert validate_record(record) == []
    assert record["seq"] == 7
    assert record["created_at"] == "2025-03-04T05:06:07.890123+00:00"
    ai = AIMessage(content="done", tool_calls=[{"name": "search", "args": {"q": "x"}, "id": "c1"}])
    response = new_event(event_type="llm.ai.response", category="message", content=ai,
                         metadata={"caller": "lead_agent", "llm_call_index": 0}, user_id=None)
    assert validate_record(RunEvent.stored(response, 1).to_dict()) == []


def test_from_dict_round_trips_through_json_text() -> None:
    for user_id in (None, "user-9"):
        event = RunEvent.stored(new_event(user_id=user_id, content={"reason": "ü\u2028\x00"}), 3)
        assert RunEvent.from_dict(event.to_dict()) == event
        assert RunEvent.from_dict(loads(dumps(event.to_dict()))) == event


def test_as_new_event_reproduces_the_same_write() -> None:
    written = new_event(content={"reason": "x", "when": MOMENT})
    copy = RunEvent.stored(written, 5).as_new_event()
    assert (copy.event_id, copy.content_json, copy.metadata_json) == (
        written.event_id, written.content_json, written.metadata_json
    )
    assert copy.created_at == written.created_at


def test_naive_created_at_is_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        new_event(created_at=datetime(2025, 1, 1, 12, 0))
    record = RunEvent.stored(new_event(), 1).to_dict()
    with pytest.raises(ValueError, match="timezone-aware"):
        RunEvent.from_dict({**record, "created_at": "2025-01-01T12:00:00"})
    with pytest.raises(ValueError, match="must be a datetime"):
        new_event(created_at="2025-01-01T12:00:00+00:00")


def test_other_offsets_are_converted_to_utc() -> None:
    india = datetime(2025, 1, 1, 17, 30, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    written = new_event(created_at=india)
    assert written.created_at.utcoffset() == timedelta(0)
    assert written.created_at == india  # the same instant
    assert written.created_at.hour == 12
    record = RunEvent.stored(written, 1).to_dict()
    assert record["created_at"] == "2025-01-01T12:00:00+00:00"
    back = RunEvent.from_dict({**record, "created_at": "2025-01-01T07:00:00-05:00"})
    assert back.created_at.tzinfo is UTC
    assert back.created_at == written.created_at


# --- normalization, one test per documented rule ---------------------------------------------------


def test_langchain_messages_are_dumped() -> None:
    human = normalize(HumanMessage(content="hello", id="m1"))
    assert isinstance(human, dict)
    assert (human["type"], human["content"], human["id"]) == ("human", "hello", "m1")
    ai = normalize(AIMessage(content="", tool_calls=[{"name": "add", "args": {"a": 1}, "id": "c1"}]))
    assert isinstance(ai, dict)
    assert ai["type"] == "ai"
    assert ai["tool_calls"] == [{"name": "add", "args": {"a": 1}, "id": "c1", "type": "tool_call"}]
    tool = normalize(ToolMessage(content=[{"type": "text", "text": "3"}], tool_call_id="c1"))
    assert isinstance(tool, dict)
    assert (tool["type"], tool["tool_call_id"], tool["status"]) == ("tool", "c1", "success")
    assert tool["content"] == [{"type": "text", "text": "3"}]


class Inner(BaseModel):
    at: datetime
    tags: tuple[str, ...]


class Outer(BaseModel):
    name: str
    inner: Inner
    extra: Any = None


def test_pydantic_models_are_dumped_and_their_leaves_normalized() -> None:
    model = Outer(name="o", inner=Inner(at=MOMENT, tags=("a", "b")), extra=float("nan"))
    assert normalize(model) == {
        "name": "o", "inner": {"at": "2025-03-04T05:06:07.890123+00:00", "tags": ["a", "b"]},
        "extra": "NaN",
    }


class Refuses(BaseModel):
    value: int

    @field_serializer("value")
    def _fail(self, value: int) -> int:
        raise RuntimeError("serializer is broken")

    def __str__(self) -> str:
        return "Refuses(value)"


def test_a_model_whose_dump_fails_is_stored_as_text() -> None:
    assert normalize({"model": Refuses(value=1)}) == {"model": "Refuses(value)"}


@dataclasses.dataclass
class Point:
    x: int
    y: float
    label: tuple[str, ...] = ()
    child: Point | None = None


def test_dataclasses_become_objects_of_their_fields() -> None:
    value = Point(1, 2.5, ("a",), child=Point(3, math.inf))
    assert normalize(value) == {
        "x": 1, "y": 2.5, "label": ["a"],
        "child": {"x": 3, "y": "Infinity", "label": [], "child": None},
    }
    assert normalize(Point) == str(Point)  # a dataclass *type* is a leaf, not an instance


def test_datetimes_dates_and_times_are_iso_8601() -> None:
    offset = timezone(timedelta(hours=-3))
    moments = [MOMENT, datetime(2025, 1, 2, 3, 4, tzinfo=offset), date(2025, 1, 2), time(3, 4, 5)]
    assert normalize(moments) == [
        "2025-03-04T05:06:07.890123+00:00", "2025-01-02T03:04:00-03:00", "2025-01-02", "03:04:05",
    ]


def test_tuples_and_sets_become_lists_sets_sorted_by_json_text() -> None:
    assert normalize((1, (2, 3))) == [1, [2, 3]]
    assert normalize({3, 1, 2}) == [1, 2, 3]
    assert normalize(frozenset({"b", "a"})) == ["a", "b"]
    assert normalize({1, "a"}) == ["a", 1]  # '"a"' sorts before '1'
    assert normalize({1, "a"}) == normalize({"a", 1})


def test_non_finite_floats_become_markers() -> None:
    assert normalize([math.nan, math.inf, -math.inf, -0.0, 1e308]) == [
        "NaN", "Infinity", "-Infinity", -0.0, 1e308
    ]


def test_integers_beyond_64_bits_become_strings() -> None:
    top, bottom = 2**63 - 1, -(2**63)
    assert normalize([top, bottom, top + 1, bottom - 1, 10**40]) == [
        top, bottom, str(top + 1), str(bottom - 1), str(10**40)
    ]


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Mode(enum.StrEnum):
    FAST = "fast"


def test_enums_give_their_value_and_other_leaves_their_text() -> None:
    ident = uuid.UUID(int=1)
    assert normalize([Color.RED, Level.HIGH, Mode.FAST, Decimal("1.10"), ident, PurePosixPath("/a/b")]) == [
        "red", 3, "fast", "1.10", str(ident), "/a/b"
    ]
    assert type(normalize(Mode.FAST)) is str
    assert type(normalize(Level.HIGH)) is int


def test_bytes_become_a_base64_marker() -> None:
    raw = b"\x00\xffbytes"
    expected = {"$bytes": base64.b64encode(raw).decode()}
    assert normalize(raw) == expected
    assert normalize(bytearray(raw)) == expected
    assert normalize(memoryview(raw)) == expected


def test_lone_surrogates_become_replacement_characters_in_values_and_keys() -> None:
    assert normalize({"k\udc80": ["a\ud800b", "\udfff"]}) == {"k\ufffd": ["a\ufffdb", "\ufffd"]}
    assert dumps(normalize("\ud83d")).encode("utf-8")  # storable as UTF-8 text


def test_nul_and_line_separators_are_kept() -> None:
    text = "a\x00b\u2028c\u2029d\r\n"
    assert normalize(text) == text
    assert "\n" not in dumps(normalize(text))  # one JSONL line per record stays one line
    assert loads(dumps(normalize(text))) == text


def test_reference_cycles_become_markers_but_shared_values_do_not() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    assert normalize(loop) == [1, "<cycle>"]
    table: dict[str, Any] = {"name": "t"}
    table["self"] = table
    assert normalize(table) == {"name": "t", "self": "<cycle>"}
    node = Point(1, 1.0)
    node.child = node
    assert normalize(node)["child"] == "<cycle>"  # type: ignore[index, call-overload]  # dict result
    shared = [1, 2]
    assert normalize([shared, shared, {"again": shared}]) == [[1, 2], [1, 2], {"again": [1, 2]}]


def test_nesting_deeper_than_max_depth_is_cut_with_a_marker() -> None:
    deep: Any = "leaf"
    for _ in range(MAX_DEPTH + 10):
        deep = [deep]
    value = normalize(deep)
    levels = 0
    while isinstance(value, list):
        (value,) = value
        levels += 1
    assert (levels, value) == (MAX_DEPTH, "<max depth>")
    shallow: Any = "leaf"
    for _ in range(MAX_DEPTH):
        shallow = [shallow]
    assert normalize(shallow) == shallow  # exactly MAX_DEPTH levels are kept


def test_non_string_keys_are_spelled_as_json_spells_them() -> None:
    assert normalize({1: "a", None: "b", (1, 2): "c", Color.RED: "d", 1.5: "e", False: "f"}) == {
        "1": "a", "null": "b", "(1, 2)": "c", "red": "d", "1.5": "e", "false": "f",
    }
    assert normalize({1: "int", "1": "str"}) == {"1": "str"}  # colliding keys: the later one wins


class Broken:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class Opaque:
    def __str__(self) -> str:
        return "opaque!"


def test_objects_with_a_broken_str_are_kept_as_a_marker() -> None:
    assert normalize({"value": Broken(), Broken(): 1}) == {
        "value": "<unprintable Broken>", "<unprintable Broken>": 1
    }
    assert normalize(Opaque()) == "opaque!"


# --- properties -------------------------------------------------------------------------------------

_plane_char = (
    st.integers(0, 16).flatmap(lambda plane: st.integers(plane << 16, (plane << 16) | 0xFFFF)).map(chr)
)
_special_char = st.sampled_from(["\u2028", "\u2029", "\x00", "\ud800", "\udfff", "\ufeff", "\x85", "\n", '"'])
_text = st.lists(st.one_of(_plane_char, _special_char), max_size=10).map("".join)
_huge_int = st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**40, -(10**100)])
_hashable = st.one_of(
    st.none(), st.booleans(), st.integers(), _huge_int, st.floats(), _text,
    st.datetimes(timezones=st.just(UTC)), st.binary(max_size=6),
)
_leaf = st.one_of(_hashable, st.decimals(), st.uuids(), st.dates())
_nested = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.one_of(_text, st.integers(), st.floats(), st.booleans()), inner, max_size=4),
        st.frozensets(_hashable, max_size=4),
    ),
    max_leaves=30,
)


def _assert_json_value(value: Any) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            assert type(key) is str
            key.encode("utf-8")
            _assert_json_value(item)
    elif isinstance(value, list):
        for item in value:
            _assert_json_value(item)
    elif isinstance(value, str):
        value.encode("utf-8")  # no lone surrogate survives
    elif isinstance(value, float):
        assert math.isfinite(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        assert -(2**63) <= value < 2**63
    else:
        assert value is None or isinstance(value, bool)


@settings(deadline=None, max_examples=150)
@given(_nested)
def test_normalize_is_idempotent_and_survives_a_json_round_trip(value: Any) -> None:
    once = normalize(value)
    _assert_json_value(once)
    assert normalize(once) == once
    assert loads(dumps(once)) == once
    assert dumps(normalize(once)) == dumps(once)


@settings(deadline=None, max_examples=300)
@given(_nested)
def test_the_one_pass_encoder_writes_exactly_what_the_walk_writes(value: Any) -> None:
    assert encode(value) == dumps(normalize(value))


def test_the_one_pass_encoder_leaves_depth_cycles_and_big_numbers_to_the_walk() -> None:
    deep: Any = "leaf"
    for _ in range(MAX_DEPTH + 3):
        deep = [deep] if len(str(deep)) % 2 else {"k": deep}
    wide = [[[1]]] * (MAX_DEPTH * 2)  # many brackets, little depth
    cycle: list[Any] = [1]
    cycle.append({"back": cycle})
    values = [deep, wide, cycle, {"id": "12345678901234567890"}, {"n": 2**64}, [math.inf], {"s": "\ud800"}]
    for value in values:
        assert encode(value) == dumps(normalize(value))
    assert "<max depth>" in encode(deep)


_tricky_text = st.lists(
    st.sampled_from(['"', "\\", "[", "]", "{", "}", "x", "\n", '\\"', "\\\\", "\u00e9"]), max_size=6
).map("".join)


def _nesting(value: Any) -> int:
    if isinstance(value, dict | list):
        return 1 + max(map(_nesting, value.values() if isinstance(value, dict) else value), default=0)
    return 0


@settings(deadline=None, max_examples=200)
@given(
    st.integers(MAX_DEPTH - 4, MAX_DEPTH + 1),
    st.lists(st.tuples(st.booleans(), _tricky_text, _tricky_text), min_size=1, max_size=6),
)
def test_the_one_pass_encoder_counts_only_the_brackets_outside_strings(
    depth: int, pattern: list[tuple[bool, str, str]]
) -> None:
    levels = list(itertools.islice(itertools.cycle(pattern), MAX_DEPTH + 1))
    value: Any = "leaf"
    for as_object, key, text in levels[:depth]:  # brackets, quotes and backslashes in keys and strings
        value = {key: value, key + "]": text} if as_object else [text, value, [text + "{"]]
    wide = [value, *([text] for _, _, text in levels)]  # more brackets than MAX_DEPTH, whatever the depth
    text = json.dumps(wide, ensure_ascii=False, separators=(",", ":"))  # what the one pass writes
    assert normalization._shallow(text) == (_nesting(wide) < MAX_DEPTH)
    assert encode(wide) == dumps(normalize(wide))


class _Labelled(int, enum.Enum):
    """An int enum whose value is not its number."""

    def __new__(cls, number: int, label: str) -> _Labelled:
        member = int.__new__(cls, number)
        member._value_ = label
        return member

    ONE = (1, "one")


def test_the_one_pass_encoder_agrees_with_the_walk_on_the_edges_a_review_found() -> None:
    at_the_limit: Any = date(2020, 1, 1)
    for _ in range(MAX_DEPTH):
        at_the_limit = [at_the_limit]  # a leaf where the walk writes "<max depth>"
    for value in (at_the_limit, [_Labelled.ONE], {_Labelled.ONE: _Labelled.ONE}):
        assert encode(value) == dumps(normalize(value))
    assert normalize([_Labelled.ONE]) == [1]  # a number enum is its number, as the C encoder writes it


def test_a_raised_recursion_limit_takes_the_walk_instead_of_the_c_stack() -> None:
    cyclic: dict[str, Any] = {"a": 1}
    cyclic["self"] = cyclic
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(100_000)
    try:
        assert encode(cyclic) == '{"a":1,"self":"<cycle>"}'
    finally:
        sys.setrecursionlimit(limit)


@settings(deadline=None, max_examples=50)
@given(_nested)
def test_every_write_reads_back_what_was_normalized(value: Any) -> None:
    written = new_event(event_type="brand.new", category="trace", content=value, metadata={"v": value})
    stored = RunEvent.stored(written, 1)
    if "content_truncated" not in written.metadata:
        assert stored.content == normalize(value)
    assert stored.metadata["v"] == normalize(value)
    assert validate_record(stored.to_dict()) == []


# --- content caps -----------------------------------------------------------------------------------


def _original(value: Any) -> bytes:
    return dumps(normalize(value)).encode("utf-8")


def test_a_20_mb_tool_output_is_cut_to_the_message_limit_and_stays_a_message() -> None:
    output = ToolMessage(content="r" * (20 * MB), tool_call_id="call-1", name="fetch")
    written = new_event(event_type="llm.tool.result", category="message", content=output,
                        metadata={"caller": "lead_agent", "tool_call_id": "call-1"})
    limit = CONTENT_LIMITS[Category("message")]
    assert limit - 1024 < len(written.content_json.encode()) <= limit
    content = written.content
    assert isinstance(content, dict)
    assert (content["type"], content["tool_call_id"], content["name"]) == ("tool", "call-1", "fetch")
    assert isinstance(content["content"], str)
    assert content["content"].endswith("…[truncated]")
    original = _original(output)
    assert written.metadata["content_truncated"] == {
        "original_bytes": len(original), "sha256": hashlib.sha256(original).hexdigest(), "limit": limit,
    }
    assert written.metadata["caller"] == "lead_agent"
    assert validate_record(RunEvent.stored(written, 1).to_dict()) == []


def test_a_5_mb_model_response_keeps_its_tool_calls() -> None:
    response = AIMessage(content="é" * (5 * MB // 2), tool_calls=[{"name": "f", "args": {"a": 1}, "id": "c"}])
    written = new_event(event_type="llm.ai.response", category="message", content=response,
                        metadata={"caller": "lead_agent", "llm_call_index": 2})
    assert len(written.content_json.encode()) <= CONTENT_LIMITS[Category.MESSAGE]
    content = written.content
    assert isinstance(content, dict)
    assert content["type"] == "ai"
    assert content["tool_calls"][0]["name"] == "f"  # type: ignore[index, call-overload]  # JSON dict
    assert written.metadata["content_truncated"]["original_bytes"] == len(_original(response))  # type: ignore[index, call-overload]


@pytest.mark.parametrize("category", ["trace", "context", "workspace", "outputs"])
def test_each_category_cuts_at_its_own_limit_counting_bytes(category: str) -> None:
    limit = CONTENT_LIMITS[Category(category)]
    for char in ("x", "€", "🧵"):
        written = new_event(event_type="brand.new", category=category, content={"text": char * limit})
        assert len(written.content_json.encode()) <= limit
        assert "content_truncated" in written.metadata


def test_content_at_the_limit_is_kept_and_one_byte_more_is_cut() -> None:
    limit = CONTENT_LIMITS[Category("context")]
    exact = new_event(event_type="brand.new", category="context", content="x" * (limit - 2))
    assert len(exact.content_json.encode()) == limit
    assert "content_truncated" not in exact.metadata
    over = new_event(event_type="brand.new", category="context", content="x" * (limit - 1))
    assert over.metadata["content_truncated"]["original_bytes"] == limit + 1  # type: ignore[index, call-overload]


def test_content_without_long_strings_falls_back_to_a_preview_within_the_limit() -> None:
    limit = CONTENT_LIMITS[Category("trace")]
    many = {'"' * 40_000: 0}  # no string value to shorten; escaping the preview doubles every byte
    written = new_event(event_type="brand.new", category="trace", content=many)
    assert len(written.content_json.encode()) <= limit
    assert written.content == {"truncated": True, "preview": written.content["preview"]}  # type: ignore[index, call-overload]
    assert written.metadata["content_truncated"]["sha256"] == hashlib.sha256(_original(many)).hexdigest()  # type: ignore[index, call-overload]


def test_oversize_metadata_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"metadata .* larger than"):
        new_event(metadata={"status": "cancelled", "blob": "m" * (METADATA_LIMIT + 1)})
    with pytest.raises(ValueError, match="metadata must be a mapping"):
        new_event(metadata=["not", "a", "mapping"])
    assert new_event(metadata=None).metadata == {}
