"""A run read back as its trajectory (structured, and as OpenAI-style messages agentevals accepts), and
``compare_runs`` on real recorded runs: every backend, the first divergence when a tool argument, a tool
outcome, the final answer or the status differs, none for two identical runs; the ``diff`` command."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from _recorded_runs import (
    WEATHER_SCRIPT,
    Recorded,
    Shared,
    calls,
    record,
    record_weather,
    said,
)
from agentevals.trajectory.match import create_trajectory_match_evaluator
from conftest import CLI_BACKENDS, backend_url
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from run_journal import RunEventStore, compare_runs, open_store, read_trajectory, trajectory_of
from run_journal.testing import ScriptedChatModel
from run_journal.trajectory import (
    Handoff,
    MiddlewareStep,
    ModelCall,
    SubagentTask,
    ToolCall,
    Trajectory,
    build_trajectory,
)
from run_journal.trajectory.compare import excerpt, first_difference


async def read(store: RunEventStore, recorded: Recorded, name: str) -> Trajectory:
    return await read_trajectory(store, recorded.thread(name), recorded.run(name))


# -- the structured trajectory -----------------------------------------------------------------------
@pytest.mark.asyncio(loop_scope="module")
async def test_a_tool_agents_trajectory_holds_its_calls_outcomes_answer_and_totals(shared: Shared) -> None:
    store, recorded = shared
    trajectory = await read(store, recorded, "tool")
    events = {e.seq: e for e in await store.list_events("weather", recorded.tool)}
    row = await store.get_run(recorded.tool)
    assert row is not None
    assert [step.kind for step in trajectory.steps] == ["model_call", "tool_call"] * 3 + ["model_call"]
    search_call, report, notes = trajectory.tool_calls
    assert (search_call.name, search_call.args, search_call.outcome, search_call.result) == (
        "search", {"query": "weather in Paris"}, "success", "18 C and sunny")
    assert (report.args, notes.args) == ({"path": "report.md", "text": "Paris: 18 C, sunny"},
                                         {"path": "notes.txt", "text": "asked about Paris"})
    relied_on = [events[s].event_type for s in search_call.seqs]
    assert relied_on == ["tool.call", "llm.tool.result", "tool.outcome"]
    assert events[search_call.seq].content["tool_call_id"] == search_call.tool_call_id == "c1"
    first = trajectory.model_calls[0]
    assert (first.caller, first.model, first.tool_calls[0].name, events[first.seq].event_type) == (
        "lead_agent", "fake-gpt", "search", "llm.ai.response")
    assert (trajectory.status, trajectory.final_answer, trajectory.input) == (
        "success", "It is 18 °C and sunny in Paris.", "What is the weather in Paris?")
    assert events[trajectory.terminal_seq or 0].event_type == "run.end"
    assert trajectory.usage == row.usage
    assert trajectory.cost_usd == row.cost_usd
    assert trajectory.cost_usd == pytest.approx((60 * 1.0 + 8 * 2.0) / 1e6)
    assert trajectory.duration_ms == events[trajectory.terminal_seq or 0].metadata["duration_ms"]
    assert sorted((f.path, f.status) for f in trajectory.files) == [("notes.txt", "modified"),
                                                                   ("report.md", "created")]
    assert json.loads(json.dumps(trajectory.to_dict()))["steps"][1]["name"] == "search"


@pytest.mark.asyncio(loop_scope="module")
async def test_a_deep_agents_trajectory_has_the_subagent_task_and_its_own_calls(shared: Shared) -> None:
    store, recorded = shared
    trajectory = await read(store, recorded, "deep")
    described = [(step.kind, step.caller) for step in trajectory.steps]
    assert described == [("model_call", "lead_agent"), ("tool_call", "lead_agent"),
                         ("subagent_task", "subagent:researcher"), ("model_call", "subagent:researcher"),
                         ("tool_call", "subagent:researcher"), ("model_call", "subagent:researcher"),
                         ("model_call", "lead_agent")]
    (task,) = trajectory.subagent_tasks
    assert (task.name, task.description, task.status, task.result, task.task_id) == (
        "researcher", "find flights to Lisbon", "completed", "No direct flight.", "task-1")
    inner = trajectory.tool_calls[1]
    assert (inner.name, inner.args, inner.result) == ("search", {"query": "flights to Lisbon"},
                                                      "nothing about flights to Lisbon")
    assert trajectory.final_answer == "The researcher found no direct flight."  # never the subagent's


@pytest.mark.asyncio(loop_scope="module")
async def test_failed_interrupted_and_resumed_runs(shared: Shared) -> None:
    store, recorded = shared
    failed = await read(store, recorded, "failed")
    assert (failed.status, failed.error, failed.final_answer) == (
        "error", "ValueError: no such thing as 1", None)
    (boom,) = failed.tool_calls
    assert (boom.outcome, boom.error, boom.failed, boom.result) == (
        "error", "ValueError: no such thing as 1", True, None)
    interrupted = await read(store, recorded, "interrupted")
    assert interrupted.status == "interrupted"
    (asked,) = interrupted.tool_calls
    assert (asked.name, asked.args, asked.outcome) == ("add", {"a": 2, "b": 2}, None)  # never ran
    (hook,) = interrupted.middleware
    assert (hook.tag, hook.hook, hook.action) == ("human_in_the_loop", "after_model", "interrupt")
    resumed = await read(store, recorded, "resumed")
    (ran,) = resumed.tool_calls  # asked in the first run, run in this one
    assert (ran.name, ran.tool_call_id, ran.outcome, ran.result, ran.args) == (
        "add", "h1", "success", "4", None)
    assert (resumed.status, resumed.final_answer) == ("success", "it is 4")
    middleware = await read(store, recorded, "middleware")
    failures = [call for call in middleware.model_calls if call.error]
    assert [call.error for call in failures] == ["ConnectionError: provider down"] * len(failures)
    assert {call.caller for call in middleware.model_calls} == {"lead_agent", "middleware:summarization"}


@pytest.mark.asyncio(loop_scope="module")
async def test_a_run_that_is_not_there_is_a_lookup_error(shared: Shared) -> None:
    store, recorded = shared
    with pytest.raises(LookupError, match="no run 'nope' in thread 'weather'"):
        await read_trajectory(store, "weather", "nope")
    with pytest.raises(LookupError):
        await read_trajectory(store, "research", recorded.tool)  # a run of another thread


def test_a_trajectory_folds_handoffs_and_events_in_any_order() -> None:
    from datetime import UTC, datetime

    from run_journal.envelope import RunEvent

    def event(seq: int, event_type: str, category: str, content: Any, **meta: Any) -> RunEvent:
        at = datetime(2025, 1, 1, tzinfo=UTC)
        return RunEvent("t", "r", seq, event_type, category, content, meta, at, f"e{seq}")

    events = [
        event(4, "agent.handoff", "trace", {"from_agent": "lead_agent", "to_agent": "agent:math",
                                            "tool_call_id": "x"}, caller="agent:math"),
        event(1, "run.start", "trace", {"run_name": "g"}, caller="lead_agent"),
        event(3, "ai_message", "message", {"type": "ai", "content": [{"type": "text", "text": "hand"},
                                                                      {"type": "text", "text": "off"}]},
              caller="lead_agent", llm_call_index=0, handoff=True),
        event(5, "run.cancel", "error", {"reason": "user"}, status="cancelled"),
    ]
    trajectory = build_trajectory(events)
    assert [type(step) for step in trajectory.steps] == [ModelCall, Handoff]
    assert (trajectory.steps[0].text, trajectory.final_answer) == ("handoff", None)  # routing is no answer
    assert (trajectory.status, trajectory.terminal_seq, trajectory.run_id) == ("cancelled", 5, "r")


# -- OpenAI-style messages and agentevals -------------------------------------------------------------
@pytest.mark.asyncio(loop_scope="module")
async def test_trajectory_of_is_openai_messages(shared: Shared) -> None:
    store, recorded = shared
    messages = await trajectory_of(store, "weather", recorded.tool)
    assert [m["role"] for m in messages] == ["user", *["assistant", "tool"] * 3, "assistant"]
    assert messages[1] == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search",
                                                      "arguments": '{"query": "weather in Paris"}'}}]}
    assert messages[2] == {"role": "tool", "content": "18 C and sunny", "tool_call_id": "c1"}
    assert messages[-1] == {"role": "assistant", "content": "It is 18 °C and sunny in Paris."}
    lead = await trajectory_of(store, "research", recorded.deep)
    everyone = await trajectory_of(store, "research", recorded.deep, callers="all")
    researcher = await trajectory_of(store, "research", recorded.deep, callers={"subagent:researcher"})
    assert [m["role"] for m in lead] == ["user", "assistant", "tool", "assistant"]
    assert [m["role"] for m in researcher] == ["user", "assistant", "tool", "assistant"]
    assert researcher[0]["content"] == "find flights to Lisbon"
    assert len(everyone) == len(lead) + len(researcher)
    with pytest.raises(ValueError, match="callers must be"):
        await trajectory_of(store, "weather", recorded.tool, callers="lead_agent")


async def test_agentevals_trajectory_match_reads_recorded_runs(store: RunEventStore, tmp_path: Path) -> None:
    run = await record_weather(store, tmp_path / "a")
    again = await record_weather(store, tmp_path / "b")
    more_calls = (calls("search", "c0", query="weather tomorrow"), *WEATHER_SCRIPT)
    extra = await record_weather(store, tmp_path / "c", script=more_calls)
    swapped_calls = (WEATHER_SCRIPT[0], said("", tool_calls=[
        {"name": "write_file", "args": {"path": "notes.txt", "text": "asked about Paris"}, "id": "c3"},
        {"name": "write_file", "args": {"path": "report.md", "text": "Paris: 18 C, sunny"}, "id": "c2"}]),
        WEATHER_SCRIPT[3])
    swapped = await record_weather(store, tmp_path / "d", script=swapped_calls)
    same, more, reordered = [await trajectory_of(store, "weather", r) for r in (again, extra, swapped)]
    base = await trajectory_of(store, "weather", run)

    def match(mode: str, outputs: list[Any], reference: list[Any]) -> bool:
        evaluator = create_trajectory_match_evaluator(trajectory_match_mode=mode)  # type: ignore[arg-type]
        result = evaluator(outputs=outputs, reference_outputs=reference)
        return bool(result["score"])  # type: ignore[call-overload]

    assert [match(mode, base, same) for mode in ("strict", "unordered", "subset", "superset")] == [True] * 4
    assert (match("strict", more, base), match("superset", more, base), match("subset", more, base)) == (
        False, True, False)
    assert (match("subset", base, more), match("superset", base, more)) == (True, False)
    assert (match("strict", reordered, base), match("unordered", reordered, base)) == (False, True)


# -- compare_runs ---------------------------------------------------------------------------------------
FORECAST = {"Paris": "18 C and sunny"}


@tool
def forecast(city: str) -> str:
    """The weather forecast of a city."""
    if city not in FORECAST:
        raise ValueError(f"no forecast for {city}")
    return FORECAST[city]


def forecast_agent(city: str = "Paris", answer: str = "It is 18 °C in Paris.") -> Any:
    from langchain.agents import create_agent

    return create_agent(ScriptedChatModel([calls("forecast", "f1", city=city), said(answer, 20)]),
                        [forecast])


async def forecast_run(store: RunEventStore, **changes: Any) -> Trajectory:
    inputs = {"messages": [("user", "Weather in Paris?")]}
    run = await record(store, forecast_agent(**changes), "forecasts", inputs)
    return await read_trajectory(store, "forecasts", run)


async def test_two_identical_runs_have_no_divergence(store: RunEventStore) -> None:
    a, b = await forecast_run(store), await forecast_run(store)
    comparison = compare_runs(a, b)
    assert comparison.same
    assert comparison.divergence is None
    assert comparison.differences == ()
    assert [pair.same for pair in comparison.steps] == [True, True, True]
    assert comparison.summary == "same trajectory: 3 step(s), status success"
    deltas = comparison.deltas
    assert (deltas.total_tokens, deltas.model_calls, deltas.cost_usd) == (0, 0, 0)
    assert json.loads(json.dumps(comparison.to_dict()))["same"] is True


async def test_a_different_tool_argument_is_the_first_divergence(store: RunEventStore) -> None:
    FORECAST["Lyon"] = "12 C and rain"
    a, b = await forecast_run(store), await forecast_run(store, city="Lyon")
    comparison = compare_runs(a, b)
    divergence = comparison.divergence
    assert divergence is not None
    assert not comparison.same
    assert (divergence.step, divergence.kind, divergence.caller, divergence.field) == (
        1, "model_call", "lead_agent", "tool_calls[0].args.city")
    assert (divergence.a, divergence.b) == ('"Paris"', '"Lyon"')
    assert (divergence.a_seq, divergence.b_seq) == (a.model_calls[0].seq, b.model_calls[0].seq)
    assert divergence.summary == (f"step 1: model call of lead_agent (seq {a.model_calls[0].seq} in A, "
                                  f"{b.model_calls[0].seq} in B): tool_calls[0].args.city differs at "
                                  'character 0: "Paris" vs "Lyon"')
    tool_pair = comparison.steps[1]
    assert [d.field for d in tool_pair.differences] == ["args.city", "result"]
    only_args = compare_runs(a, b, ignore=["tool_calls", "result"])
    assert only_args.divergence is not None
    assert only_args.divergence.field == "args.city"


async def test_a_different_tool_outcome_is_the_first_divergence(store: RunEventStore) -> None:
    a = await forecast_run(store)
    FORECAST["Paris"] = "18 C and cloudy"
    try:
        cloudy = await forecast_run(store)
        FORECAST.pop("Paris")
        failed = await forecast_run(store)
    finally:
        FORECAST["Paris"] = "18 C and sunny"
    result = compare_runs(a, cloudy).divergence
    assert result is not None
    assert (result.step, result.kind, result.field, result.a, result.b) == (
        2, "tool_call", "result", '"18 C and sunny"', '"18 C and cloudy"')
    assert result.summary.endswith('result differs at character 9: "18 C and sunny" vs "18 C and cloudy"')
    outcome = compare_runs(a, failed)
    assert outcome.divergence is not None
    first = outcome.divergence
    assert (first.step, first.field, first.a, first.b) == (2, "outcome", '"success"', '"error"')
    assert outcome.steps[2].b is None
    assert outcome.steps[2].label == "model call"
    assert [d.field for d in outcome.differences] == ["status", "error", "final_answer"]
    assert (outcome.b.status, outcome.deltas.model_calls) == ("error", -1)


async def test_a_different_final_answer_is_the_first_divergence(store: RunEventStore) -> None:
    a = await forecast_run(store)
    b = await forecast_run(store, answer="It is 18 °C in Paris, and sunny. " + "x" * 100)
    comparison = compare_runs(a, b)
    divergence = comparison.divergence
    assert divergence is not None
    assert (divergence.step, divergence.field, divergence.kind) == (3, "text", "model_call")
    assert divergence.summary.endswith('text differs at character 20: "It is 18 °C in Paris." vs '
                                       '"It is 18 °C in Paris, and sunny. ' + "x" * 27 + '…"')
    assert [d.field for d in comparison.differences] == ["final_answer"]
    run_level = compare_runs(a, b, ignore=["text"]).divergence
    assert run_level is not None
    assert (run_level.step, run_level.field) == (None, "final_answer")
    assert run_level.summary.startswith("run final_answer differs at character 20")


async def test_a_different_status_is_the_first_divergence(store: RunEventStore) -> None:
    async def run_graph(fail: bool) -> Trajectory:
        model = ScriptedChatModel([said("done", 5)])

        async def agent(state: MessagesState) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        async def finish(state: MessagesState) -> dict[str, Any]:
            if fail:
                raise ValueError("the last step failed")
            return {}

        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_node("finish", finish)
        builder.add_edge(START, "agent")
        builder.add_edge("agent", "finish")
        run = await record(store, builder.compile(), "graphs", {"messages": [("user", "go")]})
        return await read_trajectory(store, "graphs", run)

    a, b = await run_graph(False), await run_graph(True)
    comparison = compare_runs(a, b)
    assert [pair.same for pair in comparison.steps] == [True]
    assert comparison.divergence is not None
    assert comparison.divergence.summary == 'run status differs at character 0: "success" vs "error"'
    assert [d.field for d in comparison.differences] == ["status", "error"]


@pytest.mark.asyncio(loop_scope="module")
async def test_steps_only_one_run_took_line_up_by_lane(shared: Shared) -> None:
    store, recorded = shared
    deep = await read(store, recorded, "deep")
    lead_only = build_trajectory([e for e in await store.list_events("research", recorded.deep)
                                  if e.metadata.get("caller") != "subagent:researcher"])
    comparison = compare_runs(lead_only, deep)
    assert [(pair.label, pair.a is not None, pair.b is not None) for pair in comparison.steps] == [
        ("model call", True, True), ("tool task", True, True), ("subagent researcher", False, True),
        ("model call", False, True), ("tool search", False, True), ("model call", False, True),
        ("model call", True, True)]
    assert comparison.divergence is not None
    summary = comparison.divergence.summary
    assert summary.startswith("step 3: subagent researcher of subagent:researcher (seq ")
    assert summary.endswith(") is only in run B")
    assert comparison.deltas.model_calls == 2


def test_first_difference_walks_keys_and_items_in_order() -> None:
    assert first_difference("args", {"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 2]}) is None
    found = first_difference("args", {"a": 1, "b": [1, 2]}, {"b": [1, 3], "a": 1})
    assert found is not None
    assert (found.field, found.a, found.b) == ("args.b[1]", "2", "3")
    missing = first_difference("args", {"a": 1}, {"a": 1, "z": None})
    assert missing is not None
    assert (missing.field, missing.a, missing.b) == ("args.z", "<absent>", "null")
    assert first_difference("x", 1, True) is not None
    assert first_difference("x", True, True) is None
    assert excerpt("0123456789" * 10, 50, width=12) == "…678901234567…"
    assert excerpt("short", 2) == "short"


@pytest.mark.parametrize("value", [[], "text"])
def test_ignore_is_a_collection_of_names(value: Any) -> None:
    trajectory = build_trajectory([], thread_id="t", run_id="r")
    if isinstance(value, str):
        with pytest.raises(TypeError):
            compare_runs(trajectory, trajectory, ignore=value)
    else:
        assert compare_runs(trajectory, trajectory, ignore=value).same


def test_step_types_are_exported() -> None:
    assert {ModelCall.kind, ToolCall.kind, SubagentTask.kind, Handoff.kind, MiddlewareStep.kind} == {
        "model_call", "tool_call", "subagent_task", "handoff", "middleware"}


# -- the diff command ------------------------------------------------------------------------------------
@pytest.fixture(params=CLI_BACKENDS)
def cli_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return backend_url(request.param, request, tmp_path_factory)


def test_the_diff_command_shows_the_alignment_and_exits_0_or_1(cli: Any, cli_url: str) -> None:
    async def three_runs() -> list[str]:
        async with open_store(cli_url) as store:
            runs = []
            for city in ("Paris", "Paris", "Lyon"):
                FORECAST.setdefault("Lyon", "12 C and rain")
                runs.append(await record(store, forecast_agent(city=city), "forecasts",
                                         {"messages": [AIMessage("hi"), ("user", "Weather?")]}))
            return runs

    first, second, lyon = asyncio.run(three_runs())
    same = cli(cli_url, "diff", first, second)
    assert same.code == 0, same.err
    lines = same.out.splitlines()
    assert lines[0].startswith(f"A  run {first[:8]}  thread forecasts  success  3 steps, 2 model calls, "
                               "1 tool call, 34 tokens, ")
    assert any(line.split()[:2] == ["1", "model"] and line.endswith("same") for line in lines)
    assert "same trajectory (3 steps)" in same.out
    assert lines[-1].startswith("B - A: model calls +0, tool calls +0, tokens +0 (input +0, output +0), cost "
                                "+0.0000 USD, duration 0.")
    different = cli(cli_url, "diff", first[:10], lyon, "--thread", "forecasts")
    assert different.code == 1, different.err
    assert "differs: tool_calls[0].args.city" in different.out
    assert ("first divergence: step 1: model call of lead_agent" in different.out)
    assert ('tool_calls[0].args.city differs at character 0: "Paris" vs "Lyon"' in different.out)
    as_json = cli(cli_url, "diff", first, lyon, "--json", "--ignore", "tool_calls", "--ignore", "args")
    assert as_json.code == 1
    assert json.loads(as_json.out)["divergence"]["field"] == "result"
    missing = cli(cli_url, "diff", first, "nosuchrun")
    assert (missing.code, "not found" in missing.err) == (1, True)
