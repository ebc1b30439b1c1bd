"""Text rendering for the ``run-journal`` command: one readable line per event, tables, run totals.

Kept apart from ``cli.py`` so the command wiring stays short and so the one-line summaries (what an
engineer reads at 2 a.m.) can be tested without a process. Colour only when writing to a terminal.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, TextIO

from run_journal.catalog import MIDDLEWARE_PREFIX, canonical_event_type
from run_journal.envelope import RunEvent
from run_journal.runs import RunRow, UsageTotals

SUMMARY_WIDTH: Final = 96
_SPACE: Final = re.compile(r"\s+")
_COLOURS: Final = {"red": "31", "green": "32", "yellow": "33", "blue": "34", "dim": "2", "bold": "1"}
_CATEGORY_COLOUR: Final = {"error": "red", "message": "blue", "outputs": "green", "middleware": "yellow"}


class Style:
    """ANSI colour when the stream is a terminal and ``NO_COLOR`` is unset; plain text otherwise."""

    def __init__(self, stream: TextIO, *, force: bool | None = None) -> None:
        if force is None:
            force = stream.isatty() and not os.environ.get("NO_COLOR")
        self.enabled = force

    def __call__(self, text: str, colour: str) -> str:
        if not self.enabled or colour not in _COLOURS:
            return text
        return f"\x1b[{_COLOURS[colour]}m{text}\x1b[0m"


def one_line(value: Any, width: int = SUMMARY_WIDTH) -> str:
    """``value`` as a single line of at most ``width`` characters (whitespace collapsed)."""
    text = value if isinstance(value, str) else repr(value)
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= width else text[: width - 1] + "…"


def message_text(content: Any) -> str:
    """The readable text of a stored LangChain message (string content or text blocks)."""
    if isinstance(content, Mapping):
        content = content.get("content", "")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            block if isinstance(block, str) else str(block.get("text", ""))
            for block in content
            if isinstance(block, str) or (isinstance(block, Mapping) and block.get("type") == "text")
        ]
        return " ".join(part for part in parts if part)
    return "" if content is None else str(content)


def caller(event: RunEvent) -> str:
    value = event.metadata.get("caller")
    return value if isinstance(value, str) else "-"


def _field(content: Any, key: str, default: Any = "") -> Any:
    return content.get(key, default) if isinstance(content, Mapping) else default


def summary(event: RunEvent) -> str:
    """What happened, in one line: the text a human would look for first for this kind of event."""
    content, meta = event.content, event.metadata
    name = canonical_event_type(event.event_type)
    if name == "run.start":
        resumed = _field(content, "resumed_from") or meta.get("resumed_from")
        return f"{_field(content, 'run_name', 'run')}" + (f" (resumes {resumed})" if resumed else "")
    if name == "run.end":
        return f"success{_duration(meta)}"
    if name in {"run.error", "llm.error"}:
        return f"{_field(content, 'error_type', 'Error')}: {_field(content, 'message')}{_duration(meta)}"
    if name == "run.interrupt":
        interrupts = _field(content, "interrupts", [])
        values = [one_line(_field(item, "value", item), 40) for item in interrupts or []]
        return f"waiting for a human: {', '.join(values) or 'interrupt'}{_duration(meta)}"
    if name == "run.cancel":
        reconciled = " (reconciled)" if meta.get("reconciled") else ""
        return f"cancelled: {_field(content, 'reason', '')}{reconciled}"
    if name in {"llm.human.input", "llm.ai.response", "llm.tool.result"}:
        return _message_summary(name, content, meta)
    if name == "tool.call":
        return f"{_field(content, 'tool_name')}({_field(content, 'args_preview')})"
    if name == "llm.request":
        count = _field(content, "message_count", 0)
        tools = "tools" if _field(content, "tools_sha256", None) else "no tools"
        model = meta.get("model_name")
        return (f"{count} message{'' if count == 1 else 's'}, {tools}"
                f"{f', {model}' if model else ''} (call {meta.get('llm_call_index')})")
    if name == "tool.outcome":
        return _outcome_summary(content)
    if name == "context:memory":
        return f"memory sha256 {str(_field(content, 'content_sha256'))[:16]}…"
    if name.startswith("subagent."):
        return _subagent_summary(name, content)
    if name == "run.score":
        return score_text(content)
    if name.startswith(MIDDLEWARE_PREFIX):
        return (f"{_field(content, 'name')} {_field(content, 'hook')}: {_field(content, 'action')}"
                f" {one_line(_field(content, 'changes', {}), 48)}")
    if isinstance(content, str):
        return content
    return repr(content)


def score_text(content: Any) -> str:
    """``name = value (source): comment`` of a ``run.score`` event."""
    value = _field(content, "value", None)
    shown = str(value).lower() if isinstance(value, bool) else str(value)
    comment = _field(content, "comment", None)
    return (f"{_field(content, 'name')} = {shown} ({_field(content, 'source')})"
            + (f": {comment}" if comment else ""))


def _duration(meta: Mapping[str, Any]) -> str:
    duration = meta.get("duration_ms")
    return f" in {duration / 1000:.2f}s" if isinstance(duration, int | float) else ""


def _message_summary(name: str, content: Any, meta: Mapping[str, Any]) -> str:
    text = message_text(content)
    if name == "llm.tool.result":
        status = meta.get("status") or _field(content, "status")
        tool = meta.get("tool_name") or _field(content, "name") or "tool"
        return f"{tool} -> {status + ': ' if status else ''}{text}"
    calls = _field(content, "tool_calls", []) or []
    names = [str(_field(call, "name", "?")) for call in calls if isinstance(call, Mapping)]
    if names:
        text = f"{text} [calls {', '.join(names)}]".strip()
    return text or "(empty)"


def _outcome_summary(content: Any) -> str:
    outcome = _field(content, "outcome", "?")
    parts = [f"{_field(content, 'tool_name')} {outcome}"]
    size = _field(content, "result_size", None)
    if isinstance(size, int):
        parts.append(f"{size} bytes")
    error = _field(content, "error", None)
    if error:
        parts.append(f"error: {error}")
    return ", ".join(parts)


def _subagent_summary(name: str, content: Any) -> str:
    task = _field(content, "task_id")
    if name == "subagent.start":
        return f"task {task}: {_field(content, 'description')}"
    if name == "subagent.step":
        return f"task {task} #{_field(content, 'message_index')} {_field(content, 'kind')}: " + str(
            _field(content, "text")
        )
    outcome = _field(content, "result") or _field(content, "error") or ""
    return f"task {task} {_field(content, 'status')}: {outcome}"


def usage_cell(event: RunEvent, *, model: bool = True) -> str:
    """Tokens, cost and (with ``model``) model of one model call, when the event carries them."""
    usage = event.metadata.get("usage")
    if not isinstance(usage, Mapping):
        return ""
    parts = [f"{usage.get('input_tokens', 0)}+{usage.get('output_tokens', 0)} tok"]
    cost = usage.get("cost_usd", event.metadata.get("cost_usd"))
    if isinstance(cost, int | float):
        parts.append(f"${cost:.4f}")
    name = event.metadata.get("model_name")
    if model and isinstance(name, str) and name:
        parts.append(name)
    return " ".join(parts)


def clock(moment: datetime) -> str:
    """``HH:MM:SS.mmm``."""
    return moment.strftime("%H:%M:%S.%f")[:-3]


def _type_cell(event: RunEvent, style: Style, width: int, limit: int | None = None) -> tuple[str, int]:
    """The event type, padded to ``width`` (cut at ``limit``), coloured: (text, columns it takes)."""
    colour = _CATEGORY_COLOUR.get(event.category, "")
    if canonical_event_type(event.event_type) == "tool.outcome":
        outcome = _field(event.content, "outcome")
        colour = "red" if outcome in {"error", "missing"} else "dim"
    text = f"{one_line(event.event_type, limit or len(event.event_type)):<{width}}"
    return style(text, colour), len(text)


def event_line(event: RunEvent, style: Style) -> str:
    """``time  seq  event  caller  summary  [tokens]`` for one event of ``show``."""
    kind, _ = _type_cell(event, style, 18)
    cells = [style(clock(event.created_at), "dim"), f"{event.seq:>6}", kind,
             f"{caller(event):<14}"]
    line = " ".join(cells) + " " + one_line(summary(event))
    usage = usage_cell(event)
    return f"{line}  [{usage}]" if usage else line


LINE_WIDTH: Final = 100
"""Columns of an ``events`` / ``tail`` line: the summary is cut to fit."""
MIN_SUMMARY: Final = 8


def listing_line(event: RunEvent, style: Style, run: str | None, width: int = LINE_WIDTH) -> str:
    """``time  seq  [run]  event  caller  summary  [tokens cost]`` in ``width`` columns (the summary
    is cut with an ellipsis; over-long event types and callers too; ``show`` names the model too)."""
    kind, kind_width = _type_cell(event, style, 15, 18)
    plain = [clock(event.created_at), f"{event.seq:>6}",
             *([f"{run:<8}"] if run is not None else []), f"{one_line(caller(event), 14):<10}"]
    usage = f"  [{cell}]" if (cell := usage_cell(event, model=False)) else ""
    room = width - sum(len(cell) + 1 for cell in plain) - kind_width - 1 - len(usage)
    cells = [style(plain[0], "dim"), *plain[1:-1], kind, plain[-1]]
    return " ".join(cells) + " " + one_line(summary(event), max(room, MIN_SUMMARY)) + usage


class DatedLines:
    """``events`` / ``tail`` output: a date line whenever the day changes, then the event lines."""

    def __init__(self, out: TextIO, style: Style) -> None:
        self.out, self.style, self.day = out, style, ""

    def write(self, event: RunEvent, line: str) -> None:
        day = event.created_at.date().isoformat()
        if day != self.day:
            self.out.write(self.style(f"{day} UTC", "bold") + "\n")
            self.day = day
        self.out.write(line + "\n")


SHORT_ID: Final = 8


class ShortIds:
    """Run ids as listings show them: the first ``SHORT_ID`` characters, more where two ids of the
    listing (``known``, and every id shown so far) share those; the whole id with ``full``.

    The ids are kept sorted: the longest prefix an id shares with any other is the one it shares with
    a neighbour, so a listing of n runs costs n log n."""

    def __init__(self, known: Iterable[str] = (), *, full: bool = False) -> None:
        self.full = full
        self._sorted = sorted(set(known))

    def __call__(self, run_id: str) -> str:
        if self.full:
            return run_id
        ids = self._sorted
        at = bisect.bisect_left(ids, run_id)
        if at == len(ids) or ids[at] != run_id:
            ids.insert(at, run_id)
        neighbours = ids[max(at - 1, 0) : at] + ids[at + 1 : at + 2]
        return run_id[: max([SHORT_ID, *(_shared(run_id, other) + 1 for other in neighbours)])]


def _shared(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` have in common."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Left-aligned columns separated by two spaces; numbers right-aligned."""
    text = [[_cell(value) for value in row] for row in rows]
    widths = [max([len(header)] + [len(row[i]) for row in text]) for i, header in enumerate(headers)]
    numeric = [all(isinstance(row[i], int | float) for row in rows) and bool(rows)
               for i in range(len(headers))]

    def render(cells: Sequence[str]) -> str:
        columns = zip(cells, widths, numeric, strict=True)
        out = [cell.rjust(width) if num else cell.ljust(width) for cell, width, num in columns]
        return "  ".join(out).rstrip()
    return [render(headers), *(render(row) for row in text)]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


SMALLEST_COST: Final = 0.0001
"""Costs below this (but above zero) print as ``<$0.0001``: four decimals would show them as free."""
PRICE_HINT: Final = ("to add a price: RunJournal(..., pricing={'MODEL': {'input': USD, 'output': USD}}) "
                     "(per million tokens) for new runs, run-journal URL reprice --pricing FILE for "
                     "stored ones; see docs/costs.md")


def cost_text(cost: float | None) -> str:
    """``$0.0123``; ``<$0.0001`` for a cost too small for four decimals; ``unknown`` for None."""
    if cost is None:
        return "unknown"
    if 0 < cost < SMALLEST_COST:
        return f"<${SMALLEST_COST}"
    return f"${cost:.4f}"


def unknown_costs(rows: Iterable[RunRow], name: Callable[[str], str] = str) -> list[str]:
    """Why each run whose cost is unknown has none (its stored ``cost_note``), then how to add a
    price; nothing when every cost is known."""
    lines = [f"cost unknown for run {name(row.run_id)}: {row.cost_note or 'no reason was recorded'}"
             for row in rows if row.usage.cost_usd is None and row.usage.llm_calls]
    return [*lines, PRICE_HINT] if lines else []


def usage_row(name: str, totals: UsageTotals) -> list[Any]:
    return [name, totals.llm_calls, totals.input_tokens, totals.output_tokens, totals.total_tokens,
            cost_text(totals.cost_usd) if totals.llm_calls or totals.cost_usd else "-"]


USAGE_HEADERS: Final = ("name", "calls", "input", "output", "total", "cost")


def run_totals(row: RunRow) -> list[str]:
    """The footer of ``show``: lifecycle, tokens and cost, tools, and the per-model / caller buckets."""
    duration = ""
    if row.started_at and row.ended_at:
        duration = f" in {(row.ended_at - row.started_at).total_seconds():.2f}s"
    usage = row.usage
    lines = [
        f"status {row.status}{duration}" + (f"; error: {one_line(row.error, 80)}" if row.error else ""),
        f"model calls {usage.llm_calls}; tokens {usage.input_tokens} in + {usage.output_tokens} out = "
        f"{usage.total_tokens} (cache read {usage.cache_read_tokens}, reasoning "
        f"{usage.reasoning_tokens}); cost {cost_text(usage.cost_usd)}",
        f"tool calls {row.tool_call_count} ({row.tool_error_count} failed); messages {row.message_count}",
    ]
    for title, buckets in (("by model", row.usage_by_model), ("by caller", row.usage_by_caller)):
        if buckets:
            lines.append(title + ": " + "; ".join(
                f"{name} {totals.total_tokens} tok {cost_text(totals.cost_usd)}"
                for name, totals in buckets.items()
            ))
    return lines
