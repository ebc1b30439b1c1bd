"""Ids and timestamps: what every event's identity fields must be, checked the same way everywhere.

Ids name files (JSONL), keys (Redis) and rows (SQL), so every backend refuses the same ids with the
same ``ValueError``; timestamps are timezone-aware and stored in UTC, so text order is time order.
"""

from __future__ import annotations

import hashlib
import os
import re
from datetime import UTC, datetime
from typing import Final

from run_journal.catalog import ID_MAX_LENGTH

_SURROGATES: Final = re.compile("[\ud800-\udfff]")
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f]")
_BAD_ID_CHARACTER: Final = re.compile("[\x00-\x1f\x7f-\x9f/\\\\\ud800-\udfff]")
"""C0, DEL and C1 controls (category Cc): C1 bytes such as U+009B act as terminal escapes."""


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
    """128 random bits as 32 hex digits (what ``uuid4().hex`` gives, without building a UUID); the
    journal's generated run and thread ids too."""
    return os.urandom(16).hex()


def sha256_hex(text: str | bytes) -> str:
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()
