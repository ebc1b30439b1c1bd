"""``run-journal URL diff RUN_A RUN_B``: two runs' trajectories aligned, the first divergence, the
token, cost and duration deltas. Exit status 0 when the trajectories are the same, 1 when they differ."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from run_journal.cli import render
from run_journal.cli.common import add_command, emit, emit_json, require_thread, resolve_run
from run_journal.stores.base import RunEventStore
from run_journal.trajectory import (
    Handoff,
    MiddlewareStep,
    ModelCall,
    RunComparison,
    RunSide,
    Step,
    SubagentTask,
    ToolCall,
    Trajectory,
    compare_runs,
    read_trajectory,
)
from run_journal.trajectory.steps import value_text

CELL = 34


def add_diff_command(sub: Any) -> None:
    """Register ``diff`` on the ``run-journal`` subcommands."""
    text = ("compare two runs: steps aligned, the first divergence, token / cost / duration deltas "
            "(exit 0: same trajectory, 1: they differ)")
    diff = add_command(sub, "diff", cmd_diff, text)
    diff.add_argument("run_a", metavar="RUN_A", help="run id, or a unique prefix of 6 or more characters")
    diff.add_argument("run_b", metavar="RUN_B")
    diff.add_argument("--thread", help="the runs' thread (to tell runs apart by prefix)")
    diff.add_argument("--ignore", action="append", default=[], metavar="FIELD",
                      help="leave a field out of the comparison: text, model, args, result, final_answer, "
                           "... (repeatable)")
    diff.add_argument("--json", action="store_true", help="the comparison as one JSON object")
    diff.add_argument("--full-ids", action="store_true", help="whole run ids")


async def cmd_diff(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    threads = [args.thread] if args.thread else []
    if args.thread:
        await require_thread(store, args.thread)
    run_a, thread_a = await resolve_run(store, args.run_a, threads)
    run_b, thread_b = await resolve_run(store, args.run_b, threads)
    a = await read_trajectory(store, thread_a, run_a)
    b = await read_trajectory(store, thread_b, run_b)
    comparison = compare_runs(a, b, ignore=args.ignore)
    if args.json:
        emit_json(out, comparison.to_dict())
    else:
        for line in comparison_lines(comparison, a, b, full_ids=args.full_ids):
            emit(out, line)
    return 0 if comparison.same else 1


def comparison_lines(comparison: RunComparison, a: Trajectory, b: Trajectory, *, full_ids: bool = False
                     ) -> list[str]:
    """The comparison as the ``diff`` command prints it."""
    short = render.ShortIds([a.run_id, b.run_id], full=full_ids)
    lines = [_side("A", comparison.a, short), _side("B", comparison.b, short), ""]
    rows: list[list[Any]] = []
    for pair in comparison.steps:
        left = _cell(a.steps[pair.a]) if pair.a is not None else "-"
        right = _cell(b.steps[pair.b]) if pair.b is not None else "-"
        if pair.a is None:
            verdict = "only in B"
        elif pair.b is None:
            verdict = "only in A"
        elif pair.differences:
            verdict = "differs: " + ", ".join(difference.field for difference in pair.differences)
        else:
            verdict = "same"
        rows.append([pair.position, pair.label, pair.caller, left, right, verdict])
    lines += render.table(("#", "step", "caller", "A", "B", ""), rows)
    lines.append("")
    divergence = comparison.divergence
    lines.append(f"first divergence: {divergence.summary}" if divergence else
                 f"same trajectory ({len(comparison.steps)} steps)")
    for difference in comparison.differences:
        if divergence is None or divergence.step is not None or difference.field != divergence.field:
            lines.append(f"run {difference.describe()}")
    lines.append(_deltas(comparison))
    return lines


def _side(name: str, side: RunSide, short: render.ShortIds) -> str:
    took = f"{side.duration_ms / 1000:.2f}s" if side.duration_ms is not None else "running"
    counts = ", ".join([_count(side.steps, "step"), _count(side.model_calls, "model call"),
                        _count(side.tool_calls, "tool call"), _count(side.total_tokens, "token")])
    return (f"{name}  run {short(side.run_id)}  thread {side.thread_id}  {side.status}  {counts}, "
            f"{render.cost_text(side.cost_usd)}, {took}")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _cell(step: Step) -> str:
    if isinstance(step, ModelCall):
        if step.error is not None:
            text = f"error: {step.error}"
        elif step.tool_calls:
            text = "calls " + ", ".join(f"{call.name}({value_text(call.args)})" for call in step.tool_calls)
        else:
            text = repr(step.text)
    elif isinstance(step, ToolCall):
        text = f"{value_text(step.args)} -> {step.outcome or 'no outcome'}"
    elif isinstance(step, SubagentTask):
        text = f"{step.status or 'open'}: {step.result or step.error or step.description}"
    elif isinstance(step, Handoff):
        text = f"from {step.from_agent}"
    else:
        assert isinstance(step, MiddlewareStep)
        text = f"{step.hook} {step.action}"
    return render.one_line(text, CELL)


def _signed(value: int) -> str:
    return f"{value:+d}"


def _deltas(comparison: RunComparison) -> str:
    deltas = comparison.deltas
    cost = "unknown" if deltas.cost_usd is None else f"{deltas.cost_usd:+.4f} USD"
    a, b = comparison.a.duration_ms, comparison.b.duration_ms
    duration = "unknown" if a is None or b is None else f"{a / 1000:.2f}s -> {b / 1000:.2f}s"
    status = comparison.a.status if comparison.a.status == comparison.b.status else \
        f"{comparison.a.status} -> {comparison.b.status}"
    return (f"B - A: model calls {_signed(deltas.model_calls)}, tool calls {_signed(deltas.tool_calls)}, "
            f"tokens {_signed(deltas.total_tokens)} (input {_signed(deltas.input_tokens)}, output "
            f"{_signed(deltas.output_tokens)}), cost {cost}, duration {duration}; status {status}")
