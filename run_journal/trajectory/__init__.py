"""A run's trajectory read back from the journal, and one comparison of two of them.

- ``read_trajectory(store, thread_id, run_id)``: the structured form (model calls with caller and
  model, tool calls with arguments and outcomes, subagent tasks, handoffs, middleware, terminal status,
  final answer, usage, cost and duration), each step with the seqs of its events.
- ``trajectory_of(store, thread_id, run_id)``: the conversation as OpenAI-style messages, the shape
  agentevals' trajectory evaluators accept.
- ``compare_runs(a, b)``: the two trajectories aligned and the first divergence.

Everything here reads through the store contract and the projections only.
"""

from __future__ import annotations

from collections.abc import Collection

from run_journal.envelope import JsonObject
from run_journal.stores.base import RunEventStore
from run_journal.trajectory.compare import (
    Deltas,
    Divergence,
    FieldDifference,
    RunComparison,
    RunSide,
    StepPair,
    compare_runs,
    first_difference,
)
from run_journal.trajectory.reading import build_trajectory, content_text, read_trajectory
from run_journal.trajectory.steps import (
    FileChange,
    Handoff,
    Message,
    MiddlewareStep,
    ModelCall,
    Score,
    Step,
    SubagentTask,
    ToolCall,
    ToolRequest,
    Trajectory,
    is_agent_caller,
)

__all__ = [
    "Deltas",
    "Divergence",
    "FieldDifference",
    "FileChange",
    "Handoff",
    "Message",
    "MiddlewareStep",
    "ModelCall",
    "RunComparison",
    "RunSide",
    "Score",
    "Step",
    "StepPair",
    "SubagentTask",
    "ToolCall",
    "ToolRequest",
    "Trajectory",
    "build_trajectory",
    "compare_runs",
    "content_text",
    "first_difference",
    "is_agent_caller",
    "read_trajectory",
    "trajectory_of",
]


async def trajectory_of(
    store: RunEventStore, thread_id: str, run_id: str, *, callers: Collection[str] | None = None,
    user_id: str | None = None,
) -> list[JsonObject]:
    """One run's conversation as OpenAI-style chat messages, oldest first.

    ``{"role": "user", "content": ...}`` for the human input, ``{"role": "assistant", "content": ...,
    "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}]}`` for each model
    reply (``arguments`` is JSON text), ``{"role": "tool", "content": ..., "tool_call_id": ...}`` for
    each tool result. ``callers``: None for the lead agent and every named agent, ``"all"`` for every
    caller, or a collection of caller names (``{"subagent:researcher"}`` is that subagent's own
    conversation, starting with its task as the user message).
    """
    trajectory = await read_trajectory(store, thread_id, run_id, user_id=user_id)
    return trajectory.openai_messages(callers)
