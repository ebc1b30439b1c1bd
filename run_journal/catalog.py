"""The event catalog: every event type a producer may write, its category and its producer.

The catalog is the single Python source of truth for names; ``contracts/run_event_stream_contract.json``
is its machine-readable twin (payload schemas, compatibility rules) and a conformance test keeps the two
identical. Names are frozen: renaming an event or moving it to another category is a breaking change.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final

EVENT_TYPE_MAX_LENGTH: Final = 32
CATEGORY_MAX_LENGTH: Final = 16
MIDDLEWARE_PREFIX: Final = "middleware:"
MIDDLEWARE_TAG_MAX_LENGTH: Final = EVENT_TYPE_MAX_LENGTH - len(MIDDLEWARE_PREFIX)  # 21
LEAD_AGENT: Final = "lead_agent"
"""``metadata.caller`` of what the run's own agent did; the others are ``subagent:<name>`` (an agent
run as a tool call: a task), ``agent:<name>`` (a named agent graph running as a node: a supervisor's
worker, a swarm's agent) and ``middleware:<name>``."""
SUBAGENT_PREFIX: Final = "subagent:"
AGENT_PREFIX: Final = "agent:"
ID_MAX_LENGTH: Final = 255
"""Longest thread, run, user or event id a store accepts (ids become paths, keys and columns)."""
TASK_ID_MAX_LENGTH: Final = ID_MAX_LENGTH
"""Longest ``metadata["task_id"]`` (the subagent task a row is filed under, an indexed column); it
may not contain NUL either (a PostgreSQL text value cannot)."""

_TAG_PATTERN: Final = re.compile(r"[A-Za-z0-9_.\-]{1,21}")
_EVENT_TYPE_PATTERN: Final = re.compile(r"[A-Za-z0-9_.:\-]{1,32}")


class Category(StrEnum):
    """Consumer-routing buckets. Only ``message`` rows feed message projections."""

    MESSAGE = "message"
    TRACE = "trace"
    OUTPUTS = "outputs"
    ERROR = "error"
    MIDDLEWARE = "middleware"
    CONTEXT = "context"
    SUBAGENT = "subagent"
    WORKSPACE = "workspace"


@dataclass(frozen=True, slots=True)
class EventDefinition:
    """One catalog entry: what the event is called, where it is routed and who writes it."""

    event_type: str
    category: Category
    producer: str
    summary: str


def _define(*entries: EventDefinition) -> MappingProxyType[str, EventDefinition]:
    return MappingProxyType({entry.event_type: entry for entry in entries})


EVENTS: Final = _define(
    EventDefinition("run.start", Category.TRACE, "RunJournal: root on_chain_start",
                    "A run began; names the run it resumes, if any."),
    EventDefinition("run.end", Category.OUTPUTS, "RunJournal: root on_chain_end",
                    "The run finished successfully; content is what this run produced."),
    EventDefinition("run.error", Category.ERROR, "RunJournal: on_chain_error",
                    "The run failed with an exception (one row per failure)."),
    EventDefinition("run.interrupt", Category.OUTPUTS, "RunJournal: GraphInterrupt at the root",
                    "The run stopped to wait for a human (LangGraph interrupt())."),
    EventDefinition("run.cancel", Category.ERROR, "RunJournal: task cancellation or close",
                    "The run was cancelled, or closed by orphan reconciliation."),
    EventDefinition("llm.human.input", Category.MESSAGE, "RunJournal: first lead-agent human input",
                    "The human message that started the lead agent's turn."),
    EventDefinition("llm.ai.response", Category.MESSAGE, "RunJournal: on_llm_end",
                    "One model response, once per model call."),
    EventDefinition("llm.tool.result", Category.MESSAGE, "RunJournal: on_tool_end",
                    "One tool message returned to the model."),
    EventDefinition("llm.error", Category.TRACE, "RunJournal: on_llm_error",
                    "A model call failed."),
    EventDefinition("llm.request", Category.TRACE, "RunJournal: on_chat_model_start / on_llm_start",
                    "What one model call was sent: its messages, tools and parameters, as digests of "
                    "bodies stored once per thread."),
    EventDefinition("tool.call", Category.TRACE, "RunJournal: tool calls in a model response",
                    "The model asked for a tool; arguments as a capped preview."),
    EventDefinition("tool.outcome", Category.TRACE, "RunJournal: on_tool_end / on_tool_error / run end",
                    "How a tool call ended: success, error or missing (after every retry); size and hash "
                    "of the result."),
    EventDefinition("agent.handoff", Category.TRACE,
                    "RunJournal: a named agent graph takes the turn from another",
                    "The turn passed from one agent to another (a supervisor and its workers, a swarm)."),
    EventDefinition("context:memory", Category.CONTEXT, "RunJournal.record_memory_context()",
                    "The sha256 of the hidden memory context the run used, never the text."),
    EventDefinition("subagent.start", Category.SUBAGENT,
                    "subagent_run_event(): task_started; RunJournal: a graph in a tool call calls a model",
                    "A subagent task started."),
    EventDefinition("subagent.step", Category.SUBAGENT,
                    "subagent_run_event(): task_running; RunJournal: a nested agent's reply or tool result",
                    "One message of a running subagent task."),
    EventDefinition("subagent.end", Category.SUBAGENT,
                    "subagent_run_event(): terminal task_*; RunJournal: a nested agent's graph ends",
                    "A subagent task ended: completed, failed, cancelled or timed_out."),
    EventDefinition("workspace_changes", Category.WORKSPACE, "record_workspace_changes()",
                    "The files a run created, modified or deleted, with bounded diffs."),
    EventDefinition("run.score", Category.TRACE, "record_score(); run-journal URL check --record",
                    "A score given to the run: a check's result, a person's feedback, an evaluator's "
                    "number."),
)
"""The canonical catalog. ``middleware:{tag}`` is a documented pattern, not an entry."""

MIDDLEWARE_EVENT: Final = EventDefinition(
    "middleware:{tag}", Category.MIDDLEWARE,
    "RunJournal.record_middleware(); create_agent middleware hooks that changed the state, interrupted"
    " or jumped",
    "A middleware changed the run's state (guardrail, safety termination, skills, ...).",
)

LEGACY_ALIASES: Final = MappingProxyType({"ai_message": "llm.ai.response"})
"""Read-only names that old rows may carry. Producers never write them; readers treat them as the target."""

TERMINAL_RUN_EVENTS: Final = frozenset({"run.end", "run.error", "run.interrupt", "run.cancel"})
LIFECYCLE_EVENTS: Final = frozenset({"run.start"}) | TERMINAL_RUN_EVENTS

SUBAGENT_TERMINAL_STATUSES: Final = ("completed", "failed", "cancelled", "timed_out")


def middleware_event_type(tag: str) -> str:
    """Return ``middleware:{tag}``; the tag must be 1-21 characters of ``[A-Za-z0-9_.-]``."""
    if not isinstance(tag, str) or not _TAG_PATTERN.fullmatch(tag):
        raise ValueError(
            f"middleware tag {tag!r} is invalid: it must be 1-{MIDDLEWARE_TAG_MAX_LENGTH} characters "
            "of letters, digits, '_', '.' or '-' (the full event type is limited to "
            f"{EVENT_TYPE_MAX_LENGTH} characters)"
        )
    return MIDDLEWARE_PREFIX + tag


def canonical_event_type(event_type: str) -> str:
    """Map a legacy alias to the name it stands for; other names are returned unchanged."""
    return LEGACY_ALIASES.get(event_type, event_type)


def definition_of(event_type: str) -> EventDefinition | None:
    """The catalog entry for a name (aliases and middleware tags included), or None if unknown."""
    canonical = canonical_event_type(event_type)
    if canonical in EVENTS:
        return EVENTS[canonical]
    if canonical.startswith(MIDDLEWARE_PREFIX):
        return MIDDLEWARE_EVENT
    return None


def validate_event_type(event_type: str, category: str) -> None:
    """Check what every store checks before a write; raise ``ValueError`` saying what is wrong.

    Unknown event types are allowed (additions are additive), but they must respect the limits and
    use one of the eight categories; known ones must use the category the catalog gives them.
    """
    if type(event_type) is str and isinstance(category, str):
        _validate_event_type(event_type, str(category))  # cached: producers repeat a few names
    else:
        _validate_event_type.__wrapped__(event_type, category)


@functools.lru_cache(maxsize=1024)
def _validate_event_type(event_type: str, category: str) -> None:
    if not isinstance(event_type, str) or not _EVENT_TYPE_PATTERN.fullmatch(event_type):
        raise ValueError(
            f"event_type {event_type!r} is invalid: 1-{EVENT_TYPE_MAX_LENGTH} characters of "
            "letters, digits and '_.:-'"
        )
    if not isinstance(category, str) or len(category) > CATEGORY_MAX_LENGTH:
        raise ValueError(f"category {category!r} is invalid: at most {CATEGORY_MAX_LENGTH} characters")
    if category not in _CATEGORY_VALUES:
        raise ValueError(f"category {category!r} is not one of {sorted(_CATEGORY_VALUES)}")
    if event_type.startswith(MIDDLEWARE_PREFIX):
        middleware_event_type(event_type[len(MIDDLEWARE_PREFIX):])
    definition = definition_of(event_type)
    if definition is not None and definition.category != category:
        raise ValueError(
            f"event_type {event_type!r} belongs to category {definition.category.value!r}, "
            f"not {category!r}"
        )


def category_of(event_type: str) -> Category:
    """The category the catalog assigns to ``event_type``; ``KeyError`` for unknown names."""
    definition = definition_of(event_type)
    if definition is None:
        raise KeyError(f"unknown event type {event_type!r}")
    return definition.category


_CATEGORY_VALUES: Final = frozenset(category.value for category in Category)
