"""Real agent runs recorded into a store, for the trajectory, comparison and check tests.

Every run is a real LangChain v1 ``create_agent`` (or deepagents) agent on LangChain's offline fake
chat models, journaled by ``RunJournal`` into whatever store the test gives:

- ``tool``: searches, writes ``report.md`` (created) and ``notes.txt`` (modified) in a workspace that
  also holds ``.env`` (untouched), then answers; priced (the model reports ``fake-gpt``);
- ``deep``: a deepagents lead agent delegating to its ``researcher`` subagent, which searches;
- ``middleware``: summarization rewrites the history, and a fallback model answers after the first
  model fails (an ``llm.error`` in a successful run);
- ``failed``: a tool raises, the run fails;
- ``interrupted``: a human-in-the-loop middleware stops before a tool; ``resumed`` approves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from _agent_tools import add
from langchain.agents import create_agent
from langchain.agents.middleware import (
    HumanInTheLoopMiddleware,
    ModelFallbackMiddleware,
    SummarizationMiddleware,
)
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from run_journal import RunEventStore, RunJournal, WorkspaceSnapshot, arecord_workspace_changes

MODEL = "fake-gpt"
PRICING = {MODEL: {"input": 1.0, "output": 2.0}}
"""USD per million tokens: a run of the fake model has a known cost."""


class ToolModel(GenericFakeChatModel):
    """A fake chat model that accepts ``bind_tools`` (its script already holds the tool calls)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self


class BrokenModel(ToolModel):
    """A model whose provider is down."""

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("provider down")

    async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("provider down")


def said(text: str, tokens: int = 10, **fields: Any) -> AIMessage:
    return AIMessage(text, usage_metadata={"input_tokens": tokens, "output_tokens": 2,
                                           "total_tokens": tokens + 2},
                     response_metadata={"model_name": MODEL}, **fields)


def calls(name: str, call_id: str, tokens: int = 10, **args: Any) -> AIMessage:
    return said("", tokens, tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])


WORKSPACE: list[Path] = []
"""The folder ``write_file`` writes in (set by ``record_runs``)."""


@tool
def search(query: str) -> str:
    """Search the web."""
    return "18 C and sunny" if "weather" in query else f"nothing about {query}"


@tool
def write_file(path: str, text: str) -> str:
    """Write a text file in the workspace."""
    (WORKSPACE[-1] / path).write_text(text, encoding="utf-8")
    return f"wrote {len(text)} characters to {path}"


@tool
def boom(x: int) -> int:
    """Always fails."""
    raise ValueError(f"no such thing as {x}")


WEATHER_SCRIPT = (
    calls("search", "c1", query="weather in Paris"),
    calls("write_file", "c2", path="report.md", text="Paris: 18 C, sunny"),
    calls("write_file", "c3", path="notes.txt", text="asked about Paris"),
    said("It is 18 °C and sunny in Paris.", 30),
)


def weather_agent(script: Sequence[AIMessage] = WEATHER_SCRIPT) -> Any:
    return create_agent(ToolModel(messages=iter(list(script))), [search, write_file])


async def record(store: RunEventStore, agent: Any, thread: str, inputs: Any,
                 config: dict[str, Any] | None = None, workspace: Path | None = None) -> str:
    """Run ``agent`` once under a journal; the run id. A workspace is snapshotted around the run."""
    async with RunJournal(store, thread_id=thread, pricing=PRICING) as journal:
        before = await WorkspaceSnapshot.acapture(workspace) if workspace is not None else None
        with contextlib.suppress(ValueError):  # the failing run: the journal records it
            await agent.ainvoke(inputs, {**(config or {}), "callbacks": [journal]})
        if before is not None:
            await arecord_workspace_changes(journal, before)
    return journal.run_id


def ask(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(text)]}


@dataclasses.dataclass(frozen=True)
class Recorded:
    tool: str
    deep: str
    middleware: str
    failed: str
    interrupted: str
    resumed: str

    THREADS: ClassVar[dict[str, str]] = {
        "tool": "weather", "deep": "research", "middleware": "summarized", "failed": "broken",
        "interrupted": "approval", "resumed": "approval",
    }

    def thread(self, name: str) -> str:
        return self.THREADS[name]

    def run(self, name: str) -> str:
        return str(getattr(self, name))


def prepare_workspace(workspace: Path) -> None:
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.txt").write_text("nothing yet", encoding="utf-8")
    (workspace / ".env").write_text("API_KEY=not-a-real-key\n", encoding="utf-8")
    (workspace / "report.md").unlink(missing_ok=True)


async def record_weather(store: RunEventStore, workspace: Path, thread: str = "weather",
                         script: Sequence[AIMessage] = WEATHER_SCRIPT) -> str:
    await asyncio.to_thread(prepare_workspace, workspace)
    WORKSPACE.append(workspace)
    return await record(store, weather_agent(script), thread, ask("What is the weather in Paris?"),
                        workspace=workspace)


async def record_deep(store: RunEventStore, thread: str = "research") -> str:
    from deepagents import create_deep_agent

    researcher = [calls("search", "s1", 7, query="flights to Lisbon"), said("No direct flight.", 7)]
    lead = [calls("task", "task-1", 5, description="find flights to Lisbon", subagent_type="researcher"),
            said("The researcher found no direct flight.", 20)]
    agent = create_deep_agent(model=ToolModel(messages=iter(lead)), tools=[search], subagents=[
        {"name": "researcher", "description": "Finds travel facts.", "system_prompt": "You research travel.",
         "tools": [search], "model": ToolModel(messages=iter(researcher))}])
    return await record(store, agent, thread, ask("Is there a direct flight to Lisbon?"))


async def record_middleware(store: RunEventStore, thread: str = "summarized") -> str:
    summarizer = ToolModel(messages=iter([said("SUMMARY of the earlier talk", 50)] * 3))
    backup = ToolModel(messages=iter([calls("add", "m1", a=1, b=2), said("it is 3", 20)]))
    agent = create_agent(BrokenModel(messages=iter([])), [add], middleware=[
        SummarizationMiddleware(model=summarizer, trigger=("messages", 4), keep=("messages", 2)),
        ModelFallbackMiddleware(backup),
    ])
    history = [HumanMessage("hi"), AIMessage("hello"), HumanMessage("how are you"), AIMessage("fine"),
               HumanMessage("what is 1+2")]
    return await record(store, agent, thread, {"messages": history})


async def record_failed(store: RunEventStore, thread: str = "broken") -> str:
    agent = create_agent(ToolModel(messages=iter([calls("boom", "b1", x=1), said("sorry")])), [boom])
    return await record(store, agent, thread, ask("break it"))


async def record_interrupted(store: RunEventStore, thread: str = "approval") -> tuple[str, str]:
    model = ToolModel(messages=iter([calls("add", "h1", a=2, b=2), said("it is 4")]))
    agent = create_agent(model, [add], middleware=[HumanInTheLoopMiddleware(interrupt_on={"add": True})],
                         checkpointer=InMemorySaver())
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    first = await record(store, agent, thread, ask("what is 2+2"), config)
    second = await record(store, agent, thread, Command(resume={"decisions": [{"type": "approve"}]}), config)
    return first, second


Shared = tuple[RunEventStore, Recorded]
"""A store holding every kind of run, and their ids (what the tests' shared fixture yields)."""


async def record_runs(store: RunEventStore, workspace: Path) -> Recorded:
    """Every kind of run above, once, in ``store``."""
    interrupted, resumed = await record_interrupted(store)
    return Recorded(
        tool=await record_weather(store, workspace), deep=await record_deep(store),
        middleware=await record_middleware(store), failed=await record_failed(store),
        interrupted=interrupted, resumed=resumed,
    )
