"""The ``run-journal`` command line: in-process (``main([...])``) on every file and server backend, and
as a process where processes are the point (the entry point, Ctrl-C, tail across processes, pipes)."""

from __future__ import annotations

import asyncio
import json
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import backend_url

from run_journal import NewEvent, RunEventStore, RunRow, UsageTotals, open_store
from run_journal.bodies import Body
from run_journal.cli import main
from run_journal.contract import validate_record

RUN_JOURNAL = str(Path(sys.executable).with_name("run-journal"))
START = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)
BACKENDS = ("jsonl", "sqlite", "postgres", "redis")
"""``memory://`` is empty in every new ``open_store``, so the command line has nothing to read there."""


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


Cli = Callable[..., Done]
DEADLINE = 60


class Hung(BaseException):
    """A command that should have ended did not (``tail`` of a missing thread waiting forever)."""


def _hung(*_: Any) -> None:
    raise Hung(f"the command was still running after {DEADLINE} s")


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Iterator[Cli]:
    """``run-journal ARGS...`` in this process: its exit status and what it printed."""

    def call(*args: str) -> Done:
        capsys.readouterr()
        signal.alarm(DEADLINE)
        try:
            code = main(list(args))
        except SystemExit as stop:  # argparse: --help, --version, usage errors
            code = stop.code if isinstance(stop.code, int) else 0
        finally:
            signal.alarm(0)
        out, err = capsys.readouterr()
        return Done(code, out, err)

    previous = signal.signal(signal.SIGALRM, _hung)
    yield call
    signal.signal(signal.SIGALRM, previous)


def spawn(*args: str) -> Done:
    done = subprocess.run([RUN_JOURNAL, *args], capture_output=True, text=True, timeout=120, check=False)
    return Done(done.returncode, done.stdout, done.stderr)


def assert_one_line_error(result: Done, code: int, needle: str) -> None:
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("run-journal: ")
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


def seeded(url: str) -> str:
    asyncio.run(seed(url))
    asyncio.run(seed(url, thread="t2"))
    return url


@pytest.fixture(scope="module", params=BACKENDS)
def shared_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Threads t1 and t2 on each backend, for the tests that only read (one store per module)."""
    return seeded(backend_url(request.param, request, tmp_path_factory))


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Threads t1 and t2 on each backend, for a test that writes."""
    return seeded(backend_url(request.param, request, tmp_path_factory))


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return seeded(f"sqlite:///{tmp_path}/journal.db")


# -- listing and reading ---------------------------------------------------------------------------
def test_threads_and_runs(cli: Cli, shared_url: str) -> None:
    result = cli(shared_url, "threads")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["thread", "events", "runs"]
    assert [line.split()[:3] for line in lines[1:]] == [["t2", "10", "2"], ["t1", "10", "2"]]  # ties: id
    assert "\x1b[" not in result.stdout
    rows = [json.loads(line) for line in cli(shared_url, "threads", "--json").stdout.splitlines()]
    assert rows[1] == {"thread_id": "t1", "events": 10, "runs": 2, "last_status": "error",
                       "last_started_at": (START + timedelta(seconds=8)).isoformat(timespec="seconds"),
                       "last_activity_at": (START + timedelta(seconds=9)).isoformat(timespec="seconds")}
    first = cli(shared_url, "threads", "--limit", "1", "--json").stdout.splitlines()
    assert [json.loads(line)["thread_id"] for line in first] == ["t2"]
    runs = cli(shared_url, "runs", "t1")
    assert runs.returncode == 0
    assert [line.split()[:3] for line in runs.stdout.splitlines()[1:]] == [["r2", "t1", "error"],
                                                                          ["r1", "t1", "success"]]
    as_json = cli(shared_url, "runs", "t1", "--json").stdout.splitlines()
    parsed = [RunRow.from_dict(json.loads(line)) for line in as_json]
    assert [row.usage.total_tokens for row in parsed] == [0, 15]


def test_threads_are_listed_by_latest_activity_most_recent_first(cli: Cli, url: str) -> None:
    later = [e("t1", "r1", "tool.call", "trace", {"tool_name": "late"}, 600)]  # t1 is active again

    async def touch() -> None:
        async with open_store(url) as store:
            await store.put_batch([NewEvent(**event) for event in later])
            await store.put_batch([NewEvent(**e("t0", "t0r1", "run.start", "trace", {}, 300))])

    asyncio.run(touch())
    listed = [line.split()[0] for line in cli(url, "threads").stdout.splitlines()[1:]]
    assert listed == ["t1", "t0", "t2"]
    as_json = [json.loads(line) for line in cli(url, "threads", "--json").stdout.splitlines()]
    assert [row["last_activity_at"] for row in as_json] == [
        (START + timedelta(seconds=n)).isoformat(timespec="seconds") for n in (600, 300, 9)]


def test_show_prints_a_timeline_and_totals(cli: Cli, shared_url: str) -> None:
    result = cli(shared_url, "show", "r1")
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
    failed = cli(shared_url, "show", "r2").stdout
    assert "ValueError: bad input" in failed
    assert "status error" in failed


def test_events_filters_and_json(cli: Cli, shared_url: str) -> None:
    outcomes = cli(shared_url, "events", "t1", "--type", "tool.outcome", "--type", "run.end", "--json")
    records = [json.loads(line) for line in outcomes.stdout.splitlines()]
    assert [(r["seq"], r["event_type"]) for r in records] == [
        (6, "tool.outcome"), (7, "tool.outcome"), (8, "run.end")]
    assert all(validate_record(r) == [] for r in records)
    run_lines = cli(shared_url, "events", "t1", "--run", "r2", "--json").stdout.splitlines()
    by_run = [json.loads(line)["seq"] for line in run_lines]
    assert by_run == [9, 10]
    paged = cli(shared_url, "events", "t1", "--after-seq", "3", "--limit", "2").stdout.splitlines()
    assert paged[0] == "2025-03-01 UTC"
    assert [line.split()[:4] for line in paged[1:]] == [
        ["09:30:03.000", "4", "r1", "tool.call"], ["09:30:04.000", "5", "r1", "llm.tool.result"]]
    assert "[10+5 tok $0.0010]" in cli(shared_url, "events", "t1", "--type", "llm.ai.response").stdout
    assert cli(shared_url, "events", "t1", "--task", "nope").stdout == ""


def test_usage_totals_per_run_model_and_caller(cli: Cli, shared_url: str) -> None:
    text = cli(shared_url, "usage", "t1").stdout
    assert "per model" in text
    assert "fake-model" in text
    assert "lead_agent" in text
    summary = json.loads(cli(shared_url, "usage", "--json").stdout)
    assert summary["total"]["total_tokens"] == 30
    assert len(summary["runs"]) == 4
    assert summary["by_model"]["fake-model"]["llm_calls"] == 2


# -- every thread or run argument that names nothing ------------------------------------------------
NOT_FOUND = [
    (["runs", "nope"], "thread 'nope' not found"),
    (["events", "nope"], "thread 'nope' not found"),
    (["events", "t1", "--run", "no-such-run"], "run 'no-such-run' not found in thread 't1'"),
    (["events", "t1", "--run", "r1x"], "run 'r1x' not found in thread 't1'"),
    (["events", "t1", "--run", "t2r1"], "run 't2r1' not found in thread 't1'"),
    (["tail", "nope"], "thread 'nope' not found"),
    (["show", "no-such-run"], "run 'no-such-run' not found"),
    (["show", "nope"], "run 'nope' not found (a run id prefix needs at least 6 characters)"),
    (["show", "r1", "--thread", "nope"], "thread 'nope' not found"),
    (["show", "r1", "--thread", "t2"], "run 'r1' not found in thread 't2'"),
    (["verify", "nope"], "thread 'nope' not found"),
    (["verify", "t1", "nope"], "thread 'nope' not found"),
    (["export", "nope"], "thread 'nope' not found"),
    (["export", "--run", "no-such-run"], "run 'no-such-run' not found"),
    (["export", "t2", "--run", "r1"], "run 'r1' not found in thread 't2'"),
    (["export", "--format", "otlp", "--thread", "nope"], "thread 'nope' not found"),
    (["export", "--format", "otlp", "--run", "no-such-run"], "run 'no-such-run' not found"),
    (["usage", "nope"], "thread 'nope' not found"),
    (["reprice", "--thread", "nope"], "thread 'nope' not found"),
    (["prune", "--older-than", "1d", "--thread", "nope"], "thread 'nope' not found"),
]


@pytest.mark.parametrize(("args", "message"), NOT_FOUND, ids=lambda v: " ".join(v) if isinstance(v, list)
                         else "")
def test_a_thread_or_run_that_does_not_exist_is_one_line_and_status_1(
    cli: Cli, shared_url: str, args: list[str], message: str
) -> None:
    result = cli(shared_url, *args)
    assert_one_line_error(result, 1, message)
    assert result.stdout == ""


@pytest.mark.parametrize("destination", ["sqlite", "jsonl"])
def test_copy_of_a_missing_thread_fails_and_creates_no_destination(
    cli: Cli, shared_url: str, tmp_path: Path, destination: str
) -> None:
    target = tmp_path / ("copy.db" if destination == "sqlite" else "copy")
    assert_one_line_error(cli(shared_url, "copy", f"{destination}:///{target}", "--thread", "t1",
                              "--thread", "nope"), 1, "thread 'nope' not found")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


# -- run id prefixes and short ids -----------------------------------------------------------------
ALPHA, BRAVO, ROWLESS = "8f3a9c21d0e4a1", "8f3a9c21ff77b2", "5b6e7d1a2c3d4e"


@pytest.fixture
def prefixed_url(tmp_path: Path) -> str:
    """Thread p: runs ALPHA and BRAVO (same first 8 characters) with rows, ROWLESS with only events."""
    url = f"sqlite:///{tmp_path}/prefixes.db"

    async def fill() -> None:
        async with open_store(url) as store:
            for at, run in enumerate((ALPHA, BRAVO, ROWLESS)):
                await store.put_batch([
                    e("p", run, "run.start", "trace", {"run_name": "agent"}, 10 * at),
                    e("p", run, "llm.human.input", "message", {"type": "human", "content": run}, 10 * at + 1),
                ])
                if run != ROWLESS:
                    await store.put_run(RunRow(run_id=run, thread_id="p", status="running",
                                               started_at=START + timedelta(seconds=10 * at)))

    asyncio.run(fill())
    return url


def test_run_ids_can_be_shortened_to_a_unique_prefix(cli: Cli, prefixed_url: str) -> None:
    assert cli(prefixed_url, "show", "8f3a9c21d").stdout.startswith(f"run {ALPHA}  thread p")
    assert cli(prefixed_url, "show", ROWLESS[:6]).stdout.startswith(f"run {ROWLESS}  thread p")
    assert cli(prefixed_url, "show", ROWLESS[:6], "--thread", "p").returncode == 0
    seqs = [json.loads(line)["seq"] for line in
            cli(prefixed_url, "events", "p", "--run", "8f3a9c21f", "--json").stdout.splitlines()]
    assert seqs == [3, 4]
    exported = [json.loads(line)
                for line in cli(prefixed_url, "export", "--run", "5b6e7d1").stdout.splitlines()]
    assert [(r["run_id"], r["seq"]) for r in exported] == [(ROWLESS, 5), (ROWLESS, 6)]
    ambiguous = cli(prefixed_url, "show", "8f3a9c")
    assert_one_line_error(ambiguous, 2, "run id prefix '8f3a9c' is ambiguous: 2 runs match")
    assert ALPHA in ambiguous.stderr
    assert BRAVO in ambiguous.stderr
    assert_one_line_error(cli(prefixed_url, "events", "p", "--run", "8f3a9c21"), 2, "ambiguous")
    assert_one_line_error(cli(prefixed_url, "show", "8f3a9"), 1, "at least 6 characters")


def test_listings_show_short_ids_unless_asked_and_json_keeps_them_whole(cli: Cli, prefixed_url: str) -> None:
    runs = cli(prefixed_url, "runs", "p").stdout.splitlines()
    assert [line.split()[0] for line in runs[1:]] == ["8f3a9c21f", "8f3a9c21d"]  # 8 would be the same
    full = cli(prefixed_url, "runs", "p", "--full-ids").stdout.splitlines()
    assert [line.split()[0] for line in full[1:]] == [BRAVO, ALPHA]  # newest first
    assert [json.loads(line)["run_id"] for line in
            cli(prefixed_url, "runs", "p", "--json").stdout.splitlines()] == [BRAVO, ALPHA]
    events = cli(prefixed_url, "events", "p").stdout.splitlines()[1:]
    assert [line.split()[2] for line in events] == ["8f3a9c21d", "8f3a9c21d", "8f3a9c21f", "8f3a9c21f",
                                                    "5b6e7d1a", "5b6e7d1a"]
    assert ROWLESS in cli(prefixed_url, "events", "p", "--full-ids").stdout
    assert "8f3a9c21d " in cli(prefixed_url, "usage", "p").stdout
    assert ALPHA in cli(prefixed_url, "usage", "p", "--full-ids").stdout
    assert all(json.loads(line)["run_id"] in {ALPHA, BRAVO, ROWLESS} for line in
               cli(prefixed_url, "events", "p", "--json").stdout.splitlines())


def test_events_lines_fit_in_100_columns(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/wide.db"
    run = "f" * 32
    usage = {"input_tokens": 123456, "output_tokens": 65432, "cost_usd": 12.3456}
    long_caller = {"caller": "subagent:a-research-assistant-with-a-long-name"}
    events = [
        e("w", run, "run.start", "trace", {"run_name": "agent " * 40}, 0),
        e("w", run, "llm.human.input", "message", {"type": "human", "content": "tell me " * 100}, 1,
          **long_caller),
        e("w", run, "llm.ai.response", "message", {"type": "ai", "content": "well " * 100}, 2, usage=usage,
          model_name="a-model-with-a-long-name"),
        e("w", run, "middleware:a_very_long_tag_name1", "middleware",
          {"name": "guard", "hook": "before", "action": "edit", "changes": {"x": "y" * 200}}, 3),
    ]

    async def fill() -> None:
        async with open_store(url) as store:
            await store.put_batch(events)

    asyncio.run(fill())
    lines = cli(url, "events", "w").stdout.splitlines()
    assert len(lines) == 5
    assert all(len(line) <= 100 for line in lines), [len(line) for line in lines]
    assert lines[2].endswith("…")
    assert lines[3].endswith("…  [123456+65432 tok $12.3456]")
    assert lines[1].split()[2] == "ffffffff"
    assert run in cli(url, "events", "w", "--full-ids").stdout


# -- verify ----------------------------------------------------------------------------------------
def test_verify_passes_a_clean_store_and_catches_a_hole_and_a_bad_row(cli: Cli, url: str) -> None:
    clean = cli(url, "verify")
    assert clean.returncode == 0, clean.stdout
    assert clean.stdout.strip().endswith("verified 20 events in 2 thread(s), 4 run(s): OK")

    async def damage() -> None:
        async with open_store(url) as store:
            await store.put_batch([e("t1", "r3", "run.start", "trace", "not an object", 20),
                                   e("t1", "r4", "llm.human.input", "message", {"type": "human",
                                                                                 "content": "x"}, 21)])
            await store.delete_by_run("t1", "r4")
            await store.put(**e("t1", "r5", "llm.human.input", "message", {"type": "human",
                                                                            "content": "y"}, 22))

    asyncio.run(damage())
    broken = cli(url, "verify")
    assert broken.returncode == 1
    lines = broken.stdout.splitlines()
    assert any(line.startswith("thread t1 seq 11 (run.start): content: ") for line in lines), lines
    assert "thread t1: missing seq 12 (lost writes or a deleted run)" in lines
    assert lines[-1].endswith("2 problem(s)")
    assert cli(url, "verify", "t2").returncode == 0


# -- export and copy -------------------------------------------------------------------------------
def test_export_writes_jsonl_records(cli: Cli, shared_url: str, tmp_path: Path) -> None:
    out = cli(shared_url, "export", "t1").stdout.splitlines()
    records = [json.loads(line) for line in out]
    assert [r["seq"] for r in records] == list(range(1, 11))
    assert all(validate_record(r) == [] for r in records)
    target = tmp_path / "all.jsonl"
    result = cli(shared_url, "export", "--output", str(target))
    assert result.returncode == 0
    assert len(target.read_text().splitlines()) == 20
    assert "exported 20 events from 2 thread(s)" in result.stderr
    unwritable = cli(shared_url, "export", "--output", str(tmp_path / "missing" / "all.jsonl"))
    assert_one_line_error(unwritable, 2, f"cannot write {tmp_path / 'missing' / 'all.jsonl'}: ")
    assert "store" not in unwritable.stderr  # the file's fault, not the store's


async def dump(url: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    async with open_store(url) as store:
        events = [event.to_dict() for thread in await store.list_threads()
                  for event in await store.list_events(thread)]
        runs = [row.to_dict() for row in await store.list_runs()]
    return events, runs


def test_copy_jsonl_to_sqlite_to_postgres_preserves_seq_and_is_idempotent(
    cli: Cli, tmp_path: Path, postgres_database_url: str
) -> None:
    source = seeded(f"jsonl:///{tmp_path}/journal")
    middle = f"sqlite:///{tmp_path}/copy.db"
    target = f"{postgres_database_url}?schema=cli_copy_{tmp_path.name[-12:].replace('-', '_')}"
    first = cli(source, "copy", middle)
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"copied 20 events (20 new) and 4 run rows of 2 thread(s) to {middle}\n"
    second = cli("copy", middle, target)  # the ``copy SRC DST`` spelling
    assert second.returncode == 0, second.stderr
    expected = asyncio.run(dump(source))
    assert asyncio.run(dump(middle)) == expected
    assert asyncio.run(dump(target)) == expected
    again = cli(middle, "copy", target, "--thread", "t2")
    assert again.stdout == f"copied 10 events (0 new) and 2 run rows of 1 thread(s) to {target}\n"
    assert asyncio.run(dump(target)) == expected
    assert cli(target, "verify").returncode == 0


async def add_bodies(url: str) -> list[Body]:
    """Two bodies of t1 referenced by a new event of run r9, and one body of t2 alone."""
    said = [Body.of("t1", {"role": "system", "content": "be brief"}), Body.of("t1", {"name": "search"})]
    alone = Body.of("t2", "kept with its thread")
    async with open_store(url) as store:
        asked = e("t1", "r9", "llm.human.input", "message", {"type": "human", "content": "hi"}, 30,
                  bodies=[body.digest for body in said])
        await store.put_batch([asked], bodies=said)
        await store.put_bodies([alone])
    return [*said, alone]


async def all_bodies(url: str) -> list[Body]:
    async with open_store(url) as store:
        return [body for thread in ("t1", "t2") for body in await store.list_bodies(thread)]


def test_bodies_travel_with_copy_export_and_import_and_verify_checks_them(
    cli: Cli, sqlite_url: str, tmp_path: Path
) -> None:
    bodies = sorted(asyncio.run(add_bodies(sqlite_url)), key=lambda body: (body.thread_id, body.digest))
    copied = f"jsonl:///{tmp_path}/copied"
    result = cli(sqlite_url, "copy", copied)
    assert result.stdout == f"copied 21 events (21 new), 3 bodies and 4 run rows of 2 thread(s) to {copied}\n"
    assert asyncio.run(all_bodies(copied)) == bodies
    exported = tmp_path / "export.jsonl"
    result = cli(copied, "export", "--output", str(exported))
    assert "exported 21 events and 3 bodies from 2 thread(s)" in result.stderr
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert [line["body"] for line in lines if "body" in line] == [body.digest for body in bodies]
    first_event = next(n for n, line in enumerate(lines) if "seq" in line)
    assert "body" in lines[first_event - 1]  # a thread's bodies come before its events
    imported = f"sqlite:///{tmp_path}/imported.db"
    result = cli(imported, "import", str(exported))
    assert result.stdout == f"imported 21 events (21 new) and 3 bodies from {exported}\n", result.stderr
    assert asyncio.run(all_bodies(imported)) == bodies
    assert asyncio.run(dump(imported))[0] == asyncio.run(dump(sqlite_url))[0]
    assert cli(imported, "import", str(exported)).stdout.startswith("imported 21 events (0 new)")
    for checked in (sqlite_url, copied, imported):
        assert cli(checked, "verify").returncode == 0, checked

    database = sqlite3.connect(tmp_path / "imported.db")  # damage one body, lose another
    with database:
        database.execute("UPDATE run_journal_bodies SET data = ? WHERE digest = ?",
                         (b'"x"', bodies[0].digest))
        database.execute("DELETE FROM run_journal_bodies WHERE digest = ?", (bodies[1].digest,))
    database.close()
    broken = cli(imported, "verify")
    assert broken.returncode == 1
    lines = broken.stdout.splitlines()
    assert f"thread t1 body {bodies[0].digest}: its data does not hash to its digest (damaged)" in lines
    assert f"thread t1 seq 11: references body {bodies[1].digest}, which the thread does not hold" in lines

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"body": bodies[0].digest, "thread_id": "t1", "data": '"forged"'}) + "\n")
    assert_one_line_error(cli(imported, "import", str(bad)), 1, "does not hash to its digest")
    assert_one_line_error(cli(imported, "import", str(tmp_path / "missing.jsonl")), 1, "no file")


def test_copy_hides_the_destination_password(cli: Cli, sqlite_url: str, postgres_database_url: str) -> None:
    base, _, database = postgres_database_url.rpartition("/")
    user, _, host = base.removeprefix("postgresql://").rpartition("@")
    with_password = f"postgresql://{user}:secret@{host}/{database}?schema=cli_password"
    done = cli(sqlite_url, "copy", with_password, "--thread", "t1")
    assert done.returncode == 0, done.stderr
    assert "secret" not in done.stdout
    assert f"to postgresql://{user}:***@{host}/{database}?schema=cli_password" in done.stdout


# -- mistakes, --help, --version, Ctrl-C -------------------------------------------------------------
def test_user_mistakes_are_one_line_with_a_status(cli: Cli, sqlite_url: str, tmp_path: Path) -> None:
    assert_one_line_error(cli("not-a-url", "threads"), 2, "not a store URL")
    assert_one_line_error(cli("ftp://host/x", "threads"), 2, "unknown store URL scheme 'ftp'")
    assert_one_line_error(cli(f"sqlite:///{tmp_path}/missing.db", "threads"), 1, "no store at")
    assert_one_line_error(cli(f"jsonl:///{tmp_path}/missing", "copy", sqlite_url), 1, "no store at")
    assert_one_line_error(cli(f"sqlite:///{tmp_path}/missing.db", "reconcile", "--older-than", "1h"), 1,
                          "no store at")
    assert not (tmp_path / "missing.db").exists()
    assert not (tmp_path / "missing").exists()
    assert_one_line_error(cli(sqlite_url, "runs", "bad/id"), 2, "thread_id")
    assert_one_line_error(cli(sqlite_url, "show", "bad/id"), 2, "run_id")
    unreachable = cli("postgresql://postgres@127.0.0.1:9/nothing", "threads")
    assert_one_line_error(unreachable, 1, "postgresql://postgres@127.0.0.1:9/nothing")
    usage = cli(sqlite_url, "events")
    assert usage.returncode == 2
    assert "Traceback" not in usage.stderr


def test_help_names_every_scheme_and_version_needs_no_url(cli: Cli) -> None:
    from importlib.metadata import version

    shown = cli("--help")
    assert shown.returncode == 0
    for text in ("memory://", "jsonl:///dir", "jsonl:////abs/dir", "sqlite:///file.db", "sqlite:////abs/file.db",
                 "postgresql://", "redis://host:6379/0", "relative to the current directory", "130"):
        assert text in shown.stdout
    assert cli("--version") == Done(0, f"run-journal {version('run-journal')}\n", "")


@pytest.mark.parametrize("command", [["threads"], ["verify"], ["export"], ["copy", "memory://"]])
def test_ctrl_c_anywhere_is_status_130_without_a_traceback(
    cli: Cli, sqlite_url: str, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    async def interrupted(*_: Any, **__: Any) -> list[str]:
        raise KeyboardInterrupt

    monkeypatch.setattr(RunEventStore, "list_threads", interrupted)
    monkeypatch.setattr(RunEventStore, "list_recent_threads", interrupted)
    assert cli(sqlite_url, *command) == Done(130, "", "")


def test_help_imports_no_command_dependencies() -> None:
    """``--help`` and ``--version`` load neither LangChain (prices), jsonschema (the contract) nor a
    store driver: those are imported by the commands that use them."""
    probe = ("import sys\nfrom run_journal.cli import main\n"
             "for args in (['--help'], ['--version']):\n"
             "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
             "heavy = ('langchain_core', 'jsonschema', 'run_journal.usage', 'run_journal.contract',\n"
             "         'sqlalchemy', 'asyncpg', 'redis', 'run_journal.stores.sql')\n"
             "print(sorted(name for name in heavy if name in sys.modules), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stderr == "[]\n"


@pytest.fixture
def sigint_reaches_children() -> Iterator[None]:
    """A test run in the background (``pytest &``) ignores SIGINT, and so would every process it starts:
    Ctrl-C could never stop them. A handler here (reset to the default by exec) lets it through."""
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def read_lines(stream: Any) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def start_tail(url: str, *args: str) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    process = subprocess.Popen([RUN_JOURNAL, url, "tail", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, bufsize=1)
    return process, read_lines(process.stdout)


def stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    """Ctrl-C, then the exit status and everything printed on stderr."""
    process.send_signal(signal.SIGINT)
    try:
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    return code, process.stderr.read() if process.stderr else ""


@pytest.mark.slow
@pytest.mark.usefixtures("sigint_reaches_children")
def test_ctrl_c_stops_tail_quietly_with_status_130(sqlite_url: str) -> None:
    for attempt in range(10):
        process, lines = start_tail(sqlite_url, "t1", "--last", "2", "--json")
        assert [json.loads(lines.get(timeout=60))["seq"] for _ in range(2)] == [9, 10]
        time.sleep(0.02 * attempt)  # interrupt at different points of the poll loop
        assert stop(process) == (130, ""), f"attempt {attempt}"


@pytest.mark.slow
@pytest.mark.usefixtures("sigint_reaches_children")
def test_tail_follows_events_written_by_another_process(sqlite_url: str) -> None:
    process, lines = start_tail(sqlite_url, "t1", "--last", "2", "--json")
    try:
        history = [json.loads(lines.get(timeout=60))["seq"] for _ in range(2)]
        assert history == [9, 10]  # printed: the tail is following from seq 10 on

        async def write() -> None:
            async with open_store(sqlite_url) as store:
                await store.put(**e("t1", "r9", "run.start", "trace", {"run_name": "late"}, 30))
                await store.put(**e("t1", "r9", "run.end", "outputs", {"output": []}, 31, status="success"))

        asyncio.run(write())
        live = [json.loads(lines.get(timeout=60)) for _ in range(2)]
        assert [(r["seq"], r["event_type"]) for r in live] == [(11, "run.start"), (12, "run.end")]
    finally:
        code, errors = stop(process)
    assert (code, errors) == (130, "")


@pytest.mark.slow
@pytest.mark.usefixtures("sigint_reaches_children")
def test_tail_wait_follows_a_thread_that_starts_after_it(sqlite_url: str) -> None:
    process, lines = start_tail(sqlite_url, "fresh", "--wait", "--json")
    try:
        async def write() -> None:
            async with open_store(sqlite_url) as store:
                await store.put(**e("fresh", "f1", "run.start", "trace", {"run_name": "new"}, 40))

        asyncio.run(write())
        assert json.loads(lines.get(timeout=60))["event_type"] == "run.start"
    finally:
        code, errors = stop(process)
    assert (code, errors) == (130, "")


@pytest.mark.slow
def test_the_console_script_prints_its_version() -> None:
    from importlib.metadata import version

    done = spawn("--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"run-journal {version('run-journal')}\n", "")


@pytest.mark.slow
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


def test_show_and_verify_a_journaled_langgraph_run(cli: Cli, tmp_path: Path) -> None:
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
    shown = cli(url, "show", run_id[:6])
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"run {run_id}  thread lg")
    timeline = [line.split()[2] for line in shown.stdout.splitlines()[1:] if line[:2].isdigit()]
    assert timeline == ["run.start", "llm.human.input", "llm.request", "llm.ai.response", "tool.call",
                        "llm.tool.result", "tool.outcome", "llm.request", "llm.ai.response", "run.end"]
    assert "add success, 1 bytes" in shown.stdout
    assert "status success" in shown.stdout
    assert "model calls 2" in shown.stdout
    assert run_id[:8] in cli(url, "runs", "lg").stdout.splitlines()[1].split()
    verified = cli(url, "verify")
    assert verified.returncode == 0, verified.stdout
    assert verified.stdout.strip().endswith("verified 10 events in 1 thread(s), 1 run(s): OK")


def test_short_ids_are_the_shortest_unique_prefixes_of_the_listing() -> None:
    import random

    from run_journal.cli.render import SHORT_ID, ShortIds

    rng = random.Random(7)
    ids = [f"{rng.choice(['run', 'w1-run0-', 'abcdef'])}{rng.getrandbits(20):05x}" for _ in range(300)]
    short = ShortIds(ids[:200])
    for run_id in ids:  # the last 100 arrive while the listing is shown, as in a tail
        shown = short(run_id)
        others = {other for other in ids if other != run_id}
        assert run_id.startswith(shown)
        assert len(shown) >= min(SHORT_ID, len(run_id))
        assert len(shown) == len(run_id) or not any(o.startswith(shown) for o in ids[:200] if o != run_id)
        assert len(shown) == SHORT_ID or any(o.startswith(shown[:-1]) for o in others)
    assert ShortIds(ids, full=True)(ids[0]) == ids[0]


def test_prune_and_reconcile_read_durations_alike(cli: Cli, sqlite_url: str) -> None:
    for args in (["reconcile", "--older-than"], ["prune", "--dry-run", "--older-than"]):
        for good in ("2w", "1d", "90s", "1.5h"):
            done = cli(sqlite_url, *args, good)
            assert done.returncode == 0, (args, good, done.stderr)
        bad = cli(sqlite_url, *args, "soon")
        assert bad.returncode == 2
        assert "not a duration: 'soon' (e.g. 90s, 30m, 2h, 1d, 2w)" in bad.stderr


# -- store URLs in messages: the password hidden, the failing store named ------------------------------
PASSWORD = "hunter2-not-shown"
COMMAND_ARGS: dict[str, list[str]] = {
    "threads": [], "runs": ["t1"], "show": ["r1"], "events": ["t1"], "tail": ["t1"], "verify": [],
    "export": [], "import": ["-"], "copy": ["memory://"], "usage": [],
    "reconcile": ["--older-than", "1h"],
    "serve": ["--port", "0"], "reprice": [], "prune": ["--older-than", "30d"], "check": ["suite.yaml"],
    "diff": ["r1", "r2"], "calls": ["r1"],
}


def commands_of_help(cli: Cli) -> set[str]:
    """The commands ``--help`` lists: a new command must be added to COMMAND_ARGS."""
    text = cli("--help").stdout.split("COMMAND", 2)[2].split("\n\n", 1)[0]
    return {match[1] for line in text.splitlines() if (match := re.match(r"    (\w[\w-]*)\s", line))}


def assert_hidden(done: Done, code: int, needle: str) -> None:
    assert_one_line_error(done, code, needle)
    assert PASSWORD not in done.stdout + done.stderr
    assert "***" in done.stderr


def test_every_command_fails_on_an_unreachable_store_naming_it_without_its_password(cli: Cli) -> None:
    assert commands_of_help(cli) == set(COMMAND_ARGS)
    postgres = f"postgresql://postgres:{PASSWORD}@127.0.0.1:9/nothing"
    redis = f"redis://:{PASSWORD}@127.0.0.1:9/0"
    misspelt = f"postgresq://someone:{PASSWORD}@db.example/journal"
    for command, args in COMMAND_ARGS.items():
        role = "source store" if command == "copy" else "store"
        assert_hidden(cli(postgres, command, *args), 1,
                      f"{role} postgresql://postgres:***@127.0.0.1:9/nothing: ")
        assert_hidden(cli(redis, command, *args), 1, f"{role} redis://:***@127.0.0.1:9/0: ")
        assert_hidden(cli(misspelt, command, *args), 2, "unknown store URL scheme 'postgresq'")
        assert_hidden(cli(f"postgresql+psycopg://u:{PASSWORD}@h/db", command, *args), 2, "asyncpg")


def test_copy_and_prune_name_the_destination_or_archive_that_failed(cli: Cli, sqlite_url: str) -> None:
    unreachable = f"postgresql://postgres:{PASSWORD}@127.0.0.1:9/nothing"
    assert_hidden(cli(sqlite_url, "copy", unreachable), 1,
                  "destination postgresql://postgres:***@127.0.0.1:9/nothing: ConnectionRefusedError")
    assert_hidden(cli(sqlite_url, "prune", "--older-than", "30d", "--archive", unreachable), 1,
                  "archive postgresql://postgres:***@127.0.0.1:9/nothing: cannot be opened: "
                  "ConnectionRefusedError")
    assert cli(sqlite_url, "threads").stdout.count("\n") == 3  # nothing was removed


def test_an_archive_that_fails_while_copying_is_named_not_the_source(cli: Cli, sqlite_url: str,
                                                                       tmp_path: Path) -> None:
    import sqlite3

    archive = f"sqlite:///{tmp_path}/archive.db"
    asyncio.run(open_store(archive).setup())
    with sqlite3.connect(tmp_path / "archive.db") as connection:  # the archive's disk "fills up"
        connection.execute("CREATE TRIGGER full BEFORE INSERT ON run_journal_events "
                           "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
    done = cli(sqlite_url, "prune", "--older-than", "30d", "--archive", archive)
    assert_one_line_error(done, 1, f"archive {archive}: while copying thread 't1': ")
    assert "disk is full" in done.stderr
    assert sqlite_url not in done.stderr
    listed = cli(sqlite_url, "threads").stdout
    assert "t1" in listed
    assert "t2" in listed


# -- a newcomer's command lines ----------------------------------------------------------------------
@pytest.mark.parametrize(("typed", "meant"), [
    ("sqlite:journal.db", "sqlite:///journal.db"), ("jsonl:dir", "jsonl:///dir"),
    ("sqlite:", "sqlite:///journal.db"), ("jsonl:", "jsonl:///journal"), ("sqlite://act.db", "sqlite:///act.db"),
    ("sqlite:/var/lib/j.db", "sqlite:////var/lib/j.db"), ("SQLite:j.db", "SQLite:///j.db"),
    ("sqlite:///", "sqlite:///journal.db"),
])
def test_a_file_url_without_its_slashes_is_one_line_with_the_corrected_url(
    cli: Cli, typed: str, meant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for command in (["threads"], ["runs", "t1"], ["copy", "memory://"]):
        assert_one_line_error(cli(typed, *command), 2, f"{typed!r} is not a store URL: did you mean {meant}?")
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_the_command_before_the_url_says_the_url_comes_first(cli: Cli, sqlite_url: str) -> None:
    assert_one_line_error(cli("threads", sqlite_url), 2,
                          f"the store URL comes first, then the command: run-journal {sqlite_url} threads")
    assert_one_line_error(cli("--traceback", "runs", sqlite_url, "t1", "--json"), 2,
                          f"run-journal --traceback {sqlite_url} runs t1 --json")
    hidden = cli("events", "postgresql://ada:hunter2@db/app", "t1")
    assert_one_line_error(hidden, 2, "run-journal postgresql://ada:***@db/app events t1")
    assert "hunter2" not in hidden.stderr
    assert_one_line_error(cli("threads"), 2, "run-journal URL threads")
    assert cli(sqlite_url, "threads").returncode == 0
    assert cli("copy", sqlite_url, "memory://").returncode == 0  # copy SRC DST stays accepted


# -- costs -------------------------------------------------------------------------------------------
def test_a_tiny_cost_is_not_shown_as_free_and_an_unknown_one_says_why(cli: Cli, url: str) -> None:
    tiny = UsageTotals(input_tokens=3, output_tokens=1, total_tokens=4, llm_calls=1, cost_usd=0.00002)
    unpriced = UsageTotals(input_tokens=3, output_tokens=1, total_tokens=4, llm_calls=1, cost_usd=None)
    note = "no price for model 'acme-llm-7b' in genai-prices 0.0.99"

    async def write() -> None:
        async with open_store(url) as store:
            await store.put_batch([NewEvent(**e("costs", "tiny-run", "run.start", "trace", {}, 20)),
                                   NewEvent(**e("costs", "unpriced-run", "run.start", "trace", {}, 30))])
            await store.put_run(RunRow(run_id="tiny-run", thread_id="costs", status="success",
                                       started_at=START, usage=tiny, usage_by_model={"small": tiny}))
            await store.put_run(RunRow(run_id="unpriced-run", thread_id="costs", status="success",
                                       started_at=START + timedelta(seconds=30), usage=unpriced,
                                       usage_by_model={"acme-llm-7b": unpriced}, cost_note=note))

    asyncio.run(write())
    runs = cli(url, "runs", "costs", "--full-ids").stdout
    assert "<$0.0001" in runs
    assert "$0.0000" not in runs
    assert f"cost unknown for run unpriced-run: {note}" in runs
    assert "pricing=" in runs
    assert "docs/costs.md" in runs
    shown = cli(url, "show", "tiny-run").stdout
    assert "cost <$0.0001" in shown
    assert "cost unknown" not in shown
    unknown = cli(url, "show", "unpriced-run").stdout
    assert f"cost unknown for run unpriced-run: {note}" in unknown
    assert "reprice --pricing FILE" in unknown
    usage = cli(url, "usage", "costs", "--full-ids").stdout
    assert "<$0.0001" in usage
    assert note in usage


@pytest.mark.slow
def test_a_missing_driver_is_named_not_blamed_on_the_server() -> None:
    probe = ("import sys\nsys.modules['asyncpg'] = None\nsys.modules['redis'] = None\n"
             "from run_journal.cli import main\n"
             "sys.exit(main([sys.argv[1], 'threads']))\n")
    for url, needle in (("postgresql://ada:hunter2@127.0.0.1:9/app",
                         "PostgreSQL stores need the asyncpg driver: pip install 'run-journal[postgres]'"),
                        ("redis://127.0.0.1:9/0", "redis:// stores need the redis client: "
                                                  "pip install 'run-journal[redis]'")):
        done = subprocess.run([sys.executable, "-c", probe, url], capture_output=True, text=True,
                              timeout=120, check=False)
        assert_one_line_error(Done(done.returncode, done.stdout, done.stderr), 2, needle)
        assert "hunter2" not in done.stderr
        assert "Connect" not in done.stderr
