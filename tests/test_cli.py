"""The ``run-journal`` console script, run as a process on real store files (SQLite, JSONL, PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from run_journal import RunRow, UsageTotals, open_store
from run_journal.contract import validate_record

RUN_JOURNAL = str(Path(sys.executable).with_name("run-journal"))
START = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RUN_JOURNAL, *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert needle in result.stderr


def e(
    thread: str, run: str, event_type: str, category: str, content: Any, at: int, **meta: Any
) -> dict[str, Any]:
    return {"thread_id": thread, "run_id": run, "event_type": event_type, "category": category,
            "content": content, "metadata": {"caller": "lead_agent", **meta},
            "created_at": START + timedelta(seconds=at), "event_id": f"{run}-{at}"}


def run_ids(thread: str) -> tuple[str, str]:
    """Run ids are global; threads other than t1 get their own."""
    prefix = "" if thread == "t1" else thread
    return f"{prefix}r1", f"{prefix}r2"


def sample_events(thread: str = "t1") -> list[dict[str, Any]]:
    r1, r2 = run_ids(thread)
    usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15, "cost_usd": 0.001}
    ai = {"type": "ai", "content": "let me look", "tool_calls": [{"name": "search", "args": {}, "id": "c1"}]}
    return [
        e(thread, r1, "run.start", "trace", {"run_name": "agent"}, 0),
        e(thread, r1, "llm.human.input", "message", {"type": "human", "content": "find cats"}, 1),
        e(thread, r1, "llm.ai.response", "message", ai, 2, llm_call_index=0, usage=usage,
          model_name="fake-model"),
        e(thread, r1, "tool.call", "trace", {"tool_call_id": "c1", "tool_name": "search",
                                               "args_preview": "{}", "args_truncated": False}, 3,
          tool_call_id="c1"),
        e(thread, r1, "llm.tool.result", "message", {"type": "tool", "content": "3 cats",
                                                       "tool_call_id": "c1"}, 4, tool_call_id="c1",
          tool_name="search"),
        e(thread, r1, "tool.outcome", "trace", {"tool_call_id": "c1", "tool_name": "search",
                                                  "outcome": "success", "result_size": 6}, 5,
          tool_call_id="c1"),
        e(thread, r1, "tool.outcome", "trace", {"tool_call_id": "c2", "tool_name": "fetch",
                                                  "outcome": "error", "error": "boom"}, 6,
          tool_call_id="c2"),
        e(thread, r1, "run.end", "outputs", {"output": ["done"]}, 7, status="success", duration_ms=7000),
        e(thread, r2, "run.start", "trace", {"run_name": "agent"}, 8),
        e(thread, r2, "run.error", "error", {"error_type": "ValueError", "message": "bad input"}, 9,
          status="error"),
    ]


def sample_runs(thread: str = "t1") -> list[RunRow]:
    r1, r2 = run_ids(thread)
    usage = UsageTotals(input_tokens=10, output_tokens=5, total_tokens=15, llm_calls=1, cost_usd=0.001)
    return [
        RunRow(run_id=r1, thread_id=thread, status="success", started_at=START,
               ended_at=START + timedelta(seconds=7), usage=usage, usage_by_model={"fake-model": usage},
               usage_by_caller={"lead_agent": usage}, tool_call_count=2, tool_error_count=1,
               first_human_message="find cats"),
        RunRow(run_id=r2, thread_id=thread, status="error", started_at=START + timedelta(seconds=8),
               ended_at=START + timedelta(seconds=9), error="ValueError: bad input"),
    ]


async def seed(url: str, *, thread: str = "t1", extra: list[dict[str, Any]] | None = None) -> None:
    async with open_store(url) as store:
        await store.put_batch(sample_events(thread) + (extra or []))
        for row in sample_runs(thread):
            await store.put_run(row)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/journal.db"
    asyncio.run(seed(url))
    asyncio.run(seed(url, thread="t2"))
    return url


# -- listing and reading ---------------------------------------------------------------------------
def test_threads_and_runs(sqlite_url: str) -> None:
    result = cli(sqlite_url, "threads")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["thread", "events", "runs"]
    assert [line.split()[:3] for line in lines[1:]] == [["t1", "10", "2"], ["t2", "10", "2"]]
    assert "\x1b[" not in result.stdout
    rows = [json.loads(line) for line in cli(sqlite_url, "threads", "--json").stdout.splitlines()]
    assert rows[0] == {"thread_id": "t1", "events": 10, "runs": 2, "last_status": "error",
                       "last_started_at": (START + timedelta(seconds=8)).isoformat(timespec="seconds")}
    runs = cli(sqlite_url, "runs", "t1")
    assert runs.returncode == 0
    assert [line.split()[:2] for line in runs.stdout.splitlines()[1:]] == [["r1", "success"], ["r2", "error"]]
    as_json = cli(sqlite_url, "runs", "t1", "--json").stdout.splitlines()
    parsed = [RunRow.from_dict(json.loads(line)) for line in as_json]
    assert [row.usage.total_tokens for row in parsed] == [15, 0]


def test_show_prints_a_timeline_and_totals(sqlite_url: str) -> None:
    result = cli(sqlite_url, "show", "r1")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.splitlines()[0] == "run r1  thread t1  2025-03-01 UTC"
    timeline = [line for line in out.splitlines() if line.startswith("09:30:")]
    assert [line.split()[1:3] for line in timeline] == [
        ["1", "run.start"], ["2", "llm.human.input"], ["3", "llm.ai.response"], ["4", "tool.call"],
        ["5", "llm.tool.result"], ["6", "tool.outcome"], ["7", "tool.outcome"], ["8", "run.end"]]
    assert timeline[0].startswith("09:30:00.000")
    assert "let me look [calls search]" in timeline[2]
    assert "[10+5 tok $0.0010 fake-model]" in timeline[2]
    assert "search -> 3 cats" in timeline[4]
    assert "fetch error, error: boom" in timeline[6]
    assert "success in 7.00s" in timeline[7]
    assert "status success in 7.00s" in out
    assert "tokens 10 in + 5 out = 15" in out
    assert "cost $0.0010" in out
    assert "tool calls 2 (1 failed)" in out
    assert "by model: fake-model 15 tok $0.0010" in out
    failed = cli(sqlite_url, "show", "r2").stdout
    assert "ValueError: bad input" in failed
    assert "status error" in failed


def test_events_filters_and_json(sqlite_url: str) -> None:
    outcomes = cli(sqlite_url, "events", "t1", "--type", "tool.outcome", "--type", "run.end", "--json")
    records = [json.loads(line) for line in outcomes.stdout.splitlines()]
    assert [(r["seq"], r["event_type"]) for r in records] == [
        (6, "tool.outcome"), (7, "tool.outcome"), (8, "run.end")]
    assert all(validate_record(r) == [] for r in records)
    run_lines = cli(sqlite_url, "events", "t1", "--run", "r2", "--json").stdout.splitlines()
    by_run = [json.loads(line)["seq"] for line in run_lines]
    assert by_run == [9, 10]
    paged = cli(sqlite_url, "events", "t1", "--after-seq", "3", "--limit", "2")
    assert [line.split()[2] for line in paged.stdout.splitlines()] == ["4", "5"]
    assert cli(sqlite_url, "events", "t1", "--task", "nope").stdout == ""


def test_usage_totals_per_run_model_and_caller(sqlite_url: str) -> None:
    text = cli(sqlite_url, "usage", "t1").stdout
    assert "per model" in text
    assert "fake-model" in text
    assert "lead_agent" in text
    summary = json.loads(cli(sqlite_url, "usage", "--json").stdout)
    assert summary["total"]["total_tokens"] == 30
    assert len(summary["runs"]) == 4
    assert summary["by_model"]["fake-model"]["llm_calls"] == 2


# -- verify ----------------------------------------------------------------------------------------
def test_verify_passes_a_clean_store_and_catches_a_hole_and_a_bad_row(sqlite_url: str) -> None:
    clean = cli(sqlite_url, "verify")
    assert clean.returncode == 0, clean.stdout
    assert clean.stdout.strip().endswith("verified 20 events in 2 thread(s), 4 run(s): OK")

    async def damage() -> None:
        async with open_store(sqlite_url) as store:
            await store.put_batch([e("t1", "r3", "run.start", "trace", "not an object", 20),
                                   e("t1", "r4", "llm.human.input", "message", {"type": "human",
                                                                                 "content": "x"}, 21)])
            await store.delete_by_run("t1", "r4")
            await store.put(**e("t1", "r5", "llm.human.input", "message", {"type": "human",
                                                                            "content": "y"}, 22))

    asyncio.run(damage())
    broken = cli(sqlite_url, "verify")
    assert broken.returncode == 1
    lines = broken.stdout.splitlines()
    assert any(line.startswith("thread t1 seq 11 (run.start): content: ") for line in lines), lines
    assert "thread t1: missing seq 12 (lost writes or a deleted run)" in lines
    assert lines[-1].endswith("2 problem(s)")
    assert cli(sqlite_url, "verify", "t2").returncode == 0


# -- export and copy -------------------------------------------------------------------------------
def test_export_writes_jsonl_records(sqlite_url: str, tmp_path: Path) -> None:
    out = cli(sqlite_url, "export", "t1").stdout.splitlines()
    records = [json.loads(line) for line in out]
    assert [r["seq"] for r in records] == list(range(1, 11))
    assert all(validate_record(r) == [] for r in records)
    target = tmp_path / "all.jsonl"
    result = cli(sqlite_url, "export", "--output", str(target))
    assert result.returncode == 0
    assert len(target.read_text().splitlines()) == 20
    assert "exported 20 events from 2 thread(s)" in result.stderr


async def dump(url: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    async with open_store(url) as store:
        events = [event.to_dict() for thread in await store.list_threads()
                  for event in await store.list_events(thread)]
        runs = [row.to_dict() for row in await store.list_runs()]
    return events, runs


def test_copy_jsonl_to_sqlite_to_postgres_preserves_seq_and_is_idempotent(
    tmp_path: Path, postgres_database_url: str
) -> None:
    source = f"jsonl:///{tmp_path}/journal"
    asyncio.run(seed(source))
    asyncio.run(seed(source, thread="t2"))
    middle = f"sqlite:///{tmp_path}/copy.db"
    target = f"{postgres_database_url}?schema=cli_copy_{tmp_path.name[-12:].replace('-', '_')}"
    first = cli(source, "copy", middle)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["copied 20 events (20 new) and 4 run rows in 2 thread(s)"]
    second = cli("copy", middle, target)  # the ``copy SRC DST`` spelling
    assert second.returncode == 0, second.stderr
    expected = asyncio.run(dump(source))
    assert asyncio.run(dump(middle)) == expected
    assert asyncio.run(dump(target)) == expected
    again = cli(middle, "copy", target)
    assert again.stdout.splitlines() == ["copied 20 events (0 new) and 4 run rows in 2 thread(s)"]
    assert asyncio.run(dump(target)) == expected
    assert cli(target, "verify").returncode == 0


# -- tail ------------------------------------------------------------------------------------------
def read_lines(stream: Any) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


@pytest.fixture
def tail_process(sqlite_url: str) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen([RUN_JOURNAL, sqlite_url, "tail", "t1", "--last", "2", "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield process
    if process.poll() is None:
        process.kill()
        process.wait(timeout=10)


def test_tail_follows_events_written_by_another_process(
    sqlite_url: str, tail_process: subprocess.Popen[str]
) -> None:
    lines = read_lines(tail_process.stdout)
    history = [json.loads(lines.get(timeout=60))["seq"] for _ in range(2)]
    assert history == [9, 10]

    async def write() -> None:
        async with open_store(sqlite_url) as store:
            await store.put(**e("t1", "r9", "run.start", "trace", {"run_name": "late"}, 30))
            await store.put(**e("t1", "r9", "run.end", "outputs", {"output": []}, 31, status="success"))

    asyncio.run(write())
    live = [json.loads(lines.get(timeout=60)) for _ in range(2)]
    assert [(r["seq"], r["event_type"]) for r in live] == [(11, "run.start"), (12, "run.end")]
    tail_process.send_signal(signal.SIGINT)
    assert tail_process.wait(timeout=30) == 0
    assert "Traceback" not in tail_process.stderr.read()  # type: ignore[union-attr]


# -- mistakes and pipes ----------------------------------------------------------------------------
def test_user_mistakes_are_one_line_with_a_status(sqlite_url: str, tmp_path: Path) -> None:
    assert_one_line_error(cli("not-a-url", "threads"), 2, "not a store URL")
    assert_one_line_error(cli("ftp://host/x", "threads"), 2, "unknown store URL scheme 'ftp'")
    assert_one_line_error(cli(f"sqlite:///{tmp_path}/missing.db", "threads"), 1, "no store at")
    assert not (tmp_path / "missing.db").exists()
    assert_one_line_error(cli(sqlite_url, "runs", "nope"), 1, "thread 'nope' not found")
    assert_one_line_error(cli(sqlite_url, "events", "nope"), 1, "thread 'nope' not found")
    assert_one_line_error(cli(sqlite_url, "show", "nope"), 1, "run 'nope' not found")
    assert_one_line_error(cli(sqlite_url, "runs", "bad/id"), 2, "thread_id")
    unreachable = cli("postgresql://postgres@127.0.0.1:9/nothing", "threads")
    assert_one_line_error(unreachable, 1, "postgresql://postgres@127.0.0.1:9/nothing")
    usage = cli(sqlite_url, "events")
    assert usage.returncode == 2
    assert "Traceback" not in usage.stderr


def test_a_closed_pipe_is_not_a_traceback(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/big.db"
    many = [e("big", "r1", "llm.human.input", "message", {"type": "human", "content": "x" * 200}, i)
            for i in range(1500)]

    async def fill() -> None:
        async with open_store(url) as store:
            await store.put_batch(many)

    asyncio.run(fill())
    result = subprocess.run(f"'{RUN_JOURNAL}' '{url}' export | head -n 1", shell=True,
                            capture_output=True, text=True, timeout=120, check=False)
    assert json.loads(result.stdout)["seq"] == 1
    assert result.stderr == ""


def test_show_and_verify_a_journaled_langgraph_run(tmp_path: Path) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from run_journal import RunJournal
    from tests.test_projections import tool_loop_graph

    url = f"sqlite:///{tmp_path}/journal.db"
    call = {"name": "add", "args": {"a": 1, "b": 2}, "id": "c1", "type": "tool_call"}

    async def journaled() -> str:
        async with open_store(url) as store:
            journal = RunJournal(store)
            graph = tool_loop_graph([AIMessage("adding", tool_calls=[call]), AIMessage("it is 3")])
            await graph.ainvoke({"messages": [HumanMessage("what is 1+2?")]},
                                {"configurable": {"thread_id": "lg"}, "callbacks": [journal]})
            await journal.aclose()
            return journal.run_id

    run_id = asyncio.run(journaled())
    shown = cli(url, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    timeline = [line.split()[2] for line in shown.stdout.splitlines()[1:] if line[:2].isdigit()]
    assert timeline == ["run.start", "llm.human.input", "llm.ai.response", "tool.call", "llm.tool.result",
                        "tool.outcome", "llm.ai.response", "run.end"]
    assert "add success, 1 bytes" in shown.stdout
    assert "status success" in shown.stdout
    assert "model calls 2" in shown.stdout
    verified = cli(url, "verify")
    assert verified.returncode == 0, verified.stdout
    assert verified.stdout.strip().endswith("verified 8 events in 1 thread(s), 1 run(s): OK")
