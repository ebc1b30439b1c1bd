"""The record envelope and the one normalization every store applies before it writes.

``NewEvent`` is an event on its way in: validated, normalized, capped and serialized once, when it is
built, so a producer learns about bad input at the call site and every backend writes the same bytes.
``RunEvent`` is an event as stored: the same fields plus the ``seq`` the store assigned.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import hashlib
import json
import math
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import PurePath
from typing import Any, Final, TypeAlias

from pydantic import BaseModel

from run_journal.catalog import ID_MAX_LENGTH, Category, validate_event_type

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None
JsonObject: TypeAlias = dict[str, JsonValue]

MAX_DEPTH: Final = 64
"""Deeper nesting is replaced by the marker ``"<max depth>"`` (it also guards the recursion)."""
INT_RANGE: Final = (-(2**63), 2**63 - 1)
"""Integers outside a signed 64-bit range are stored as their decimal string."""
CONTENT_LIMITS: Final = {
    Category.MESSAGE: 256 * 1024,
    Category.OUTPUTS: 256 * 1024,
    Category.TRACE: 64 * 1024,
    Category.ERROR: 64 * 1024,
    Category.MIDDLEWARE: 64 * 1024,
    Category.CONTEXT: 16 * 1024,
    Category.SUBAGENT: 64 * 1024,
    Category.WORKSPACE: 16 * 1024,
}
"""Serialized content bytes per category; larger content is cut (see ``NewEvent``)."""
METADATA_LIMIT: Final = 1024 * 1024
"""Serialized metadata bytes; metadata is filterable evidence, so oversize is rejected, not cut."""

_SURROGATES: Final = re.compile("[\ud800-\udfff]")
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f]")
_BAD_ID_CHARACTER: Final = re.compile("[\x00-\x1f\x7f-\x9f/\\\\\ud800-\udfff]")
"""C0, DEL and C1 controls (category Cc): C1 bytes such as U+009B act as terminal escapes."""
_CYCLE: Final = "<cycle>"
_TOO_DEEP: Final = "<max depth>"
_TRUNCATION_MARK: Final = "…[truncated]"


class Normalized:
    """A value a producer already passed through :func:`normalize`; normalizing it again is a no-op.

    Producers that put the same payload in two events (a model's message in ``llm.ai.response`` and
    again in ``run.end``) wrap the first result instead of paying for the walk twice.
    """

    __slots__ = ("value",)

    def __init__(self, value: JsonValue) -> None:
        self.value = value


def normalize(value: Any) -> JsonValue:
    """Return the canonical JSON-compatible form of ``value``.

    Rules (documented in docs/concepts.md): mappings get ``str`` keys; tuples, lists, sets become lists
    (sets sorted by their JSON text); LangChain messages and pydantic models are dumped; dataclasses
    become objects; datetimes, dates and times are ISO-8601; enums give their value; ``Decimal``,
    ``UUID`` and paths give ``str``; ``bytes`` give ``{"$bytes": "<base64>"}``; NaN and infinities
    give ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; integers beyond 64 bits give their decimal string;
    lone surrogates become U+FFFD; a reference cycle gives ``"<cycle>"``; anything else gives ``str()``.
    """
    return _normalize(value, 0, set())


def _normalize(value: Any, depth: int, active: set[int]) -> JsonValue:
    kind = type(value)
    if kind is str:
        return value if value.isascii() else _clean_text(value)
    if value is None or kind is bool:
        return value  # type: ignore[no-any-return]  # exactly None, True or False
    if kind is int:
        return value if INT_RANGE[0] <= value <= INT_RANGE[1] else str(value)
    if kind is float:
        return value if math.isfinite(value) else _non_finite(value)
    if depth >= MAX_DEPTH:
        return _TOO_DEEP
    if kind is dict or kind is list or kind is tuple:  # exact types: skips the ABC checks below
        marker = id(value)
        if marker in active:
            return _CYCLE
        active.add(marker)
        depth += 1
        try:
            if kind is dict:
                return {
                    key if type(key) is str and key.isascii() else _key(key):
                        _normalize(item, depth, active)
                    for key, item in value.items()
                }
            return [_normalize(item, depth, active) for item in value]
        finally:
            active.discard(marker)
    if kind is Normalized:
        return value.value  # type: ignore[no-any-return]  # normalized by its producer
    if isinstance(value, Mapping | list | tuple | set | frozenset | BaseModel) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        marker = id(value)
        if marker in active:
            return _CYCLE
        active.add(marker)
        try:
            return _normalize_container(value, depth + 1, active)
        finally:
            active.discard(marker)
    return _normalize_leaf(value)


def _normalize_container(value: Any, depth: int, active: set[int]) -> JsonValue:
    if isinstance(value, Mapping):
        return {_key(key): _normalize(item, depth, active) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_normalize(item, depth, active) for item in value]
    if isinstance(value, set | frozenset):
        items = [_normalize(item, depth, active) for item in value]
        return sorted(items, key=dumps)
    if isinstance(value, BaseModel):
        try:
            dumped = value.model_dump(mode="python")
        except Exception:  # noqa: BLE001 - a model whose serializer fails must not lose the event
            return _normalize_leaf(value)
        return _normalize(dumped, depth, active)
    return {
        field.name: _normalize(getattr(value, field.name), depth, active)
        for field in dataclasses.fields(value)
    }


def _normalize_leaf(value: Any) -> JsonValue:
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, enum.Enum):
        return _normalize(value.value, MAX_DEPTH - 1, set())
    if isinstance(value, int):
        return _normalize(int(value), 0, set())
    if isinstance(value, float):
        return _normalize(float(value), 0, set())
    if isinstance(value, str):  # a str subclass: its characters, whatever its __str__ says
        return _clean_text(str.__str__(value))
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Decimal | uuid.UUID | PurePath):
        return str(value)
    return _text_of(value)


def _text_of(value: Any) -> str:
    try:
        text = str(value)
    except Exception:  # noqa: BLE001 - a broken __str__ must not lose the event
        text = f"<unprintable {type(value).__name__}>"
    return _clean_text(text)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return _clean_text(str.__str__(key))
    if isinstance(key, enum.Enum):
        key = key.value
    return _text_of(key)


def _clean_text(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATES.sub("\ufffd", text)
    return text


def _non_finite(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def dumps(value: JsonValue) -> str:
    """The canonical JSON text of an already normalized value (compact, UTF-8, no NaN)."""
    return _ENCODER.encode(value)


_SCAN: Final = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set in __init__, untyped


def loads(text: str) -> Any:
    """Decode JSON text written by ``dumps``; every call returns a fresh, caller-owned value.

    The canonical text has no whitespace to skip, so the C scanner is called directly, without
    ``json.loads``' Python-level wrapper; anything unexpected goes through ``json.loads`` and its
    usual errors."""
    if text == "{}":
        return {}
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def validate_id(name: str, value: object) -> str:
    """Ids name files, keys and rows: 1-255 characters, no control characters, no path syntax."""
    if type(value) is str and 0 < len(value) <= ID_MAX_LENGTH and not _BAD_ID_CHARACTER.search(value) \
            and value not in {".", ".."}:
        return value  # the common case, one regex search; the checks below say what is wrong
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    if len(value) > ID_MAX_LENGTH:
        raise ValueError(f"{name} is {len(value)} characters long; the limit is {ID_MAX_LENGTH}")
    if _CONTROL.search(value) or "/" in value or "\\" in value or value in {".", ".."}:
        raise ValueError(
            f"{name} {value!r} is not allowed: no control characters, '/', '\\', '.' or '..'"
        )
    if _SURROGATES.search(value):
        raise ValueError(f"{name} {value!r} contains a lone surrogate")
    return value


def utc_now() -> datetime:
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """Timestamps must be timezone-aware; they are stored in UTC so text order is time order."""
    if not isinstance(moment, datetime):
        raise ValueError(f"created_at must be a datetime, got {type(moment).__name__}")
    if moment.tzinfo is UTC:
        return moment
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("created_at must be timezone-aware (naive datetimes are ambiguous)")
    return moment.astimezone(UTC)


def new_event_id() -> str:
    return uuid.uuid4().hex


def sha256_hex(text: str | bytes) -> str:
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


@dataclasses.dataclass(frozen=True, slots=True)
class NewEvent:
    """An event ready to be written: everything but the ``seq`` the store assigns.

    Building one validates ids and names against the catalog limits, normalizes ``content`` and
    ``metadata`` with :func:`normalize`, cuts content above its category's limit (keeping its shape:
    the longest strings are shortened and ``metadata["content_truncated"]`` records the original size
    and sha256) and serializes both once, so stores write ``content_json`` / ``metadata_json`` as is.
    """

    thread_id: str
    run_id: str
    event_type: str
    category: str
    content: JsonValue = ""
    metadata: JsonObject = dataclasses.field(default_factory=dict)
    created_at: datetime = dataclasses.field(default_factory=utc_now)
    event_id: str = dataclasses.field(default_factory=new_event_id)
    user_id: str | None = None
    content_json: str = dataclasses.field(init=False, repr=False, compare=False)
    metadata_json: str = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        validate_id("thread_id", self.thread_id)
        validate_id("run_id", self.run_id)
        validate_id("event_id", self.event_id)
        if self.user_id is not None:
            validate_id("user_id", self.user_id)
        validate_event_type(self.event_type, self.category)
        if self.metadata is None:
            metadata: JsonObject = {}
        elif isinstance(self.metadata, Mapping):
            metadata = normalize(self.metadata)  # type: ignore[assignment]  # a Mapping normalizes to a dict
        else:
            raise ValueError(f"metadata must be a mapping, got {type(self.metadata).__name__}")
        content = normalize(self.content)
        content_json = dumps(content)
        limit = CONTENT_LIMITS[self.category]  # type: ignore[index]  # a validated category name
        if len(content_json) > limit // 4 and len(content_json.encode("utf-8")) > limit:
            content, content_json, metadata = _cap(content, content_json, metadata, limit)
        metadata_json = dumps(metadata)
        if len(metadata_json) > METADATA_LIMIT // 4 and len(metadata_json.encode()) > METADATA_LIMIT:
            raise ValueError(
                f"metadata of {self.event_type!r} is larger than {METADATA_LIMIT} bytes; "
                "keep large payloads in content"
            )
        setter = object.__setattr__
        setter(self, "content", content)
        setter(self, "metadata", metadata)
        setter(self, "created_at", as_utc(self.created_at))
        setter(self, "content_json", content_json)
        setter(self, "metadata_json", metadata_json)


def _cap(
    content: JsonValue, content_json: str, metadata: JsonObject, limit: int
) -> tuple[JsonValue, str, JsonObject]:
    original = content_json.encode("utf-8")
    note: JsonObject = {"original_bytes": len(original), "sha256": sha256_hex(original), "limit": limit}
    for _ in range(8):
        excess = len(content_json.encode("utf-8")) - limit
        if excess <= 0:
            return content, content_json, {**metadata, "content_truncated": note}
        content = _shorten_longest_text(content, excess + len(_TRUNCATION_MARK.encode()) + 16)
        content_json = dumps(content)
    # JSON-escaping the preview at most doubles its bytes (the text holds no raw control characters).
    preview = original[: (limit - 64) // 2].decode("utf-8", "ignore")
    content = {"truncated": True, "preview": preview}
    return content, dumps(content), {**metadata, "content_truncated": note}


def _shorten_longest_text(value: JsonValue, excess: int) -> JsonValue:
    """Cut ``excess`` characters (at least ``excess`` bytes) from the longest string leaf."""
    path: list[str | int] = []
    best: tuple[int, list[str | int]] = (-1, [])

    def visit(node: JsonValue) -> None:
        nonlocal best
        if isinstance(node, str):
            if len(node) > best[0]:
                best = (len(node), list(path))
        elif isinstance(node, dict | list):
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, child in items:
                path.append(key)
                visit(child)
                path.pop()

    visit(value)
    length, where = best
    keep = max(0, length - excess)
    if not where:
        return value[:keep] + _TRUNCATION_MARK if isinstance(value, str) else value
    parent: Any = value
    for step in where[:-1]:
        parent = parent[step]
    parent[where[-1]] = parent[where[-1]][:keep] + _TRUNCATION_MARK
    return value


_UNDECODED: Final[Any] = object()
_RECORD_FIELDS: Final = (
    "thread_id", "run_id", "seq", "event_type", "category", "content", "metadata", "created_at",
    "event_id", "user_id",
)


class RunEvent:
    """An event as a store holds it. Frozen; ``content`` and ``metadata`` are the reader's own copies.

    ``seq`` is assigned by the store in the same step that persists the event: per thread it starts at
    1 and is dense, so a consumer detects loss by looking for holes (``find_gaps``), never by time.

    A record read from a store that keeps JSON text (SQL, memory) decodes ``content`` and ``metadata``
    on first access, so a page read by a consumer that only looks at names and seqs (gap checks,
    status folds, timelines) never pays for decoding payloads.
    """

    __slots__ = (
        "_content",
        "_content_json",
        "_metadata",
        "_metadata_json",
        "category",
        "created_at",
        "event_id",
        "event_type",
        "run_id",
        "seq",
        "thread_id",
        "user_id",
    )
    thread_id: str
    run_id: str
    seq: int
    event_type: str
    category: str
    created_at: datetime
    event_id: str
    user_id: str | None
    _content: Any
    _metadata: Any
    _content_json: str
    _metadata_json: str

    def __init__(
        self,
        thread_id: str,
        run_id: str,
        seq: int,
        event_type: str,
        category: str,
        content: JsonValue,
        metadata: JsonObject,
        created_at: datetime,
        event_id: str,
        user_id: str | None = None,
    ) -> None:
        self._fill(thread_id, run_id, seq, event_type, category, created_at, event_id, user_id)
        setter = object.__setattr__
        setter(self, "_content", content)
        setter(self, "_metadata", metadata)
        setter(self, "_content_json", "")
        setter(self, "_metadata_json", "")

    @classmethod
    def from_json(
        cls,
        *,
        thread_id: str,
        run_id: str,
        seq: int,
        event_type: str,
        category: str,
        content_json: str,
        metadata_json: str,
        created_at: datetime,
        event_id: str,
        user_id: str | None = None,
    ) -> RunEvent:
        """A record whose payload is still the stored JSON text (decoded once, when first read)."""
        event = cls.__new__(cls)
        event._fill(thread_id, run_id, seq, event_type, category, created_at, event_id, user_id)
        setter = object.__setattr__
        setter(event, "_content", _UNDECODED)
        setter(event, "_metadata", _UNDECODED)
        setter(event, "_content_json", content_json)
        setter(event, "_metadata_json", metadata_json)
        return event

    def _fill(
        self, thread_id: str, run_id: str, seq: int, event_type: str, category: str,
        created_at: datetime, event_id: str, user_id: str | None,
    ) -> None:
        setter = object.__setattr__
        setter(self, "thread_id", thread_id)
        setter(self, "run_id", run_id)
        setter(self, "seq", seq)
        setter(self, "event_type", event_type)
        setter(self, "category", category)
        # Every record, however built (a store read, an export line), carries an aware UTC time.
        setter(self, "created_at", as_utc(created_at))
        setter(self, "event_id", event_id)
        setter(self, "user_id", user_id)

    @property
    def content(self) -> JsonValue:
        value: JsonValue = self._content
        if value is _UNDECODED:
            value = loads(self._content_json)
            object.__setattr__(self, "_content", value)
        return value

    @property
    def metadata(self) -> JsonObject:
        value: JsonObject = self._metadata
        if value is _UNDECODED:
            value = loads(self._metadata_json)
            object.__setattr__(self, "_metadata", value)
        return value

    def __setattr__(self, name: str, value: object) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}: RunEvent is frozen")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}: RunEvent is frozen")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RunEvent):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in _RECORD_FIELDS)

    __hash__ = None  # type: ignore[assignment]  # payloads are dicts: a record is not hashable

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in _RECORD_FIELDS)
        return f"RunEvent({fields})"

    def to_dict(self) -> JsonObject:
        """The JSON form of the record (validates against the contract's record schema)."""
        return {
            "thread_id": self.thread_id,
            "run_id": self.run_id,
            "seq": self.seq,
            "event_type": self.event_type,
            "category": self.category,
            "content": self.content,
            "metadata": self.metadata,
            "created_at": self.created_at.isoformat(),
            "event_id": self.event_id,
            "user_id": self.user_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunEvent:
        """Rebuild a record from ``to_dict()`` output (an export line, a copy between stores)."""
        created = data["created_at"]
        return cls(
            thread_id=data["thread_id"],
            run_id=data["run_id"],
            seq=int(data["seq"]),
            event_type=data["event_type"],
            category=data["category"],
            content=data.get("content", ""),
            metadata=dict(data.get("metadata") or {}),
            created_at=datetime.fromisoformat(created) if isinstance(created, str) else created,
            event_id=data["event_id"],
            user_id=data.get("user_id"),
        )

    @classmethod
    def stored(cls, event: NewEvent, seq: int, *, copy: bool = False) -> RunEvent:
        """The record of ``event`` stored at ``seq``.

        A write's result shares ``event``'s already normalized payload (the writer's own objects;
        stores persist ``content_json``, so nothing done to them reaches the store). ``copy=True``
        decodes fresh payload objects, for a store that returns the same ``NewEvent`` to many readers.
        """
        if copy:
            return cls.from_json(
                thread_id=event.thread_id, run_id=event.run_id, seq=seq, event_type=event.event_type,
                category=event.category, content_json=event.content_json,
                metadata_json=event.metadata_json, created_at=event.created_at,
                event_id=event.event_id, user_id=event.user_id,
            )
        return cls(
            thread_id=event.thread_id,
            run_id=event.run_id,
            seq=seq,
            event_type=event.event_type,
            category=event.category,
            content=event.content,
            metadata=event.metadata,
            created_at=event.created_at,
            event_id=event.event_id,
            user_id=event.user_id,
        )

    def as_new_event(self) -> NewEvent:
        """The write that reproduces this record in another store (same event_id, time, payload)."""
        return NewEvent(
            thread_id=self.thread_id,
            run_id=self.run_id,
            event_type=self.event_type,
            category=self.category,
            content=self.content,
            metadata=self.metadata,
            created_at=self.created_at,
            event_id=self.event_id,
            user_id=self.user_id,
        )
