"""``run-journal URL calls RUN [--call N]``: what each model call of a run was sent (system prompt,
messages, tools, parameters) and what it answered."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from run_journal.calls import ModelCall, model_calls
from run_journal.cli import render
from run_journal.cli.common import CliError, add_command, emit, emit_json, require_thread, resolve_run
from run_journal.stores.base import RunEventStore

INDENT = "    "


def add_calls_command(sub: Any) -> None:
    """Register ``calls`` on the ``run-journal`` subcommands."""
    text = "what each model call of a run was sent (system prompt, messages, tools, parameters) and answered"
    calls = add_command(sub, "calls", cmd_calls, text, json_flag=True)
    calls.add_argument("run", metavar="RUN", help="run id, or a unique prefix of 6 or more characters")
    calls.add_argument("--thread", help="the run's thread (to tell runs apart by prefix)")
    calls.add_argument("--call", type=int, metavar="N", help="only the call with this index (0, 1, ...)")


async def cmd_calls(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    threads = [args.thread] if args.thread else []
    if args.thread:
        await require_thread(store, args.thread)
    run_id, thread_id = await resolve_run(store, args.run, threads)
    calls = await model_calls(store, thread_id, run_id)
    if args.call is not None:
        calls = [call for call in calls if call.index == args.call]
        if not calls:
            raise CliError(f"run {run_id} has no model call {args.call}")
    for position, call in enumerate(calls):
        if args.json:
            emit_json(out, call.to_dict())
            continue
        if position:
            emit(out)
        for line in call_lines(call):
            emit(out, line)
    if not calls and not args.json:
        emit(out, f"run {run_id} made no model call")
    return 0


def call_lines(call: ModelCall) -> list[str]:
    """One call as ``calls`` prints it."""
    took = f", {call.latency_ms / 1000:.2f}s" if call.latency_ms is not None else ""
    tokens = f", {call.usage.get('total_tokens')} tokens" if call.usage else ""
    cost = f", {render.cost_text(call.cost_usd)}" if call.cost_usd is not None else ""
    lines = [f"call {call.index}  {call.caller}  {call.model or 'unknown model'}{took}{tokens}{cost}"]
    request = call.request
    if request is None:
        lines.append(f"{INDENT}request not recorded (journaled with record_requests=False)")
    else:
        if request.missing:
            count = len(request.missing)
            lines.append(f"{INDENT}incomplete: {count} bod{'y' if count == 1 else 'ies'} missing from the "
                         f"store ({', '.join(digest[:12] for digest in request.missing[:3])})")
        lines.append(f"{INDENT}messages ({request.message_count}):")
        for message in request.messages:
            lines += _message_lines(message)
        if request.tools:
            lines.append(f"{INDENT}tools ({len(request.tools)}):")
            lines += [f"{INDENT * 2}{_tool_line(tool)}" for tool in request.tools]
        else:
            lines.append(f"{INDENT}tools: none")
        shown = {key: value for key, value in request.params.items() if value is not None}
        lines.append(f"{INDENT}params: {json.dumps(shown, ensure_ascii=False, sort_keys=True)}")
    if call.reply is not None:
        lines.append(f"{INDENT}reply:")
        lines += _message_lines(call.reply)
    elif call.error is not None:
        error = call.error
        lines.append(f"{INDENT}error: {error.get('error_type', 'Error')}: {error.get('message', '')}")
    else:
        lines.append(f"{INDENT}no reply (the call never ended)")
    return lines


def _message_lines(message: dict[str, Any]) -> list[str]:
    kind = str(message.get("type", "?"))
    name = f" {message['name']}" if isinstance(message.get("name"), str) and message.get("name") else ""
    text = render.message_text(message)
    lines = [f"{INDENT * 2}[{kind}{name}] {line}" if index == 0 else f"{INDENT * 3}{line}"
             for index, line in enumerate(text.splitlines() or [""])]
    if kind == "system" and len(lines) > 6:  # a long system prompt: its start and its size
        lines = [*lines[:5], f"{INDENT * 3}... ({len(text)} characters in all)"]
    for tool_call in message.get("tool_calls") or []:
        if isinstance(tool_call, dict):
            args = json.dumps(tool_call.get("args", {}), ensure_ascii=False, sort_keys=True)
            lines.append(f"{INDENT * 3}-> {tool_call.get('name')}({render.one_line(args, 200)}) "
                         f"id {tool_call.get('id')}")
    if isinstance(message.get("tool_call_id"), str):
        lines[0] += f"  (answers {message['tool_call_id']})"
    return lines


def _tool_line(tool: Any) -> str:
    function = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(function, dict):
        return render.one_line(json.dumps(tool, ensure_ascii=False), 200)
    description = render.one_line(str(function.get("description") or ""), 80)
    parameters = function.get("parameters")
    names = sorted((parameters or {}).get("properties", {})) if isinstance(parameters, dict) else []
    return f"{function.get('name')}({', '.join(names)}){f': {description}' if description else ''}"
