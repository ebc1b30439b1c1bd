"""The check vocabulary: what can be asserted about one recorded run.

A check is a name and its parameters (``Check.of("tool_called", name="search", max=2)``, or in YAML
``tool_called: {name: search, max: 2}``); evaluating it over a ``Trajectory`` gives a
``CheckResult``: pass or fail, a one-line reason and the seqs of the events it relied on. The
parameters are validated when the check is made, with the same messages for Python and YAML.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

from run_journal.checks import evaluators
from run_journal.checks.params import (
    ERROR_KINDS,
    FILE_STATUSES,
    MATCH_MODES,
    ORDER_MODES,
    STATUSES,
    TOKEN_KINDS,
    CheckDefinitionError,
    Param,
    shown,
)
from run_journal.envelope import JsonObject
from run_journal.trajectory import Trajectory

_MISSING: Final[Any] = object()


@dataclasses.dataclass(frozen=True, slots=True)
class CheckResult:
    """The outcome of one check on one run."""

    check: str
    """The check's name (``tool_called``)."""
    label: str
    """The check with its main parameter (``tool_called search``)."""
    passed: bool
    reason: str
    """One line: what was found."""
    seqs: tuple[int, ...]
    """The events the result relied on (thread seqs of the run)."""
    thread_id: str
    run_id: str

    def to_dict(self) -> JsonObject:
        return {"check": self.check, "label": self.label, "passed": self.passed, "reason": self.reason,
                "seqs": list(self.seqs), "thread_id": self.thread_id, "run_id": self.run_id}


Evaluator = Callable[[Trajectory, Mapping[str, Any]], evaluators.Outcome]


@dataclasses.dataclass(frozen=True, slots=True)
class CheckKind:
    """One word of the vocabulary."""

    name: str
    summary: str
    params: tuple[Param, ...]
    evaluate: Evaluator
    shorthand: str | None = None
    """The parameter a bare value fills (``tool_called: search`` is ``{name: search}``); its value
    names the check in reports (``tool_called search``)."""

    def param(self, name: str) -> Param | None:
        return next((param for param in self.params if param.name == name), None)


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """A check with validated parameters; ``evaluate(trajectory)`` gives its result."""

    name: str
    params: Mapping[str, Any]
    label: str

    @classmethod
    def of(cls, name: str, value: Any = _MISSING, /, **params: Any) -> Check:
        """Make a check: ``Check.of("tool_called", "search")``, ``Check.of("max_tokens", 500)``,
        ``Check.of("tool_called", name="search", args={"q": "cats"}, max=1)``."""
        if value is not _MISSING and params:
            raise CheckDefinitionError(f"{name}: give either a value or named parameters, not both")
        return cls.parse(name, params if value is _MISSING else value)

    @classmethod
    def parse(cls, name: str, value: Any) -> Check:
        """A check from its name and its YAML value: a mapping of parameters, a bare value for the
        shorthand parameter, or None for a check that needs none."""
        kind = VOCABULARY.get(name) if isinstance(name, str) else None
        if kind is None:
            close = difflib.get_close_matches(str(name), list(VOCABULARY), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(VOCABULARY)})"
            raise CheckDefinitionError(f"unknown check {name!r}{hint}")
        given: dict[str, Any]
        if isinstance(value, Mapping) and not (kind.shorthand and _takes_mapping(kind)):
            given = dict(value)
        elif value is None or value == {} or (value is True and not any(p.required for p in kind.params)):
            given = {}  # ``no_errors``, ``no_errors:``, ``no_errors: true``
        elif value is False:
            raise CheckDefinitionError(f"{name}: false is not a check (leave the check out instead)")
        elif kind.shorthand is None:
            raise CheckDefinitionError(f"{name} takes a mapping of parameters, got {shown(value)}")
        else:
            given = {kind.shorthand: value}
        params: dict[str, Any] = {}
        for key, item in given.items():
            param = kind.param(key) if isinstance(key, str) else None
            if param is None:
                known = ", ".join(p.name for p in kind.params)
                raise CheckDefinitionError(f"{name}: unknown parameter {key!r} (it takes {known})", str(key))
            params[key] = param.coerce(name, item)
        for param in kind.params:
            if param.name not in params:
                if param.required:
                    raise CheckDefinitionError(
                        f"{name}: {param.name} is required ({param.describe()})", param.name)
                params[param.name] = param.default
        _check_consistency(name, params)
        main_param = kind.param(kind.shorthand or "")
        main = params.get(main_param.name) if main_param else None
        label = name if main is None or main_param is None else \
            f"{name} {main_param.unit.format(_label_text(main, main_param.kind))}"
        return cls(name, MappingProxyType(params), label)

    def evaluate(self, trajectory: Trajectory) -> CheckResult:
        passed, reason, seqs = VOCABULARY[self.name].evaluate(trajectory, self.params)
        return CheckResult(self.name, self.label, passed, reason, tuple(sorted(set(seqs))),
                           trajectory.thread_id, trajectory.run_id)


def _takes_mapping(kind: CheckKind) -> bool:
    param = kind.param(kind.shorthand or "")
    return param is not None and param.kind == "mapping"


def _label_text(value: Any, kind: str) -> str:
    if isinstance(value, re.Pattern):
        return f"/{value.pattern}/"
    if isinstance(value, tuple):
        return (" -> " if kind == "texts" else ", ").join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _check_consistency(name: str, params: dict[str, Any]) -> None:
    if name in {"tool_called", "tool_not_called"}:
        ranged = params.get("min") is not None or params.get("max") is not None
        if params.get("times") is not None and ranged:
            raise CheckDefinitionError(f"{name}: give times, or min and max, not both", "times")
        low, high = params.get("min"), params.get("max")
        if low is not None and high is not None and low > high:
            raise CheckDefinitionError(f"{name}: min ({low}) is above max ({high})", "min")
        args, mode = params.get("args"), params.get("match")
        if args is None and mode is not None:
            raise CheckDefinitionError(f"{name}: match applies to args, which is not given", "match")
        if args is not None:
            mode = params["match"] = mode or "subset"
            if mode == "subset" and not isinstance(args, Mapping):
                raise CheckDefinitionError(f"{name}: args with match subset is a mapping", "args")
            if mode == "regex":
                params["args"] = _compiled_patterns(name, args)


def _compiled_patterns(name: str, args: Any) -> Any:
    def compiled(pattern: Any, where: str) -> re.Pattern[str]:
        if not isinstance(pattern, str):
            raise CheckDefinitionError(f"{name}: {where} with match regex is a regular expression, got "
                                       f"{shown(pattern)}", "args")
        try:
            return re.compile(pattern)
        except re.error as error:
            raise CheckDefinitionError(f"{name}: {where} is not a valid regular expression: {error}",
                                       "args") from None

    if isinstance(args, Mapping):
        return MappingProxyType({key: compiled(value, f"args.{key}") for key, value in args.items()})
    return compiled(args, "args")


def _kinds() -> dict[str, CheckKind]:
    e = evaluators
    caller = Param("caller", "text")
    limit = Param("limit", "integer", required=True, minimum=0)
    path = Param("path", "text", required=True)
    ignore_case = Param("ignore_case", "boolean", default=False)
    tool = (Param("name", "text", required=True), Param("args", "json"),
            Param("match", "choice", choices=MATCH_MODES), caller)
    tag = (Param("tag", "text", required=True), Param("hook", "text"), Param("action", "text"))
    times = tuple(Param(name, "integer", minimum=0) for name in ("min", "max", "times"))
    kinds = [
        CheckKind("tool_called", "the tool was called (min / max / times: how often; args: with which "
                  "arguments)", (*tool, *times), e.tool_called, "name"),
        CheckKind("tool_not_called", "the tool was never called (with args: never with those arguments)",
                  tool, e.tool_not_called, "name"),
        CheckKind("tools_in_order", "these tools were called in this order (subsequence or exact)",
                  (Param("tools", "texts", required=True),
                   Param("mode", "choice", default="subsequence", choices=ORDER_MODES), caller),
                  e.tools_in_order, "tools"),
        CheckKind("max_model_calls", "at most this many model calls (failed ones count)", (limit, caller),
                  e.max_model_calls, "limit"),
        CheckKind("max_tokens", "at most this many tokens (the run row's total, input or output)",
                  (limit, Param("kind", "choice", default="total", choices=TOKEN_KINDS)), e.max_tokens,
                  "limit"),
        CheckKind("max_cost", "the run cost at most this many US dollars (an unknown cost fails)",
                  (Param("limit", "number", required=True, minimum=0, unit="${}"),), e.max_cost, "limit"),
        CheckKind("max_duration", "the run took at most this long (seconds, or 30s, 2m, 500ms)",
                  (Param("limit", "duration", required=True, minimum=0, unit="{}s"),), e.max_duration,
                  "limit"),
        CheckKind("status", "the run's terminal status is this one (or one of these)",
                  (Param("is", "choices", required=True, choices=STATUSES),), e.status, "is"),
        CheckKind("no_errors", "no llm.error, no run.error and no failed tool outcome (ignore: those kinds)",
                  (Param("ignore", "choices", choices=ERROR_KINDS, unit="ignoring {}"),), e.no_errors,
                  "ignore"),
        CheckKind("subagent_completed", "a task of this subagent completed",
                  (Param("name", "text", required=True),), e.subagent_completed, "name"),
        CheckKind("middleware_fired", "this middleware changed the run (optionally: at this hook, with "
                  "this action)", tag, e.middleware_fired, "tag"),
        CheckKind("middleware_not_fired", "this middleware never changed the run (or not at this hook, "
                  "with this action)", tag, e.middleware_not_fired, "tag"),
        CheckKind("file_created", "the run created a file matching this path (a glob pattern)", (path,),
                  e.file_created, "path"),
        CheckKind("file_changed", "the run created, modified or deleted a file matching this path "
                  "(status: only those)", (path, Param("status", "choices", choices=FILE_STATUSES)),
                  e.file_changed, "path"),
        CheckKind("file_untouched", "no recorded change of a file matching this path", (path,),
                  e.file_untouched, "path"),
        CheckKind("final_answer_contains", "the final answer contains this text",
                  (Param("text", "text", required=True), ignore_case), e.final_answer_contains, "text"),
        CheckKind("final_answer_matches", "the final answer matches this regular expression (search)",
                  (Param("pattern", "regex", required=True), ignore_case), e.final_answer_matches,
                  "pattern"),
    ]
    return {kind.name: kind for kind in kinds}


VOCABULARY: Final = MappingProxyType(_kinds())
"""Every check by name, in the order the documentation lists them."""
