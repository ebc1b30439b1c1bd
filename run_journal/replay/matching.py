"""Which recorded call answers an incoming one: by request, or by each caller's order.

``CallBook`` holds the recorded calls and what the replay used of them. It is shared by every binding
of one replay model (the lead agent's, each subagent's, each middleware's), and safe across threads
and tasks: each lookup holds its lock for a dictionary lookup or two.

- ``match="request"``: the unused recorded call whose request equals the incoming one (the same
  caller's first, then the earliest), so the order calls arrive in, and which agent makes them, do
  not matter. Needs the recorded requests (a recorded call without one is matched by order).
- ``match="order"``: the caller's next unused recorded call. When both requests are known and
  differ, that is a divergence too.

A divergence raises ``ReplayDivergence`` (``strict``), or is kept in ``divergences`` and answered by
the caller's order (``strict=False``). A caller with no recorded call left always raises: there is
nothing to answer with.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from typing import Final, Literal

from run_journal.replay.divergence import (
    COMPARED_PARAMS,
    CallDivergence,
    ReplayDivergence,
    agreement,
    request_difference,
)
from run_journal.replay.recorded import RecordedCall
from run_journal.replay.requests import RecordedRequest

Match = Literal["request", "order"]
MATCHES: Final = ("request", "order")


class CallBook:
    """The recorded calls of a replay and which of them were used (see the module docstring)."""

    def __init__(self, calls: Iterable[RecordedCall], *, match: Match, strict: bool) -> None:
        if match not in MATCHES:
            raise ValueError(f"match must be 'request' or 'order', got {match!r}")
        self.calls: tuple[RecordedCall, ...] = tuple(calls)
        self.match: Match = match
        self.strict = strict
        self._lock = threading.Lock()
        self._lanes: dict[str, list[int]] = {}
        self._by_request: dict[str, list[int]] = {}
        for position, call in enumerate(self.calls):
            self._lanes.setdefault(call.caller, []).append(position)
            if call.request is not None:
                key = request_key(call.request, tools=call.request.tools is not None)
                self._by_request.setdefault(key, []).append(position)
        self._used: set[int] = set()
        self._count = 0
        self.answers: list[tuple[int, str, int]] = []
        """``(incoming call, caller, position of the recorded call that answered it)``, in order."""
        self.divergences: list[CallDivergence] = []

    @property
    def unused(self) -> tuple[RecordedCall, ...]:
        """Recorded calls no incoming call was answered with (yet)."""
        with self._lock:
            return tuple(call for position, call in enumerate(self.calls) if position not in self._used)

    def answer(self, caller: str, request: RecordedRequest | None) -> RecordedCall:
        """The recorded call that answers an incoming call of ``caller`` (``ReplayDivergence``)."""
        with self._lock:
            number = self._count
            self._count += 1
            if self.match == "request" and request is not None:
                position = self._requested(caller, request)
                if position is None:  # a recorded call without its request is matched by order
                    following = self._next_of(caller)
                    unknown = following is not None and self.calls[following].request is None
                    position = following if unknown else None
                if position is not None:
                    return self._take(number, caller, position)
                divergence = self._unmatched(number, caller, request)
            else:
                position = self._next_of(caller)
                if position is None:
                    raise self._diverged(self._exhausted(number, caller))
                recorded = self.calls[position].request
                difference = None
                if recorded is not None and request is not None:
                    difference = request_difference(recorded, request)
                if difference is None:
                    return self._take(number, caller, position)
                divergence = CallDivergence(number, caller, "its request is not the recorded one",
                                            self.calls[position], difference)
            fallback = self._next_of(caller)
            if self.strict or fallback is None:
                raise self._diverged(divergence)
            self.divergences.append(divergence)
            return self._take(number, caller, fallback)

    def _take(self, number: int, caller: str, position: int) -> RecordedCall:
        self._used.add(position)
        self.answers.append((number, caller, position))
        return self.calls[position]

    def _diverged(self, divergence: CallDivergence) -> ReplayDivergence:
        self.divergences.append(divergence)
        return ReplayDivergence(divergence)

    def _next_of(self, caller: str) -> int | None:
        return next((p for p in self._lanes.get(caller, ()) if p not in self._used), None)

    def _requested(self, caller: str, request: RecordedRequest) -> int | None:
        found = [*self._by_request.get(request_key(request, tools=True), ()),
                 *self._by_request.get(request_key(request, tools=False), ())]
        free = sorted(p for p in found if p not in self._used)
        same_caller = [p for p in free if self.calls[p].caller == caller]
        chosen = same_caller or free
        return chosen[0] if chosen else None

    def _unmatched(self, number: int, caller: str, request: RecordedRequest) -> CallDivergence:
        candidates = [p for p, call in enumerate(self.calls)
                      if p not in self._used and call.request is not None]
        if not candidates:
            return self._exhausted(number, caller)

        def closeness(position: int) -> tuple[int, int, int, bool, int]:
            call = self.calls[position]
            assert call.request is not None
            return (*agreement(call.request, request), call.caller == caller, -position)

        closest = self.calls[max(candidates, key=closeness)]
        assert closest.request is not None
        return CallDivergence(number, caller, "no recorded call has this request", closest,
                              request_difference(closest.request, request))

    def _exhausted(self, number: int, caller: str) -> CallDivergence:
        made = len(self._lanes.get(caller, ()))
        if made:
            reason = f"the recording has no call of {caller} left (it made {made})"
        else:
            known = ", ".join(sorted(self._lanes)) or "none"
            reason = f"the recording has no call of {caller} (its callers: {known})"
        return CallDivergence(number, caller, reason)


def request_key(request: RecordedRequest, *, tools: bool) -> str:
    """Equal requests, equal keys: the JSON of the compared parts, keys sorted (a store may keep a
    mapping's keys in an order of its own), tools by name (left out: ``tools=False``, for a recorded
    request whose tools are not known)."""
    offered = _tools(request.tools or ()) if tools else "-"
    return _sorted_json([list(request.messages), offered, _params(request)])


def _tools(tools: Sequence[object]) -> list[object]:
    return sorted(tools, key=_sorted_json)


def _sorted_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def _params(request: RecordedRequest) -> dict[str, object]:
    return {name: request.params.get(name) for name in COMPARED_PARAMS}
