"""Where a replay leaves its recording: a model call no recorded call answers, and why.

``request_difference(recorded, incoming)`` finds the first place two requests differ, read the way a
person would look for it: the messages in order (which message, its role, which field, the first
differing text), then the tools offered (one offered on one side only, or a tool whose description or
schema changed), then the parameters the agent chose (``tool_choice``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from run_journal.envelope import JsonObject
from run_journal.replay.recorded import RecordedCall
from run_journal.replay.requests import RecordedRequest
from run_journal.trajectory import FieldDifference, first_difference
from run_journal.trajectory.compare import ABSENT, excerpt
from run_journal.trajectory.steps import value_text

COMPARED_PARAMS: Final = ("tool_choice",)
"""Request parameters the agent's code chooses, compared between the recording and the replay (the
recorded model's own settings, its name and temperature, belong to the model the replay stands in for)."""
OFFERED: Final = "offered"
NOT_OFFERED: Final = "not offered"
ROLES: Final = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


@dataclasses.dataclass(frozen=True, slots=True)
class RequestDifference:
    """The first difference between a recorded request and an incoming one.

    ``part`` is ``messages``, ``tools`` or ``params``; ``where`` says which message (``message 0
    (system)``), tool or parameter; ``field`` the differing field inside it; ``recorded`` and
    ``incoming`` each side's value as JSON text (``<absent>`` when one side has none), cut around the
    first differing character (``offset``)."""

    part: str
    where: str
    field: str
    recorded: str
    incoming: str
    offset: int | None = None

    def describe(self) -> str:
        if self.part == "tools" and not self.field:
            return (f"{self.where} was offered in the recording, not now" if self.recorded == OFFERED else
                    f"{self.where} is offered now, not in the recording")
        at = f" at character {self.offset}" if self.offset is not None else ""
        field = f" {self.field}" if self.field else ""
        return f"{self.where}{field} differs{at}: recorded {self.recorded}, now {self.incoming}"

    def to_dict(self) -> JsonObject:
        return {"part": self.part, "where": self.where, "field": self.field, "recorded": self.recorded,
                "incoming": self.incoming, "offset": self.offset}


@dataclasses.dataclass(frozen=True, slots=True)
class CallDivergence:
    """A model call of the replay that its recording does not answer as it is.

    ``call`` counts the replay's model calls from 0, in the order they reached the replay model;
    ``caller`` is whose call it was; ``closest`` the recorded call nearest to it (None when the
    recording has none left for that caller); ``difference`` the first difference between the two
    requests, when both are known."""

    call: int
    caller: str
    reason: str
    closest: RecordedCall | None = None
    difference: RequestDifference | None = None

    def describe(self) -> str:
        lines = [f"replay diverged at model call {self.call} ({self.caller}): {self.reason}"]
        if self.closest is not None:
            lines.append(f"  closest recorded call: {self.closest.label}")
        if self.difference is not None:
            lines.append(f"  {self.difference.describe()}")
        return "\n".join(lines)

    def to_dict(self) -> JsonObject:
        closest: JsonObject | None = None if self.closest is None else {
            "run_id": self.closest.run_id, "index": self.closest.index, "seq": self.closest.seq,
            "caller": self.closest.caller}
        return {"call": self.call, "caller": self.caller, "reason": self.reason, "closest": closest,
                "difference": None if self.difference is None else self.difference.to_dict()}


class ReplayDivergence(Exception):
    """A model call that the recording does not answer (``strict=True``, the default).

    ``divergence`` holds the call index, the caller, the closest recorded call and the first
    difference between its request and the new one; the message says all of it in a few lines."""

    def __init__(self, divergence: CallDivergence) -> None:
        super().__init__(divergence.describe())
        self.divergence = divergence

    @property
    def call(self) -> int:
        return self.divergence.call

    @property
    def caller(self) -> str:
        return self.divergence.caller


def request_difference(recorded: RecordedRequest, incoming: RecordedRequest) -> RequestDifference | None:
    """The first difference (see the module docstring), or None when the requests are the same."""
    tools = None if recorded.tools is None else _tools_difference(recorded.tools, incoming.tools or ())
    return (_messages_difference(recorded.messages, incoming.messages) or tools
            or _params_difference(recorded.params, incoming.params))


def agreement(recorded: RecordedRequest, incoming: RecordedRequest) -> tuple[int, int, int]:
    """How far two requests agree, for picking the closest recorded call: the leading messages that
    are equal, the tools offered on both sides, and the first differing character of the next message."""
    same = 0
    for a, b in zip(recorded.messages, incoming.messages, strict=False):
        if a != b:
            break
        same += 1
    names = {_tool_name(tool) for tool in recorded.tools or ()} & {
        _tool_name(tool) for tool in incoming.tools or ()}
    offset = 0
    if same < min(len(recorded.messages), len(incoming.messages)):
        found = first_difference("", recorded.messages[same], incoming.messages[same])
        if found is not None and found.offset is not None:
            offset = found.offset
    return same, len(names), offset


def _messages_difference(recorded: Sequence[JsonObject], incoming: Sequence[JsonObject]
                         ) -> RequestDifference | None:
    for index in range(max(len(recorded), len(incoming))):
        a = recorded[index] if index < len(recorded) else None
        b = incoming[index] if index < len(incoming) else None
        if a is None or b is None:
            present = a if a is not None else b
            where = f"message {index} ({_role(present)})"
            return RequestDifference("messages", where, "", _summary(a), _summary(b))
        found = first_difference("", a, b)
        if found is not None:
            role = _role(a) if _role(a) == _role(b) else f"{_role(a)}, now {_role(b)}"
            return _difference("messages", f"message {index} ({role})", found)
    return None


def _tools_difference(recorded: Sequence[JsonObject], incoming: Sequence[JsonObject]
                      ) -> RequestDifference | None:
    before = {_tool_name(tool): tool for tool in recorded}
    now = {_tool_name(tool): tool for tool in incoming}
    for name in before:
        if name not in now:
            return RequestDifference("tools", f"tool {name!r}", "", OFFERED, NOT_OFFERED)
    for name in now:
        if name not in before:
            return RequestDifference("tools", f"tool {name!r}", "", NOT_OFFERED, OFFERED)
    for name, tool in before.items():
        found = first_difference("", tool, now[name])
        if found is not None:
            return _difference("tools", f"tool {name!r}", found)
    return None


def _params_difference(recorded: Mapping[str, Any], incoming: Mapping[str, Any]) -> RequestDifference | None:
    for name in COMPARED_PARAMS:
        found = first_difference("", recorded.get(name), incoming.get(name))
        if found is not None:
            return _difference("params", f"parameter {name}", found)
    return None


def _difference(part: str, where: str, found: FieldDifference) -> RequestDifference:
    return RequestDifference(part, where, found.field.lstrip("."), found.a, found.b, found.offset)


def _role(message: Mapping[str, Any] | None) -> str:
    if message is None:
        return "none"
    kind = message.get("type") or message.get("role")
    return ROLES.get(str(kind), str(kind)) if kind is not None else "message"


def _summary(message: Mapping[str, Any] | None) -> str:
    if message is None:
        return ABSENT
    content = message.get("content")
    text = content if isinstance(content, str) else value_text(content)
    return json.dumps(excerpt(text, 0), ensure_ascii=False)


def _tool_name(tool: Mapping[str, Any]) -> str:
    name = tool.get("name")
    if not isinstance(name, str):
        function = tool.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) else "?"
