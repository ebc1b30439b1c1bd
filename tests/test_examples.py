"""Every example runs as a newcomer would run it (a subprocess in an empty directory) and prints
what it claims to show; then it runs a second time against the same store and directory, as someone
trying it again would, and must succeed and still make sense."""

from __future__ import annotations

import os
import re
import shlex
import sqlite3
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BIN = Path(sys.executable).parent


def example_env() -> dict[str, str]:
    """The caller's environment without a real model and without this virtualenv on ``PATH`` (as
    when it is not activated)."""
    path = [part for part in os.environ.get("PATH", "").split(os.pathsep) if part and Path(part) != BIN]
    env = {key: value for key, value in os.environ.items()
           if key not in {"RUN_JOURNAL_MODEL", "RUN_JOURNAL_URL", "VIRTUAL_ENV"}}
    return {**env, "PATH": os.pathsep.join(path)}


def run_example(name: str, cwd: Path, *args: str, timeout: float = 180, python: str = sys.executable) -> str:
    done = subprocess.run(
        [python, str(EXAMPLES / name), *args], cwd=cwd, env=example_env(), capture_output=True,
        text=True, timeout=timeout, check=False,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def hinted_commands(output: str) -> list[str]:
    """The command lines the quickstart suggests at its end."""
    tail = output.split("read it back with the command line:\n", 1)[1]
    return [line.strip() for line in tail.splitlines() if line.startswith("  ")]


def run_hint(command: str, cwd: Path) -> str:
    """A suggested command line, run the way a shell would run it from ``cwd``."""
    done = subprocess.run(shlex.split(command), cwd=cwd, env=example_env(), capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def timeline(output: str) -> list[tuple[int, str, str]]:
    return [(int(m[1]), m[2], m[3]) for m in re.finditer(r"^\s+(\d+)  (\S+)\s+(\S+)\s", output, re.MULTILINE)]


def test_quickstart_journals_into_journal_db_in_the_current_directory(tmp_path: Path) -> None:
    out = run_example("quickstart.py", tmp_path)
    assert out.splitlines()[0] == "success 133"
    assert timeline(out) == [
        (1, "run.start", "lead_agent"), (2, "llm.human.input", "lead_agent"),
        (3, "llm.request", "lead_agent"), (4, "llm.ai.response", "lead_agent"),
        (5, "tool.call", "lead_agent"), (6, "llm.tool.result", "lead_agent"),
        (7, "tool.outcome", "lead_agent"), (8, "llm.request", "lead_agent"),
        (9, "llm.ai.response", "lead_agent"), (10, "run.end", "lead_agent"),
    ]
    assert 'get_weather({"city":"Paris"})' in out
    assert "get_weather success, 30 bytes" in out
    assert "status success: 2 model calls, 110 input + 23 output = 133 tokens, 1 tool call(s)" in out
    with sqlite3.connect(tmp_path / "journal.db") as db:
        assert db.execute("select count(*) from run_journal_events").fetchone() == (10,)
    again = run_example("quickstart.py", tmp_path)  # a second turn on the same thread continues seq
    assert again.splitlines()[0] == "success 133"
    assert [seq for seq, _, _ in timeline(again)] == list(range(11, 21))
    assert "status success: 2 model calls, 110 input + 23 output = 133 tokens, 1 tool call(s)" in again
    first_run = re.search(r"^run (\w+) on thread t1$", out, re.MULTILINE)
    second_run = re.search(r"^run (\w+) on thread t1$", again, re.MULTILINE)
    assert first_run is not None
    assert second_run is not None
    assert first_run[1] != second_run[1]


def test_quickstart_suggests_command_lines_that_run_without_an_activated_virtualenv(
        tmp_path: Path) -> None:
    out = run_example("quickstart.py", tmp_path)
    threads, show = hinted_commands(out)
    # This virtualenv is outside the current directory: its script, by its full path.
    script = BIN / "run-journal"
    assert script.is_file()
    assert threads == f"{shlex.quote(str(script))} sqlite:///journal.db threads"
    run_id = re.search(r"^run (\w+) on thread t1$", out, re.MULTILINE)
    assert run_id is not None
    assert show == f"{shlex.quote(str(script))} sqlite:///journal.db show {run_id[1]}"
    listed = run_hint(threads, tmp_path)
    assert re.search(r"^t1\s+10\s+1\s+success", listed, re.MULTILINE), listed
    shown = run_hint(show, tmp_path)
    assert f"run {run_id[1]}" in shown
    assert "get_weather" in shown


def make_virtualenv(root: Path, *, with_script: bool) -> Path:
    """A virtualenv at ``root/.venv`` that sees this one's packages (run_journal included); with the
    ``run-journal`` script pip would install, or without it. Returns its Python."""
    env_dir = root / ".venv"
    venv.create(env_dir, with_pip=False, symlinks=os.name != "nt")
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site_packages = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    here = sysconfig.get_paths()["purelib"]
    Path(site_packages, "parent_env.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    if with_script:
        script = python.parent / "run-journal"
        script.write_text(f"#!{python}\nimport sys\nfrom run_journal.cli import main\nsys.exit(main())\n")
        script.chmod(0o755)
    return python


@pytest.mark.skipif(os.name == "nt", reason="POSIX virtualenv layout and shell quoting")
def test_quickstart_shows_a_virtualenv_in_the_current_directory_relative_to_it(tmp_path: Path) -> None:
    python = make_virtualenv(tmp_path, with_script=True)
    out = run_example("quickstart.py", tmp_path, python=str(python))
    threads, _ = hinted_commands(out)
    assert threads == ".venv/bin/run-journal sqlite:///journal.db threads"
    assert re.search(r"^t1\s+10\s+1\s+success", run_hint(threads, tmp_path), re.MULTILINE)
    # Without the script (run_journal importable, not installed with its entry point): through Python.
    (python.parent / "run-journal").unlink()
    again = run_example("quickstart.py", tmp_path, python=str(python))
    threads, _ = hinted_commands(again)
    assert threads.startswith(".venv/bin/python ")
    assert threads.endswith(" sqlite:///journal.db threads")
    assert re.search(r"^t1\s+20\s+2\s+success", run_hint(threads, tmp_path), re.MULTILINE)


def test_tool_agent_prices_the_run(tmp_path: Path) -> None:
    lookups = []
    for _ in range(2):  # the second run is a new run on the same thread of the same journal.db
        out = run_example("tool_agent.py", tmp_path)
        assert "answer: Order A-1001 shipped on 2024-05-02 and arrives Friday; it is still refundable." in out
        assert "tool calls 2 (0 failed), messages 5" in out
        assert "tokens: 2550 input + 100 output = 2650 in 2 model calls" in out
        # 2550 input tokens at $2.50/M + 100 output tokens at $10/M: the row is this run's alone
        assert "cost: $0.007375" in out
        assert "by model fake-gpt: 2650 tokens $0.007375" in out
        lookup = re.search(r"seq (\d+): lookup_order -> success", out)
        assert lookup is not None
        lookups.append(int(lookup[1]))
        assert re.search(r"seq \d+: refund_policy -> success", out)
    assert lookups[1] > lookups[0]


def test_interrupt_then_resume_names_the_interrupted_run(tmp_path: Path) -> None:
    first_runs = []
    for _ in range(2):  # a thread of its own each time in the same journal.db
        out = run_example("interrupt_resume.py", tmp_path)
        runs = re.findall(r"^run (\w+): status (\w+), resumed_from (\w+)$", out, re.MULTILINE)
        assert [status for _, status, _ in runs] == ["interrupted", "success"]
        (first, _, origin), (_, _, resumed) = runs
        assert origin == "None"
        assert resumed == first
        first_runs.append(first)
        assert "value={'question': 'Approve a $40 refund?'}" in out
        assert re.findall(r"seq\s+(\d+) \w+ (\S+)", out) == [
            ("1", "run.start"), ("2", "llm.human.input"), ("3", "run.interrupt"),
            ("4", "run.start"), ("5", "llm.request"), ("6", "llm.ai.response"), ("7", "run.end"),
        ]
        assert "second run resumes the first: True" in out
        hint = out.rstrip().splitlines()[-1]
        assert hint == f"browse the interrupted run: run-journal sqlite:///journal.db show {first}"
        shown = subprocess.run([str(BIN / "run-journal"), *shlex.split(hint.split(": ", 1)[1])[1:]],
                               cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True).stdout
        assert "run.interrupt" in shown
        assert "status interrupted" in shown
    assert first_runs[0] != first_runs[1]
    with sqlite3.connect(tmp_path / "journal.db") as connection:  # both invocations, kept on disk
        threads = connection.execute("SELECT DISTINCT thread_id FROM run_journal_events").fetchall()
    assert len(threads) == 2


def test_postgres_workers_names_a_missing_driver_not_the_server(tmp_path: Path) -> None:
    python = make_virtualenv(tmp_path, with_script=False)
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site_packages = subprocess.run([str(python), "-c", where], capture_output=True, text=True,
                                   check=True).stdout.strip()
    Path(site_packages, "zz_no_asyncpg.pth").write_text("import sys; sys.modules['asyncpg'] = None\n")
    out = run_example("postgres_workers.py", tmp_path, "postgresql://postgres@127.0.0.1:5432/test",
                      python=str(python))
    assert out.startswith("skipped: the PostgreSQL driver asyncpg is not installed "
                          "(pip install 'run-journal[postgres]')")
    assert "reachable" not in out


def test_the_examples_workspace_and_journal_are_ignored_by_git() -> None:
    root = EXAMPLES.parent
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("examples/workspace/notes.txt", "workspace/notes.txt", "examples/journal.db", "journal.db"):
        ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=root, check=False)
        assert ignored.returncode == 0, path
    assert subprocess.run(["git", "check-ignore", "-q", "run_journal/workspace/snapshot.py"], cwd=root,
                          check=False).returncode == 1


def test_subagent_steps_read_back_by_task_id_in_pages(tmp_path: Path) -> None:
    starts = []
    for _ in range(2):  # the second run's task-1 is read back alone, not mixed with the first run's
        out = run_example("subagent_stream.py", tmp_path)
        steps = re.findall(r"page (\d): seq (\d+) #(\d) (\w+): (.*)", out)
        assert [(page, index, kind) for page, _, index, kind, _ in steps] == [
            ("1", "0", "ai"), ("1", "1", "tool"), ("2", "2", "ai")]
        assert steps[1][4].startswith("3 papers on event logs")
        assert [int(seq) for _, seq, _, _, _ in steps] == sorted(int(seq) for _, seq, _, _, _ in steps)
        assert re.search(r"subagent\.start\s+subagent:researcher\s+task_id=task-1", out)
        assert re.search(r"subagent\.end\s+subagent:researcher\s+task_id=task-1", out)
        assert "usage lead_agent: 2 call(s), 104 tokens" in out
        assert "usage subagent:researcher: 2 call(s), 122 tokens" in out
        timeline_seqs = [int(seq) for seq in re.findall(r"^  seq\s+(\d+) ", out, re.MULTILINE)]
        assert timeline_seqs == list(range(timeline_seqs[0], timeline_seqs[0] + 21))
        starts.append(timeline_seqs[0])
    assert starts == [1, 22]


def test_workspace_changes_are_reviewed(tmp_path: Path) -> None:
    for _ in range(2):  # the second run finds the workspace as the first did (and reviews its own run)
        out = run_example("workspace_changes.py", tmp_path)
        assert "4 file(s) changed +4 -2" in out
        files = re.findall(r"^  (created|modified|deleted)\s+(\S+)\s+\+(\d+) -(\d+)(.*)$", out, re.MULTILINE)
        assert files == [
            ("created", ".env", "0", "0", " (sensitive)"), ("created", "README.md", "3", "0", ""),
            ("modified", "app.py", "1", "1", ""), ("deleted", "notes.txt", "0", "1", "")]
        assert "-print('hello')\n+print('hello, world')" in out
        assert "not-a-real-key" not in out
        assert (tmp_path / "workspace" / "app.py").read_text() == "print('hello, world')\n"
        assert not (tmp_path / "workspace" / "notes.txt").exists()


@pytest.mark.postgres
def test_postgres_workers_share_one_dense_thread(tmp_path: Path, postgres_database_url: str) -> None:
    threads = []
    for _ in range(2):  # the second invocation journals new runs on a new thread of the same schema
        out = run_example("postgres_workers.py", tmp_path, f"{postgres_database_url}?schema=examples_workers")
        assert "skipped" not in out
        thread = re.search(r"^thread (dice-\w+): 60 events from 6 runs by 2 workers$", out, re.MULTILINE)
        assert thread is not None
        threads.append(thread[1])
        assert "seq runs from 1 to 60; gaps: none; duplicates: 0" in out
        followed = [int(seq) for seq in re.findall(r"^follower: seq\s+(\d+)", out, re.MULTILINE)]
        assert followed == list(range(1, 61))
        writers = re.search(r"writer of each seq \(1 = w1, 2 = w2\): ([12]+)", out)
        assert writers is not None
        assert sorted(writers[1]) == ["1"] * 30 + ["2"] * 30
        assert "statuses: ['success']" in out
    assert threads[0] != threads[1]


def test_postgres_workers_skips_without_a_server(tmp_path: Path) -> None:
    out = run_example("postgres_workers.py", tmp_path, "postgresql://postgres@127.0.0.1:9/none")
    assert out.startswith("skipped: no PostgreSQL server reachable at postgresql://postgres@127.0.0.1:9/none")


def test_agent_middleware_attributes_the_summarizer_and_writes_hook_events(tmp_path: Path) -> None:
    for _ in range(2):  # runnable again against the same store
        out = run_example("agent_middleware.py", tmp_path)
        assert "human input: How much is 120 EUR in dollars?" in out
        assert "last answer: 120 EUR is 129.60 USD." in out
        assert "tokens by lead_agent: 101 in 2 call(s)" in out
        assert "tokens by middleware:summarization: 624 in 2 call(s)" in out
        changes = {"messages": {"removed": "all", "added": 3}}
        assert f"middleware:summarization: before_model update {changes}" in out
        assert "middleware:model_call_limit: after_model update" in out
        shown = ["llm.human.input", "llm.ai.response", "llm.tool.result", "llm.ai.response"]
        assert f"thread history: {shown}" in out


def test_deep_agent_journals_its_subagent_as_a_task(tmp_path: Path) -> None:
    for _ in range(2):
        out = run_example("deep_agent.py", tmp_path)
        assert "subagent.start call-research-1 subagent:researcher Find the cheapest direct flight" in out
        assert "subagent.end call-research-1 subagent:researcher completed" in out
        assert "  step 1: tool 'CDG-JFK: 3 direct flights tomorrow, cheapest 420 EUR'" in out
        assert "  step 2: ai 'Cheapest direct flight: 420 EUR.'" in out
        assert "tokens by subagent:researcher: 75" in out
        assert "('llm.ai.response', 'The cheapest direct flight tomorrow costs 420 EUR.')]" in out
        assert "('llm.ai.response', 'Cheapest direct flight: 420 EUR.')" not in out
