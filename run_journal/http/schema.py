"""Response shapes for the OpenAPI schema (documentation: the endpoints return these as plain JSON).

The records are the library's own JSON forms: ``RunEvent.to_dict()``, ``RunRow.to_dict()``,
``UsageSummary.to_dict()`` and the ``latest_workspace_changes`` payload. Unknown fields may be added;
clients ignore what they do not know.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt

COMMENT_MAX: Final = 2000
"""The longest feedback comment the HTTP API takes (characters)."""


class Event(BaseModel):
    """One stored event (``RunEvent.to_dict()``)."""

    thread_id: str
    run_id: str
    seq: int = Field(description="Position in the thread: from 1, dense, assigned by the store.")
    event_type: str
    category: str
    content: Any
    metadata: dict[str, Any]
    created_at: str = Field(description="ISO 8601, UTC.")
    event_id: str
    user_id: str | None


class Usage(BaseModel):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int
    reasoning_tokens: int
    llm_calls: int
    cost_usd: float | None


class Run(BaseModel):
    """A run row (``RunRow.to_dict()``) plus ``duration_ms``."""

    run_id: str
    thread_id: str
    user_id: str | None
    status: str
    started_at: str | None
    ended_at: str | None
    updated_at: str | None
    resumed_from: str | None
    error: str | None
    usage: Usage
    usage_by_caller: dict[str, Usage]
    usage_by_model: dict[str, Usage]
    tool_call_count: int
    tool_error_count: int
    message_count: int
    first_human_message: str | None
    last_ai_message: str | None
    metadata: dict[str, Any]
    cost_note: str | None = Field(description="Why ``usage.cost_usd`` is None although the run made "
                                              "model calls (e.g. no price for a model); see costs.")
    duration_ms: int | None


class Score(BaseModel):
    """A ``run.score`` event of the run: feedback given over HTTP, a check's result, any score."""

    seq: int
    created_at: str
    name: str
    value: bool | int | float | str
    source: str = Field(description="Who gave it: human (feedback), check, api, ...")
    comment: str | None


class RunDetail(Run):
    row: bool = Field(description="False for a run with events but no run row: its status is "
                                  "folded from its lifecycle events and its totals are zero.")
    scores: list[Score] = Field(description="The run's scores, oldest first.")


class Feedback(BaseModel):
    """Feedback on a run: thumbs up or down, or a number, with an optional comment."""

    model_config = ConfigDict(extra="forbid")

    value: Literal["up", "down"] | StrictInt | StrictFloat = Field(
        description='"up", "down", or a number (a rating, say 1 to 5).')
    comment: str | None = Field(default=None, max_length=COMMENT_MAX)
    name: str = Field(default="feedback", min_length=1, max_length=64,
                      pattern=r"^[A-Za-z0-9_.:-]+$", description="The score's name.")


class LatestRun(BaseModel):
    run_id: str
    status: str
    started_at: str | None
    ended_at: str | None
    duration_ms: int | None
    first_human_message: str | None
    total_tokens: int
    cost_usd: float | None
    cost_note: str | None


class Thread(BaseModel):
    """A thread and the totals of its run rows (a thread with events but no run row has zeros)."""

    thread_id: str
    last_activity_at: str = Field(description="ISO 8601: the newest event's created_at (the "
                                              "caller's newest, in a user-scoped list).")
    run_count: int
    message_count: int
    total_tokens: int
    cost_usd: float | None = Field(description="None when a model call's price is unknown.")
    cost_note: str | None = Field(description="Why cost_usd is None: the runs' reasons.")
    latest_run: LatestRun | None


class ThreadPage(BaseModel):
    data: list[Thread] = Field(description="Most recently active first.")
    has_more: bool
    next_after: str | None = Field(description="Pass as ``after`` for the next page.")


class RunPage(BaseModel):
    data: list[Run] = Field(description="Newest first.")
    total: int
    has_more: bool
    next_offset: int | None
    next_after: str | None = Field(description="Pass as ``after`` for the next page.")


class SearchRun(Run):
    """A run row of a search: ``Run`` plus what search filters on."""

    models: list[str]
    tools: list[str]
    callers: list[str]
    llm_error_count: int


class SearchPage(BaseModel):
    data: list[SearchRun] = Field(description="Newest first.")
    has_more: bool
    next_cursor: str | None = Field(description="Pass as ``cursor`` for the next page.")


class UsageBucket(BaseModel):
    key: str = Field(description="The day (YYYY-MM-DD, UTC; 'not started' for runs without a start), "
                                 "model or caller.")
    runs: int = Field(description="Runs counted in the bucket.")
    usage: Usage = Field(description="Their totals; cost_usd is None when any call's price is unknown.")
    known_cost_usd: float = Field(description="The sum of the costs that are known.")
    unpriced_runs: int = Field(description="Runs in the bucket with calls of unknown price.")


class UsageTrend(BaseModel):
    by: str = Field(description="day, model or caller.")
    data: list[UsageBucket] = Field(description="Days in time order; models and callers by name.")


class HistoryPage(BaseModel):
    data: list[Event]
    has_more: bool
    next_before_seq: int | None = Field(description="Pass as ``before_seq`` for the older page.")


class EventPage(BaseModel):
    data: list[Event]
    has_more: bool
    next_after_seq: int | None = Field(description="Pass as ``after_seq`` for the next page.")


class MessagePage(BaseModel):
    data: list[Event]
    has_more: bool
    next_before_seq: int | None
    next_after_seq: int | None


class UsageRun(BaseModel):
    run_id: str
    thread_id: str
    status: str
    usage: Usage


class UsageSummary(BaseModel):
    runs: list[UsageRun]
    by_model: dict[str, Usage]
    by_caller: dict[str, Usage]
    total: Usage


class WorkspaceReview(BaseModel):
    available: bool
    thread_id: str
    run_id: str
    seq: int | None
    created_at: str | None
    summary_text: str | None
    workspace_changes: dict[str, Any] | None = Field(
        description="The event's ``metadata.workspace_changes``: version, summary and files (path, "
                    "status, additions, deletions, diff, sensitive, binary, truncated, ...).")


class Comparison(BaseModel):
    """``compare_runs(a, b).to_dict()``: run A against run B of one thread."""

    same: bool
    summary: str = Field(description="The first divergence in one line, or that the runs are the same.")
    a: dict[str, Any] = Field(description="Run A: status, input, final answer, counts, tokens, cost.")
    b: dict[str, Any]
    divergence: dict[str, Any] | None = Field(
        description="Where B first went differently: step, kind, caller, field, both values, seqs.")
    steps: list[dict[str, Any]] = Field(
        description="The aligned steps: position, kind, caller, label, index and seq in A and in B "
                    "(null: a step only one run took), the fields that differ.")
    differences: list[dict[str, Any]]
    deltas: dict[str, Any] = Field(description="B minus A: model and tool calls, tokens, cost, duration.")
    ignored: list[str]


class Error(BaseModel):
    error: str = Field(description="bad_request, unauthorized, forbidden, not_found, not_allowed, "
                                   "unavailable or internal.")
    detail: str


class ModelRequest(BaseModel):
    """What a model call was sent (``ModelRequest.to_dict()``)."""

    messages: list[dict[str, Any]] = Field(
        description="LangChain message dicts (type, content, tool_calls, ...).")
    tools: list[Any] | None = Field(description="OpenAI tool format; null when none was offered.")
    params: dict[str, Any]
    message_count: int
    missing: list[str] = Field(description="Digests of bodies the store does not hold.")


class ModelCall(BaseModel):
    """One model call (``ModelCall.to_dict()``)."""

    index: int
    caller: str
    model: str | None
    provider: str | None
    request: ModelRequest | None = Field(description="null when the run was journaled without requests.")
    reply: dict[str, Any] | None
    error: dict[str, Any] | None
    usage: dict[str, Any] | None
    cost_usd: float | None
    latency_ms: int | None
    time_to_first_token_ms: int | None
    request_seq: int | None
    reply_seq: int | None
    llm_run_id: str | None


class ModelCallList(BaseModel):
    thread_id: str
    run_id: str
    data: list[ModelCall]
