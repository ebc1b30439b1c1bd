"""The bookkeeping of one journaled run: what the recorder tracks between callbacks."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime
from typing import Any

from run_journal.catalog import LEAD_AGENT
from run_journal.envelope import JsonObject, NewEvent
from run_journal.runs import RunStatus


@dataclasses.dataclass(slots=True)
class NestedAgent:
    """A graph run inside a tool call (deepagents' ``task`` tool, an agent used as a tool). It is
    journaled as a subagent task from its first model call on: ``task_id`` is then set."""

    root: uuid.UUID
    call_id: str | None
    name: str
    description: str
    task_id: str | None = None
    steps: int = 0
    last_text: str | None = None
    mirrored: bool = False
    """The task is a streamed one (``task_*`` chunks) already: the chunks journal its steps."""

    @property
    def caller(self) -> str:
        return f"subagent:{self.name}"


@dataclasses.dataclass(frozen=True, slots=True)
class MiddlewareHook:
    """A ``create_agent`` middleware hook running as its own graph node."""

    run_id: uuid.UUID
    name: str
    hook: str
    tag: str


@dataclasses.dataclass(frozen=True, slots=True)
class Scope:
    """Whom a callback run works for, handed down the callback tree to its children: the innermost
    middleware hook or active nested agent wins, else the caller its tags, its agent or its root
    gave it."""

    caller: str
    nested: NestedAgent | None = None
    hook: MiddlewareHook | None = None
    namespace: str | None = None
    """LangGraph's ``checkpoint_ns`` of the graph the run belongs to (None: the run's own graph)."""
    agent: str | None = None
    """The innermost named agent graph the run belongs to (a supervisor worker, a swarm agent)."""

    @property
    def attributed(self) -> str:
        if self.hook is not None:
            return f"middleware:{self.hook.tag}"
        if self.nested is not None and self.nested.task_id is not None:
            return self.nested.caller
        return self.caller


@dataclasses.dataclass(slots=True)
class LlmCall:
    caller: str
    model: str | None
    index: int
    started: float
    first_token_at: float | None = None
    task: NestedAgent | None = None
    provider: str | None = None
    """LangChain's ``ls_provider`` of the call (``openai``, ``amazon_bedrock``...), for its price."""


@dataclasses.dataclass(frozen=True, slots=True)
class ToolRun:
    name: str
    call_id: str | None
    caller: str
    started: float
    task: NestedAgent | None = None
    parent: uuid.UUID | None = None
    args: Any = None


@dataclasses.dataclass(slots=True)
class RunState:
    """Lifecycle, open work and dedupe sets. Everything keyed by LangChain run id is popped on end,
    so memory follows what is in flight, not the length of the run."""

    started: bool = False
    ended: bool = False
    root: uuid.UUID | None = None
    started_at: datetime | None = None
    started_mono: float = 0.0
    ended_at: datetime | None = None
    status: RunStatus = RunStatus.PENDING
    error: str | None = None
    caller: str = LEAD_AGENT
    run_name: str | None = None
    chain_names: dict[uuid.UUID, str] = dataclasses.field(default_factory=dict)
    scopes: dict[uuid.UUID, Scope] = dataclasses.field(default_factory=dict)
    """The scope of every chain in flight (popped at its end)."""
    baseline: set[str] | None = None
    """Ids of the messages the thread held before this run (from the first node's input)."""
    root_input_count: int = 0
    interrupts: dict[str, Any] = dataclasses.field(default_factory=dict)
    error_node: str | None = None
    llm_calls: dict[uuid.UUID, LlmCall] = dataclasses.field(default_factory=dict)
    llm_index: int = 0
    tool_runs: dict[uuid.UUID, ToolRun] = dataclasses.field(default_factory=dict)
    seen_calls: set[str] = dataclasses.field(default_factory=set)
    open_calls: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    """tool_call_id -> (tool name, caller) for calls a model asked for and nobody answered yet."""
    results_done: set[str] = dataclasses.field(default_factory=set)
    outcomes_done: set[str] = dataclasses.field(default_factory=set)
    errored_calls: set[str] = dataclasses.field(default_factory=set)
    failed_tries: dict[str, tuple[ToolRun, JsonObject, int]] = dataclasses.field(default_factory=dict)
    """tool_call_id -> (tool run, its outcome's error fields, tries) for tries that failed and were not
    retried yet."""
    open_tasks: dict[str, str] = dataclasses.field(default_factory=dict)
    tree_tasks: set[str] = dataclasses.field(default_factory=set)
    """Tasks journaled from the callback tree: their model calls are counted as they happen, and
    ``task_*`` chunks for them (a stream wrapper around the same run) are not journaled again."""
    memory_recorded: bool = False
    entry_node: str | None = None
    """The first node the run's own graph ran."""
    routed_entry: bool = False
    """The graph chose its first node at its start (``__start__`` ran a router, as a swarm does)."""
    lead_agent_name: str | None = None
    """The named agent the graph started with, if it did not route: its calls are the lead's."""
    active_agent: str | None = None
    """The caller of the agent holding the turn, for ``agent.handoff``."""
    handoff_tools: set[str] = dataclasses.field(default_factory=set)
    """Tools that hand off to another agent (``__handoff_destination`` in their metadata)."""
    pending_handoff: tuple[str, str] | None = None
    """(tool call id, destination) of the last handoff tool that ran."""
    handoff_calls: set[str] = dataclasses.field(default_factory=set)
    """Tool call ids of handoffs: their results are routing, not conversation."""

    def next_llm_index(self) -> int:
        index = self.llm_index
        self.llm_index += 1
        return index

    def answerable(self) -> set[str]:
        """Tool call ids this run may still write a ``llm.tool.result`` for."""
        if not (self.open_calls or self.errored_calls or self.seen_calls):
            return set()
        return (self.open_calls.keys() | self.errored_calls | self.seen_calls) - self.results_done

    def caller_of_call(self, call_id: str) -> str:
        entry = self.open_calls.get(call_id)
        return entry[1] if entry else LEAD_AGENT


__all__ = ["LlmCall", "MiddlewareHook", "NestedAgent", "NewEvent", "RunState", "Scope", "ToolRun"]
