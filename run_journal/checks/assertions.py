"""Assertions for tests: ``(await assert_run(store, thread, run)).called("search").before("answer")``.

Each method evaluates one check of the vocabulary and raises ``RunCheckFailed`` (an
``AssertionError``, so pytest reports it as a failed assertion) with the check, its reason, the
events it relied on and an outline of the run; it returns the same object otherwise, so checks chain.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from run_journal.catalog import LEAD_AGENT
from run_journal.checks.vocabulary import Check, CheckResult
from run_journal.envelope import RunEvent
from run_journal.runs import RunRow
from run_journal.stores.base import RunEventStore
from run_journal.trajectory import Trajectory, build_trajectory, read_trajectory

OUTLINE_STEPS = 12


class RunCheckFailed(AssertionError):
    """A check that failed on a run; ``result`` is its ``CheckResult``."""

    def __init__(self, message: str, result: CheckResult) -> None:
        super().__init__(message)
        self.result = result


async def assert_run(store: RunEventStore, thread_id: str, run_id: str) -> RunAssertions:
    """Read a stored run and return its assertions (``LookupError`` if the run is not there)."""
    return RunAssertions(await read_trajectory(store, thread_id, run_id))


class RunAssertions:
    """Checks over one run's trajectory, each raising ``RunCheckFailed`` when it does not hold."""

    def __init__(self, trajectory: Trajectory) -> None:
        self.trajectory = trajectory
        self.results: list[CheckResult] = []
        self._last_tool: str | None = None

    @classmethod
    def of_events(cls, events: Iterable[RunEvent], row: RunRow | None = None) -> RunAssertions:
        """Assertions over a run given as its events (and row): what ``capture_run()`` records."""
        return cls(build_trajectory(events, row))

    def check(self, name: str, value: Any = None, /, **params: Any) -> RunAssertions:
        """Any check of the vocabulary by name, as a suite writes it: ``check("max_tokens", 500)``."""
        made = Check.of(name, **params) if params else Check.parse(name, value)
        result = made.evaluate(self.trajectory)
        self.results.append(result)
        if not result.passed:
            raise RunCheckFailed(self._message(result), result)
        return self

    # -- tools -------------------------------------------------------------------------------------
    def called(self, tool: str, *, args: Any = None, match: str | None = None, times: int | None = None,
               min: int | None = None, max: int | None = None, caller: str | None = None,
               ) -> RunAssertions:
        """The tool was called (at least once, or ``times`` / ``min``..``max`` times), with
        arguments matching ``args`` (``match``: ``subset`` by default, ``exact`` or ``regex``)."""
        params = _given(name=tool, args=args, match=match, times=times, min=min, max=max, caller=caller)
        self.check("tool_called", **params)
        self._last_tool = tool
        return self

    def not_called(self, tool: str, *, args: Any = None, match: str | None = None,
                   caller: str | None = None) -> RunAssertions:
        self._last_tool = None
        return self.check("tool_not_called", **_given(name=tool, args=args, match=match, caller=caller))

    def before(self, tool: str) -> RunAssertions:
        """After ``called(x)``: a call of x came before a call of ``tool``."""
        return self.check("tools_in_order", tools=[self._previous("before"), tool])

    def after(self, tool: str) -> RunAssertions:
        """After ``called(x)``: a call of x came after a call of ``tool``."""
        return self.check("tools_in_order", tools=[tool, self._previous("after")])

    def tools_in_order(self, *tools: str, exact: bool = False, caller: str | None = None) -> RunAssertions:
        mode = "exact" if exact else "subsequence"
        return self.check("tools_in_order", **_given(tools=list(tools), mode=mode, caller=caller))

    # -- budgets, status, errors -------------------------------------------------------------------
    def max_model_calls(self, limit: int, *, caller: str | None = None) -> RunAssertions:
        return self.check("max_model_calls", **_given(limit=limit, caller=caller))

    def max_tokens(self, limit: int, *, kind: str = "total") -> RunAssertions:
        return self.check("max_tokens", limit=limit, kind=kind)

    def max_cost(self, usd: float) -> RunAssertions:
        return self.check("max_cost", limit=usd)

    def max_duration(self, seconds: float | str) -> RunAssertions:
        return self.check("max_duration", limit=seconds)

    def status(self, *expected: str) -> RunAssertions:
        return self.check("status", list(expected))

    def succeeded(self) -> RunAssertions:
        return self.status("success")

    def no_errors(self, *, ignore: tuple[str, ...] = ()) -> RunAssertions:
        return self.check("no_errors", **_given(ignore=list(ignore) or None))

    # -- agents, files, answer ---------------------------------------------------------------------
    def subagent_completed(self, name: str) -> RunAssertions:
        return self.check("subagent_completed", name)

    def middleware_fired(self, tag: str, *, hook: str | None = None, action: str | None = None
                         ) -> RunAssertions:
        return self.check("middleware_fired", **_given(tag=tag, hook=hook, action=action))

    def middleware_not_fired(self, tag: str, *, hook: str | None = None, action: str | None = None
                             ) -> RunAssertions:
        return self.check("middleware_not_fired", **_given(tag=tag, hook=hook, action=action))

    def file_created(self, path: str) -> RunAssertions:
        return self.check("file_created", path)

    def file_changed(self, path: str, *, status: str | None = None) -> RunAssertions:
        return self.check("file_changed", **_given(path=path, status=status))

    def file_untouched(self, path: str) -> RunAssertions:
        return self.check("file_untouched", path)

    def final_answer_contains(self, text: str, *, ignore_case: bool = False) -> RunAssertions:
        return self.check("final_answer_contains", text=text, ignore_case=ignore_case)

    def final_answer_matches(self, pattern: str, *, ignore_case: bool = False) -> RunAssertions:
        return self.check("final_answer_matches", pattern=pattern, ignore_case=ignore_case)

    # -- messages ----------------------------------------------------------------------------------
    def _previous(self, method: str) -> str:
        if self._last_tool is None:
            raise TypeError(f"{method}() follows called(tool): it compares that tool with another")
        return self._last_tool

    def _message(self, result: CheckResult) -> str:
        trajectory = self.trajectory
        seqs = ", ".join(map(str, result.seqs)) or "none"
        lines = [
            f"{result.label}: {result.reason}",
            f"  run {trajectory.run_id} (thread {trajectory.thread_id}), status {trajectory.status}; "
            f"events relied on (seq): {seqs}",
            f"  steps: {outline(trajectory)}",
        ]
        return "\n".join(lines)


def outline(trajectory: Trajectory, limit: int = OUTLINE_STEPS) -> str:
    """The run's steps in one line: ``model call@3 -> tool add@4 -> model call@7``."""
    steps = [f"{step.label()}@{step.seq}" + (f" [{step.caller}]" if step.caller != LEAD_AGENT else "")
             for step in trajectory.steps]
    shown = " -> ".join(steps[:limit]) or "none"
    return shown + (f" -> … ({len(steps) - limit} more)" if len(steps) > limit else "")


def _given(**params: Any) -> dict[str, Any]:
    return {key: value for key, value in params.items() if value is not None}
