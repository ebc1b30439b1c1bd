"""``RunJournal``: the LangChain callback surface over one recorder and one writer.

Each callback takes the journal's lock, lets the :class:`~run_journal.journal.recorder.RunRecorder`
turn it into events, and hands those (with a run-row snapshot when the status changed or
``row_interval`` passed) to the :class:`~run_journal.writer.EventWriter`. That is all that happens on
the agent's thread. A callback never raises into the user's graph: a failure is logged, counted in
``stats.callback_errors`` and reported by the next ``flush()`` / ``aclose()``. Lock order: the
journal's lock, then the writer's.

``AsyncRunJournal`` is the same journal with coroutine callbacks: over ``max_pending`` queued events,
an async graph waits for the store to catch up instead of the queue growing.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, Self

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult

from run_journal.bodies import Body
from run_journal.envelope import NewEvent, new_event_id, validate_id
from run_journal.journal import payloads as p
from run_journal.journal.current import note_model_call
from run_journal.journal.exports import RunExporter, RunExports
from run_journal.journal.recorder import RunRecorder
from run_journal.journal.requests import store_identity
from run_journal.journal.resume import ResumeStart
from run_journal.redact import Redactor, resolve_redactor
from run_journal.runs import RowSnapshot, RunRow
from run_journal.stores.base import RunEventStore
from run_journal.usage import PricingOption
from run_journal.writer import (
    OPEN_TIMEOUT,
    EventWriter,
    Item,
    JournalError,
    JournalStats,
    RetryPolicy,
    SharedStore,
)

logger = logging.getLogger("run_journal")


class UnwrittenEvents(list[NewEvent]):
    """What the store does not have yet, in order, plus ``run_row``: the latest run row if it is not
    stored either, and ``bodies``: what the events' model requests refer to. Enough to finish the
    job by hand (``put_batch(events, bodies=bodies)``, then ``put_run``)."""

    run_row: RunRow | None = None
    bodies: list[Body] = []  # noqa: RUF012 - replaced per instance, never mutated


class RunJournal(BaseCallbackHandler):
    """Record one LangGraph / LangChain run as an ordered event stream plus a ``RunRow``.

    Pass it as ``config={"callbacks": [journal]}``, then make it durable with ``await
    journal.flush()`` / ``await journal.aclose()`` / ``async with journal:`` (or ``with journal:``
    around sync code). ``store`` is a ``RunEventStore`` or a store URL. A journal made in async code
    writes on that code's event loop (a URL is opened there and closed with the journal); one made
    anywhere else writes on the process's writer thread, where each URL names one store shared by
    every journal of the process. A store that cannot be opened never fails the graph: the run goes
    on and ``flush()`` / ``close()`` raise ``JournalError``. Options are documented in
    ``docs/journal.md``.
    """

    run_inline = True
    raise_error = False
    closes_when_ended: ClassVar[bool] = False
    """The journal closes itself once its run ended (the ``RUN_JOURNAL_URL`` journals: nobody else will)."""
    waits_for_room: ClassVar[bool] = False
    """Callbacks on an event loop await room when the queue is full (``AsyncRunJournal``)."""

    def __init__(
        self,
        store: RunEventStore | str | SharedStore | None = None,
        *,
        thread_id: str | None = None,
        run_id: str | None = None,
        user_id: str | None = None,
        pricing: PricingOption = None,
        redact: Redactor | bool | None = None,
        resumed_from: str | None = None,
        batch_size: int = 200,
        flush_interval: float = 1.0,
        max_flush_delay: float = 5.0,
        row_interval: float = 2.0,
        max_pending: int = 10_000,
        retry: RetryPolicy | None = None,
        store_timeout: float = 30.0,
        open_timeout: float = OPEN_TIMEOUT,
        middleware_events: str = "changes",
        record_requests: bool = True,
        exporters: Sequence[RunExporter] = (),
    ) -> None:
        super().__init__()
        if store is None:
            raise ValueError("RunJournal needs a store or a store URL (to journal every run of a process "
                             "without one, set RUN_JOURNAL_URL: see run_journal.activation)")
        if row_interval < 0:
            raise ValueError("row_interval must be >= 0")
        self.run_id = validate_id("run_id", run_id) if run_id is not None else new_event_id()
        self.user_id = validate_id("user_id", user_id) if user_id is not None else None
        self._recorder = RunRecorder(
            thread_id=validate_id("thread_id", thread_id) if thread_id is not None else None,
            run_id=self.run_id, user_id=self.user_id,
            resumed_from=validate_id("resumed_from", resumed_from) if resumed_from else None,
            redact=resolve_redactor(redact), pricing=pricing, middleware_events=middleware_events,
            record_requests=record_requests,
            store_key=store_identity(store) if record_requests else (None, None),
        )
        exports = RunExports(exporters) if exporters else None
        self._writer = EventWriter(
            store, batch_size=batch_size, flush_interval=flush_interval, max_flush_delay=max_flush_delay,
            max_pending=max_pending,
            retry=retry, store_timeout=store_timeout, open_timeout=open_timeout,
            on_row_stored=exports.row_stored if exports else None,
            finishers=(exports.finish,) if exports else (),
        )
        self._resume: ResumeStart | None = None
        self._lock = threading.Lock()
        self._row_interval = row_interval
        self._row_status: str | None = None
        self._row_at = 0.0
        self._closed = self._warned_full = False
        self._callback_errors = self._reported_errors = 0

    # -- what the journal knows ----------------------------------------------------------------------
    @property
    def thread_id(self) -> str | None:
        """The run's thread (from ``configurable.thread_id`` once the root call started, if not given)."""
        return self._recorder.thread_id

    @property
    def resumed_from(self) -> str | None:
        resume = self._resume
        return resume.resumed_from if resume is not None else self._recorder.resumed_from

    @property
    def stats(self) -> JournalStats:
        return self._writer.stats(self._callback_errors)

    @property
    def run_row(self) -> RunRow | None:
        """The run row as the journal sees it now (the stored one may lag until ``flush()``)."""
        with self._lock:
            snapshot = self._snapshot()
        return None if snapshot is None else snapshot()

    def _snapshot(self) -> RowSnapshot | None:
        snapshot = self._recorder.snapshot()
        if snapshot is not None and self._resume is not None:
            return functools.partial(self._resume.patched, snapshot)
        return snapshot

    def unwritten_events(self) -> UnwrittenEvents:
        """Events (and the run row, as ``.run_row``) still waiting for the store, including events
        recorded for a run whose root never started."""
        with self._lock:
            held = self._recorder.held  # empty once the run started: they were written after run.start
        events, row = self._writer.unwritten()
        unwritten = UnwrittenEvents(held + events)
        unwritten.run_row = row
        unwritten.bodies = self._writer.unwritten_bodies()
        return unwritten

    # -- durability ----------------------------------------------------------------------------------
    async def flush(self) -> None:
        """Write every event queued so far and the run row; ``JournalError`` if the store refused
        them (a later flush tries again), or if a callback failed since the last flush."""
        with self._lock:
            self._forward(row_due=self._recorder.changed)
        await self._writer.flush()
        self._raise_for_lost_work()

    async def aclose(self) -> None:
        """Finish (an unfinished run is recorded as cancelled), flush, and close a URL store."""
        self._finish()
        await self._writer.aclose()
        self._raise_for_lost_work()

    def close(self) -> None:
        """``aclose()`` for sync code (not on the writer's own loop thread)."""
        self._finish()
        self._writer.close()
        self._raise_for_lost_work()

    async def __aenter__(self) -> Self:
        self._writer.bind_to_running_loop()
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _finish(self) -> None:
        with self._lock:
            self._recorder.finish_unended()
            self._forward(row_due=self._recorder.changed)
            self._closed = True

    def _raise_for_lost_work(self) -> None:
        with self._lock:
            failed = self._callback_errors - self._reported_errors
            self._reported_errors = self._callback_errors
            held = len(self._recorder.held)
        if held and self._closed:
            raise JournalError(
                f"{held} recorded event(s) were not written: the run they belong to never started "
                "(no root callback reached this journal); see unwritten_events()"
            )
        if failed:
            raise JournalError(
                f"{failed} journal callback(s) failed (logged by the 'run_journal' logger); the run "
                "went on, but its record may be incomplete"
            )

    # -- from the recorder to the writer (lock held) ---------------------------------------------------
    def _forward(self, *, row_due: bool = False) -> bool:
        """Hand the recorder's new events to the writer, with a row snapshot when the status changed
        or ``row_interval`` passed (rows ride with events; a flush asks for one with ``row_due``).
        True: the queue is full and this runs on an event loop (the caller may ``await room()``)."""
        recorder = self._recorder
        items: Sequence[Item] = recorder.take()
        if not items and not row_due:
            return False
        lookup = recorder.resume_lookup
        if lookup is not None and self._resume is None:
            self._resume = ResumeStart(lookup)
            items = [self._resume if item is lookup else item for item in items]
        status = recorder.state.status
        row = None
        if status != self._row_status or (
            recorder.changed and (row_due or time.monotonic() - self._row_at >= self._row_interval)
        ):
            row = self._snapshot()
            if row is not None:
                self._row_status, self._row_at, recorder.changed = status, time.monotonic(), False
        if not items and row is None:
            return False
        ended = recorder.state.ended and row is not None
        full = self._writer.submit(items, row, urgent=ended)
        if ended and self.closes_when_ended:
            self._writer.close_soon()
        return full

    def _record(self, step: Callable[[], Any]) -> Any:
        """A recorder call from user code: bad input raises; a closed journal is a JournalError."""
        with self._lock:
            if self._closed:
                raise JournalError("this RunJournal is closed")
            result = step()
            self._forward()
        return result

    def _callback(self, step: Callable[..., None], *args: Any) -> bool:
        """A LangChain callback: never raises. True: the queue is over ``max_pending`` and this runs
        on an event loop, which must not block (``AsyncRunJournal`` awaits room then)."""
        try:
            with self._lock:
                step(*args)
                full = self._forward()
        except Exception:  # a journaling bug must not become the user's exception
            self._callback_errors += 1
            logger.exception("run-journal: a callback failed")
            return False
        if full and not self.waits_for_room and not self._warned_full:
            self._warned_full = True
            logger.warning("run-journal: more than %d events wait for a store that falls behind; "
                           "callbacks on an event loop do not wait for it (AsyncRunJournal does)",
                           self._writer.max_pending)
        return full

    async def room(self) -> None:
        """Wait until the writer's queue is back under ``max_pending`` (without blocking the loop)."""
        await self._writer.room()

    # -- recorders (any thread) ------------------------------------------------------------------------
    def record(self, event_type: str, *, content: Any = "", metadata: Mapping[str, Any] | None = None,
               caller: str = p.LEAD_AGENT) -> None:
        """Queue any catalog event in run order (workspace changes, custom producers).

        Validated now (``ValueError`` for unknown names, lifecycle events or bad payloads); events
        recorded before the run starts are held and written right after ``run.start``.
        """
        self._record(lambda: self._recorder.record(event_type, content, metadata, caller))

    def record_middleware(self, tag: str, *, name: str, hook: str, action: str,
                          changes: Mapping[str, Any]) -> None:
        """``middleware:{tag}``: a middleware changed the run's state. The tag is checked first."""
        self._record(lambda: self._recorder.record_middleware(tag, name, hook, action, changes))

    def record_memory_context(self, *, content: str | None = None, content_sha256: str | None = None) -> bool:
        """``context:memory`` once per run: the sha256 of the memory text (never the text)."""
        return bool(self._record(lambda: self._recorder.record_memory_context(content, content_sha256)))

    def record_subagent_chunk(self, chunk: Any) -> bool:
        """Journal one ``task_*`` stream chunk; malformed chunks are ignored (returns False)."""
        from run_journal.subagents import subagent_run_event  # subagents imports the journal lazily too

        mapped = subagent_run_event(chunk, redact=self._recorder.redact)
        if mapped is None:
            return False
        return bool(self._record(lambda: self._recorder.record_subagent(mapped)))

    # -- LangChain callbacks (each returns whether the caller should await room(): see _callback) ------
    def on_chain_start(self, serialized: dict[str, Any] | None, inputs: Any, *, run_id: uuid.UUID,
                       parent_run_id: uuid.UUID | None = None, tags: list[str] | None = None,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> bool:
        name = str(kwargs.get("name") or (serialized or {}).get("name") or "chain")
        return self._callback(self._recorder.chain_start, run_id, parent_run_id, name, inputs, tags, metadata)

    def on_chain_end(self, outputs: Any, *, run_id: uuid.UUID, **kwargs: Any) -> bool:
        return self._callback(self._recorder.chain_end, outputs, run_id)

    def on_chain_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> bool:
        return self._callback(self._recorder.chain_error, error, run_id)

    def on_chat_model_start(self, serialized: dict[str, Any] | None, messages: list[list[BaseMessage]],
                            *, run_id: uuid.UUID, parent_run_id: uuid.UUID | None = None,
                            tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                            **kwargs: Any) -> bool:
        prompt = messages[0] if messages else []
        params = kwargs.get("invocation_params")
        full = self._callback(self._recorder.model_start, run_id, parent_run_id, "chat_model", prompt, tags,
                              metadata, params)
        self._note_caller(run_id)
        return full

    def on_llm_start(self, serialized: dict[str, Any] | None, prompts: list[str], *, run_id: uuid.UUID,
                     parent_run_id: uuid.UUID | None = None, tags: list[str] | None = None,
                     metadata: dict[str, Any] | None = None, **kwargs: Any) -> bool:
        params = kwargs.get("invocation_params")
        full = self._callback(self._recorder.model_start, run_id, parent_run_id, "llm", prompts, tags,
                              metadata, params)
        self._note_caller(run_id)
        return full

    def _note_caller(self, run_id: uuid.UUID) -> None:
        """Tell code running inside the model call whose call it is (``journal.current``)."""
        with self._lock:
            call = self._recorder.state.llm_calls.get(run_id)
        if call is not None:
            note_model_call(run_id, call.caller)

    def on_llm_new_token(self, token: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self._callback(self._recorder.new_token, run_id)  # queues nothing: never waits

    def on_llm_end(self, response: LLMResult, *, run_id: uuid.UUID, **kwargs: Any) -> bool:
        return self._callback(self._recorder.llm_end, response, run_id)

    def on_llm_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> bool:
        return self._callback(self._recorder.llm_error, error, run_id)

    def on_tool_start(self, serialized: dict[str, Any] | None, input_str: str, *, run_id: uuid.UUID,
                      parent_run_id: uuid.UUID | None = None, tags: list[str] | None = None,
                      metadata: dict[str, Any] | None = None, **kwargs: Any) -> bool:
        name = str((serialized or {}).get("name") or kwargs.get("name") or "tool")
        call_id = kwargs.get("tool_call_id")
        return self._callback(self._recorder.tool_start, run_id, parent_run_id, name,
                              call_id if isinstance(call_id, str) else None, tags, kwargs.get("inputs"),
                              metadata)

    def on_tool_end(self, output: Any, *, run_id: uuid.UUID, **kwargs: Any) -> bool:
        return self._callback(self._recorder.tool_end, output, run_id)

    def on_tool_error(self, error: BaseException, *, run_id: uuid.UUID, **kwargs: Any) -> bool:
        return self._callback(self._recorder.tool_error, error, run_id)


class AsyncRunJournal(RunJournal):
    """A ``RunJournal`` whose callbacks are coroutines, for async graphs: when more than
    ``max_pending`` events wait for a store that falls behind, the graph awaits room (LangChain
    awaits coroutine callbacks) instead of the queue growing. Each callback costs about a
    microsecond more than ``RunJournal``'s; in sync code use ``RunJournal``."""

    waits_for_room = True

    # Each override is a coroutine over RunJournal's callback of the same name, so LangChain awaits it.
    async def on_chain_start(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]  # a coroutine by design
        if super().on_chain_start(*args, **kwargs):
            await self.room()

    async def on_chain_end(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]  # a coroutine by design
        if super().on_chain_end(*args, **kwargs):
            await self.room()

    async def on_chain_error(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]  # a coroutine by design
        if super().on_chain_error(*args, **kwargs):
            await self.room()

    async def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]  # a coroutine by design
        if super().on_chat_model_start(*args, **kwargs):
            await self.room()

    async def on_llm_start(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]  # a coroutine by design
        if super().on_llm_start(*args, **kwargs):
            await self.room()

    async def on_llm_end(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]  # a coroutine by design
        if super().on_llm_end(*args, **kwargs):
            await self.room()

    async def on_llm_error(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]  # a coroutine by design
        if super().on_llm_error(*args, **kwargs):
            await self.room()

    async def on_tool_start(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]  # a coroutine by design
        if super().on_tool_start(*args, **kwargs):
            await self.room()

    async def on_tool_end(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]  # a coroutine by design
        if super().on_tool_end(*args, **kwargs):
            await self.room()

    async def on_tool_error(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]  # a coroutine by design
        if super().on_tool_error(*args, **kwargs):
            await self.room()
