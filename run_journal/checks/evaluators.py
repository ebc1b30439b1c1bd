"""How each check of the vocabulary is evaluated over a ``Trajectory``: pass or fail, a one-line
reason and the seqs of the events it relied on."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from typing import Any

from run_journal.checks.params import ERROR_KINDS, ERROR_NAMES, FILE_STATUSES
from run_journal.trajectory import Trajectory
from run_journal.trajectory.steps import MiddlewareStep, ToolCall, value_text

Outcome = tuple[bool, str, tuple[int, ...]]
"""Passed, the one-line reason, the seqs of the events relied on."""


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


def _seq_list(seqs: Sequence[int]) -> str:
    if not seqs:
        return ""
    shown = ", ".join(map(str, seqs[:8])) + (", …" if len(seqs) > 8 else "")
    return f" (seq {shown})"


def _tool_names(trajectory: Trajectory, caller: str | None = None) -> str:
    names = [f"{call.name}@{call.seq}" for call in _tool_calls(trajectory, None, caller)]
    return ", ".join(names[:10]) + (", …" if len(names) > 10 else "") if names else "none"


def _tool_calls(trajectory: Trajectory, name: str | None, caller: str | None) -> list[ToolCall]:
    return [call for call in trajectory.tool_calls
            if (name is None or call.name == name) and (caller is None or call.caller == caller)]


def args_match(actual: Any, expected: Any, mode: str) -> bool:
    """``exact``: equal JSON values; ``subset``: every key of ``expected`` is in ``actual`` with an
    equal value (nested mappings compared the same way); ``regex``: each pattern of ``expected``
    (or one pattern for the whole arguments) is found in the argument's text (compact JSON for a
    value that is not a string)."""
    if mode == "exact":
        return _json_equal(actual, expected)
    if mode == "subset":
        return _subset(actual, expected)
    if isinstance(expected, re.Pattern):
        return expected.search(value_text(actual)) is not None
    if not isinstance(actual, Mapping):
        return False
    return all(key in actual and pattern.search(value_text(actual[key])) is not None
               for key, pattern in expected.items())


def _subset(actual: Any, expected: Any) -> bool:
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            key in actual and _subset(actual[key], value) for key, value in expected.items())
    return _json_equal(actual, expected)


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _args_text(args: Any) -> str:
    if isinstance(args, re.Pattern):
        return f"/{args.pattern}/"
    if isinstance(args, Mapping) and any(isinstance(v, re.Pattern) for v in args.values()):
        return "{" + ", ".join(f"{k}: /{v.pattern}/" for k, v in args.items()) + "}"
    text = value_text(args)
    return text if len(text) <= 80 else text[:79] + "…"


def tool_called(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    name, caller, args, mode = params["name"], params["caller"], params["args"], params["match"]
    low, high = params["min"], params["max"]
    if params["times"] is not None:
        low = high = params["times"]
    low = 1 if low is None else low
    return _count_calls(trajectory, name, caller, args, mode, low, high)


def tool_not_called(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    return _count_calls(trajectory, params["name"], params["caller"], params["args"], params["match"], 0, 0)


def _count_calls(trajectory: Trajectory, name: str, caller: str | None, args: Any, mode: str | None,
                 low: int, high: int | None) -> Outcome:
    calls = _tool_calls(trajectory, name, caller)
    matching = [call for call in calls if args is None or args_match(call.args, args, mode or "subset")]
    seqs = tuple(call.seq for call in matching)
    count = len(matching)
    what = name + (f" with args matching {_args_text(args)}" if args is not None else "") \
        + (f" by {caller}" if caller else "")
    expected = _expected_range(low, high)
    if low <= count and (high is None or count <= high):
        if count == 0:
            return True, f"{what} was not called", ()
        return True, f"{what} called {_times(count)}{_seq_list(seqs)}", seqs
    if count == 0 and calls:
        shown = "; ".join(f"{_args_text(call.args)} at seq {call.seq}" for call in calls[:3])
        return False, f"{name} called {_times(len(calls))}, never with args matching " \
                      f"{_args_text(args)} (its args: {shown})", tuple(call.seq for call in calls)
    if count == 0:
        return False, f"{what} was never called (tools called: {_tool_names(trajectory)})", ()
    return False, f"{what} called {_times(count)}{_seq_list(seqs)}, expected {expected}", seqs


def _expected_range(low: int, high: int | None) -> str:
    if high == 0:
        return "no call"
    if high is None:
        return f"at least {_times(low)}"
    if low == high:
        return f"exactly {_times(low)}"
    return f"{low} to {high} times" if low else f"at most {_times(high)}"


def tools_in_order(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    expected: tuple[str, ...] = params["tools"]
    calls = _tool_calls(trajectory, None, params["caller"])
    names = [call.name for call in calls]
    order = " -> ".join(expected)
    if params["mode"] == "exact":
        seqs = tuple(call.seq for call in calls)
        if tuple(names) == expected:
            return True, f"tools were exactly {order}{_seq_list(seqs)}", seqs
        return False, f"tools were {' -> '.join(names) or 'none'}, expected exactly {order}", seqs
    matched: list[ToolCall] = []
    position = 0
    for call in calls:
        if position < len(expected) and call.name == expected[position]:
            matched.append(call)
            position += 1
    seqs = tuple(call.seq for call in matched)
    if position == len(expected):
        return True, f"{order} in order{_seq_list(seqs)}", seqs
    missing = expected[position]
    after = f" after {expected[position - 1]} (seq {matched[-1].seq})" if matched else ""
    listed = _tool_names(trajectory, params["caller"])
    return False, f"no {missing} call{after}; tools in order: {listed}", seqs


def max_model_calls(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    calls = [call for call in trajectory.model_calls
             if params["caller"] is None or call.caller == params["caller"]]
    seqs = tuple(call.seq for call in calls)
    who = f" by {params['caller']}" if params["caller"] else ""
    text = f"{len(calls)} model call(s){who}, at most {params['limit']} allowed"
    return len(calls) <= params["limit"], text, seqs


def max_tokens(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    kind = params["kind"]
    tokens = getattr(trajectory.usage, f"{kind}_tokens")
    seqs = tuple(call.seq for call in trajectory.model_calls if call.usage)
    return tokens <= params["limit"], f"{tokens} {kind} tokens, at most {params['limit']} allowed", seqs


def max_cost(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    seqs = tuple(call.seq for call in trajectory.model_calls)
    cost = trajectory.cost_usd
    if cost is None and not trajectory.usage.llm_calls:
        cost = 0.0
    if cost is None:
        why = f": {trajectory.cost_note}" if trajectory.cost_note else ""
        return False, f"the cost is unknown{why}", seqs
    limit = params["limit"]
    return cost <= limit, f"cost ${cost:.6f}, at most ${limit:g} allowed", seqs


def max_duration(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    seqs = tuple(s for s in (trajectory.start_seq, trajectory.terminal_seq) if s)
    limit = params["limit"]
    if trajectory.duration_ms is None:
        return False, f"the run has no duration (status {trajectory.status}: it has not ended)", seqs
    took = trajectory.duration_ms / 1000
    return took <= limit, f"took {took:.3f}s, at most {limit:g}s allowed", seqs


def status(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    expected: tuple[str, ...] = params["is"]
    seqs = (trajectory.terminal_seq,) if trajectory.terminal_seq else ()
    wanted = " or ".join(expected)
    at = f" (seq {trajectory.terminal_seq})" if trajectory.terminal_seq else ""
    error = f": {trajectory.error}" if trajectory.error and trajectory.status == "error" else ""
    if trajectory.status in expected:
        return True, f"status {trajectory.status}{at}", seqs
    return False, f"status {trajectory.status}{at}{error}, expected {wanted}", seqs


def no_errors(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    ignored = set(params["ignore"] or ())
    found: list[tuple[int, str]] = []
    if "llm" not in ignored:
        found += [(call.seq, f"llm.error at seq {call.seq} ({call.error})")
                  for call in trajectory.model_calls if call.error is not None]
    if "run" not in ignored:
        found += [(seq, f"run.error at seq {seq} ({trajectory.error})") for seq in trajectory.error_seqs]
    if "tool" not in ignored:
        found += [(call.outcome_seq or call.seq, f"tool {call.name} {call.outcome} at seq "
                                                 f"{call.outcome_seq or call.seq}"
                   + (f" ({call.error})" if call.error else ""))
                  for call in trajectory.tool_calls if call.failed]
    looked = [ERROR_NAMES[kind] for kind in ERROR_KINDS if kind not in ignored]
    if not found:
        return True, "no " + (" or ".join(looked) if looked else "error kind checked"), ()
    found.sort()
    more = f"; and {len(found) - 3} more" if len(found) > 3 else ""
    text = "; ".join(entry for _, entry in found[:3]) + more
    return False, f"{len(found)} error(s): {text}", tuple(seq for seq, _ in found)


def subagent_completed(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    name = params["name"]
    tasks = [task for task in trajectory.subagent_tasks if task.name == name]
    done = [task for task in tasks if task.status == "completed"]
    if done:
        seqs = tuple(seq for task in done for seq in task.seqs)
        return True, f"{len(done)} task(s) of {name} completed{_seq_list(seqs)}", seqs
    if tasks:
        states = "; ".join(f"{task.status or 'still open'}" + (f": {task.error}" if task.error else "")
                           + f" (seq {task.seq})" for task in tasks[:3])
        return False, f"no task of {name} completed: {states}", tuple(s for t in tasks for s in t.seqs)
    others = sorted({task.name or "?" for task in trajectory.subagent_tasks})
    ran = f"tasks ran: {', '.join(others)}" if others else "no subagent task ran"
    return False, f"no task of {name} ran ({ran})", ()


def _middleware_events(trajectory: Trajectory, params: Mapping[str, Any]) -> list[MiddlewareStep]:
    return [step for step in trajectory.middleware if step.tag == params["tag"]
            and params["hook"] in {None, step.hook} and params["action"] in {None, step.action}]


def _middleware_what(params: Mapping[str, Any]) -> str:
    details = [params[key] for key in ("hook", "action") if params[key]]
    return str(params["tag"]) + (f" ({' '.join(details)})" if details else "")


def middleware_fired(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    steps = _middleware_events(trajectory, params)
    seqs = tuple(step.seq for step in steps)
    what = _middleware_what(params)
    if steps:
        return True, f"middleware {what} fired {_times(len(steps))}{_seq_list(seqs)}", seqs
    tags = sorted({step.tag for step in trajectory.middleware})
    return False, f"middleware {what} never fired (fired: {', '.join(tags) or 'none'})", ()


def middleware_not_fired(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    steps = _middleware_events(trajectory, params)
    seqs = tuple(step.seq for step in steps)
    what = _middleware_what(params)
    if steps:
        return False, f"middleware {what} fired {_times(len(steps))}{_seq_list(seqs)}", seqs
    return True, f"middleware {what} did not fire", ()


def _file_matches(pattern: str, path: str, root: str) -> bool:
    joined = f"{root.rstrip('/')}/{path}" if root else path
    return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(joined, pattern)


def _changed_files(trajectory: Trajectory, pattern: str, statuses: Sequence[str]) -> Outcome:
    changes = [change for change in trajectory.files
               if change.status in statuses and _file_matches(pattern, change.path, change.root)]
    seqs = tuple(change.seq for change in changes)
    if changes:
        listed = ", ".join(f"{c.path} {c.status}" for c in changes[:3])
        return True, f"{listed}{_seq_list(seqs)}", seqs
    wanted = " or ".join(statuses)
    if not trajectory.files:
        return False, f"no file {wanted} matches {pattern}: the run recorded no workspace change", ()
    others = ", ".join(f"{c.path} {c.status}" for c in trajectory.files[:5])
    return False, f"no file {wanted} matches {pattern} (changed: {others})", \
        tuple(change.seq for change in trajectory.files)


def file_created(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    return _changed_files(trajectory, params["path"], ("created",))


def file_changed(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    return _changed_files(trajectory, params["path"], params["status"] or FILE_STATUSES)


def file_untouched(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    pattern = params["path"]
    changes = [c for c in trajectory.files if _file_matches(pattern, c.path, c.root)]
    seqs = tuple(change.seq for change in changes)
    if changes:
        listed = ", ".join(f"{c.path} {c.status}" for c in changes[:3])
        return False, f"{listed}{_seq_list(seqs)}", seqs
    if trajectory.files_omitted:
        return False, (f"cannot tell: {trajectory.files_omitted} changed file(s) were not listed (over the "
                       "workspace limits)"), tuple(change.seq for change in trajectory.files)
    return True, f"no recorded change matches {pattern}", tuple(change.seq for change in trajectory.files)


def _final_answer(trajectory: Trajectory) -> tuple[str | None, tuple[int, ...]]:
    seqs = (trajectory.final_answer_seq,) if trajectory.final_answer_seq else ()
    return trajectory.final_answer, seqs


def _answer_excerpt(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:59] + "…")


def final_answer_contains(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    answer, seqs = _final_answer(trajectory)
    text: str = params["text"]
    if answer is None:
        return False, "the run has no final answer", seqs
    found = (text.lower() in answer.lower()) if params["ignore_case"] else text in answer
    if found:
        return True, f"the final answer contains {text!r}", seqs
    return False, f"the final answer {_answer_excerpt(answer)} does not contain {text!r}", seqs


def final_answer_matches(trajectory: Trajectory, params: Mapping[str, Any]) -> Outcome:
    answer, seqs = _final_answer(trajectory)
    pattern: re.Pattern[str] = params["pattern"]
    if params["ignore_case"]:
        pattern = re.compile(pattern.pattern, pattern.flags | re.IGNORECASE)
    if answer is None:
        return False, "the run has no final answer", seqs
    match = pattern.search(answer)
    if match:
        return True, f"the final answer matches /{pattern.pattern}/ at {match.group(0)!r}", seqs
    return False, f"the final answer {_answer_excerpt(answer)} does not match /{pattern.pattern}/", seqs
