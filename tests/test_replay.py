"""Replaying recorded runs: real agents recorded on every backend, then re-run on ``RecordedChatModel``.

Unchanged, each replay has the recorded trajectory and usage (a ``create_agent`` tool agent, a
deepagents agent with a subagent, summarization and fallback middleware, an interrupted run and its
resumption, a streamed run, a supervisor with two workers). Changed, it says where it went differently:
a tool's output, a removed tool, a second run that asks for more than was recorded. The model's own
surface (sync, async, streaming, structured output, recorded failures) and the ``replay`` command.
"""

from __future__ import annotations

import asyncio
import json
import re
import textwrap
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from _recorded_runs import (
    PRICING,
    WEATHER_SCRIPT,
    Recorded,
    ToolModel,
    add,
    ask,
    calls,
    record,
    record_runs,
    record_weather,
    said,
    search,
    write_file,
)
from conftest import CLI_BACKENDS, backend_url
from langchain.agents import create_agent
from langchain.agents.middleware import (
    HumanInTheLoopMiddleware,
    ModelFallbackMiddleware,
    SummarizationMiddleware,
)
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph_supervisor import create_supervisor
from pydantic import BaseModel

from run_journal import RunEventStore, RunJournal, open_store
from run_journal.replay import (
    RecordedCall,
    RecordedChatModel,
    RecordedModelError,
    ReplayDivergence,
    replay_run,
)
from run_journal.testing import ScriptedChatModel, assert_replays

HISTORY = [HumanMessage("hi"), AIMessage("hello"), HumanMessage("how are you"), AIMessage("fine"),
           HumanMessage("what is 1+2")]
"""The middleware run's input: a conversation long enough to be summarized."""


# -- the graphs, built on any model (the recording's scripted fakes, or the replay's model) ----------
def weather_agent(model: Any) -> Any:
    return create_agent(model, [search, write_file])


def deep_agent(model: Any) -> Any:
    from deepagents import create_deep_agent

    return create_deep_agent(model=model, tools=[search], subagents=[
        {"name": "researcher", "description": "Finds travel facts.", "system_prompt": "You research travel.",
         "tools": [search], "model": model}])


def middleware_agent(model: Any) -> Any:
    return create_agent(model, [add], middleware=[
        SummarizationMiddleware(model=model, trigger=("messages", 4), keep=("messages", 2)),
        ModelFallbackMiddleware(model),
    ])


def approval_agent(model: Any) -> Any:
    return create_agent(model, [add], middleware=[HumanInTheLoopMiddleware(interrupt_on={"add": True})],
                        checkpointer=InMemorySaver())


@tool
def web_search(query: str) -> str:
    """Search the web."""
    return f"results for {query}"


def supervisor_graph(lead: Any, research_model: Any = None, math_model: Any = None) -> Any:
    research = create_agent(research_model or lead, [web_search], name="research_expert")
    math = create_agent(math_model or lead, [add], name="math_expert")
    return create_supervisor([research, math], model=lead).compile()


class StreamingModel(ToolModel):
    """A scripted model that streams as a provider does: its text in pieces, then a last chunk with
    the tool calls and the usage."""

    def _stream(self, messages: Any, stop: Any = None, run_manager: Any = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        message = next(self.messages)
        assert isinstance(message, AIMessage)
        for word in re.findall(r"\S+\s*", message.text):
            yield ChatGenerationChunk(message=AIMessageChunk(content=word))
        yield ChatGenerationChunk(message=AIMessageChunk(
            content="", usage_metadata=message.usage_metadata, response_metadata=message.response_metadata,
            tool_call_chunks=[{"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
                              for i, c in enumerate(message.tool_calls)],
            chunk_position="last"))


# -- one store per backend with every kind of run recorded --------------------------------------------
@dataclass(frozen=True)
class Runs:
    store: RunEventStore
    recorded: Recorded
    streamed: str
    supervised: str


async def record_streamed(store: RunEventStore) -> str:
    model = StreamingModel(messages=iter([calls("search", "q1", query="weather in Rome"),
                                          said("Rome is sunny today.", 30)]))
    agent = create_agent(model, [search])
    async with RunJournal(store, thread_id="streamed", pricing=PRICING) as journal:
        config: Any = {"callbacks": [journal]}
        async for _ in agent.astream(ask("Weather in Rome?"), config, stream_mode="messages"):  # type: ignore[call-overload]  # a plain dict config
            pass
    return journal.run_id


def reply(text: str = "", *tool_calls: tuple[str, dict[str, Any], str], tokens: int = 10) -> AIMessage:
    return said(text, tokens, tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}
                                          for name, args, call_id in tool_calls])


async def record_supervised(store: RunEventStore) -> str:
    lead = ToolModel(messages=iter([reply("", ("transfer_to_research_expert", {}, "s1")),
                                    reply("", ("transfer_to_math_expert", {}, "s2")),
                                    reply("Headcount is about 1.9M, and 1 + 2 = 3.")]))
    research = ToolModel(messages=iter([reply("", ("web_search", {"query": "FAANG headcount"}, "r1")),
                                        reply("FAANG employs about 1.9M people")]))
    math = ToolModel(messages=iter([reply("", ("add", {"a": 1, "b": 2}, "m1")), reply("1 + 2 = 3")]))
    return await record(store, supervisor_graph(lead, research, math), "supervised", ask("go"))



@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runs(recorded_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Runs]:
    async with open_store(recorded_url) as store:
        recorded = await record_runs(store, tmp_path_factory.mktemp("workspace"))
        yield Runs(store, recorded, await record_streamed(store), await record_supervised(store))


module_loop = pytest.mark.asyncio(loop_scope="module")


# -- unchanged: the same trajectory and usage -------------------------------------------------------------
@module_loop
@pytest.mark.parametrize("match", ["order", None])
async def test_a_tool_agent_replays_with_its_trajectory_and_usage(runs: Runs, match: str | None) -> None:
    result = await assert_replays(runs.store, "weather", runs.recorded.tool, weather_agent, pricing=PRICING,
                                  match=match)
    (run,) = result.runs
    assert run.replayed is not None
    assert run.replayed.status == "success"
    assert [step.kind for step in run.replayed.steps] == ["model_call", "tool_call"] * 3 + ["model_call"]
    assert run.replayed.final_answer == "It is 18 °C and sunny in Paris."
    assert run.recorded_row is not None
    assert run.replayed_row is not None
    assert run.replayed_row.usage == run.recorded_row.usage
    assert run.replayed_row.usage.total_tokens == 68
    assert run.replayed_row.usage.llm_calls == 4
    assert run.replayed_row.usage_by_model == run.recorded_row.usage_by_model
    assert run.replayed_row.cost_usd == run.recorded_row.cost_usd is not None


@module_loop
async def test_a_deep_agent_with_a_subagent_replays_on_one_model(runs: Runs) -> None:
    result = await assert_replays(runs.store, "research", runs.recorded.deep, deep_agent, pricing=PRICING)
    (run,) = result.runs
    assert run.replayed is not None
    assert run.replayed_row is not None
    assert [task.name for task in run.replayed.subagent_tasks] == ["researcher"]
    assert set(run.replayed_row.usage_by_caller) == {"lead_agent", "subagent:researcher"}
    assert run.recorded_row is not None
    assert run.replayed_row.usage_by_caller == run.recorded_row.usage_by_caller


@module_loop
async def test_summarization_and_a_failed_model_call_replay(runs: Runs) -> None:
    result = await assert_replays(runs.store, "summarized", runs.recorded.middleware, middleware_agent,
                                  pricing=PRICING, inputs={"messages": HISTORY})
    (run,) = result.runs
    assert run.replayed is not None
    assert run.replayed_row is not None
    failed = [call.error for call in run.replayed.model_calls if call.error is not None]
    assert failed == [call.error for call in run.recorded.model_calls if call.error is not None]
    assert failed[0] == "ConnectionError: provider down"  # failed again, and the fallback answered
    assert "middleware:summarization" in run.replayed_row.usage_by_caller
    assert run.replayed.status == "success"
    assert run.replayed.final_answer == "it is 3"


@module_loop
async def test_a_resumed_run_replays_after_the_run_it_resumed(runs: Runs) -> None:
    result = await assert_replays(runs.store, "approval", runs.recorded.resumed, approval_agent,
                                  pricing=PRICING)
    assert [run.recorded.run_id for run in result.runs] == [runs.recorded.interrupted, runs.recorded.resumed]
    assert [run.replayed.status for run in result.runs if run.replayed] == ["interrupted", "success"]
    replayed_resume = result.runs[1].replayed
    assert replayed_resume is not None
    assert [call.outcome for call in replayed_resume.tool_calls] == ["success"]


@module_loop
async def test_a_streamed_run_replays_streamed_with_the_usage_on_its_chunks(runs: Runs) -> None:
    result = await assert_replays(runs.store, "streamed", runs.streamed, lambda m: create_agent(m, [search]),
                                  pricing=PRICING, stream=True)
    (run,) = result.runs
    assert run.replayed_row is not None
    assert run.replayed_row.usage.total_tokens == 12 + 32
    chunks: list[AIMessageChunk] = []
    model = await RecordedChatModel.from_store(runs.store, "streamed", runs.streamed, match="order")
    agent: Any = create_agent(model, [search])
    async for chunk, _ in agent.astream(ask("Weather in Rome?"), stream_mode="messages"):
        if isinstance(chunk, AIMessageChunk):
            chunks.append(chunk)
    assert len(chunks) > 4  # the text came in pieces
    usage = [chunk.usage_metadata for chunk in chunks if chunk.usage_metadata]
    assert [u["total_tokens"] for u in usage] == [12, 32]


@module_loop
async def test_a_supervisor_with_two_workers_replays_on_one_model(runs: Runs) -> None:
    result = await assert_replays(runs.store, "supervised", runs.supervised, supervisor_graph,
                                  pricing=PRICING)
    (run,) = result.runs
    assert run.replayed is not None
    assert run.replayed_row is not None
    assert set(run.replayed_row.usage_by_caller) == {
        "lead_agent", "agent:research_expert", "agent:math_expert"}
    assert [handoff.to_agent for handoff in run.replayed.handoffs][:2] == [
        "agent:research_expert", "lead_agent"]


def two_subagents(lead: Any, researcher: Any, critic: Any) -> Any:
    from deepagents import create_deep_agent

    return create_deep_agent(model=lead, tools=[search], subagents=[
        {"name": "researcher", "description": "Finds travel facts.", "system_prompt": "You research travel.",
         "tools": [search], "model": researcher},
        {"name": "critic", "description": "Checks claims.", "system_prompt": "You check claims.",
         "tools": [search], "model": critic}])


@module_loop
async def test_two_subagents_running_at_once_replay_on_one_model(runs: Runs) -> None:
    tasks = [{"name": "task", "args": {"description": "find flights", "subagent_type": "researcher"},
              "id": "t1", "type": "tool_call"},
             {"name": "task", "args": {"description": "check the claim", "subagent_type": "critic"},
              "id": "t2", "type": "tool_call"}]
    lead = ToolModel(messages=iter([said("", 5, tool_calls=tasks), said("Both done.", 20)]))
    researcher = ToolModel(messages=iter([calls("search", "s1", 7, query="flights"),
                                          said("No direct flight.", 7)]))
    critic = ToolModel(messages=iter([calls("search", "s2", 8, query="claim"), said("The claim holds.", 8)]))
    graph = two_subagents(lead, researcher, critic)
    run_id = await record(runs.store, graph, "parallel", ask("Flights?"))
    recorded = [event.metadata["caller"] for event in await runs.store.list_events("parallel", run_id)
                if event.event_type == "llm.ai.response"]
    assert recorded[1:3] == ["subagent:researcher", "subagent:critic"]  # the two ran at once
    result = await assert_replays(runs.store, "parallel", run_id,
                                  lambda model: two_subagents(model, model, model), pricing=PRICING)
    (run,) = result.runs
    assert run.replayed is not None
    assert sorted(task.name or "" for task in run.replayed.subagent_tasks) == ["critic", "researcher"]


# -- changed: where it went differently -----------------------------------------------------------------
@module_loop
async def test_a_changed_tool_output_shows_at_that_tool(runs: Runs) -> None:
    @tool("search")
    def cold_search(query: str) -> str:
        """Search the web."""
        return "5 C and snow"

    result = await replay_run(runs.store, "weather", runs.recorded.tool,
                              lambda m: create_agent(m, [cold_search, write_file]), match="order")
    assert not result.same
    comparison = result.comparison
    assert comparison is not None
    assert comparison.divergence is not None
    assert (comparison.divergence.kind, comparison.divergence.field) == ("tool_call", "result")
    assert "5 C and snow" in comparison.divergence.b
    assert "tool search" in result.report()


@module_loop
async def test_a_removed_tool_is_reported(runs: Runs) -> None:
    result = await replay_run(runs.store, "weather", runs.recorded.tool, lambda m: create_agent(m, [search]),
                              match="order")
    assert not result.same
    assert "tool write_file" in result.report()


@module_loop
async def test_a_caller_asking_for_more_calls_than_were_recorded_diverges(runs: Runs) -> None:
    model = await RecordedChatModel.from_store(runs.store, "weather", runs.recorded.tool, match="order")
    agent = weather_agent(model)
    await agent.ainvoke(ask("What is the weather in Paris?"))
    assert model.unused_calls == ()
    assert model.answered == 4
    with pytest.raises(ReplayDivergence) as raised:
        await agent.ainvoke(ask("And tomorrow?"))
    assert (raised.value.call, raised.value.caller) == (4, "lead_agent")
    assert "no call of lead_agent left (it made 4)" in str(raised.value)
    assert model.divergences[-1].call == 4


@module_loop
async def test_fewer_calls_than_recorded_are_reported(runs: Runs) -> None:
    def stops_early(model: Any) -> Any:
        async def answer(state: MessagesState) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        graph = StateGraph(MessagesState)
        graph.add_node("answer", answer)
        graph.add_edge(START, "answer")
        return graph.compile()

    result = await replay_run(runs.store, "weather", runs.recorded.tool, stops_early, match="order")
    assert not result.same
    assert len(result.unused_calls) == 3
    assert "3 recorded model call(s) were never asked for" in result.report()


# -- the model itself ---------------------------------------------------------------------------------------
@module_loop
async def test_one_model_answers_each_caller_in_its_order_without_a_journal(runs: Runs) -> None:
    model = await RecordedChatModel.from_store(runs.store, "research", runs.recorded.deep, match="order")
    await deep_agent(model).ainvoke(ask("Is there a direct flight to Lisbon?"))
    callers = [call.caller for call in model.recorded_calls]
    assert callers == ["lead_agent", "subagent:researcher", "subagent:researcher", "lead_agent"]
    assert model.unused_calls == ()
    assert model.divergences == []
    model = await RecordedChatModel.from_store(runs.store, "supervised", runs.supervised, match="order")
    await supervisor_graph(model).ainvoke(ask("go"))
    assert model.unused_calls == ()
    assert model.divergences == []


@module_loop
async def test_sync_invoke_and_sync_stream_answer_from_the_record(runs: Runs) -> None:
    for streamed in (False, True):
        model = await RecordedChatModel.from_store(runs.store, "weather", runs.recorded.tool, match="order")

        def run(model: RecordedChatModel = model, streamed: bool = streamed) -> list[Any]:
            agent = weather_agent(model)
            if streamed:
                states = list(agent.stream(ask("What is the weather in Paris?"), stream_mode="values"))
                return states[-1]["messages"]  # type: ignore[no-any-return]
            return agent.invoke(ask("What is the weather in Paris?"))["messages"]  # type: ignore[no-any-return]

        messages = await asyncio.to_thread(run)
        assert messages[-1].content == "It is 18 °C and sunny in Paris."
        assert [m.tool_calls[0]["name"] for m in messages if getattr(m, "tool_calls", None)] == [
            "search", "write_file", "write_file"]
        assert model.unused_calls == ()


def recorded(reply: dict[str, Any] | None, *, caller: str = "lead_agent", index: int = 0, **fields: Any
             ) -> RecordedCall:
    return RecordedCall(run_id="r1", index=index, seq=index + 3, caller=caller, model="fake-gpt",
                        provider="openai", reply=reply, **fields)


class Forecast(BaseModel):
    city: str
    celsius: int


def test_structured_output_reads_a_recorded_tool_call_or_json_text() -> None:
    as_tool = recorded({"content": "", "type": "ai", "tool_calls": [
        {"name": "Forecast", "args": {"city": "Oslo", "celsius": -3}, "id": "f1", "type": "tool_call"}]})
    as_text = recorded({"content": '{"city": "Rome", "celsius": 21}', "type": "ai"}, index=1)
    model = RecordedChatModel([as_tool, as_text], match="order")
    structured = model.with_structured_output(Forecast)
    assert structured.invoke("weather?") == Forecast(city="Oslo", celsius=-3)
    raw: Any = model.with_structured_output(Forecast, include_raw=True).invoke("weather?")
    assert raw["parsed"] == Forecast(city="Rome", celsius=21)
    assert raw["parsing_error"] is None
    said_no = RecordedChatModel([recorded({"content": "I cannot say", "type": "ai"})], match="order")
    with pytest.raises(ValueError, match="no 'Forecast' tool call and no JSON text"):
        said_no.with_structured_output(Forecast).invoke("weather?")


def test_a_reply_keeps_its_recorded_usage_metadata_and_provider() -> None:
    usage = {"input_tokens": 100, "output_tokens": 7, "total_tokens": 107,
             "input_token_details": {"cache_read": 60}}
    reply_with_usage = recorded({"content": "hi", "type": "ai", "usage_metadata": usage,
                                 "response_metadata": {"model_name": "gpt-x", "finish_reason": "stop"}})
    from_row_only = recorded({"content": "hey", "type": "ai"}, index=1,
                             usage={"input_tokens": 5, "output_tokens": 1, "total_tokens": 6,
                                    "cache_read_tokens": 2, "reasoning_tokens": 1})
    model = RecordedChatModel([reply_with_usage, from_row_only], match="order")
    first = model.invoke("x")
    assert first.usage_metadata == usage
    assert first.response_metadata["finish_reason"] == "stop"
    assert first.response_metadata["model_provider"] == "openai"
    second = model.invoke("x")
    assert second.usage_metadata is not None
    assert (second.usage_metadata["total_tokens"], second.usage_metadata["input_token_details"],
            second.usage_metadata["output_token_details"]) == (6, {"cache_read": 2}, {"reasoning": 1})
    assert second.response_metadata["model_name"] == "fake-gpt"


async def test_a_recorded_failure_fails_again_with_its_type_name() -> None:
    model = RecordedChatModel([recorded(None, error_type="RateLimitError", error="slow down")], match="order")
    with pytest.raises(RecordedModelError, match="slow down") as raised:
        await model.ainvoke("x")
    assert type(raised.value).__name__ == "RateLimitError"


def test_match_request_needs_recorded_requests() -> None:
    with pytest.raises(ValueError, match="match='request' needs the runs' recorded requests"):
        RecordedChatModel([recorded({"content": "hi", "type": "ai"})], match="request")
    with pytest.raises(ValueError, match="match must be 'request' or 'order'"):
        RecordedChatModel([recorded({"content": "hi", "type": "ai"})], match="fastest")  # type: ignore[arg-type]


@module_loop
async def test_an_unknown_run_is_a_lookup_error(runs: Runs) -> None:
    with pytest.raises(LookupError, match="no run 'nope'"):
        await RecordedChatModel.from_store(runs.store, "weather", "nope", match="order")


# -- the replay command ------------------------------------------------------------------------------------
@pytest.fixture(params=CLI_BACKENDS)
def cli_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return backend_url(request.param, request, tmp_path_factory)


GRAPHS = textwrap.dedent('''
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    @tool
    def search(query: str) -> str:
        """Search the web."""
        return "18 C and sunny" if "weather" in query else f"nothing about {query}"

    @tool
    def write_file(path: str, text: str) -> str:
        """Write a text file in the workspace."""
        return f"wrote {len(text)} characters to {path}"

    @tool("search")
    def cold_search(query: str) -> str:
        """Search the web."""
        return "5 C and snow"

    def weather(model):
        return create_agent(model, [search, write_file])

    def colder(model):
        return create_agent(model, [cold_search, write_file])

    def broken(model):
        raise RuntimeError("no graph today")
''')


def test_the_replay_command_exits_0_same_1_diverged_2_usage(cli: Any, cli_url: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    async def recorded_weather() -> str:
        async with open_store(cli_url) as store:
            return await record_weather(store, tmp_path / "workspace")

    async def cost_of(url: str, run_id: str) -> float | None:
        async with open_store(url) as store:
            row = await store.get_run(run_id)
            assert row is not None
            return row.usage.cost_usd

    run_id = asyncio.run(recorded_weather())
    recorded_cost = asyncio.run(cost_of(cli_url, run_id))
    assert recorded_cost is not None
    (tmp_path / "my_graphs.py").write_text(GRAPHS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    same = cli(cli_url, "replay", run_id[:8], "--graph", "my_graphs:weather")
    assert same.code == 0, same.err + same.out
    assert "same trajectory and usage" in same.out
    assert "replay journaled in memory://" in same.out
    into = f"sqlite:///{tmp_path / 'replays.db'}"
    diverged = cli(cli_url, "replay", run_id, "--graph", "my_graphs:colder", "--into", into)
    assert diverged.code == 1, diverged.err
    assert "replay diverged at model call 1 (lead_agent): no recorded call has this request" in diverged.out
    assert 'message 2 (tool) content differs at character 0: recorded "18 C and sunny", now "5 C and snow"' \
        in diverged.out
    assert "first divergence: step 2: tool search of lead_agent" in diverged.out  # the comparison's
    shown = cli(into, "runs", diverged.out.rsplit("thread ", 1)[1].split(",")[0])
    assert shown.code == 0
    assert " error " in shown.out  # the replay stopped at the diverging call
    lenient = cli(cli_url, "replay", run_id, "--graph", "my_graphs:colder", "--lenient")
    assert lenient.code == 1
    assert "replay diverged at model call 1" in lenient.out
    assert "status success" in lenient.out
    as_json = cli(cli_url, "replay", run_id, "--graph", "my_graphs:weather", "--json")
    assert as_json.code == 0
    assert json.loads(as_json.out)["same"] is True
    by_path = cli(cli_url, "replay", run_id, "--graph", f"{tmp_path / 'my_graphs.py'}:weather")
    assert by_path.code == 0, by_path.err
    (tmp_path / "prices.json").write_text(json.dumps(PRICING), encoding="utf-8")
    priced_into = f"sqlite:///{tmp_path / 'priced.db'}"
    for priced, cost in [([], None), (["--pricing", str(tmp_path / "prices.json")], recorded_cost)]:
        done = cli(cli_url, "replay", run_id, "--graph", "my_graphs:weather", "--into", priced_into,
                   "--json", *priced)
        assert done.code == 0, done.err
        replayed = json.loads(done.out)["runs"][0]["replayed_run_id"]
        assert asyncio.run(cost_of(priced_into, replayed)) == cost  # fake-gpt: only the table prices it
    for wrong, said_what in [
        (["--graph", "my_graphs"], "--graph takes MODULE:FACTORY"),
        (["--graph", "no_such_module:weather"], "cannot import no_such_module"),
        (["--graph", "my_graphs:nothing"], "my_graphs has no nothing"),
        (["--graph", "my_graphs:broken"], "failed to build the graph: RuntimeError: no graph today"),
        (["--graph", "my_graphs:weather", "--input", "{not json"], "--input is not JSON"),
    ]:
        done = cli(cli_url, "replay", run_id, *wrong)
        assert (done.code, said_what in done.err) == (2, True), done.err
    unknown = cli(cli_url, "replay", "f" * 32, "--graph", "my_graphs:weather")
    assert unknown.code == 2
    assert "not found" in unknown.err


# -- by request -------------------------------------------------------------------------------------------
PROMPT = "You are a weather bot."


def requesting_agent(model: Any, *, prompt: str = PROMPT, tools: Sequence[Any] = (search, write_file)) -> Any:
    return create_agent(model, list(tools), system_prompt=prompt)


async def record_requested(store: RunEventStore) -> str:
    async with RunJournal(store, thread_id="requested", pricing=PRICING) as journal:
        await requesting_agent(ScriptedChatModel(list(WEATHER_SCRIPT))).ainvoke(
            ask("What is the weather in Paris?"), {"callbacks": [journal]})
    return journal.run_id


@module_loop
async def test_an_unchanged_run_replays_by_request(runs: Runs) -> None:
    run_id = await record_requested(runs.store)
    model = await RecordedChatModel.from_store(runs.store, "requested", run_id)
    assert model.match == "request"
    assert all(call.request is not None and call.request.tools for call in model.recorded_calls)
    await assert_replays(runs.store, "requested", run_id, requesting_agent, pricing=PRICING)


@module_loop
async def test_a_changed_system_prompt_diverges_at_the_first_call_naming_it(runs: Runs) -> None:
    run_id = await record_requested(runs.store)
    model = await RecordedChatModel.from_store(runs.store, "requested", run_id)
    with pytest.raises(ReplayDivergence) as raised:
        await requesting_agent(model, prompt="You are a terse weather bot.").ainvoke(
            ask("What is the weather in Paris?"))
    divergence = raised.value.divergence
    assert (divergence.call, divergence.caller) == (0, "lead_agent")
    assert divergence.closest is not None
    assert divergence.closest.index == 0
    assert divergence.difference is not None
    assert (divergence.difference.where, divergence.difference.field, divergence.difference.offset) == (
        "message 0 (system)", "content", 10)
    assert ('message 0 (system) content differs at character 10: recorded "You are a weather bot.", '
            'now "You are a terse weather bot."') in str(raised.value)


@module_loop
async def test_a_changed_tool_output_diverges_at_the_call_after_that_tool(runs: Runs) -> None:
    @tool("search")
    def cold_search(query: str) -> str:
        """Search the web."""
        return "5 C and snow"

    run_id = await record_requested(runs.store)
    result = await replay_run(runs.store, "requested", run_id,
                              lambda m: requesting_agent(m, tools=[cold_search, write_file]))
    (divergence,) = result.divergences
    assert (divergence.call, divergence.caller) == (1, "lead_agent")
    assert divergence.difference is not None
    assert divergence.difference.describe() == (
        'message 3 (tool) content differs at character 0: recorded "18 C and sunny", now "5 C and snow"')
    assert result.error is not None
    assert result.error.startswith("ReplayDivergence: ")


@module_loop
async def test_a_removed_tool_is_reported_at_the_first_call(runs: Runs) -> None:
    run_id = await record_requested(runs.store)
    result = await replay_run(runs.store, "requested", run_id, lambda m: requesting_agent(m, tools=[search]))
    (divergence,) = result.divergences
    assert divergence.call == 0
    assert divergence.difference is not None
    assert divergence.difference.describe() == "tool 'write_file' was offered in the recording, not now"
    assert "tool 'write_file' was offered in the recording, not now" in result.report()


@module_loop
async def test_lenient_replays_record_each_divergence_and_answer_by_order(runs: Runs) -> None:
    run_id = await record_requested(runs.store)
    result = await replay_run(runs.store, "requested", run_id,
                              lambda m: requesting_agent(m, prompt="You are a terse weather bot."),
                              strict=False)
    assert [d.call for d in result.divergences] == [0, 1, 2, 3]
    assert [d.difference.where for d in result.divergences if d.difference] == ["message 0 (system)"] * 4
    (run,) = result.runs
    assert run.comparison is not None
    assert run.comparison.same
    assert not result.same


@module_loop
async def test_same_named_subagents_at_once_are_answered_by_their_requests(runs: Runs) -> None:
    tasks = [{"name": "task", "id": f"t{n}", "type": "tool_call",
              "args": {"description": f"find flights to {city}", "subagent_type": "researcher"}}
             for n, city in enumerate(["Lisbon", "Porto"])]
    lead = ScriptedChatModel([said("", 5, tool_calls=tasks), said("Both done.", 20)])
    researcher = ScriptedChatModel([calls("search", "s1", 7, query="Lisbon"),
                                    calls("search", "s2", 7, query="Porto"),
                                    said("Lisbon: none.", 7), said("Porto: one.", 7)])

    def graph(lead: Any, researcher: Any) -> Any:
        from deepagents import create_deep_agent

        return create_deep_agent(model=lead, tools=[search], subagents=[
            {"name": "researcher", "description": "Finds travel facts.", "system_prompt": "You research.",
             "tools": [search], "model": researcher}])

    run_id = await record(runs.store, graph(lead, researcher), "twins", ask("Flights?"))
    result = await replay_run(runs.store, "twins", run_id, lambda m: graph(m, m), pricing=PRICING)
    assert result.error is None
    assert result.divergences == ()
    assert result.unused_calls == ()
    (run,) = result.runs
    assert run.same_usage
    assert run.replayed is not None
    # Each task got the replies it got when recorded, however the two interleaved this time (the
    # comparison of steps within one caller's lane depends on that interleaving, so it is not asserted).
    def results(tasks: Any) -> dict[str, str | None]:
        return {task.task_id: task.result for task in tasks}

    assert results(run.replayed.subagent_tasks) == results(run.recorded.subagent_tasks)
    assert len(run.replayed.subagent_tasks) == 2
