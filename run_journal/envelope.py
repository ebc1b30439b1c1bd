"""The record envelope: what an event is on its way into a store, and as a store returns it.

``NewEvent`` is an event on its way in: validated, normalized, capped and serialized once, when it is
built, so a producer learns about bad input at the call site and every backend writes the same bytes.
``RunEvent`` is an event as stored: the same fields plus the ``seq`` the store assigned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self

from run_journal.caps import CONTENT_LIMITS, METADATA_LIMIT, cap_content
from run_journal.catalog import TASK_ID_MAX_LENGTH, validate_event_type
from run_journal.ids import as_utc, new_event_id, sha256_hex, utc_now, validate_id
from run_journal.normalization import (
    INT_RANGE,
    MAX_DEPTH,
    JsonObject,
    JsonValue,
    Normalized,
    dumps,
    encode,
    loads,
    normalize,
)

__all__ = [  # the record types, and the payload and id rules they apply, from one import
    "CONTENT_LIMITS", "INT_RANGE", "MAX_DEPTH", "METADATA_LIMIT", "JsonObject", "JsonValue", "NewEvent",
    "Normalized", "RunEvent", "as_utc", "dumps", "loads", "new_event_id", "normalize", "sha256_hex",
    "utc_now", "validate_id", "validate_task_id",
]

_UNDECODED: Final[Any] = object()


def validate_task_id(task_id: str) -> str:
    """``metadata["task_id"]`` is an indexed column: at most ``TASK_ID_MAX_LENGTH`` characters, no NUL
    (the same limit on every backend; a read filtering by a task_id is held to it too)."""
    if len(task_id) > TASK_ID_MAX_LENGTH:
        raise ValueError(f"metadata task_id is {len(task_id)} characters long; the limit is "
                         f"{TASK_ID_MAX_LENGTH} (it is an indexed column on every backend)")
    if "\x00" in task_id:
        raise ValueError(f"metadata task_id {task_id!r} contains a NUL character, which no store keeps")
    return task_id


def _decoded(record: _Frozen, slot: str, text: str) -> Any:
    """A payload field: decoded from its JSON ``text`` on first read, then kept in ``slot``."""
    value = getattr(record, slot, _UNDECODED)  # unset or _UNDECODED: not decoded yet
    if value is _UNDECODED:
        value = loads(text)
        object.__setattr__(record, slot, value)  # the record's own cache, past its frozen __setattr__
    return value


class _Frozen:
    """What both records share: every field refuses assignment, equality is field by field (an
    event's payload is compared as decoded), and payloads are dicts, so records are not hashable."""

    __slots__ = ()
    _FIELDS: ClassVar[tuple[str, ...]]

    def __setattr__(self, name: str, value: object) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to {name!r}: {type(self).__name__} is frozen")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete {name!r}: {type(self).__name__} is frozen")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self._FIELDS)

    __hash__ = None  # type: ignore[assignment]  # see the class docstring

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._FIELDS)
        return f"{type(self).__name__}({fields})"


class NewEvent(_Frozen):
    """An event ready to be written: everything but the ``seq`` the store assigns.

    Building one validates ids and names against the catalog limits, normalizes ``content`` and
    ``metadata`` (:func:`normalize`'s rules), cuts content above its category's limit (keeping its
    shape: the longest strings are shortened and ``metadata["content_truncated"]`` records the
    original size and sha256) and serializes both once, so stores write ``content_json`` /
    ``metadata_json`` as is. Frozen. The normalized ``content`` and ``metadata`` are decoded from
    that text on first access: a writer that only moves events into a store never pays for them.
    """

    __slots__ = (
        "_content", "_metadata", "category", "content_json", "created_at", "event_id", "event_type",
        "metadata_json", "run_id", "task_id", "thread_id", "user_id",
    )
    thread_id: str
    run_id: str
    event_type: str
    category: str
    created_at: datetime
    event_id: str
    user_id: str | None
    content_json: str
    metadata_json: str
    task_id: str | None
    """``metadata["task_id"]`` when it is a string: the subagent task a row is filed under."""
    _content: Any
    _metadata: Any

    def __init__(
        self,
        thread_id: str,
        run_id: str,
        event_type: str,
        category: str,
        content: Any = "",
        metadata: Mapping[str, Any] | None = None,
        created_at: datetime | None = None,
        event_id: str | None = None,
        user_id: str | None = None,
    ) -> None:
        validate_id("thread_id", thread_id)
        validate_id("run_id", run_id)
        if event_id is not None:
            validate_id("event_id", event_id)
        if user_id is not None:
            validate_id("user_id", user_id)
        validate_event_type(event_type, category)
        self._fill(thread_id, run_id, event_type, category, content, metadata,
                   utc_now() if created_at is None else as_utc(created_at), event_id, user_id)

    @classmethod
    def _checked_by_producer(
        cls, thread_id: str, run_id: str, event_type: str, category: str, content_json: str,
        metadata_json: str, created_at: datetime, user_id: str | None,
    ) -> Self:
        """For a producer that validated its ids and names once and encoded the payload itself (the
        journal, through ``normalization.encode``; metadata a JSON object): the caps still apply, the
        per-event checks do not."""
        event: Self = _new_record(cls)
        event._fill_encoded(thread_id, run_id, event_type, category, content_json, metadata_json,
                            created_at, None, user_id)
        return event

    def _fill(
        self, thread_id: str, run_id: str, event_type: str, category: str, content: Any,
        metadata: Mapping[str, Any] | None, created_at: datetime, event_id: str | None,
        user_id: str | None,
    ) -> None:
        if metadata is None:
            metadata_json = "{}"
        elif type(metadata) is dict or isinstance(metadata, Mapping):
            metadata_json = encode(metadata) if metadata else "{}"
        else:
            raise ValueError(f"metadata must be a mapping, got {type(metadata).__name__}")
        # a payload its producer normalized and encoded already is written as is
        content_json = content.text if type(content) is Normalized else encode(content)
        self._fill_encoded(thread_id, run_id, event_type, category, content_json, metadata_json,
                           created_at, event_id, user_id)

    def _fill_encoded(
        self, thread_id: str, run_id: str, event_type: str, category: str, content_json: str,
        metadata_json: str, created_at: datetime, event_id: str | None, user_id: str | None,
    ) -> None:
        if len(content_json) > _SURELY_SMALL or len(metadata_json) > _SURELY_SMALL:  # else under every limit
            content_json, metadata_json = self._capped(event_type, category, content_json, metadata_json)
        # ``_content`` / ``_metadata`` stay unset (undecoded) unless the cut above decoded them
        _SET_THREAD_ID(self, thread_id)
        _SET_RUN_ID(self, run_id)
        _SET_EVENT_TYPE(self, event_type)
        _SET_CATEGORY(self, category)
        _SET_CREATED_AT(self, created_at)
        _SET_EVENT_ID(self, new_event_id() if event_id is None else event_id)
        _SET_USER_ID(self, user_id)
        _SET_CONTENT_JSON(self, content_json)
        _SET_METADATA_JSON(self, metadata_json)
        task_id = None if '"task_id"' not in metadata_json else self.metadata.get("task_id")
        _SET_TASK_ID(self, validate_task_id(task_id) if isinstance(task_id, str) else None)

    def _capped(
        self, event_type: str, category: str, content_json: str, metadata_json: str
    ) -> tuple[str, str]:
        """Content over its category's limit cut (decoded into the record's slots); metadata over
        ``METADATA_LIMIT`` refused."""
        limit = CONTENT_LIMITS[category]  # type: ignore[index]  # a validated category name
        if len(content_json) > limit // 4 and len(content_json.encode("utf-8")) > limit:
            content_value, content_json, metadata_value = cap_content(
                loads(content_json), content_json, loads(metadata_json), limit
            )
            metadata_json = dumps(metadata_value)
            _SET_CONTENT(self, content_value)
            _SET_METADATA(self, metadata_value)
        if len(metadata_json) > METADATA_LIMIT // 4 and len(metadata_json.encode()) > METADATA_LIMIT:
            raise ValueError(
                f"metadata of {event_type!r} is larger than {METADATA_LIMIT} bytes; "
                "keep large payloads in content"
            )
        return content_json, metadata_json

    @property
    def content(self) -> JsonValue:
        """The normalized content (decoded from ``content_json`` once, on first access)."""
        content: JsonValue = _decoded(self, "_content", self.content_json)
        return content

    @property
    def metadata(self) -> JsonObject:
        """The normalized metadata (decoded from ``metadata_json`` once, on first access)."""
        metadata: JsonObject = _decoded(self, "_metadata", self.metadata_json)
        return metadata

    def __reduce__(self) -> tuple[Any, ...]:
        return (NewEvent, tuple(getattr(self, name) for name in self._FIELDS))


NewEvent._FIELDS = (
    "thread_id", "run_id", "event_type", "category", "content", "metadata", "created_at", "event_id",
    "user_id",
)


_new_record = object.__new__
_SURELY_SMALL: Final = min(*CONTENT_LIMITS.values(), METADATA_LIMIT) // 4
"""JSON text no longer than this (characters) is under every byte limit, whatever its characters."""


def _column(index: int, doc: str) -> Any:
    return property(lambda event: event._row[index], doc=doc)


class RunEvent(_Frozen):
    """An event as a store holds it. Frozen; ``content`` and ``metadata`` are the reader's own copies.

    ``seq`` is assigned by the store in the same step that persists the event: per thread it starts at
    1 and is dense, so a consumer detects loss by looking for holes (``find_gaps``), never by time.

    A record read from a store is the stored row itself (``from_row``): ``content``, ``metadata``
    and ``created_at`` are decoded on first access. A page read by a consumer that only looks at
    names and seqs (gap checks, status folds, timelines) never pays for decoding payloads, and a
    page of 500 costs little more than the query that fetched it.
    """

    __slots__ = ("_content", "_created_at", "_metadata", "_row")
    _row: tuple[Any, ...]  # the stored columns in ``COLUMNS`` order (content, metadata: JSON text)
    _content: Any
    _metadata: Any
    _created_at: Any

    COLUMNS: Final = (
        "thread_id", "run_id", "seq", "event_type", "category", "content", "metadata", "created_at",
        "event_id", "user_id",
    )
    """The order of ``from_row``'s row (the SQL stores select exactly these columns)."""
    _FIELDS = COLUMNS

    if TYPE_CHECKING:
        thread_id: str
        run_id: str
        seq: int
        event_type: str
        category: str
        event_id: str
        user_id: str | None
    else:  # read straight from the row: no per-field work when a record is built
        thread_id = _column(0, "The conversation the event belongs to.")
        run_id = _column(1, "The run that produced the event.")
        seq = _column(2, "Position in the thread: from 1, dense, assigned by the store.")
        event_type = _column(3, "A catalog name (``run_journal.catalog``).")
        category = _column(4, "The catalog category of ``event_type`` (or a legacy alias).")
        event_id = _column(8, "Unique per store; a retried write with the same id writes nothing.")
        user_id = _column(9, "The owner for scoped reads, or None.")

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
        _ROW(self, (thread_id, run_id, seq, event_type, category, None, None, None, event_id, user_id))
        _CONTENT(self, content)
        _METADATA(self, metadata)
        _CREATED_AT(self, as_utc(created_at))

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> RunEvent:
        """A record over a stored row (``COLUMNS`` order; ``created_at`` as ISO text or a datetime).

        Nothing is parsed until read: each record decodes its own payload copies on first access
        (until then the decoded slots are unset, so building a record sets one slot).
        """
        event: RunEvent = _new_record(cls)
        _ROW(event, row)
        return event

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[Any, ...]]) -> list[RunEvent]:
        """``from_row`` for a page of rows, in one loop (what a store's page read returns)."""
        new, set_row = _new_record, _ROW
        page: list[RunEvent] = []
        append = page.append
        for row in rows:
            event = new(cls)
            set_row(event, row)
            append(event)
        return page

    @property
    def content(self) -> JsonValue:
        """The event's payload (decoded from the stored JSON on first access)."""
        content: JsonValue = _decoded(self, "_content", self._row[5])
        return content

    @property
    def metadata(self) -> JsonObject:
        """Attribution and measurements (caller, usage, latency, ...): a JSON object."""
        metadata: JsonObject = _decoded(self, "_metadata", self._row[6])
        return metadata

    @property
    def created_at(self) -> datetime:
        """When the event happened, timezone-aware UTC."""
        value: datetime = getattr(self, "_created_at", _UNDECODED)
        if value is _UNDECODED:
            stored = self._row[7]
            value = as_utc(datetime.fromisoformat(stored) if isinstance(stored, str) else stored)
            _CREATED_AT(self, value)
        return value

    def __reduce__(self) -> tuple[Any, ...]:
        return (RunEvent.from_dict, (self.to_dict(),))

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
        """The record of ``event`` stored at ``seq``, decoding its payload only when it is read.

        A write's result shares the payload objects ``event`` has already decoded, if any (the
        writer's own; stores persist ``content_json``, so nothing done to them reaches the store).
        ``copy=True`` never shares, for a store that returns the same ``NewEvent`` to many readers.
        """
        record = cls.from_row((
            event.thread_id, event.run_id, seq, event.event_type, event.category,
            event.content_json, event.metadata_json, event.created_at, event.event_id, event.user_id,
        ))
        if not copy:
            content = getattr(event, "_content", _UNDECODED)
            if content is not _UNDECODED:
                _CONTENT(record, content)
            metadata = getattr(event, "_metadata", _UNDECODED)
            if metadata is not _UNDECODED:
                _METADATA(record, metadata)
        return record

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


def _slot_setter(record: type, name: str) -> Any:
    """The setter of one slot of a record class, by the slot's name."""
    return record.__dict__[name].__set__


# Events and records are built by setting their slots directly (``__setattr__`` refuses: records are frozen).
_ROW, _CONTENT, _METADATA, _CREATED_AT = (
    _slot_setter(RunEvent, name) for name in ("_row", "_content", "_metadata", "_created_at"))
_SET_CONTENT = _slot_setter(NewEvent, "_content")
_SET_METADATA = _slot_setter(NewEvent, "_metadata")
_SET_CATEGORY = _slot_setter(NewEvent, "category")
_SET_CONTENT_JSON = _slot_setter(NewEvent, "content_json")
_SET_CREATED_AT = _slot_setter(NewEvent, "created_at")
_SET_EVENT_ID = _slot_setter(NewEvent, "event_id")
_SET_EVENT_TYPE = _slot_setter(NewEvent, "event_type")
_SET_METADATA_JSON = _slot_setter(NewEvent, "metadata_json")
_SET_RUN_ID = _slot_setter(NewEvent, "run_id")
_SET_TASK_ID = _slot_setter(NewEvent, "task_id")
_SET_THREAD_ID = _slot_setter(NewEvent, "thread_id")
_SET_USER_ID = _slot_setter(NewEvent, "user_id")
