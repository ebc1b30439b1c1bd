"""Check parameters: what each takes, validated once with the messages suites and tests show."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any, Final

from run_journal.runs import RunStatus

MATCH_MODES: Final = ("exact", "subset", "regex")
ORDER_MODES: Final = ("subsequence", "exact")
ERROR_KINDS: Final = ("llm", "run", "tool")
ERROR_NAMES: Final = {"llm": "llm.error", "run": "run.error", "tool": "failed tool outcome"}
TOKEN_KINDS: Final = ("total", "input", "output")
FILE_STATUSES: Final = ("created", "modified", "deleted")
STATUSES: Final = tuple(status.value for status in RunStatus)


class CheckDefinitionError(ValueError):
    """A check that cannot be made: unknown name, unknown or missing parameter, wrong type.

    ``path`` names the parameter (``"max"``, ``"args"``), empty for the check as a whole.
    """

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


@dataclasses.dataclass(frozen=True, slots=True)
class Param:
    """One parameter of a check: its name, what it takes, and whether it must be given."""

    name: str
    kind: str
    """``text``, ``texts`` (one or a list), ``integer``, ``number``, ``boolean``, ``true``, ``json``
    (any value), ``mapping``, ``regex``, ``duration`` (seconds, or text like ``30s``), ``choice`` /
    ``choices`` (one / a list of ``choices``)."""
    required: bool = False
    default: Any = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    unit: str = "{}"
    """How a value of it reads in a check's label (``{}s``, ``${}``)."""

    def describe(self) -> str:
        kinds = {
            "text": "a string", "texts": "a string or a list of strings", "integer": "an integer",
            "number": "a number", "boolean": "true or false", "true": "true", "json": "any value",
            "mapping": "a mapping", "regex": "a regular expression",
            "duration": "a number of seconds or a duration like 30s, 2m, 500ms",
        }
        if self.kind in {"choice", "choices"}:
            listed = ", ".join(self.choices)
            return f"one of {listed}" if self.kind == "choice" else f"one or a list of {listed}"
        text = kinds[self.kind]
        if self.minimum is not None:
            text += f" >= {self.minimum:g}"
        return text

    def coerce(self, check: str, value: Any) -> Any:
        """The validated value, or ``CheckDefinitionError`` saying what this parameter takes."""
        problem = _problem(self, value)
        if problem is not None:
            raise CheckDefinitionError(
                f"{check}: {self.name} takes {self.describe()}, got {shown(value)}{problem}", self.name)
        if self.kind in {"texts", "choices"}:
            return (value,) if isinstance(value, str) else tuple(value)
        if self.kind == "duration":
            return seconds_of(value)
        if self.kind == "regex":
            return re.compile(value)
        if self.kind == "number":
            return float(value)
        return value


def _problem(param: Param, value: Any) -> str | None:
    """None when ``value`` fits ``param``; else a suffix for the message ("" when the type says it)."""
    kind = param.kind
    number = isinstance(value, int | float) and not isinstance(value, bool)
    ok: bool
    if kind == "text":
        ok = isinstance(value, str) and value != ""
    elif kind == "texts":
        ok = (isinstance(value, str) and value != "") or (
            isinstance(value, list) and bool(value) and all(isinstance(v, str) and v for v in value))
    elif kind == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "number":
        ok = number and math.isfinite(value)
    elif kind in {"boolean", "true"}:
        ok = value is True or (kind == "boolean" and value is False)
    elif kind == "mapping":
        ok = isinstance(value, Mapping)
    elif kind == "json":
        ok = True
    elif kind == "regex":
        if not isinstance(value, str):
            ok = False
        else:
            try:
                re.compile(value)
            except re.error as error:
                return f" (not a valid regular expression: {error})"
            ok = True
    elif kind == "duration":
        ok = (number and math.isfinite(value)) or (isinstance(value, str) and seconds_of(value) is not None)
    elif kind == "choice":
        ok = isinstance(value, str) and value in param.choices
    else:  # choices
        items = [value] if isinstance(value, str) else value
        ok = isinstance(items, list) and bool(items) and all(
            isinstance(v, str) and v in param.choices for v in items)
    if not ok:
        return ""
    if param.minimum is not None and (kind in {"integer", "number"} or (kind == "duration" and number)) \
            and value < param.minimum:
        return f" (below {param.minimum:g})"
    return None


_DURATION: Final = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*")


def seconds_of(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return None
    return float(match[1]) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}[match[2]]


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"
