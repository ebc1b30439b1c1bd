"""Ages and moments as people type them: ``90s``, ``30m``, ``2h``, ``1d``, ``2w``, or an ISO date or
time. The one syntax of every command's ``--older-than`` / ``--since`` / ``--until`` and of the HTTP
API's ``since`` / ``until``."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Final

_AGE: Final = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")
_UNITS: Final = {"s": "seconds", "": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
AGE_EXAMPLES: Final = "90s, 30m, 2h, 1d, 2w"
MOMENT_EXAMPLES: Final = f"an age ({AGE_EXAMPLES}: that long ago) or an ISO date or time (2024-05-01, " \
                         "2024-05-01T13:00Z; UTC when no offset)"


def parse_age(text: str) -> timedelta:
    """``90s``, ``30m``, ``2h``, ``1d``, ``2w`` (a bare number is seconds); ValueError otherwise."""
    match = _AGE.fullmatch(text.strip()) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"not a duration: {text!r} (e.g. {AGE_EXAMPLES})")
    return timedelta(**{_UNITS[match[2]]: float(match[1])})


def parse_moment(text: str, now: datetime | None = None) -> datetime:
    """An age (that long before ``now``, by default the current time) or an ISO 8601 date or time
    (UTC when it names no offset), as a timezone-aware ``datetime``; ValueError otherwise."""
    try:
        return (now or datetime.now(UTC)) - parse_age(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip())
    except (ValueError, AttributeError):
        raise ValueError(f"not an age or a date: {text!r} ({MOMENT_EXAMPLES})") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
