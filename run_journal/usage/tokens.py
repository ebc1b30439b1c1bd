"""``TokenUsage``: the token counts of one model call, by kind, in the journal's own flat shape.

Counting convention (LangChain's): ``input_tokens`` includes the cached, cache-written and audio input
tokens, ``output_tokens`` includes the reasoning and audio output tokens; each other field says how
many of them were of that kind. ``cache_creation_tokens`` counts every cache write, and
``cache_creation_1h_tokens`` how many of those were written for an hour (the rest for five minutes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final


@dataclasses.dataclass(frozen=True, slots=True)
class TokenUsage:
    """The usage of one model call (before pricing)."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    reasoning_tokens: int = 0
    cache_creation_1h_tokens: int = 0
    input_audio_tokens: int = 0
    output_audio_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(*(getattr(self, name) + getattr(other, name) for name in FIELDS))

    def to_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in FIELDS}

    @classmethod
    def from_dict(cls, data: Any) -> TokenUsage | None:
        """The journal's flat shape (``to_dict``, what events and run rows store); None when ``data`` is
        not a mapping. A count that is missing or not a non-negative number is 0."""
        if not isinstance(data, Mapping):
            return None
        usage = cls(*(count(data.get(name)) for name in FIELDS))
        if not usage.total_tokens:
            usage = dataclasses.replace(usage, total_tokens=usage.input_tokens + usage.output_tokens)
        return usage


FIELDS: Final = tuple(field.name for field in dataclasses.fields(TokenUsage))
"""The counts of a ``TokenUsage``, in order (also the token fields of ``UsageTotals``)."""


def count(value: Any) -> int:
    """Token counts are non-negative integers; anything else (None, junk, bool) counts as 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(0, int(value))
