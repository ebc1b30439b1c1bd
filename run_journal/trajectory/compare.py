"""One comparison of two trajectories: the steps aligned, the first divergence, the deltas.

``compare_runs(a, b)`` is what ``run-journal URL diff A B`` prints, what a replay compares a replayed
run with, and what a viewer's compare view shows. It is pure (two ``Trajectory`` values in, one
``RunComparison`` out) and its result is plain data: ``to_dict()`` is JSON.

How steps are aligned: each caller (``lead_agent``, ``agent:<name>``, ``subagent:<name>``,
``middleware:<tag>``) is a lane, and each lane's steps are aligned on their kind and name (a model call;
a tool call of tool X; a task of subagent Y; a handoff to Z; a hook of middleware T), so steps that
ran at the same time in different lanes (parallel subagents) never count as a divergence by their
order alone. Aligned steps are then compared field by field; ids (tool call ids, message ids) and
timings never count. The lanes are merged back in run A's order.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import Any, Final

from run_journal.envelope import JsonObject, JsonValue
from run_journal.trajectory.steps import (
    Handoff,
    MiddlewareStep,
    Step,
    SubagentTask,
    ToolCall,
    Trajectory,
    value_text,
)

EXCERPT: Final = 60
"""Characters of a differing text shown around its first difference."""
ABSENT: Final = "<absent>"
RUN_FIELDS_BEFORE: Final = ("input",)
RUN_FIELDS_AFTER: Final = ("status", "error", "final_answer")


@dataclasses.dataclass(frozen=True, slots=True)
class FieldDifference:
    """One field that differs: its path (``args.city``, ``tool_calls[0].name``, ``final_answer``),
    each side's value as JSON text (a string value is quoted, and cut to an excerpt around the first
    difference when it is long; ``<absent>`` for a missing key or item) and the offset of the first
    differing character when both values are strings."""

    field: str
    a: str
    b: str
    offset: int | None = None

    def to_dict(self) -> JsonObject:
        return {"field": self.field, "a": self.a, "b": self.b, "offset": self.offset}

    def describe(self) -> str:
        where = f" at character {self.offset}" if self.offset is not None else ""
        return f"{self.field} differs{where}: {self.a} vs {self.b}"


@dataclasses.dataclass(frozen=True, slots=True)
class StepPair:
    """One row of the alignment: a step of A and the step of B it lines up with (either may be
    None: a step only one run took), with the fields that differ."""

    position: int
    """1-based row of the alignment."""
    kind: str
    caller: str
    label: str
    a: int | None
    """Index into A's ``steps``, or None."""
    b: int | None
    a_seq: int | None
    b_seq: int | None
    differences: tuple[FieldDifference, ...] = ()

    @property
    def same(self) -> bool:
        return self.a is not None and self.b is not None and not self.differences

    def to_dict(self) -> JsonObject:
        return {"position": self.position, "kind": self.kind, "caller": self.caller, "label": self.label,
                "a": self.a, "b": self.b, "a_seq": self.a_seq, "b_seq": self.b_seq,
                "differences": [difference.to_dict() for difference in self.differences]}


@dataclasses.dataclass(frozen=True, slots=True)
class Divergence:
    """Where the two runs first went differently: a step (``step`` is its ``StepPair.position``) or a
    run-level field (``step`` None: ``input``, ``status``, ``error``, ``final_answer``)."""

    step: int | None
    kind: str | None
    caller: str | None
    field: str
    a: str
    b: str
    a_seq: int | None
    b_seq: int | None
    summary: str
    """One line saying which step, which field and the first differing text."""

    def to_dict(self) -> JsonObject:
        return {"step": self.step, "kind": self.kind, "caller": self.caller, "field": self.field,
                "a": self.a, "b": self.b, "a_seq": self.a_seq, "b_seq": self.b_seq, "summary": self.summary}


@dataclasses.dataclass(frozen=True, slots=True)
class RunSide:
    """One run's identity and totals as the comparison shows them."""

    thread_id: str
    run_id: str
    status: str
    input: str | None
    final_answer: str | None
    steps: int
    model_calls: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    total_tokens: int
    cost_usd: float | None
    duration_ms: int | None

    @classmethod
    def of(cls, trajectory: Trajectory) -> RunSide:
        usage = trajectory.usage
        return cls(trajectory.thread_id, trajectory.run_id, trajectory.status, trajectory.input,
                   trajectory.final_answer, len(trajectory.steps), len(trajectory.model_calls),
                   len(trajectory.tool_calls), usage.input_tokens, usage.output_tokens, usage.total_tokens,
                   usage.cost_usd if usage.llm_calls or usage.cost_usd else 0.0, trajectory.duration_ms)

    def to_dict(self) -> JsonObject:
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True, slots=True)
class Deltas:
    """B minus A. ``cost_usd`` / ``duration_ms`` are None when either side's is unknown."""

    model_calls: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    total_tokens: int
    cost_usd: float | None
    duration_ms: int | None

    def to_dict(self) -> JsonObject:
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True, slots=True)
class RunComparison:
    """The comparison of run A with run B. ``same`` is true when no step and no run-level field
    differs (usage, cost and duration are reported in ``deltas`` but never make runs differ)."""

    a: RunSide
    b: RunSide
    same: bool
    divergence: Divergence | None
    steps: tuple[StepPair, ...]
    differences: tuple[FieldDifference, ...]
    """Run-level fields that differ (``input``, ``status``, ``error``, ``final_answer``)."""
    deltas: Deltas
    ignored: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        """One line: the first divergence, or that the trajectories are the same."""
        if self.divergence is not None:
            return self.divergence.summary
        return f"same trajectory: {len(self.steps)} step(s), status {self.a.status}"

    def to_dict(self) -> JsonObject:
        return {
            "same": self.same, "summary": self.summary, "a": self.a.to_dict(), "b": self.b.to_dict(),
            "divergence": self.divergence.to_dict() if self.divergence else None,
            "steps": [pair.to_dict() for pair in self.steps],
            "differences": [difference.to_dict() for difference in self.differences],
            "deltas": self.deltas.to_dict(), "ignored": list(self.ignored),
        }


def compare_runs(a: Trajectory, b: Trajectory, *, ignore: Collection[str] = ()) -> RunComparison:
    """Compare run A with run B (read each with ``read_trajectory``; they may come from two stores).

    ``ignore`` names fields left out of the comparison: a step field (``text``, ``model``, ``args``,
    ``result``, ``outcome``, ``error``, ``description``, ...) or a run-level one (``input``,
    ``status``, ``error``, ``final_answer``).
    """
    if isinstance(ignore, str):
        raise TypeError("ignore is a collection of field names, not one string")
    skipped = frozenset(ignore)
    pairs = _aligned(a.steps, b.steps, skipped)
    before = _run_differences(a, b, RUN_FIELDS_BEFORE, skipped)
    after = _run_differences(a, b, RUN_FIELDS_AFTER, skipped)
    divergence = _first_divergence(before, pairs, after)
    return RunComparison(
        a=RunSide.of(a), b=RunSide.of(b), same=divergence is None, divergence=divergence,
        steps=tuple(pairs), differences=(*before, *after), deltas=_deltas(RunSide.of(a), RunSide.of(b)),
        ignored=tuple(sorted(skipped)),
    )


# -- alignment -----------------------------------------------------------------------------------
def _key(step: Step) -> Hashable:
    """What makes two steps the same step of the run, their other fields aside."""
    if isinstance(step, ToolCall):
        return (step.kind, step.name)
    if isinstance(step, SubagentTask):
        return (step.kind, step.name)
    if isinstance(step, Handoff):
        return (step.kind, step.to_agent)
    if isinstance(step, MiddlewareStep):
        return (step.kind, step.tag, step.hook)
    return (step.kind,)


def _lanes(steps: Sequence[Step]) -> dict[str, list[int]]:
    lanes: dict[str, list[int]] = {}
    for index, step in enumerate(steps):
        lanes.setdefault(step.caller, []).append(index)
    return lanes


def _aligned(a: Sequence[Step], b: Sequence[Step], skipped: frozenset[str]) -> list[StepPair]:
    lanes_a, lanes_b = _lanes(a), _lanes(b)
    matches: list[tuple[int | None, int | None]] = []
    for lane in [*lanes_a, *(name for name in lanes_b if name not in lanes_a)]:
        left, right = lanes_a.get(lane, []), lanes_b.get(lane, [])
        matcher = difflib.SequenceMatcher(None, [_key(a[i]) for i in left], [_key(b[j]) for j in right],
                                          autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag in {"equal", "replace"}:
                common = min(i2 - i1, j2 - j1)
                matches += [(left[i1 + k], right[j1 + k]) for k in range(common)]
                matches += [(left[i], None) for i in range(i1 + common, i2)]
                matches += [(None, right[j]) for j in range(j1 + common, j2)]
            elif tag == "delete":
                matches += [(left[i], None) for i in range(i1, i2)]
            else:
                matches += [(None, right[j]) for j in range(j1, j2)]
    partner = {j: i for i, j in matches if i is not None and j is not None}
    anchor = []  # for each step of B: the last step of A paired with a step of B up to it
    latest = -1
    for index in range(len(b)):
        latest = max(latest, partner.get(index, -1))
        anchor.append(latest)

    def order(match: tuple[int | None, int | None]) -> tuple[int, int, int]:
        i, j = match
        if i is not None:
            return (i, 0, 0)
        assert j is not None
        return (anchor[j], 1, j)  # just after the A step paired before it

    pairs = []
    for position, (i, j) in enumerate(sorted(matches, key=order), start=1):
        step = a[i] if i is not None else b[j or 0]
        differences = () if i is None or j is None else _step_differences(a[i], b[j], skipped)
        pairs.append(StepPair(position, step.kind, step.caller, step.label(), i, j,
                              a[i].seq if i is not None else None, b[j].seq if j is not None else None,
                              differences))
    return pairs


def _step_differences(a: Step, b: Step, skipped: frozenset[str]) -> tuple[FieldDifference, ...]:
    fields_a, fields_b = a.compared(), b.compared()
    if type(a) is not type(b):
        return (FieldDifference("kind", a.kind, b.kind),)
    found = []
    for name, value in fields_a.items():
        if name in skipped:
            continue
        difference = first_difference(name, value, fields_b.get(name))
        if difference is not None:
            found.append(difference)
    return tuple(found)


# -- field differences ---------------------------------------------------------------------------
def first_difference(path: str, a: Any, b: Any) -> FieldDifference | None:
    """The first place two JSON values differ, or None: keys in sorted order, list items in order."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            inner = f"{path}.{key}"
            if key not in a or key not in b:
                return FieldDifference(inner, _shown(a, key), _shown(b, key))
            found = first_difference(inner, a[key], b[key])
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for index in range(max(len(a), len(b))):
            inner = f"{path}[{index}]"
            if index >= len(a) or index >= len(b):
                return FieldDifference(inner, _shown_item(a, index), _shown_item(b, index))
            found = first_difference(inner, a[index], b[index])
            if found is not None:
                return found
        return None
    if _same_value(a, b):
        return None
    if isinstance(a, str) and isinstance(b, str):
        offset = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        return FieldDifference(path, _quoted(excerpt(a, offset)), _quoted(excerpt(b, offset)), offset)
    return FieldDifference(path, _text(a), _text(b))


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def excerpt(text: str, offset: int, width: int = EXCERPT) -> str:
    """``text`` around ``offset``: a little before it, more after it, with ``…`` where cut."""
    start = max(0, offset - width // 3)
    end = min(len(text), start + width)
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def _text(value: JsonValue) -> str:
    if isinstance(value, str):
        return _quoted(excerpt(value, 0))
    return excerpt(value_text(value), 0)


def _shown(mapping: Mapping[str, Any], key: str) -> str:
    return _text(mapping[key]) if key in mapping else ABSENT


def _shown_item(items: list[Any], index: int) -> str:
    return _text(items[index]) if index < len(items) else ABSENT


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


# -- run level -----------------------------------------------------------------------------------
def _run_differences(a: Trajectory, b: Trajectory, fields: Sequence[str], skipped: frozenset[str]
                     ) -> list[FieldDifference]:
    found = []
    for name in fields:
        if name in skipped:
            continue
        difference = first_difference(name, getattr(a, name), getattr(b, name))
        if difference is not None:
            found.append(difference)
    return found


def _first_divergence(before: list[FieldDifference], pairs: list[StepPair], after: list[FieldDifference]
                      ) -> Divergence | None:
    if before:
        return _run_divergence(before[0])
    for pair in pairs:
        if pair.same:
            continue
        where = f"step {pair.position}: {pair.label} of {pair.caller}"
        if pair.b is None:
            summary = f"{where} (seq {pair.a_seq}) is only in run A"
            return Divergence(pair.position, pair.kind, pair.caller, "step", pair.label, ABSENT,
                              pair.a_seq, None, summary)
        if pair.a is None:
            summary = f"{where} (seq {pair.b_seq}) is only in run B"
            return Divergence(pair.position, pair.kind, pair.caller, "step", ABSENT, pair.label,
                              None, pair.b_seq, summary)
        first = pair.differences[0]
        summary = f"{where} (seq {pair.a_seq} in A, {pair.b_seq} in B): {first.describe()}"
        return Divergence(pair.position, pair.kind, pair.caller, first.field, first.a, first.b,
                          pair.a_seq, pair.b_seq, summary)
    return _run_divergence(after[0]) if after else None


def _run_divergence(difference: FieldDifference) -> Divergence:
    return Divergence(None, None, None, difference.field, difference.a, difference.b, None, None,
                      f"run {difference.describe()}")


def _deltas(a: RunSide, b: RunSide) -> Deltas:
    cost = None if a.cost_usd is None or b.cost_usd is None else b.cost_usd - a.cost_usd
    duration = None if a.duration_ms is None or b.duration_ms is None else b.duration_ms - a.duration_ms
    return Deltas(b.model_calls - a.model_calls, b.tool_calls - a.tool_calls, b.input_tokens - a.input_tokens,
                  b.output_tokens - a.output_tokens, b.total_tokens - a.total_tokens, cost, duration)
