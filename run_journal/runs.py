"""The run row (lifecycle and usage totals of one run) and the status fold over lifecycle events."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, Final, Protocol

from run_journal.envelope import JsonObject, as_utc, normalize, utc_now, validate_id


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCESS = "success"
    ERROR = "error"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"


TERMINAL_STATUSES: Final = frozenset(
    {RunStatus.SUCCESS, RunStatus.ERROR, RunStatus.INTERRUPTED, RunStatus.CANCELLED}
)
STATUS_AFTER: Final = {
    "run.start": RunStatus.RUNNING,
    "run.end": RunStatus.SUCCESS,
    "run.error": RunStatus.ERROR,
    "run.interrupt": RunStatus.INTERRUPTED,
    "run.cancel": RunStatus.CANCELLED,
}
"""The lifecycle transition each lifecycle event makes; every other event leaves status alone."""


class _HasEventType(Protocol):
    @property
    def event_type(self) -> str: ...


def status_of(events: Iterable[_HasEventType]) -> RunStatus:
    """Fold one run's events (in seq order) into its status: the last transition wins.

    A run with no lifecycle event is ``pending``; a run that started and never ended is ``running``
    (which is what an orphan looks like until ``reconcile_orphans`` closes it).
    """
    status = RunStatus.PENDING
    for event in events:
        status = STATUS_AFTER.get(event.event_type, status)
    return status


def may_replace(stored: str, new: str) -> bool:
    """A finished run is never reopened: a terminal status only accepts the same status again."""
    return stored not in TERMINAL_STATUSES or stored == new


@dataclasses.dataclass(frozen=True, slots=True)
class UsageTotals:
    """Token usage and cost of a set of model calls. ``cost_usd`` is None when any price is unknown."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    reasoning_tokens: int = 0
    llm_calls: int = 0
    cost_usd: float | None = None
    cache_creation_1h_tokens: int = 0
    """Of ``cache_creation_tokens``, those written to a one-hour cache (the rest: five minutes)."""
    input_audio_tokens: int = 0
    output_audio_tokens: int = 0

    def __add__(self, other: UsageTotals) -> UsageTotals:
        return UsageTotals(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_creation_tokens=self.cache_creation_tokens + other.cache_creation_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            llm_calls=self.llm_calls + other.llm_calls,
            cost_usd=_add_cost(self, other),
            cache_creation_1h_tokens=self.cache_creation_1h_tokens + other.cache_creation_1h_tokens,
            input_audio_tokens=self.input_audio_tokens + other.input_audio_tokens,
            output_audio_tokens=self.output_audio_tokens + other.output_audio_tokens,
        )

    def to_dict(self) -> JsonObject:
        return dict(zip(_USAGE_FIELDS, _USAGE_VALUES(self), strict=True))  # asdict() deep-copies: slow

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> UsageTotals:
        if not data:
            return cls()
        if data.keys() == _USAGE_KEYS:  # what to_dict wrote: every field, nothing else
            return cls(**data)
        return cls(**{key: value for key, value in data.items() if key in _USAGE_KEYS})


_USAGE_FIELDS: Final = tuple(field.name for field in dataclasses.fields(UsageTotals))
_USAGE_KEYS: Final = frozenset(_USAGE_FIELDS)
_USAGE_VALUES: Final = operator.attrgetter(*_USAGE_FIELDS)


def _add_cost(left: UsageTotals, right: UsageTotals) -> float | None:
    """Cost of a sum: unknown if either side made calls at an unknown price."""
    if (left.llm_calls and left.cost_usd is None) or (right.llm_calls and right.cost_usd is None):
        return None
    if left.cost_usd is None and right.cost_usd is None:
        return None
    return (left.cost_usd or 0.0) + (right.cost_usd or 0.0)


@dataclasses.dataclass(frozen=True, slots=True)
class RunRow:
    """One run's lifecycle and totals, written by the journal at start, during and at the end.

    Token and cost totals are accumulated while callbacks fire (never rebuilt from event rows);
    ``status`` always agrees with ``status_of`` over the run's own events.
    """

    run_id: str
    thread_id: str
    user_id: str | None = None
    status: str = RunStatus.PENDING
    started_at: datetime | None = None
    ended_at: datetime | None = None
    updated_at: datetime = dataclasses.field(default_factory=utc_now)
    resumed_from: str | None = None
    error: str | None = None
    usage: UsageTotals = UsageTotals()
    usage_by_caller: Mapping[str, UsageTotals] = dataclasses.field(default_factory=dict)
    usage_by_model: Mapping[str, UsageTotals] = dataclasses.field(default_factory=dict)
    tool_call_count: int = 0
    tool_error_count: int = 0
    message_count: int = 0
    first_human_message: str | None = None
    last_ai_message: str | None = None
    metadata: JsonObject = dataclasses.field(default_factory=dict)
    cost_note: str | None = None
    """Why ``usage.cost_usd`` is None although the run made model calls (no price known for a model,
    a call that reported no usage, pricing turned off); None when the cost is known."""
    models: tuple[str, ...] = ()
    """Every model the run called (sorted), those of failed calls included; ``unknown`` for a call
    that did not say. Rows written before this field read it from ``usage_by_model``."""
    tools: tuple[str, ...] = ()
    """The names of every tool the run called (sorted)."""
    callers: tuple[str, ...] = ()
    """Every caller (``lead_agent``, ``subagent:<name>``, ...) that made a model or tool call (sorted).
    Rows written before this field read it from ``usage_by_caller``."""
    llm_error_count: int = 0
    """Model calls that failed (``llm.error`` events)."""

    def __post_init__(self) -> None:
        validate_id("run_id", self.run_id)
        validate_id("thread_id", self.thread_id)
        if self.user_id is not None:
            validate_id("user_id", self.user_id)
        object.__setattr__(self, "status", RunStatus(self.status))
        object.__setattr__(self, "metadata", normalize(self.metadata or {}))
        for name in ("models", "tools", "callers"):
            names = getattr(self, name)
            if isinstance(names, str) or not all(isinstance(item, str) for item in names):
                raise TypeError(f"RunRow.{name} is a collection of names, got {names!r}")
            object.__setattr__(self, name, tuple(sorted(set(names))))
        for name in ("started_at", "ended_at", "updated_at"):
            moment = getattr(self, name)
            if moment is not None:
                object.__setattr__(self, name, as_utc(moment))

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def llm_call_count(self) -> int:
        return self.usage.llm_calls

    @property
    def total_tokens(self) -> int:
        return self.usage.total_tokens

    @property
    def cost_usd(self) -> float | None:
        return self.usage.cost_usd

    @property
    def has_error(self) -> bool:
        """Whether anything in the run failed: the run itself (``run.error``), a model call
        (``llm.error``) or a tool (an error result or a failed ``tool.outcome``)."""
        return self.status == RunStatus.ERROR or self.llm_error_count > 0 or self.tool_error_count > 0

    @property
    def error_count(self) -> int:
        """Failed model calls, failed tools and the run's own failure (1 when its status is error)."""
        return self.llm_error_count + self.tool_error_count + (self.status == RunStatus.ERROR)

    def replace(self, **changes: Any) -> RunRow:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> JsonObject:
        def moment(value: datetime | None) -> str | None:
            return value.isoformat() if value else None

        return {
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "user_id": self.user_id,
            "status": self.status.value if isinstance(self.status, RunStatus) else self.status,
            "started_at": moment(self.started_at),
            "ended_at": moment(self.ended_at),
            "updated_at": moment(self.updated_at),
            "resumed_from": self.resumed_from,
            "error": self.error,
            "usage": self.usage.to_dict(),
            "usage_by_caller": {key: value.to_dict() for key, value in self.usage_by_caller.items()},
            "usage_by_model": {key: value.to_dict() for key, value in self.usage_by_model.items()},
            "tool_call_count": self.tool_call_count,
            "tool_error_count": self.tool_error_count,
            "message_count": self.message_count,
            "first_human_message": self.first_human_message,
            "last_ai_message": self.last_ai_message,
            "metadata": self.metadata,
            "cost_note": self.cost_note,
            "models": list(self.models),
            "tools": list(self.tools),
            "callers": list(self.callers),
            "llm_error_count": self.llm_error_count,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRow:
        def moment(value: str | None) -> datetime | None:
            return datetime.fromisoformat(value) if value else None

        by_caller = {key: UsageTotals.from_dict(value)
                     for key, value in (data.get("usage_by_caller") or {}).items()}
        by_model = {key: UsageTotals.from_dict(value)
                    for key, value in (data.get("usage_by_model") or {}).items()}
        return cls(
            run_id=data["run_id"],
            thread_id=data["thread_id"],
            user_id=data.get("user_id"),
            status=data.get("status", RunStatus.PENDING),
            started_at=moment(data.get("started_at")),
            ended_at=moment(data.get("ended_at")),
            updated_at=moment(data.get("updated_at")) or utc_now(),
            resumed_from=data.get("resumed_from"),
            error=data.get("error"),
            usage=UsageTotals.from_dict(data.get("usage")),
            usage_by_caller=by_caller,
            usage_by_model=by_model,
            tool_call_count=int(data.get("tool_call_count", 0)),
            tool_error_count=int(data.get("tool_error_count", 0)),
            message_count=int(data.get("message_count", 0)),
            first_human_message=data.get("first_human_message"),
            last_ai_message=data.get("last_ai_message"),
            metadata=dict(data.get("metadata") or {}),
            cost_note=data.get("cost_note"),
            models=tuple(data["models"]) if "models" in data else tuple(by_model),
            tools=tuple(data.get("tools") or ()),
            callers=tuple(data["callers"]) if "callers" in data else tuple(by_caller),
            llm_error_count=int(data.get("llm_error_count", 0)),
        )


def _moment(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


class StoredBuckets(Mapping[str, UsageTotals]):
    """A stored row's per-model or per-caller totals, each decoded when it is first read: a page of
    rows that nobody looks into the buckets of costs no bucket decoding. A read-only mapping equal to
    the dict it stands for."""

    __slots__ = ("_decoded", "_raw")

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self._raw = raw
        self._decoded: dict[str, UsageTotals] = {}

    def __getitem__(self, key: str) -> UsageTotals:
        found = self._decoded.get(key)
        if found is None:
            found = self._decoded[key] = UsageTotals.from_dict(self._raw[key])
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __repr__(self) -> str:
        return repr(dict(self.items()))


_STATUSES: Final = {status.value: status for status in RunStatus}
_SET: Final = object.__setattr__


def stored_row(data: Mapping[str, Any]) -> RunRow:
    """A run row from the JSON a store wrote (``RunRow.to_dict()`` of a row that was checked when it
    was built), parsed for this call alone: the same row as ``RunRow.from_dict`` without checking it
    again, which is most of what reading a row costs. Only for a store's own freshly parsed rows;
    anything else goes through ``from_dict``."""
    row = object.__new__(RunRow)
    get, put = data.get, _SET
    status = get("status", "pending")
    by_caller, by_model = get("usage_by_caller") or {}, get("usage_by_model") or {}
    put(row, "run_id", data["run_id"])
    put(row, "thread_id", data["thread_id"])
    put(row, "user_id", get("user_id"))
    put(row, "status", _STATUSES.get(status) or RunStatus(status))
    put(row, "started_at", _moment(get("started_at")))
    put(row, "ended_at", _moment(get("ended_at")))
    put(row, "updated_at", _moment(get("updated_at")) or utc_now())
    put(row, "resumed_from", get("resumed_from"))
    put(row, "error", get("error"))
    put(row, "usage", UsageTotals.from_dict(get("usage")))
    put(row, "usage_by_caller", StoredBuckets(by_caller))
    put(row, "usage_by_model", StoredBuckets(by_model))
    put(row, "tool_call_count", get("tool_call_count", 0))
    put(row, "tool_error_count", get("tool_error_count", 0))
    put(row, "message_count", get("message_count", 0))
    put(row, "first_human_message", get("first_human_message"))
    put(row, "last_ai_message", get("last_ai_message"))
    put(row, "metadata", get("metadata") or {})
    put(row, "cost_note", get("cost_note"))
    put(row, "models", tuple(data["models"]) if "models" in data else tuple(sorted(by_model)))
    put(row, "tools", tuple(get("tools") or ()))
    put(row, "callers", tuple(data["callers"]) if "callers" in data else tuple(sorted(by_caller)))
    put(row, "llm_error_count", get("llm_error_count", 0))
    return row


RowSnapshot = Callable[[], RunRow]
"""A run row as it stood when the snapshot was taken, built only when called: a journal hands its
writer one with each status change, and the writer builds only the one it writes."""
