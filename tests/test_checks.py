"""Checks over recorded runs: the vocabulary on real agent runs (every backend), YAML suites and their
mistakes, the check command's table, exit status and JUnit XML, scores, and the test assertions."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
import xmlschema
from _recorded_runs import Recorded, Shared, record_runs, record_weather
from conftest import CLI_BACKENDS, backend_url

from run_journal import RunEventStore, open_store
from run_journal.checks import (
    VOCABULARY,
    Check,
    CheckDefinitionError,
    RunCheckFailed,
    SuiteError,
    assert_run,
    junit_xml,
    parse_suite,
    record_results,
    record_score,
    run_suite,
)
from run_journal.contract import validate_record
from run_journal.envelope import RunEvent
from run_journal.trajectory import read_trajectory

JUNIT_SCHEMA = Path(__file__).parent / "schemas" / "junit-10.xsd"
"""``memory://`` is empty in every new ``open_store``: the command line has nothing to read there."""

# (run, check, value, passes): every check kind passes on some recorded run and fails on another.
TABLE: list[tuple[str, str, Any, bool]] = [
    ("tool", "tool_called", "search", True),
    ("tool", "tool_called", {"name": "search", "args": {"query": "weather in Paris"}, "match": "exact"},
     True),
    ("tool", "tool_called", {"name": "write_file", "args": {"path": "report.md"}}, True),  # subset
    ("tool", "tool_called", {"name": "search", "args": {"query": "^weather"}, "match": "regex"}, True),
    ("tool", "tool_called", {"name": "write_file", "min": 2, "max": 2}, True),
    ("deep", "tool_called", {"name": "search", "caller": "subagent:researcher"}, True),
    ("tool", "tool_called", {"name": "write_file", "times": 1}, False),
    ("tool", "tool_called", {"name": "search", "args": {"query": "rain"}, "match": "regex"}, False),
    ("tool", "tool_called", {"name": "search", "args": {"query": "weather"}, "match": "exact"}, False),
    ("tool", "tool_called", "delete_file", False),
    ("deep", "tool_called", {"name": "search", "caller": "lead_agent"}, False),
    ("tool", "tool_not_called", "delete_file", True),
    ("tool", "tool_not_called", {"name": "write_file", "args": {"path": ".env"}}, True),
    ("tool", "tool_not_called", "search", False),
    ("tool", "tools_in_order", ["search", "write_file"], True),
    ("tool", "tools_in_order", {"tools": ["search", "write_file", "write_file"], "mode": "exact"}, True),
    ("tool", "tools_in_order", ["write_file", "search"], False),
    ("tool", "tools_in_order", {"tools": ["search", "write_file"], "mode": "exact"}, False),
    ("tool", "max_model_calls", 4, True),
    ("middleware", "max_model_calls", {"limit": 2, "caller": "middleware:summarization"}, True),
    ("tool", "max_model_calls", 3, False),
    ("middleware", "max_model_calls", 5, False),  # the failed calls count
    ("tool", "max_tokens", 100, True),
    ("tool", "max_tokens", {"limit": 8, "kind": "output"}, True),
    ("tool", "max_tokens", 50, False),
    ("tool", "max_cost", 0.001, True),
    ("tool", "max_cost", 0.00001, False),
    ("tool", "max_duration", 60, True),
    ("tool", "max_duration", "1h", True),
    ("tool", "max_duration", 0, False),
    ("tool", "status", "success", True),
    ("failed", "status", "error", True),
    ("interrupted", "status", ["interrupted", "cancelled"], True),
    ("tool", "status", ["error", "cancelled"], False),
    ("failed", "status", "success", False),
    ("tool", "no_errors", True, True),
    ("middleware", "no_errors", {"ignore": ["llm"]}, True),
    ("failed", "no_errors", None, False),  # a failed tool outcome and a run.error
    ("failed", "no_errors", {"ignore": ["run"]}, False),  # the tool's failure is still there
    ("middleware", "no_errors", True, False),  # llm.error in a run that succeeded
    ("deep", "subagent_completed", "researcher", True),
    ("deep", "subagent_completed", "writer", False),
    ("tool", "subagent_completed", "researcher", False),
    ("middleware", "middleware_fired", "summarization", True),
    ("middleware", "middleware_fired", {"tag": "summarization", "hook": "before_model", "action": "update"},
     True),
    ("interrupted", "middleware_fired", {"tag": "human_in_the_loop", "action": "interrupt"}, True),
    ("tool", "middleware_fired", "summarization", False),
    ("middleware", "middleware_fired", {"tag": "summarization", "hook": "after_agent"}, False),
    ("tool", "middleware_not_fired", "summarization", True),
    ("middleware", "middleware_not_fired", "summarization", False),
    ("interrupted", "middleware_not_fired", "human_in_the_loop", False),
    ("tool", "file_created", "report.md", True),
    ("tool", "file_created", "*.md", True),
    ("tool", "file_created", "notes.txt", False),  # modified, not created
    ("deep", "file_created", "report.md", False),  # no workspace change recorded
    ("tool", "file_changed", "notes.txt", True),
    ("tool", "file_changed", {"path": "*.txt", "status": "modified"}, True),
    ("tool", "file_changed", {"path": "report.md", "status": ["modified", "deleted"]}, False),
    ("tool", "file_changed", ".env", False),
    ("tool", "file_untouched", ".env", True),
    ("tool", "file_untouched", "notes.txt", False),
    ("tool", "final_answer_contains", "18 °C", True),
    ("tool", "final_answer_contains", {"text": "PARIS", "ignore_case": True}, True),
    ("resumed", "final_answer_contains", "it is 4", True),
    ("tool", "final_answer_contains", "rain", False),
    ("tool", "final_answer_contains", "PARIS", False),
    ("interrupted", "final_answer_contains", "4", False),  # stopped before any answer
    ("tool", "final_answer_matches", r"\d+ °C", True),
    ("tool", "final_answer_matches", {"pattern": "^it IS", "ignore_case": True}, True),
    ("tool", "final_answer_matches", "^Rain", False),
    ("failed", "final_answer_matches", ".*", False),  # no answer at all
]




def test_the_table_passes_and_fails_every_check_kind() -> None:
    outcomes = {(name, passes) for _, name, _, passes in TABLE}
    assert {(name, passes) for name in VOCABULARY for passes in (True, False)} <= outcomes
    assert {run for run, *_ in TABLE} == {"tool", "deep", "middleware", "failed", "interrupted", "resumed"}


@pytest.mark.asyncio(loop_scope="module")
async def test_every_check_kind_passes_and_fails_on_recorded_runs(shared: Shared) -> None:
    store, recorded = shared
    names = ("tool", "deep", "middleware", "failed", "interrupted", "resumed")
    trajectories = {name: await read_trajectory(store, recorded.thread(name), recorded.run(name))
                    for name in names}
    seqs_of = {}
    for name in names:
        events = await store.list_events(recorded.thread(name), recorded.run(name), limit=10_000)
        seqs_of[name] = {event.seq for event in events}
    wrong = []
    for run, name, value, passes in TABLE:
        result = Check.parse(name, value).evaluate(trajectories[run])
        if result.passed is not passes:
            wrong.append(f"{run}: {result.label} {value!r} -> {result.passed}: {result.reason}")
        assert result.reason
        assert "\n" not in result.reason
        assert set(result.seqs) <= seqs_of[run], (result, "relies on events of another run")
        assert (result.thread_id, result.run_id) == (recorded.thread(run), recorded.run(run))
    assert wrong == []


@pytest.mark.asyncio(loop_scope="module")
async def test_results_name_the_events_they_relied_on(shared: Shared) -> None:
    store, recorded = shared
    tool = await read_trajectory(store, "weather", recorded.tool)
    events = {event.seq: event for event in await store.list_events("weather", recorded.tool)}
    called = Check.of("tool_called", "search").evaluate(tool)
    relied_on = [(events[s].event_type, events[s].content["tool_name"]) for s in called.seqs]
    assert relied_on == [("tool.call", "search")]
    assert called.reason == f"search called once (seq {called.seqs[0]})"
    status = Check.of("status", "success").evaluate(tool)
    assert [events[s].event_type for s in status.seqs] == ["run.end"]
    created = Check.of("file_created", "report.md").evaluate(tool)
    assert [events[s].event_type for s in created.seqs] == ["workspace_changes"]
    answer = Check.of("final_answer_contains", "Paris").evaluate(tool)
    assert [events[s].event_type for s in answer.seqs] == ["llm.ai.response"]
    failed = await read_trajectory(store, "broken", recorded.failed)
    errors = Check.of("no_errors").evaluate(failed)
    failed_events = {e.seq: e.event_type for e in await store.list_events("broken", recorded.failed)}
    assert sorted(failed_events[s] for s in errors.seqs) == ["run.error", "tool.outcome"]
    assert errors.reason.startswith("2 error(s): tool boom error at seq")


# -- making checks -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "value", "message"), [
    ("tool_caled", "x", "unknown check 'tool_caled' (did you mean 'tool_called'?)"),
    ("max_tokens", "lots", "max_tokens: limit takes an integer >= 0, got 'lots'"),
    ("max_tokens", True, "max_tokens: limit takes an integer >= 0, got True"),
    ("max_tokens", -1, "max_tokens: limit takes an integer >= 0, got -1 (below 0)"),
    ("max_cost", "cheap", "max_cost: limit takes a number >= 0, got 'cheap'"),
    ("max_duration", "soon", "max_duration: limit takes a number of seconds or a duration like 30s"),
    ("status", "done", "status: is takes one or a list of pending, running, success, error, interrupted"),
    ("tool_called", {"name": "x", "maxx": 2}, "tool_called: unknown parameter 'maxx' (it takes name, args"),
    ("tool_called", {"args": {}}, "tool_called: name is required (a string)"),
    ("tool_called", {"name": "x", "times": 1, "max": 2}, "give times, or min and max, not both"),
    ("tool_called", {"name": "x", "min": 3, "max": 2}, "min (3) is above max (2)"),
    ("tool_called", {"name": "x", "match": "exact"}, "match applies to args, which is not given"),
    ("tool_called", {"name": "x", "args": {"q": "("}, "match": "regex"}, "args.q is not a valid regular"),
    ("tool_called", {"name": "x", "args": ["q"]}, "args with match subset is a mapping"),
    ("tools_in_order", [], "tools_in_order: tools takes a string or a list of strings, got []"),
    ("no_errors", False, "no_errors: false is not a check"),
    ("no_errors", {"ignore": ["warnings"]}, "ignore takes one or a list of llm, run, tool"),
    ("file_changed", {"path": "a", "status": "renamed"}, "status takes one or a list of created, modified"),
    ("final_answer_matches", "(", "pattern takes a regular expression, got '(' (not a valid regular"),
    ("final_answer_contains", {"text": "x", "ignore_case": "yes"}, "ignore_case takes true or false"),
    ("subagent_completed", 3, "subagent_completed: name takes a string, got 3"),
])
def test_a_check_that_cannot_be_made_says_what_is_wrong(name: str, value: Any, message: str) -> None:
    with pytest.raises(CheckDefinitionError) as raised:
        Check.parse(name, value)
    assert message in str(raised.value)


def test_checks_read_the_same_from_python_and_yaml() -> None:
    suite = parse_suite("- name: c\n  thread: t\n  checks:\n    - tool_called: {name: s, max: 2}\n"
                        "    - max_duration: 2m\n    - no_errors\n    - status: [success, error]\n")
    checks = suite.cases[0].checks
    assert checks[0] == Check.of("tool_called", name="s", max=2)
    assert [check.label for check in checks] == [
        "tool_called s", "max_duration 120s", "no_errors", "status success, error"]
    assert checks[1].params["limit"] == 120.0
    with pytest.raises(CheckDefinitionError, match="either a value or named parameters"):
        Check.of("tool_called", "s", max=2)


# -- suites ------------------------------------------------------------------------------------------
GOOD_SUITE = """\
cases:
  - name: weather answer
    thread: weather
    last: 1
    checks:
      - tool_called: search
      - tools_in_order: [search, write_file]
      - max_tokens: 1000
      - status: success
      - no_errors
      - file_untouched: .env
      - final_answer_contains: Paris
"""


@pytest.mark.parametrize(("text", "line", "fragment"), [
    ("cases: [", 1, "not valid YAML"),
    ("cases:\n  - name: a\n    thread: t\n    checks:\n      - tool_called: {name: x\n", 6,
     "not valid YAML: expected ',' or '}', but got '<stream end>' (while parsing a flow mapping that "
     "starts on line 5)"),
    ("a:\n  - x\n - y\n", 3, "not valid YAML: expected <block end>, but found '<block sequence start>'"),
    ("- name: a\n  thread: t\n  checks:\n    - tool_caled: search\n", 4,
     "case 'a': unknown check 'tool_caled' (did you mean 'tool_called'?)"),
    ("- name: a\n  thread: t\n  checks:\n    - status: success\n    - max_tokens: lots\n", 5,
     "case 'a': max_tokens: limit takes an integer >= 0, got 'lots'"),
    ("- name: a\n  thread: t\n  checks:\n    - tool_called:\n        name: s\n        max: two\n", 6,
     "case 'a': tool_called: max takes an integer >= 0, got 'two'"),
    ("- name: a\n  thrad: t\n  checks: [no_errors]\n", 2,
     "case 'a': unknown key 'thrad' (did you mean 'thread'?)"),
    ("- name: a\n  checks: [no_errors]\n", 1, "case 'a': say which runs to check"),
    ("- name: a\n  thread: t\n  last: 0\n  checks: [no_errors]\n", 3, "last is a number of runs (1 or more)"),
    ("- name: a\n  run: [r1, 7]\n  checks: [no_errors]\n", 2, "run is a run id or a list of run ids"),
    ("- name: a\n  thread: t\n", 1, "case 'a': checks is a non-empty list of checks"),
    ("- name: a\n  thread: t\n  checks:\n    - {status: success, no_errors: true}\n", 4,
     "a check is a mapping with one key"),
    ("- name: a\n  thread: t\n  thread: u\n  checks: [no_errors]\n", 3, "'thread' is given twice"),
    ("- name: a\n  thread: t\n  checks: [no_errors]\n- name: a\n  thread: u\n  checks: [no_errors]\n", 4,
     "two cases have this name"),
    ("cases: {}\n", 1, "the cases are a non-empty list"),
    ("tests: []\n", 1, "unknown key 'tests' at the top"),
    ("- just a string\n", 1, "case 1 is a mapping"),
])
def test_a_bad_suite_names_the_line_and_the_case(text: str, line: int, fragment: str) -> None:
    with pytest.raises(SuiteError) as raised:
        parse_suite(text, source="suite.yaml")
    assert str(raised.value).startswith(f"suite.yaml:{line}:"), str(raised.value)
    assert fragment in str(raised.value)
    assert raised.value.line == line


async def test_a_suite_selects_runs_by_id_thread_and_last(store: RunEventStore, tmp_path: Path) -> None:
    first = await record_weather(store, tmp_path / "w1")
    second = await record_weather(store, tmp_path / "w2")
    other = await record_weather(store, tmp_path / "w3", thread="elsewhere")
    text = f"""
- {{name: one, run: {first}, checks: [no_errors]}}
- {{name: two, run: [{first}, {other}], checks: [no_errors]}}
- {{name: thread, thread: weather, checks: [no_errors]}}
- {{name: last of thread, thread: weather, last: 1, checks: [no_errors]}}
- {{name: last of store, last: 2, checks: [no_errors]}}
- {{name: nothing, thread: nowhere, checks: [no_errors]}}
"""
    result = await run_suite(store, parse_suite(text))
    runs = {case.case.name: [r.result.run_id for r in case.results] for case in result.cases}
    assert runs == {"one": [first], "two": [first, other], "thread": [first, second],
                    "last of thread": [second], "last of store": [second, other], "nothing": []}
    nothing = result.cases[-1]
    assert (nothing.passed, nothing.problem) == (False, "selected no run (thread nowhere)")
    assert (result.tests, result.failures, result.passed) == (9, 1, False)
    with pytest.raises(SuiteError, match=r"<suite>:3: case 'gone': no run 'r-gone' in the store"):
        await run_suite(store, parse_suite("- name: gone\n  checks: [no_errors]\n  run: r-gone\n"))


# -- the check command ---------------------------------------------------------------------------------
@pytest.fixture(params=CLI_BACKENDS)
def cli_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return backend_url(request.param, request, tmp_path_factory)


def recorded_at(url: str, tmp_path: Path) -> Recorded:
    async def record() -> Recorded:
        async with open_store(url) as store:
            return await record_runs(store, tmp_path / "workspace")

    return asyncio.run(record())


def test_the_check_command_prints_a_table_and_exits_0_1_or_2(cli: Any, cli_url: str, tmp_path: Path) -> None:
    recorded = recorded_at(cli_url, tmp_path)
    suite = tmp_path / "suite.yaml"
    suite.write_text(GOOD_SUITE, encoding="utf-8")
    done = cli(cli_url, "check", str(suite))
    assert done.code == 0, done.out + done.err
    lines = done.out.splitlines()
    assert lines[0].split() == ["case", "run", "check", "result", "reason"]
    assert "weather answer  " + recorded.tool[:8] in lines[1]
    assert all(" pass " in line for line in lines[1:8])
    assert lines[-1] == "7 check(s) on 1 run(s): 7 passed, 0 failed"
    failing = GOOD_SUITE.replace("thread: weather\n    last: 1", f"run: {recorded.failed}")
    suite.write_text(failing, encoding="utf-8")
    done = cli(cli_url, "check", str(suite))
    assert done.code == 1
    assert re.search(r"status success +FAIL +status error \(seq \d+\): ValueError", done.out), done.out
    assert done.out.splitlines()[-1] == "7 check(s) on 1 run(s): 2 passed, 5 failed"
    for text, needle in [("cases: [\n", "suite.yaml:2: not valid YAML"),
                         ("- {name: a, thread: weather, checks: [tool_caled: x]}\n",
                          "suite.yaml:1: case 'a': unknown check 'tool_caled'"),
                         ("- name: a\n  thread: weather\n  checks:\n    - max_cost: free\n",
                          "suite.yaml:4: case 'a': max_cost: limit takes a number >= 0, got 'free'"),
                         ("- {name: a, run: nope, checks: [no_errors]}\n",
                          "case 'a': no run 'nope' in the store")]:
        suite.write_text(text, encoding="utf-8")
        done = cli(cli_url, "check", str(suite))
        assert done.code == 2, (text, done.out, done.err)
        assert done.err.count("\n") == 1
        assert "Traceback" not in done.err
        assert done.err.startswith(f"run-journal: {suite}:"), done.err
        assert needle in done.err, done.err
    done = cli(cli_url, "check", str(tmp_path / "missing.yaml"))
    assert (done.code, "cannot read the suite" in done.err) == (2, True)


def test_junit_xml_validates_against_the_junit_schema(cli: Any, cli_url: str, tmp_path: Path) -> None:
    recorded = recorded_at(cli_url, tmp_path)
    suite = tmp_path / "agents.yaml"
    suite.write_text(GOOD_SUITE + f"""\
  - name: the failed run <&>
    run: [{recorded.failed}, {recorded.tool}]
    checks:
      - status: success
      - final_answer_contains: "18 °C"
  - name: no run
    thread: nowhere
    checks: [no_errors]
""", encoding="utf-8")
    report = tmp_path / "report.xml"
    done = cli(cli_url, "check", str(suite), "--junit-xml", str(report))
    assert done.code == 1
    schema = xmlschema.XMLSchema(str(JUNIT_SCHEMA))
    schema.validate(str(report))  # raises with the first violation
    document = schema.to_dict(str(report))
    assert (document["@tests"], document["@failures"], document["@errors"]) == ("12", "3", "0")
    cases = {suite["@name"]: suite for suite in document["testsuite"]}
    assert list(cases) == ["weather answer", "the failed run <&>", "no run"]
    failed = cases["the failed run <&>"]
    assert (failed["@tests"], failed["@failures"]) == ("4", "2")
    failures = [case for case in failed["testcase"] if "failure" in case]
    assert [case["@name"] for case in failures] == [f"status success [run {recorded.failed}]",
                                                    f"final_answer_contains 18 °C [run {recorded.failed}]"]
    assert failures[0]["failure"][0]["@message"].startswith("status error (seq ")
    assert f"run {recorded.failed}" in failures[0]["failure"][0]["$"]
    assert cases["no run"]["testcase"][0]["failure"][0]["@message"] == "selected no run (thread nowhere)"
    assert all(case["@classname"] == "agents.weather answer" for case in cases["weather answer"]["testcase"])


def test_a_report_without_failures_validates_too() -> None:
    async def empty_run() -> str:
        async with open_store("memory://") as store:
            await store.put(thread_id="t", run_id="r", event_type="run.start", category="trace",
                            content={"run_name": "x"}, metadata={"caller": "lead_agent"})
            await store.put(thread_id="t", run_id="r", event_type="run.end", category="outputs",
                            content={"output": None}, metadata={"status": "success", "duration_ms": 3})
            suite = parse_suite("- {name: a, thread: t, checks: [no_errors]}")
            return junit_xml(await run_suite(store, suite))

    xmlschema.XMLSchema(str(JUNIT_SCHEMA)).validate(asyncio.run(empty_run()))


# -- scores ----------------------------------------------------------------------------------------------
async def test_a_score_is_an_event_of_the_run_with_its_user(store: RunEventStore, tmp_path: Path) -> None:
    run = await record_weather(store, tmp_path / "w")
    row = await store.get_run(run)
    assert row is not None
    event = await record_score(store, "weather", run, "helpful", 1, comment="good answer", source="human",
                               seqs=[3], metadata={"reviewer": "ana", "api_key": "sk-123"})
    assert (event.event_type, event.category, event.user_id) == ("run.score", "trace", row.user_id)
    assert event.content == {"name": "helpful", "value": 1, "source": "human", "comment": "good answer",
                             "seqs": [3]}
    assert event.metadata == {"reviewer": "ana", "api_key": "[redacted]", "source": "human"}
    assert validate_record(event.to_dict()) == []
    again = await record_score(store, "weather", run, "thumbs", "up", event_id="fb-1")
    same = await record_score(store, "weather", run, "thumbs", "up", event_id="fb-1")
    assert again.seq == same.seq  # the same event id is stored once
    trajectory = await read_trajectory(store, "weather", run)
    assert [(s.name, s.value, s.source) for s in trajectory.scores] == [("helpful", 1, "human"),
                                                                      ("thumbs", "up", "api")]
    assert trajectory.status == "success"  # a score after the end changes nothing of the run
    stored = await store.get_run(run)
    assert stored is not None
    assert stored.status == "success"


@pytest.mark.parametrize(("name", "value", "changes", "message"), [
    ("", 1, {}, "a score's name is a non-empty string"),
    ("x", float("nan"), {}, "the value must be finite"),
    ("x", [1], {}, "the value is a number, a boolean or a short text"),
    ("x", "", {}, "a text value is 1-1000 characters"),
    ("x", 1, {"comment": 3}, "the comment is a string or None"),
    ("x", 1, {"source": ""}, "the source is a non-empty string"),
    ("x", 1, {"seqs": [0]}, "seqs are the seqs"),
])
async def test_a_bad_score_is_refused_before_anything_is_written(
    name: str, value: Any, changes: dict[str, Any], message: str
) -> None:
    async with open_store("memory://") as store:
        await store.put(thread_id="t", run_id="r", event_type="run.start", category="trace",
                        content={"run_name": "x"}, metadata={"caller": "lead_agent"})
        with pytest.raises(ValueError, match=message):
            await record_score(store, "t", "r", name, value, **changes)
        with pytest.raises(LookupError, match="no run 'other' in thread 't'"):
            await record_score(store, "t", "other", "x", 1)
        assert await store.last_seq("t") == 1


def test_check_record_writes_each_result_as_a_score_that_show_prints(cli: Any, cli_url: str,
                                                                    tmp_path: Path) -> None:
    async def weather() -> str:
        async with open_store(cli_url) as store:
            return await record_weather(store, tmp_path / "w")

    async def scores_of(run: str) -> list[RunEvent]:
        async with open_store(cli_url) as store:
            return [e for e in await store.list_events("weather", run) if e.event_type == "run.score"]

    run = asyncio.run(weather())
    suite = tmp_path / "suite.yaml"
    suite.write_text("- name: budget\n  run: " + run + "\n  checks:\n    - max_tokens: 10\n    - no_errors\n",
                     encoding="utf-8")
    done = cli(cli_url, "check", str(suite), "--record")
    assert done.code == 1
    assert done.out.splitlines()[-1] == "recorded 2 score(s)"
    scores = asyncio.run(scores_of(run))
    assert [(e.content["name"], e.content["value"], e.content["source"]) for e in scores] == [
        ("max_tokens 10", False, "check"), ("no_errors", True, "check")]
    assert scores[0].content["comment"] == "68 total tokens, at most 10 allowed"
    assert scores[0].metadata["case"] == "budget"
    assert scores[0].metadata["suite"] == str(suite)
    assert all(validate_record(e.to_dict()) == [] for e in scores)
    shown = cli(cli_url, "show", run)
    assert shown.code == 0
    assert "score max_tokens 10 = false (check): 68 total tokens, at most 10 allowed" in shown.out
    assert "score no_errors = true (check)" in shown.out
    timeline = [line for line in shown.out.splitlines() if " run.score " in line]
    assert len(timeline) == 2
    assert "max_tokens 10 = false (check)" in timeline[0]
    as_json = cli(cli_url, "check", str(suite), "--json")
    assert json.loads(as_json.out)["failures"] == 1


async def test_record_results_records_every_result(store: RunEventStore, tmp_path: Path) -> None:
    run = await record_weather(store, tmp_path / "w")
    result = await run_suite(store, parse_suite(GOOD_SUITE))
    events = await record_results(store, result)
    assert [e.content["value"] for e in events] == [True] * 7
    assert {e.run_id for e in events} == {run}
    assert all(validate_record(e.to_dict()) == [] for e in events)


# -- assertions for tests ---------------------------------------------------------------------------------
async def test_assertions_chain_and_fail_with_a_readable_message(
    store: RunEventStore, tmp_path: Path
) -> None:
    run = await record_weather(store, tmp_path / "w")
    checks = await assert_run(store, "weather", run)
    checks.called("search").before("write_file").called("write_file", times=2).not_called("delete_file")
    checks.succeeded().no_errors().max_tokens(100).max_model_calls(4).max_cost(0.01).max_duration(60)
    checks.file_created("report.md").file_changed("notes.txt", status="modified").file_untouched(".env")
    checks.final_answer_contains("Paris").final_answer_matches(r"\d+ °C").middleware_not_fired("pii")
    checks.called("write_file", args={"path": "notes.txt"}).after("search")
    assert len(checks.results) == 18
    assert all(result.passed for result in checks.results)
    with pytest.raises(RunCheckFailed) as raised:
        checks.called("search", args={"query": "rain"})
    message = str(raised.value)
    first, second, third = message.splitlines()
    assert first == ('tool_called search: search called once, never with args matching {"query":"rain"} '
                     '(its args: {"query":"weather in Paris"} at seq 5)')
    assert second.startswith(f"  run {run} (thread weather), status success; events relied on (seq): 5")
    assert third.startswith("  steps: model call@4 -> tool search@5 -> model call@9 -> tool write_file@10")
    assert raised.value.result.passed is False
    with pytest.raises(AssertionError, match="no search call after write_file"):
        checks.called("write_file").before("search")
    with pytest.raises(TypeError, match=r"before\(\) follows called\(tool\)"):
        (await assert_run(store, "weather", run)).before("search")
    with pytest.raises(AssertionError, match="status success"):
        checks.status("error")
    with pytest.raises(LookupError):
        await assert_run(store, "weather", "no-such-run")
