"""``replay_run``: a recorded run replayed against a graph built today, and the two trajectories compared.

The loop, for run R of a thread:

1. the runs to replay: R, preceded by the runs it resumed (an interrupted run before the run that
   resumed it), or by every earlier run of the thread (``whole_thread=True``: a graph whose
   checkpointer holds the conversation);
2. one ``RecordedChatModel`` answering from all of them, handed to ``build_graph``;
3. each run invoked on its recorded input (the human message, or the ``Command(resume=...)`` it was
   resumed with), journaled into ``into`` under a thread of its own;
4. each replayed run's trajectory compared with its recording (``compare_runs``), and the usage rows.

Tools run for real: the point is today's code against yesterday's model decisions (see
``docs/replay.md`` for pinning tools that reach the outside world).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from typing import Any, Final

from langchain_core.messages import HumanMessage
from langgraph.types import Command

from run_journal.catalog import ID_MAX_LENGTH
from run_journal.envelope import RunEvent
from run_journal.journal import RunJournal
from run_journal.projections import iter_events
from run_journal.redact import Redactor
from run_journal.replay.divergence import CallDivergence
from run_journal.replay.matching import Match
from run_journal.replay.model import RecordedChatModel
from run_journal.replay.recorded import RecordedCall
from run_journal.runs import RunRow, UsageTotals
from run_journal.stores.base import RunEventStore
from run_journal.stores.memory import MemoryRunEventStore
from run_journal.trajectory import RunComparison, Trajectory, compare_runs, read_trajectory
from run_journal.usage import PricingOption

GraphFactory = Callable[[RecordedChatModel], Any]
"""Takes the replay's chat model, returns the graph (or a coroutine that returns it)."""
RESUME_PREFIX: Final = "Command(resume="
NO_INPUT: Final = object()


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayedRun:
    """One recorded run and its replay: their trajectories, the comparison, the usage rows."""

    recorded: Trajectory
    replayed: Trajectory | None
    """None when the replay never started (the graph failed before its first callback)."""
    comparison: RunComparison | None
    recorded_row: RunRow | None
    replayed_row: RunRow | None

    @property
    def same_usage(self) -> bool:
        """The same model calls and tokens in total, per caller and per model. Costs are left out:
        they come from the price table each journal was given (pass the recording's ``pricing`` to
        compare them too)."""
        a, b = self.recorded_row, self.replayed_row
        if a is None or b is None:
            return a is b
        return _tokens(a) == _tokens(b)

    @property
    def same(self) -> bool:
        return self.comparison is not None and self.comparison.same and self.same_usage


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayResult:
    """What ``replay_run`` found. ``same``: every replayed run has the recorded trajectory and
    usage, no model call diverged, every recorded call was asked for and the graph raised nothing."""

    thread_id: str
    run_id: str
    runs: tuple[ReplayedRun, ...]
    divergences: tuple[CallDivergence, ...]
    unused_calls: tuple[RecordedCall, ...]
    error: str | None
    """What the replayed graph raised (``"ReplayDivergence: ..."``, a tool's failure), if anything."""
    store: RunEventStore
    """Where the replay was journaled."""
    replay_thread_id: str

    @property
    def same(self) -> bool:
        return (self.error is None and not self.divergences and not self.unused_calls
                and len(self.runs) > 0 and all(run.same for run in self.runs))

    @property
    def comparison(self) -> RunComparison | None:
        """The comparison of the first replayed run that differs, else of the run asked for."""
        differing = [run.comparison for run in self.runs if not run.same and run.comparison is not None]
        if differing:
            return differing[0]
        return self.runs[-1].comparison if self.runs else None

    def report(self) -> str:
        """A few lines for a person: the verdict, the divergence, the first difference, usage."""
        lines = [f"replay of run {self.run_id} (thread {self.thread_id}): "
                 + ("same trajectory and usage" if self.same else "diverged")]
        lines += [divergence.describe() for divergence in self.divergences[:3]]
        if self.error is not None and not self.divergences:
            lines.append(f"the replayed graph raised {self.error}")
        for run in self.runs:
            if run.comparison is not None and not run.comparison.same:
                lines.append(f"run {run.recorded.run_id}: {run.comparison.summary}")
            if run.comparison is not None and not run.same_usage and self.error is None:
                lines.append(f"run {run.recorded.run_id}: usage differs: " + _usage_text(run))
        if self.unused_calls and not self.divergences:
            first = self.unused_calls[0]
            lines.append(f"{len(self.unused_calls)} recorded model call(s) were never asked for, "
                         f"the first: {first.label}")
        return "\n".join(lines)


async def replay_run(
    store: RunEventStore, thread_id: str, run_id: str, build_graph: GraphFactory, *,
    match: Match | None = None, strict: bool = True, inputs: Any = NO_INPUT, whole_thread: bool = False,
    into: RunEventStore | None = None, stream: bool = False, pricing: PricingOption = None,
    redact: Redactor | bool | None = None, config: Mapping[str, Any] | None = None,
    ignore: Collection[str] = (),
) -> ReplayResult:
    """Replay run ``run_id`` of ``thread_id`` against ``build_graph(model)`` (see the module docstring).

    ``match``: ``"request"`` or ``"order"`` (None: by request when the runs recorded their requests,
    else by order); ``strict=False`` lets the replay go on past a divergence. ``inputs`` replaces the
    first replayed run's recorded input (a graph whose input was not one human message). ``into``: where
    the replay is journaled (a new memory store by default). ``stream``: run the graph
    with ``astream(stream_mode="messages")`` so every model call streams. ``pricing`` and ``redact``
    are the journal's options (give the ones the recording used); ``config`` is merged into the graph's
    config; ``ignore`` names fields ``compare_runs`` leaves out.
    """
    runs = await _runs_to_replay(store, thread_id, run_id, whole_thread=whole_thread)
    calls_model = await RecordedChatModel.from_store(store, thread_id, runs, match=match or "order",
                                                     strict=strict, redact=redact)
    if match is None and any(call.request is not None for call in calls_model.recorded_calls):
        calls_model = RecordedChatModel(calls_model.recorded_calls, match="request", strict=strict,
                                        redact=redact)
    graph = build_graph(calls_model)
    if inspect.isawaitable(graph):
        graph = await graph
    replay_thread = f"{thread_id}-replay-{uuid.uuid4().hex[:8]}"[-ID_MAX_LENGTH:]
    target = into if into is not None else MemoryRunEventStore()
    replayed: list[tuple[str, str | None]] = []
    error: str | None = None
    for index, recorded_run in enumerate(runs):
        given = inputs if index == 0 else NO_INPUT
        run_input = given if given is not NO_INPUT else await recorded_input(store, thread_id, recorded_run)
        journal = RunJournal(target, thread_id=replay_thread, pricing=pricing, redact=redact)
        try:
            await _invoke(graph, run_input, journal, replay_thread, config, stream=stream)
        except Exception as failure:  # noqa: BLE001 - the replay's outcome: reported, not the caller's crash
            error = f"{type(failure).__name__}: {failure}"
        finally:
            await journal.aclose()
        replayed.append((recorded_run, journal.run_id if journal.run_row is not None else None))
        if error is not None:
            break
    compared = [await _compared(store, thread_id, recorded, target, replay_thread, replay, ignore)
                for recorded, replay in replayed]
    return ReplayResult(thread_id, run_id, tuple(compared), tuple(calls_model.divergences),
                        calls_model.unused_calls if error is None else (), error, target, replay_thread)


async def _invoke(graph: Any, run_input: Any, journal: RunJournal, thread: str,
                  config: Mapping[str, Any] | None, *, stream: bool) -> None:
    given = dict(config or {})
    configurable = {**dict(given.pop("configurable", None) or {}), "thread_id": thread}
    callbacks = [*list(given.pop("callbacks", None) or []), journal]
    run_config = {**given, "configurable": configurable, "callbacks": callbacks}
    if not stream:
        await graph.ainvoke(run_input, run_config)
        return
    async for _ in graph.astream(run_input, run_config, stream_mode="messages"):
        pass


async def _compared(store: RunEventStore, thread_id: str, recorded_run: str, target: RunEventStore,
                    replay_thread: str, replay_run_id: str | None, ignore: Collection[str]) -> ReplayedRun:
    recorded = await read_trajectory(store, thread_id, recorded_run)
    recorded_row = await store.get_run(recorded_run)
    if replay_run_id is None:
        return ReplayedRun(recorded, None, None, recorded_row, None)
    replayed = await read_trajectory(target, replay_thread, replay_run_id)
    return ReplayedRun(recorded, replayed, compare_runs(recorded, replayed, ignore=ignore), recorded_row,
                       await target.get_run(replay_run_id))


async def _runs_to_replay(store: RunEventStore, thread_id: str, run_id: str, *, whole_thread: bool
                          ) -> list[str]:
    if whole_thread:
        rows = await store.list_runs(thread_id)
        ids = [row.run_id for row in rows]
        if run_id not in ids:
            raise LookupError(f"no run {run_id!r} in thread {thread_id!r}")
        return ids[: ids.index(run_id) + 1]
    chain = [run_id]
    while len(chain) <= 100:
        origin = await _resumed_from(store, thread_id, chain[0])
        if origin is None or origin in chain:
            break
        chain.insert(0, origin)
    return chain


async def _resumed_from(store: RunEventStore, thread_id: str, run_id: str) -> str | None:
    row = await store.get_run(run_id)
    if row is not None and row.resumed_from:
        return row.resumed_from
    start = await _first(iter_events(store, thread_id, run_id, event_types=["run.start"]))
    content = start.content if start is not None and isinstance(start.content, dict) else {}
    origin = content.get("resumed_from")
    return origin if isinstance(origin, str) and origin else None


async def recorded_input(store: RunEventStore, thread_id: str, run_id: str) -> Any:
    """What a recorded run was invoked with, as far as its record tells: the ``Command(resume=...)``
    of a resumed run, else ``{"messages": [the human message]}``. ``ValueError`` when it tells neither
    (give ``inputs=``)."""
    events = [event async for event in iter_events(store, thread_id, run_id,
                                                   event_types=["run.start", "llm.human.input"])]
    start = next((event for event in events if event.event_type == "run.start"), None)
    if start is None:
        raise LookupError(f"no run {run_id!r} in thread {thread_id!r} (no run.start)")
    resume = _resume_value(start)
    if resume is not NO_INPUT:
        return Command(resume=resume)
    human = next((event for event in events if event.event_type == "llm.human.input"), None)
    if human is not None and isinstance(human.content, dict):
        fields = {key: value for key, value in human.content.items() if key != "type"}
        return {"messages": [HumanMessage.model_validate(fields)]}
    raise ValueError(f"the record of run {run_id!r} does not say what it was invoked with (no human "
                     "message, no resume): give the input yourself (inputs=..., --input)")


def _resume_value(start: RunEvent) -> Any:
    content = start.content if isinstance(start.content, dict) else {}
    preview = content.get("input_preview")
    if not isinstance(preview, str) or not preview.startswith(RESUME_PREFIX) or not preview.endswith(")"):
        return NO_INPUT
    if content.get("input_preview_truncated"):
        raise ValueError(f"run {start.run_id!r} was resumed with a value too long for its record to "
                         "hold: give the input yourself (inputs=Command(resume=...), --input)")
    try:
        return json.loads(preview[len(RESUME_PREFIX):-1])
    except ValueError:
        raise ValueError(f"the resume value of run {start.run_id!r} is not readable JSON: "
                         "give the input yourself") from None


async def _first(events: AsyncIterator[RunEvent]) -> RunEvent | None:
    async for event in events:
        return event
    return None


def _tokens(row: RunRow) -> tuple[Any, ...]:
    def counted(totals: UsageTotals) -> UsageTotals:
        return dataclasses.replace(totals, cost_usd=None)

    return (counted(row.usage), {caller: counted(t) for caller, t in row.usage_by_caller.items()},
            {model: counted(t) for model, t in row.usage_by_model.items()})


def _usage_text(run: ReplayedRun) -> str:
    a, b = run.recorded_row, run.replayed_row
    if a is None or b is None:
        return "a run row is missing"
    return (f"recorded {a.usage.total_tokens} tokens in {a.usage.llm_calls} call(s), "
            f"replayed {b.usage.total_tokens} in {b.usage.llm_calls}")


__all__ = ["GraphFactory", "ReplayResult", "ReplayedRun", "recorded_input", "replay_run"]
