"""Whose model call is this? The caller of an incoming call, named as the journal names it.

When the replayed run is journaled (``replay_run`` and the ``replay`` command always do), the journal
attributes each model call along the callback tree before the model answers, and the replay takes its
word (``run_journal.journal.current``). Without a journal the caller is read from the call's tags and
metadata: an explicit caller tag, a middleware hook's node, the ``lc_agent_name`` of a named agent
(``subagent:<name>`` inside a tool call, ``agent:<name>`` otherwise), else ``lead_agent``.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage

from run_journal.catalog import AGENT_PREFIX, LEAD_AGENT, MIDDLEWARE_PREFIX, SUBAGENT_PREFIX
from run_journal.journal.current import current_model_call
from run_journal.journal.payloads import explicit_caller, middleware_node


@dataclasses.dataclass(frozen=True, slots=True)
class CallStart:
    """What LangChain told the model's callbacks when a call started: the messages and invocation
    parameters are the ones every callback (the journal's too) was shown."""

    run_id: uuid.UUID
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    messages: tuple[BaseMessage, ...] | None = None
    params: Mapping[str, Any] | None = None


_STARTED: ContextVar[CallStart | None] = ContextVar("run_journal_replay_call", default=None)


class CallStarts(BaseCallbackHandler):
    """The replay model's own callback: notes each of its calls as it starts, in the caller's context
    (a streamed call is not handed its run manager, so this is how it learns its run id)."""

    run_inline = True
    raise_error = False

    def on_chat_model_start(self, serialized: dict[str, Any] | None, messages: list[list[BaseMessage]], *,
                            run_id: uuid.UUID, parent_run_id: uuid.UUID | None = None,
                            tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                            **kwargs: Any) -> None:
        params = kwargs.get("invocation_params")
        _STARTED.set(CallStart(run_id, tuple(tags or ()), dict(metadata or {}),
                               tuple(messages[0]) if messages else (),
                               dict(params) if isinstance(params, Mapping) else None))


def started_call() -> CallStart | None:
    return _STARTED.get()


def caller_of(start: CallStart | None) -> str:
    """The caller of the call that started with ``start`` (None: nothing is known of it)."""
    noted = current_model_call()
    if noted is not None and (start is None or noted[0] == start.run_id):
        return noted[1]
    if start is None:
        return LEAD_AGENT
    return guessed_caller(start.tags, start.metadata)


def guessed_caller(tags: Sequence[str], metadata: Mapping[str, Any]) -> str:
    """The caller from tags and metadata alone (see the module docstring)."""
    explicit = explicit_caller(list(tags))
    if explicit is not None:
        return explicit
    node = metadata.get("langgraph_node")
    hook = middleware_node(node) if isinstance(node, str) else None
    if hook is not None:
        return f"{MIDDLEWARE_PREFIX}{hook[2]}"
    name = metadata.get("lc_agent_name")
    if isinstance(name, str) and name:
        namespace = metadata.get("checkpoint_ns")
        inside_tool = isinstance(namespace, str) and any(
            part.startswith("tools:") for part in namespace.split("|"))
        return f"{SUBAGENT_PREFIX if inside_tool else AGENT_PREFIX}{name}"
    return LEAD_AGENT
