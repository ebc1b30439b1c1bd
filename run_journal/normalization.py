"""The one normalization of event payloads: any Python value to its canonical JSON form.

Every store writes what this produces, so every backend reads back the same value for the same write
(design invariant 2). The rules are listed on :func:`normalize` and in docs/concepts.md.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import itertools
import json
import math
import re
import sys
import uuid
from collections.abc import Callable, Mapping
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import PurePath
from typing import Any, Final, TypeAlias

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None
JsonObject: TypeAlias = dict[str, JsonValue]

MAX_DEPTH: Final = 64
"""Deeper nesting is replaced by the marker ``"<max depth>"`` (it also guards the recursion)."""
INT_RANGE: Final = (-(2**63), 2**63 - 1)
"""Integers outside a signed 64-bit range are stored as their decimal string."""
_SURROGATES: Final = re.compile("[\ud800-\udfff]")
_CYCLE: Final = "<cycle>"
_TOO_DEEP: Final = "<max depth>"


class Normalized:
    """A value a producer already passed through :func:`normalize`; normalizing it again is a no-op.

    Producers that put the same payload in two events (a model's message in ``llm.ai.response`` and
    again in ``run.end``) wrap the first result instead of paying for the walk twice. Built from its
    JSON text (:meth:`from_text`), it decodes the value only if someone asks: an event that carries
    it writes the text as is, and ``run.end`` splices the texts of the messages it repeats.
    """

    __slots__ = ("_text", "_value")

    def __init__(self, value: JsonValue, text: str | None = None) -> None:
        self._value = value
        self._text = text

    @classmethod
    def from_text(cls, text: str) -> Normalized:
        """The payload whose canonical JSON is ``text`` (as :func:`encode` wrote it)."""
        payload = cls(None, text)
        payload._value = _UNDECODED_VALUE
        return payload

    def __reduce__(self) -> tuple[Any, ...]:
        return (Normalized.from_text, (self.text,))  # a copy or a pickle is rebuilt from the text

    @property
    def value(self) -> JsonValue:
        if self._value is _UNDECODED_VALUE:
            self._value = loads(self._text)  # type: ignore[arg-type]  # from_text always sets it
        return self._value

    @property
    def text(self) -> str:
        """``dumps(value)``, computed once (an event whose content is this value writes it as is)."""
        if self._text is None:
            self._text = dumps(self._value)
        return self._text


_UNDECODED_VALUE: Final[Any] = object()


def normalize(value: Any) -> JsonValue:
    """Return the canonical JSON-compatible form of ``value``.

    Rules (documented in docs/concepts.md): mappings get ``str`` keys; tuples, lists, sets become lists
    (sets sorted by their JSON text); LangChain messages and pydantic models are dumped; dataclasses
    become objects; datetimes, dates and times are ISO-8601; enums give their value (int, float and
    str enums their number or text); ``Decimal``, ``UUID`` and paths give ``str``; ``bytes`` give
    ``{"$bytes": "<base64>"}``; NaN and infinities give ``"NaN"``, ``"Infinity"``, ``"-Infinity"``;
    integers beyond 64 bits give their decimal string; lone surrogates become U+FFFD; a reference
    cycle gives ``"<cycle>"``; anything else gives ``str()``.
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
    if isinstance(value, Mapping | list | tuple | set | frozenset) or _is_model(value) or (
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


def _is_model(value: Any) -> bool:
    """A pydantic model? Without importing pydantic: until something else has, no value can be one."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(value, pydantic.BaseModel)


def _normalize_container(value: Any, depth: int, active: set[int]) -> JsonValue:
    if isinstance(value, Mapping):
        return {_key(key): _normalize(item, depth, active) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_normalize(item, depth, active) for item in value]
    if isinstance(value, set | frozenset):
        items = [_normalize(item, depth, active) for item in value]
        return sorted(items, key=dumps)
    if _is_model(value):
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
    # Subclasses of the JSON scalars (IntEnum, StrEnum included) are their number or characters,
    # whatever their __str__ or enum value says: what the C JSON encoder writes for them too.
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return _normalize(int(value), 0, set())
    if isinstance(value, float):
        return _normalize(float(value), 0, set())
    if isinstance(value, str):
        return _clean_text(str.__str__(value))
    if isinstance(value, enum.Enum):
        return _normalize(value.value, MAX_DEPTH - 1, set())
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
    """Keys are spelled as JSON spells them (what the C encoder writes: ``true``, ``null``, ``1.5``)."""
    if isinstance(key, str):
        return _clean_text(str.__str__(key))
    if key is None or isinstance(key, bool):
        return _JSON_WORDS[key]
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        return float.__repr__(key)
    if isinstance(key, enum.Enum):
        return _key(key.value)
    return _text_of(key)


_JSON_WORDS: Final = {None: "null", True: "true", False: "false"}


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


def _not_json(value: object) -> None:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _encoder(default: Callable[[Any], Any]) -> Callable[[Any], str]:
    """``json.dumps(ensure_ascii=False, separators=(",", ":"), allow_nan=False)`` as one encoder built
    once (``json.dumps`` with options builds one per call); no cycle markers, because normalized values
    have no cycles and ``encode`` leaves the cycles of the rest to the walk."""
    return json.JSONEncoder(
        ensure_ascii=False, check_circular=False, allow_nan=False, separators=(",", ":"), default=default
    ).encode


_DUMPS: Final = _encoder(_not_json)


def dumps(value: JsonValue) -> str:
    """The canonical JSON text of an already normalized value (compact, UTF-8, no NaN)."""
    return _DUMPS(value)


# The same encoder, handing what is not plain JSON data to ``normalize`` (datetimes, models...).
_ENCODE_ANY: Final = _encoder(normalize)
_BRACKET: Final = re.compile(r"[\[\]{}]")
_NESTING: Final = {"[": 1, "{": 1, "]": -1, "}": -1}
_SAFE_RECURSION: Final = 4000
"""The stdlib encoder (its C accelerator) finds a cycle by exhausting the recursion limit; above this
(a raised limit) it could exhaust the C stack first, so such processes take the walk, which stops at
``MAX_DEPTH``."""


def encode(value: Any) -> str:
    """``dumps(normalize(value))``, in one pass of the stdlib encoder when ``value`` is plain JSON data
    (the common case: dicts, lists, strings, numbers).

    The encoder hands anything else to ``normalize`` (datetimes, models...); what only the walk
    handles is detected on the text and the value is walked instead: lone surrogates (the UTF-8
    encode fails), NaN (the encoder refuses it), cycles (the recursion limit), nesting as deep as
    ``MAX_DEPTH`` (bracket depth) and integers beyond 64 bits (a byte scan: a run of 19 digits
    anywhere, even inside a string, sends the value to the walk). One difference is left, because
    finding it would take the walk: a mapping whose keys collide once spelled as JSON (``1`` and
    ``"1"``) keeps both in the text, where the walk keeps the later one; both decode alike.
    """
    if sys.getrecursionlimit() <= _SAFE_RECURSION:
        try:
            text = _ENCODE_ANY(value)
            if _LONG_NUMBER not in text.encode("utf-8").translate(_DIGITS_ONLY) and (
                text.count("[") + text.count("{") < MAX_DEPTH or _shallow(text)
            ):
                return text
        except (TypeError, ValueError, RecursionError):  # UnicodeEncodeError: a lone surrogate
            pass
    return dumps(normalize(value))


_DUMPS_SORTED: Final = json.JSONEncoder(
    ensure_ascii=False, check_circular=False, allow_nan=False, separators=(",", ":"), sort_keys=True,
).encode


def encode_sorted(value: Any) -> str:
    """``encode(value)`` with every object's keys in sorted order: the one text of a value, whatever
    order its mappings were built in, so equal values give equal text in any process (what a
    content address hashes). The value is encoded, decoded (every key is then a string) and encoded
    again sorted, three passes of the stdlib's C code."""
    return _DUMPS_SORTED(loads(encode(value)))


_DIGITS_ONLY: Final = bytes(0x39 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_NUMBER: Final = b"9" * 19


def encode_value(value: Any) -> tuple[str, JsonValue]:
    """``(encode(value), normalize(value))``: the text and a fresh copy of the value it holds."""
    text = encode(value)
    return text, loads(text)


def _shallow(text: str) -> bool:
    """Nesting below ``MAX_DEPTH``: no value sits where the walk would put ``"<max depth>"``.

    Only brackets outside strings count. Once the escaped backslashes, then the escaped quotes, are
    dropped, every quote left opens or closes a string, so what lies between strings is every other
    piece of the text split on quotes (string methods: no scan of the strings in Python or a regex)."""
    if text.count("[") + text.count("{") < MAX_DEPTH:
        return True
    outside = "".join(text.replace("\\\\", "").replace('\\"', "").split('"')[::2])
    brackets = _BRACKET.findall(outside)
    return max(itertools.accumulate(map(_NESTING.__getitem__, brackets)), default=0) < MAX_DEPTH


_RAW_DECODE: Final = json.JSONDecoder().raw_decode


def loads(text: str) -> Any:
    """Decode JSON text written by ``dumps``; every call returns a fresh, caller-owned value.

    The canonical text has no whitespace to skip, so it is decoded with ``raw_decode``, without
    ``json.loads``' whitespace and BOM checks; anything unexpected goes through ``json.loads`` and
    its usual errors."""
    if text == "{}":
        return {}
    try:
        value, end = _RAW_DECODE(text)
    except json.JSONDecodeError:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)
