"""``RunRecorder``: one run's callbacks in, catalog events and run-row snapshots out. Pure.

The recorder holds everything the journal knows about its run (lifecycle, open model and tool calls,
subagent tasks, usage) and turns each callback into the events it implies: attribution of model calls
to callers, usage and cost, deduplication of tool results, and exactly one terminal event. It does no
I/O, starts no thread, needs no event loop and is not thread-safe: ``RunJournal`` calls it under its
lock and hands what :meth:`take` returns to the writer. Tests drive it directly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Hashable, Mapping
from datetime import datetime
from typing import Any, Final

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from run_journal.catalog import (
    EVENTS,
    ID_MAX_LENGTH,
    LEGACY_ALIASES,
    LIFECYCLE_EVENTS,
    category_of,
    middleware_event_type,
    validate_event_type,
)
from run_journal.envelope import NewEvent, Normalized, new_event_id, sha256_hex, utc_now, validate_id
from run_journal.journal import payloads as p
from run_journal.journal.requests import REGISTRY, MessageKey, RequestBuilder, message_key
from run_journal.journal.state import LlmCall, MiddlewareHook, NestedAgent, RunState, Scope, ToolRun
from run_journal.journal.subagents import subagent_run_event
from run_journal.normalization import encode
from run_journal.redact import Redactor, no_redaction, redact_secrets, redacted_string, redacted_text
from run_journal.runs import TERMINAL_STATUSES, RowSnapshot, RunRow, RunStatus
from run_journal.usage.reading import extract_usage, model_name_of, provider_of, usage_from_mapping
from run_journal.usage.tally import PricingOption, RunTally, cap_text
from run_journal.writer import WithBodies

logger = logging.getLogger("run_journal")
CANCELLED: Final = (asyncio.CancelledError, KeyboardInterrupt, GeneratorExit)
"""How a root run that was stopped from outside ends: a cancelled task, Ctrl-C, a consumer that left
a ``stream()`` / ``astream()`` early (the generator is closed)."""


MIDDLEWARE_EVENT_MODES: Final = ("changes", "all", "off")
GENERIC_CHAIN_NAMES: Final = frozenset(
    {"LangGraph", "RunnableSequence", "RunnableLambda", "RunnableParallel"})
"""Chain names that say nothing about which agent a nested graph is."""


class RunRecorder:
    """The state machine of one journaled run (see the module docstring)."""

    def __init__(self, *, thread_id: str | None, run_id: str, user_id: str | None,
                 resumed_from: str | None, redact: Redactor, pricing: PricingOption,
                 middleware_events: str = "changes", record_requests: bool = True,
                 store_key: tuple[Hashable | None, Any] = (None, None)) -> None:
        if middleware_events not in MIDDLEWARE_EVENT_MODES:
            raise ValueError(f"middleware_events must be one of {', '.join(MIDDLEWARE_EVENT_MODES)}")
        self.middleware_events = middleware_events
        """``changes``: a hook that changed the state writes an event; ``all``: every hook that ran;
        ``off``: none (``record_middleware`` still works)."""
        self.thread_id = thread_id
        self.run_id = run_id
        self.user_id = user_id
        self.resumed_from = resumed_from
        self.redact = redact
        self.state = RunState()
        self.tally = RunTally(pricing=pricing)
        self.changed = False
        """Something the run row shows changed since the last :meth:`row` snapshot."""
        self.record_requests = record_requests
        """Each model call writes ``llm.request``: what it was sent (``journal/requests.py``)."""
        self._store_key = store_key
        self._requests: RequestBuilder | None = None
        self._out: list[NewEvent] = []
        self._held: list[NewEvent] = []
        self._payloads: dict[str, tuple[BaseMessage, MessageKey, Normalized]] = {}
        self.resume_lookup: NewEvent | None = None
        """The ``run.start`` of a resumed run whose origin was not given: the store knows it (the
        journal has the writer look it up, see ``journal/resume.py``)."""

    # -- output ------------------------------------------------------------------------------------
    def take(self) -> list[NewEvent]:
        """The events produced since the last call, in run order."""
        out = self._out
        if out:
            self._out = []
        return out

    @property
    def held(self) -> list[NewEvent]:
        """Events recorded before the run started (written right after ``run.start``)."""
        return list(self._held)

    def row(self) -> RunRow | None:
        """The run row now (None before the run starts)."""
        snapshot = self.snapshot()
        return None if snapshot is None else snapshot()

    def snapshot(self) -> RowSnapshot | None:
        """The run row as it stands now, built when called: the writer builds only what it writes."""
        state = self.state
        if not state.started or self.thread_id is None:
            return None
        terminal = state.status in TERMINAL_STATUSES
        return functools.partial(
            _build_row, self.tally.copy(), run_id=self.run_id, thread_id=self.thread_id,
            user_id=self.user_id, status=state.status, started_at=state.started_at,
            ended_at=state.ended_at if terminal else None, resumed_from=self.resumed_from,
            error=state.error if terminal else None,
            metadata={"run_name": state.run_name, "caller": state.caller},
        )

    # -- chains ------------------------------------------------------------------------------------
    def chain_start(self, run_id: uuid.UUID, parent_run_id: uuid.UUID | None, name: str, inputs: Any,
                    tags: list[str] | None, metadata: dict[str, Any] | None) -> None:
        if parent_run_id is None:
            self._start_root(run_id, name, inputs, tags, metadata)
            return
        state = self.state
        if not state.started or state.ended:
            return
        meta = metadata or {}
        node = meta.get("langgraph_node")
        state.chain_names[run_id] = str(node or name)
        state.scopes[run_id] = self._scope_of(run_id, parent_run_id, name, node, meta)
        if state.baseline is None and parent_run_id == state.root and isinstance(inputs, Mapping):
            messages = inputs.get("messages")
            if isinstance(messages, list):
                previous = messages[: max(0, len(messages) - state.root_input_count)]
                state.baseline = {m.id for m in previous if isinstance(getattr(m, "id", None), str)}

    def chain_end(self, outputs: Any, run_id: uuid.UUID) -> None:
        state = self.state
        if run_id == state.root and not state.ended:
            self._end_root(outputs)
            return
        if not state.started or state.ended:
            return
        state.chain_names.pop(run_id, None)
        if state.failed_tries:
            self._settle_failed_tools(run_id)
        scope = state.scopes.pop(run_id, None)
        if scope is not None and scope.hook is not None and scope.hook.run_id == run_id \
                and self.middleware_events != "off":
            found = p.middleware_changes(outputs)
            if found is not None or self.middleware_events == "all":
                self._middleware_event(scope, *(found or ("none", {}, None)))
        answerable = state.answerable()
        for message in p.tool_messages(outputs) if answerable else ():
            if message.tool_call_id in answerable:  # _tool_result skips a repeated id
                self._tool_result(message, state.caller_of_call(message.tool_call_id), None, None)
        task = scope.nested if scope is not None else None
        if task is not None and task.root == run_id and task.task_id is not None:
            self._task_chunk(task, "task_completed", result=task.last_text or "")

    def chain_error(self, error: BaseException, run_id: uuid.UUID) -> None:
        state = self.state
        if not state.started or state.ended:
            return
        self._note_interrupts(error)
        if run_id == state.root:
            self._fail_root(error)
            return
        if state.failed_tries:
            self._settle_failed_tools(run_id)
        scope = state.scopes.pop(run_id, None)
        if scope is not None and scope.hook is not None and scope.hook.run_id == run_id \
                and self.middleware_events != "off":
            interrupts = p.interrupts_of(error)
            if interrupts:
                self._middleware_event(scope, "interrupt", {"interrupts": p.interrupt_payload(interrupts)},
                                       None)
        task = scope.nested if scope is not None else None
        ended = task is not None and task.root == run_id and task.task_id is not None
        if task is not None and ended and not p.is_bubble_up(error):
            kind = "task_cancelled" if isinstance(error, CANCELLED) else "task_failed"
            self._task_chunk(task, kind, error=f"{type(error).__name__}: {error}")
        if not p.is_bubble_up(error) and state.error_node is None:
            state.error_node = state.chain_names.get(run_id)

    def _scope_of(self, run_id: uuid.UUID, parent_run_id: uuid.UUID, name: str, node: Any,
                  metadata: Mapping[str, Any]) -> Scope:
        """A chain's scope: its parent's, or a new nested agent when it runs inside a tool call, or a
        named agent graph when it starts one as a graph node, or a middleware hook when it is a
        ``create_agent`` hook's own node."""
        state = self.state
        tool = state.tool_runs.get(parent_run_id)
        namespace = metadata.get("checkpoint_ns")
        namespace = namespace if isinstance(namespace, str) and namespace else None
        if tool is not None:
            args = tool.args if isinstance(tool.args, Mapping) else {}
            agent = metadata.get("lc_agent_name") or args.get("subagent_type")
            if not isinstance(agent, str) or not agent:
                agent = name if name not in GENERIC_CHAIN_NAMES else tool.name
            description = args.get("description")
            nested = NestedAgent(run_id, tool.call_id, agent[:ID_MAX_LENGTH],
                                 description if isinstance(description, str) else "")
            scope = Scope(tool.caller, nested, namespace=namespace)
        else:
            scope = state.scopes.get(parent_run_id) or Scope(state.caller)
            if parent_run_id == state.root and isinstance(node, str):
                self._note_entry(node)
            if namespace != scope.namespace:  # a graph running inside a node of another
                scope = self._graph_scope(scope, name, node, namespace, metadata)
        hook = p.middleware_node(name) if node == name else None
        if hook is not None:
            scope = dataclasses.replace(scope, hook=MiddlewareHook(run_id, *hook))
        return scope

    def _note_entry(self, node: str) -> None:
        """A node of the run's own graph started: the first one is its entry, unless the graph chose
        it with a router at its start (``__start__`` ran a branch: a swarm's active-agent router)."""
        state = self.state
        if node == "__start__":
            state.routed_entry = state.routed_entry or state.entry_node is None
        elif state.entry_node is None:
            state.entry_node = node

    def _graph_scope(self, outer: Scope, name: str, node: Any, namespace: str | None,
                     metadata: Mapping[str, Any]) -> Scope:
        """The scope of a graph that runs as a node (or inside a node) of another. A named graph is
        an agent, and its calls are its own (``agent:<name>``), except the one the run's graph
        started with when it did not route: a supervisor, whose calls stay the lead agent's."""
        state = self.state
        named = metadata.get("lc_agent_name")
        agent = named if isinstance(named, str) and named else name
        if agent in GENERIC_CHAIN_NAMES:
            return dataclasses.replace(outer, namespace=namespace)  # an unnamed subgraph: no agent
        agent = agent[:ID_MAX_LENGTH]
        top_level = outer.agent is None and outer.nested is None
        lead = top_level and not state.routed_entry and (
            agent == state.lead_agent_name or (state.lead_agent_name is None and node == state.entry_node))
        if lead:
            state.lead_agent_name = agent
        caller = outer.caller if lead else f"{p.AGENT_PREFIX}{agent}"
        return Scope(caller, outer.nested, outer.hook, namespace, agent)

    def _handoff(self, caller: str, scope: Scope | None) -> None:
        """``agent.handoff`` when a model call's agent (``lead_agent`` or ``agent:<name>``) is not
        the previous call's: the turn passed from one agent to the other."""
        state = self.state
        if caller != p.LEAD_AGENT and not caller.startswith(p.AGENT_PREFIX):
            return
        previous, state.active_agent = state.active_agent, caller
        if previous is None or previous == caller:
            return
        via, state.pending_handoff = state.pending_handoff, None
        agent = scope.agent if scope is not None and scope.agent is not None else state.lead_agent_name
        call_id = via[0] if via is not None and via[1] == agent else None
        content = {"from_agent": previous, "to_agent": caller, "tool_call_id": call_id}
        self._emit("agent.handoff", self._own(content),
                   self._own({"caller": caller, "tool_call_id": call_id}))

    # -- models ------------------------------------------------------------------------------------
    def model_start(self, run_id: uuid.UUID, parent_run_id: uuid.UUID | None, kind: str, inputs: Any,
                    tags: list[str] | None, metadata: dict[str, Any] | None,
                    params: Mapping[str, Any] | None) -> None:
        state = self.state
        if parent_run_id is None and not state.started:
            self._start_root(run_id, kind, inputs, tags, metadata)
        if not state.started or state.ended:
            return
        scope = state.scopes.get(parent_run_id) if parent_run_id is not None else None
        task = scope.nested if scope is not None else None
        if task is not None and task.task_id is None:
            self._start_task(task)
        caller = p.explicit_caller(tags) or (scope.attributed if scope is not None else state.caller)
        self._handoff(caller, scope)
        params = params or {}
        model = params.get("model_name") or params.get("model") or (metadata or {}).get("ls_model_name")
        step_of = task if scope is not None and scope.hook is None else None
        provider = (metadata or {}).get("ls_provider")
        call = LlmCall(caller, str(model) if model else None, state.next_llm_index(), time.monotonic(),
                       task=step_of, provider=provider if isinstance(provider, str) else None)
        state.llm_calls[run_id] = call
        if self.record_requests:
            self._request(call, run_id, kind, inputs, params)

    def _request(self, call: LlmCall, run_id: uuid.UUID, kind: str, inputs: Any,
                 params: Mapping[str, Any]) -> None:
        """``llm.request``: the call's messages, tools and parameters as body digests; the bodies the
        store may not have travel with it."""
        builder = self._requests
        if builder is None:
            assert self.thread_id is not None
            key, owner = self._store_key
            builder = self._requests = RequestBuilder(
                REGISTRY.get(key, owner, self.thread_id, self.redact), self.redact, self._message_payload)
        if kind == "llm":
            messages: list[BaseMessage] = [HumanMessage(str(prompt)) for prompt in inputs or ()]
        else:
            messages = [m for m in inputs or () if isinstance(m, BaseMessage)]
        content, bodies = builder.build(messages, params)
        meta = {"caller": call.caller, "llm_call_index": call.index, "llm_run_id": str(run_id),
                "model_name": call.model, "model_provider": call.provider}
        fields = (self.thread_id or "pending", self.run_id, "llm.request", "trace", content.text,
                  self._own(meta).text, utc_now(), self.user_id)
        self._out.append(WithBodies.encoded(bodies, builder.bodies.stored, *fields) if bodies
                         else NewEvent._checked_by_producer(*fields))

    def new_token(self, run_id: uuid.UUID) -> None:
        call = self.state.llm_calls.get(run_id)
        if call is not None and call.first_token_at is None:
            call.first_token_at = time.monotonic()

    def llm_end(self, response: LLMResult, run_id: uuid.UUID) -> None:
        state = self.state
        call = state.llm_calls.pop(run_id, None)
        if call is None or state.ended:
            return  # a second on_llm_end for the same call, or a call outside the run
        message, reply = self._llm_response(call, response)
        if call.task is not None:
            call.task.last_text = p.message_text(reply)
            self._task_chunk(call.task, "task_running", message_index=call.task.steps, message=reply)
            call.task.steps += 1
        if run_id == state.root:
            self._end_root(message if message is not None else response.llm_output)

    def llm_error(self, error: BaseException, run_id: uuid.UUID) -> None:
        state = self.state
        call = state.llm_calls.pop(run_id, None)
        if call is None or state.ended:
            return
        meta = {"caller": call.caller, "llm_call_index": call.index, "model_name": call.model}
        self.tally.add_llm_error(call.caller, call.model)
        self.changed = True
        self._emit("llm.error", p.error_content(error, with_traceback=False), self._own(meta))
        if run_id == state.root:
            self._fail_root(error)

    # -- tools -------------------------------------------------------------------------------------
    def tool_start(self, run_id: uuid.UUID, parent_run_id: uuid.UUID | None, name: str,
                   call_id: str | None, tags: list[str] | None, args: Any = None,
                   metadata: Mapping[str, Any] | None = None) -> None:
        state = self.state
        if not state.started or state.ended:
            return
        destination = (metadata or {}).get(p.HANDOFF_DESTINATION)
        if isinstance(destination, str) and destination:  # a handoff tool (langgraph-supervisor, -swarm)
            state.handoff_tools.add(name)
            if call_id is not None:
                state.handoff_calls.add(call_id)
                state.pending_handoff = (call_id, destination)
        scope = state.scopes.get(parent_run_id) if parent_run_id is not None else None
        caller = p.explicit_caller(tags) or (scope.attributed if scope is not None else state.caller)
        task = scope.nested if scope is not None and scope.hook is None else None
        if task is not None and task.task_id is None:
            task = None  # a tool of a nested graph that never called a model: not a subagent's step
        state.tool_runs[run_id] = ToolRun(name, call_id, caller, time.monotonic(), task, parent_run_id, args)
        if call_id is not None:
            state.seen_calls.add(call_id)
        self.tally.add_tool(caller, name)
        self.changed = True

    def tool_end(self, output: Any, run_id: uuid.UUID) -> None:
        tool = self.state.tool_runs.pop(run_id, None)
        if tool is None or self.state.ended:
            return
        failed = self.state.failed_tries.pop(tool.call_id, None) if tool.call_id is not None else None
        status = "success"
        for message in p.tool_messages(output):
            self._tool_result(message, tool.caller, tool.name, tool.task)
            if message.tool_call_id == tool.call_id and message.status == "error":
                status = "error"
        if tool.call_id is not None:
            size, digest = p.result_digest(output)
            tries = {} if failed is None else {"attempts": failed[2] + 1}
            self._outcome(tool.call_id, tool.name, tool.caller, status, tool,
                          result_size=size, result_sha256=digest, **tries)

    def tool_error(self, error: BaseException, run_id: uuid.UUID) -> None:
        """A failed try. Its outcome waits: a retry middleware may call the tool again with the same
        call id, so the call's outcome is written when it succeeds, or once its node is over."""
        tool = self.state.tool_runs.pop(run_id, None)
        if tool is None or self.state.ended:
            return
        if p.is_bubble_up(error):  # an interrupt or a parent command, not a failure
            self._note_interrupts(error)
            return
        if tool.call_id is not None:
            fields = p.tool_error_fields(error)
            earlier = self.state.failed_tries.get(tool.call_id)
            self.state.failed_tries[tool.call_id] = (tool, fields, 1 if earlier is None else earlier[2] + 1)

    def _settle_failed_tools(self, parent: uuid.UUID | None) -> None:
        """Failed tries under ``parent`` (every one when None) that no retry answered are errors."""
        for call_id, (tool, fields, tries) in list(self.state.failed_tries.items()):
            if parent is None or tool.parent == parent:
                del self.state.failed_tries[call_id]
                self.state.errored_calls.add(call_id)
                attempts = {"attempts": tries} if tries > 1 else {}
                self._outcome(call_id, tool.name, tool.caller, "error", tool, **fields, **attempts)

    # -- recorders ---------------------------------------------------------------------------------
    def record(self, event_type: str, content: Any, metadata: Mapping[str, Any] | None,
               caller: str) -> None:
        """Any catalog event but the lifecycle ones, validated now (``ValueError``)."""
        if event_type in LIFECYCLE_EVENTS:
            raise ValueError(f"{event_type!r} is written by the journal's callbacks, not record()")
        if event_type in LEGACY_ALIASES:
            raise ValueError(f"{event_type!r} is a read-only legacy name that old rows may carry; "
                             f"producers write {LEGACY_ALIASES[event_type]!r}")
        try:
            category = category_of(event_type)
        except KeyError:
            raise ValueError(f"unknown event type {event_type!r}; see run_journal.catalog") from None
        self._emit(event_type, content, {"caller": caller, **(metadata or {})}, category)

    def record_middleware(self, tag: str, name: str, hook: str, action: str,
                          changes: Mapping[str, Any]) -> None:
        event_type = middleware_event_type(tag)
        if not isinstance(changes, Mapping):
            raise ValueError("changes must be a mapping")
        content = {"name": name, "hook": hook, "action": action, "changes": dict(changes)}
        self.record(event_type, content, None, f"middleware:{name}")

    def record_memory_context(self, content: str | None, content_sha256: str | None) -> bool:
        if (content is None) == (content_sha256 is None):
            raise ValueError("pass exactly one of content= or content_sha256=")
        if content is not None:
            payload: dict[str, Any] = {"content_sha256": sha256_hex(content), "content_length": len(content)}
        else:
            digest = str(content_sha256).lower()
            if len(digest) != 64 or any(ch not in "0123456789abcdef" for ch in digest):
                raise ValueError("content_sha256 must be 64 hexadecimal characters")
            payload = {"content_sha256": digest}
        if self.state.memory_recorded:
            return False
        self.record("context:memory", payload, None, p.LEAD_AGENT)
        self.state.memory_recorded = True
        return True

    def record_subagent(self, mapped: Mapping[str, Any]) -> bool:
        """One ``subagent_run_event`` mapping from a ``task_*`` stream. A task the callback tree
        journals already (the same subagent seen in process) is not journaled twice: False."""
        if mapped["content"]["task_id"] in self.state.tree_tasks:
            return False
        self._subagent_event(mapped)
        return True

    def _subagent_event(self, mapped: Mapping[str, Any]) -> None:
        """A ``subagent.*`` event. Usage a task reports at its end is counted once per task, and not
        when the journal saw the subagent's model calls while the task ran (it runs in process)."""
        content, state = mapped["content"], self.state
        task_id = content["task_id"]
        name = content.get("subagent") or state.open_tasks.get(task_id) or "task"
        caller = f"subagent:{name}"
        if mapped["event_type"] == "subagent.start":
            state.open_tasks[task_id] = str(name)
            self.tally.task_started(task_id, caller)
        elif mapped["event_type"] == "subagent.end":
            state.open_tasks.pop(task_id, None)
            # a task journaled from the callback tree had its model calls counted as they happened
            usage = None if task_id in state.tree_tasks else usage_from_mapping(content.get("usage"))
            if self.tally.task_ended(task_id, caller, content.get("model"), usage):
                self.changed = True
        self._emit(mapped["event_type"], content, {"caller": caller, **mapped["metadata"]},
                   mapped["category"])

    def _start_task(self, task: NestedAgent) -> None:
        """A graph nested in a tool call made its first model call: it is a subagent task, whose
        id is the tool call's id. If a streamed task (``task_*`` chunks) is open, it is that task:
        its chunks journal the steps, the model calls are attributed to it, nothing is written twice."""
        streamed = [task_id for task_id in self.state.open_tasks if task_id not in self.state.tree_tasks]
        if streamed:
            task.task_id, task.mirrored = streamed[-1], True
            task.name = self.state.open_tasks[streamed[-1]]
            return
        task.task_id = task.call_id or f"task-{task.root.hex}"
        self.state.tree_tasks.add(task.task_id)
        self._task_chunk(task, "task_started", description=task.description, subagent=task.name)

    def _task_chunk(self, task: NestedAgent, kind: str, **fields: Any) -> None:
        """A subagent event shaped exactly as the ``task_*`` chunk mapper shapes it."""
        if task.mirrored:
            return
        mapped = subagent_run_event({"type": kind, "task_id": task.task_id, **fields}, redact=self.redact)
        if mapped is not None:
            self._subagent_event(mapped)

    def _middleware_event(self, scope: Scope, action: str, changes: dict[str, Any], update: Any) -> None:
        """``middleware:<tag>`` for a hook that ran: what it changed, as ``record_middleware`` writes."""
        hook = scope.hook
        assert hook is not None
        if update:
            text = redacted_text(encode(update), self.redact)
            changes["preview"], changes["preview_truncated"] = p.capped(text, p.MIDDLEWARE_PREVIEW_LIMIT)
        metadata: dict[str, Any] = {}
        if scope.nested is not None and scope.nested.task_id is not None:
            metadata["task_id"] = scope.nested.task_id
        self.record(middleware_event_type(hook.tag),
                    {"name": hook.name, "hook": hook.hook, "action": action, "changes": changes},
                    metadata, f"middleware:{hook.tag}")

    def finish_unended(self) -> None:
        """The journal is closing: a run that started and never ended is recorded as cancelled."""
        if self.state.started and not self.state.ended:
            self._terminal("run.cancel", RunStatus.CANCELLED,
                           {"reason": "the journal was closed before the run ended"})

    # -- transitions -------------------------------------------------------------------------------
    def _emit(self, event_type: str, content: Any, metadata: Mapping[str, Any] | Normalized,
              category: str | None = None, *, created_at: datetime | None = None) -> None:
        """Every event goes out through here: its content and metadata normalized and redacted (one
        pass over each), then the envelope's caps. A ``Normalized`` payload is written as it is: a
        message payload was redacted when it was built, and :meth:`_own` values were redacted as needed.
        """
        if category is None:
            category = EVENTS[event_type].category
        else:
            validate_event_type(event_type, category)
        event = NewEvent._checked_by_producer(  # ids were checked when they were set
            self.thread_id or "pending", self.run_id, event_type, category,
            content.text if type(content) is Normalized else self._redacted_json(content),
            metadata.text if type(metadata) is Normalized else self._redacted_json(metadata),
            created_at or utc_now(), self.user_id,
        )
        (self._out if self.state.started else self._held).append(event)

    def _redacted_json(self, value: Any) -> str:
        """The one redaction pass over a payload's canonical JSON."""
        return redacted_text(encode(value), self.redact)

    def _own(self, value: Mapping[str, Any]) -> Normalized:
        """The journal's own values (ids, names, counts, digests, and texts redacted already): the
        built-in redactors find nothing in them, so they are not scanned; a redactor of the user's
        sees them as it sees every payload."""
        text = encode(value)
        if self.redact is not redact_secrets and self.redact is not no_redaction:
            text = redacted_text(text, self.redact)
        return Normalized.from_text(text)

    def _message_payload(self, message: BaseMessage, key: MessageKey | None = None) -> Normalized:
        """A message's redacted, normalized payload, computed once per message id per run (again
        when the message changed in place: its cheap ``key`` tells, computed here if not given)."""
        message_id = message.id if isinstance(message.id, str) and message.id else None
        cached = self._payloads.get(message_id) if message_id else None
        if cached is not None and cached[0] is message:
            key = key or message_key(message)
            if cached[1] == key:
                return cached[2]
        payload = p.message_payload(message, self.redact)
        if message_id:
            self._payloads[message_id] = (message, key or message_key(message), payload)
        return payload

    def _note_interrupts(self, error: BaseException) -> None:
        for item in p.interrupts_of(error):
            self.state.interrupts.setdefault(str(getattr(item, "id", id(item))), item)

    def _start_root(self, root: uuid.UUID, name: str, inputs: Any, tags: list[str] | None,
                    metadata: dict[str, Any] | None) -> None:
        state = self.state
        if state.started:
            return  # one journal records one run; a second root call is not journaled
        identity = p.langgraph_identity(metadata)
        if self.thread_id is None:
            try:
                self.thread_id = validate_id("thread_id", identity.get("thread_id"))
            except ValueError:
                self.thread_id = new_event_id()
        state.root, state.started_at, state.status = root, utc_now(), RunStatus.RUNNING
        state.started_mono = time.monotonic()
        state.caller = p.caller_of(tags)
        state.run_name = name
        state.started = True
        self.changed = True
        resuming = p.is_resume(inputs)
        user_meta = {k: v for k, v in (metadata or {}).items() if k not in p.LANGGRAPH_KEYS}
        content = {"run_name": name, **p.input_preview_fields(inputs, self.redact),
                   "resumed_from": self.resumed_from}
        meta = {"caller": state.caller, "langgraph": p.bounded(identity),
                "tags": list(tags or []), "run_metadata": p.bounded(user_meta),
                "resumed_from": self.resumed_from}
        self._emit("run.start", content, meta, created_at=state.started_at)
        if resuming and self.resumed_from is None:
            self.resume_lookup = self._out[-1]
        for event in self._held:
            self._out.append(_moved(event, self.thread_id))
        self._held = []
        messages = [] if resuming else p.input_messages(inputs)
        state.root_input_count = len(messages)
        human = next((m for m in reversed(messages) if p.is_visible_human(m)), None)  # this turn's
        if human is not None:
            self.tally.messages += 1
            self.tally.first_human = cap_text(redacted_string(p.message_text(human), self.redact))
            self._emit("llm.human.input", self._message_payload(human),
                       self._own({"caller": state.caller, "message_id": human.id}))

    def _llm_response(self, call: LlmCall, response: LLMResult) -> tuple[BaseMessage | None, BaseMessage]:
        """``llm.ai.response`` (and a ``tool.call`` per call it asks for); returns the chat message,
        if the model gave one, and the message as written."""
        generations = [g for batch in response.generations for g in batch]
        first = generations[0] if generations else None
        chat = first.message if isinstance(first, ChatGeneration) else None
        message = chat or AIMessage(content=first.text if first is not None else "")
        model = model_name_of(response, call.model)
        usage = extract_usage(response)
        provider = provider_of(response, call.provider)
        priced = self.tally.add_call(call.caller, model, usage, provider=provider)
        ttft = None if call.first_token_at is None else int((call.first_token_at - call.started) * 1000)
        meta = {
            "caller": call.caller, "llm_call_index": call.index, "model_name": model,
            "model_provider": provider,
            "usage": usage.to_dict() if usage else None, "cost_usd": priced.cost_usd,
            "latency_ms": int((time.monotonic() - call.started) * 1000), "time_to_first_token_ms": ttft,
            "message_id": message.id,
        }
        self.tally.messages += 1
        self.changed = True
        text = p.message_text(message)
        if text and (call.caller == p.LEAD_AGENT or call.caller.startswith(p.AGENT_PREFIX)):
            self.tally.last_ai = cap_text(redacted_string(text, self.redact))
        tool_calls = getattr(message, "tool_calls", None) or []
        if tool_calls and not text and all(self._is_handoff(c.get("name")) for c in tool_calls):
            meta["handoff"] = True  # routing between agents, not a reply: out of thread history
        self._emit("llm.ai.response", self._message_payload(message), self._own(meta))
        for tool_call in tool_calls:
            call_id = tool_call.get("id")
            if not isinstance(call_id, str) or not call_id:
                continue
            preview, cut = p.args_preview(tool_call.get("args", {}), self.redact)
            name = str(tool_call.get("name", ""))
            self.state.open_calls[call_id] = (name, call.caller)
            self._emit(  # the preview is redacted already
                "tool.call",
                self._own({"tool_call_id": call_id, "tool_name": name, "args_preview": preview,
                     "args_truncated": cut}),
                self._own({"caller": call.caller, "tool_call_id": call_id, "llm_call_index": call.index}),
            )
        return chat, message

    def _tool_result(self, message: Any, caller: str, tool_name: str | None,
                     task: NestedAgent | None) -> None:
        """A tool's answer: ``llm.tool.result``, or a step of the subagent task it belongs to."""
        state = self.state
        call_id = message.tool_call_id
        if call_id in state.results_done:
            return
        state.results_done.add(call_id)
        if message.status == "error" and call_id not in state.errored_calls:
            state.errored_calls.add(call_id)
            self.tally.tool_errors += 1
        self.changed = True
        if task is not None and task.task_id is not None:
            self._task_chunk(task, "task_running", message_index=task.steps, message=message)
            task.steps += 1
            return
        self.tally.messages += 1
        meta = {"caller": caller, "tool_call_id": call_id, "tool_name": message.name or tool_name,
                "status": message.status}
        if call_id in state.handoff_calls or self._is_handoff(message.name or tool_name):
            meta["handoff"] = True
        self._emit("llm.tool.result", self._message_payload(message), self._own(meta))

    def _is_handoff(self, tool_name: Any) -> bool:
        """A tool that hands the turn to another agent: one seen with ``__handoff_destination``
        metadata, or named as langgraph-supervisor's and langgraph-swarm's handoff tools are."""
        return isinstance(tool_name, str) and (
            tool_name in self.state.handoff_tools or tool_name.startswith(p.HANDOFF_TOOL_PREFIXES))

    def _outcome(self, call_id: str, name: str, caller: str, outcome: str, tool: ToolRun | None,
                 **extra: Any) -> None:
        state = self.state
        if call_id in state.outcomes_done:
            return
        state.outcomes_done.add(call_id)
        state.open_calls.pop(call_id, None)
        if outcome == "error" and tool is not None:
            self.tally.tool_errors += 1
            self.changed = True
        duration = None if tool is None else int((time.monotonic() - tool.started) * 1000)
        content = {"tool_call_id": call_id, "tool_name": name, "outcome": outcome,
                   "duration_ms": duration, **extra}
        self._emit("tool.outcome",
                   content if outcome == "error" else self._own(content),  # an error's words: scanned
                   self._own({"caller": caller, "tool_call_id": call_id}))

    def _close_open_work(self, *, missing: bool) -> None:
        """Before a terminal event: settle failed tool tries, close unfinished subagent tasks and
        (optionally) unanswered calls."""
        self._settle_failed_tools(None)
        for task_id in list(self.state.open_tasks):
            mapped = subagent_run_event({"type": "task_cancelled", "task_id": task_id,
                                         "closed_by_journal": True}, redact=self.redact)
            if mapped is not None:
                self._subagent_event(mapped)
        if missing:
            for call_id, (name, caller) in list(self.state.open_calls.items()):
                self._outcome(call_id, name, caller, "missing", None)

    def _terminal(self, event_type: str, status: RunStatus, content: Any, error: str | None = None) -> None:
        state = self.state
        self._close_open_work(missing=status != RunStatus.INTERRUPTED)
        state.ended, state.status, state.error = True, status, error
        state.ended_at = utc_now()
        self.changed = True
        duration = int((time.monotonic() - state.started_mono) * 1000)
        meta = {"status": status.value, "duration_ms": duration, "caller": state.caller}
        self._emit(event_type, content, self._own(meta), created_at=state.ended_at)

    def _end_root(self, output: Any) -> None:
        state = self.state
        pending = output.get("__interrupt__") if isinstance(output, Mapping) else None
        if state.interrupts or pending:
            items = list(state.interrupts.values()) or list(pending or [])
            self._terminal("run.interrupt", RunStatus.INTERRUPTED, {"interrupts": p.interrupt_payload(items)})
            return
        produced, truncated, keys = p.produced_messages(
            output, state.baseline, self.redact, self._message_payload
        )
        self._terminal("run.end", RunStatus.SUCCESS, p.end_content(produced, truncated, keys))

    def _fail_root(self, error: BaseException) -> None:
        state = self.state
        if isinstance(error, CANCELLED):
            self._terminal("run.cancel", RunStatus.CANCELLED, {"reason": f"{type(error).__name__}"})
        elif state.interrupts or p.is_bubble_up(error):
            self._terminal("run.interrupt", RunStatus.INTERRUPTED,
                           {"interrupts": p.interrupt_payload(state.interrupts.values())})
        else:
            content = {**p.error_content(error, with_traceback=True), "node": state.error_node}
            redacted = Normalized.from_text(self._redacted_json(content))  # the row shows what is stored
            message = redacted.value["message"] if isinstance(redacted.value, dict) else content["message"]
            self._terminal("run.error", RunStatus.ERROR, redacted, error=str(message))


def _build_row(tally: RunTally, **fields: Any) -> RunRow:
    return RunRow(**fields, **tally.row_fields())


def _moved(event: NewEvent, thread_id: str | None) -> NewEvent:
    """An event recorded before the thread was known, moved to the run's thread."""
    if thread_id is None or event.thread_id == thread_id:
        return event
    return NewEvent(
        thread_id=thread_id, run_id=event.run_id, event_type=event.event_type, category=event.category,
        content=event.content, metadata=event.metadata, created_at=event.created_at,
        event_id=event.event_id, user_id=event.user_id,
    )

