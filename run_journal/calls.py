"""What each model call of a run was sent and what it answered: ``model_calls(store, thread_id, run_id)``.

A run's ``llm.request`` events name bodies by digest (see ``docs/journal.md``, "Model requests"):
the last link of the message chain, the tools, the parameters. :func:`model_calls` pairs each
request with its reply (``llm.ai.response``) or failure (``llm.error``) by ``llm_call_index`` and
resolves the bodies with few store reads: one ``get_bodies`` for what the requests name, then, while
the chains are short, one per level of links, and for long chains one pass over the thread's bodies
(``list_bodies``), which holds them all.

:func:`request_problems` is what ``run-journal URL verify`` checks: every chain resolves to as many
messages as its request says it had.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from run_journal.catalog import LEAD_AGENT
from run_journal.envelope import JsonObject, JsonValue, RunEvent
from run_journal.projections import iter_events
from run_journal.stores.base import RunEventStore

__all__ = ["ModelCall", "ModelRequest", "model_calls", "request_problems"]

CALL_EVENTS: Final = ("llm.request", "llm.ai.response", "llm.error")
READ_LIMIT: Final = 1000
"""Digests one ``get_bodies`` call reads at most (the store contract's ``MAX_BODY_READ``)."""
LINK_ROUNDS: Final = 3
"""Levels of links read digest by digest before the rest of a long chain is read by listing the
thread's bodies."""


@dataclasses.dataclass(frozen=True, slots=True)
class ModelRequest:
    """What one model call was sent.

    ``messages``: the message list in order, each a dict as LangChain dumps a message (``type``:
    ``system``, ``human``, ``ai`` or ``tool``; ``content``: a string or content blocks; and when set
    ``tool_calls``, ``tool_call_id``, ``name``, ``id``, ``additional_kwargs``, ...), redacted, so
    ``langchain_core.messages.convert_to_messages(request.messages)`` rebuilds the messages.
    ``tools``: the tools offered in OpenAI tool format (``{"type": "function", "function": {"name",
    "description", "parameters"}}``), or None when none was. ``params``: the invocation parameters
    (``model``, ``temperature``, ``max_tokens``, ``tool_choice``, ``stop``, ... as the model
    reported them), redacted. ``missing``: digests the store does not hold (then ``messages`` holds
    only what could be read: the messages after the last missing link)."""

    messages: list[JsonObject]
    tools: list[JsonValue] | None
    params: JsonObject
    message_count: int
    missing: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def system_prompt(self) -> str | None:
        """The text of the first message when it is a system message."""
        first = self.messages[0] if self.messages else None
        if first is None or first.get("type") != "system":
            return None
        content = first.get("content")
        return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)

    def to_dict(self) -> JsonObject:
        return {"messages": list(self.messages), "tools": self.tools, "params": self.params,
                "message_count": self.message_count, "missing": list(self.missing)}


@dataclasses.dataclass(frozen=True, slots=True)
class ModelCall:
    """One model call of a run: who made it, what it was sent, what it answered.

    ``index``: the call's ``llm_call_index`` in the run. ``caller``: ``lead_agent``,
    ``subagent:<name>``, ``middleware:<name>`` or ``agent:<name>``. ``request``: None when the run
    was journaled without requests (``record_requests=False``). ``reply``: the model's message as
    ``llm.ai.response`` stored it (a dict like the request's messages), None when the call failed
    (``error``: ``{"error_type", "message"}``) or never ended. ``request_seq`` / ``reply_seq``: the
    seqs of the ``llm.request`` and of the reply or error event."""

    index: int
    caller: str
    model: str | None
    provider: str | None
    request: ModelRequest | None
    reply: JsonObject | None
    error: JsonObject | None
    usage: JsonObject | None
    cost_usd: float | None
    latency_ms: int | None
    time_to_first_token_ms: int | None
    request_seq: int | None
    reply_seq: int | None
    llm_run_id: str | None

    @property
    def ended(self) -> bool:
        return self.reply is not None or self.error is not None

    def to_dict(self) -> JsonObject:
        data: JsonObject = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        data["request"] = self.request.to_dict() if self.request is not None else None
        return data


async def model_calls(store: RunEventStore, thread_id: str, run_id: str, *,
                      user_id: str | None = None) -> list[ModelCall]:
    """Every model call of the run, in the order the calls started (see the module docstring)."""
    events = [event async for event in iter_events(store, thread_id, run_id, event_types=CALL_EVENTS,
                                                   user_id=user_id)]
    requests: dict[int, RunEvent] = {}
    answers: dict[int, RunEvent] = {}
    order: list[int] = []
    for event in events:
        index = event.metadata.get("llm_call_index")
        if not isinstance(index, int) or isinstance(index, bool):
            continue
        if index not in requests and index not in answers:
            order.append(index)
        target = requests if event.event_type == "llm.request" else answers
        target.setdefault(index, event)
    resolver = BodyResolver(store, thread_id)
    resolved = await resolver.requests([requests[index] for index in order if index in requests])
    return [_call(index, requests.get(index), answers.get(index), resolved) for index in order]


def _call(index: int, request: RunEvent | None, answer: RunEvent | None,
          resolved: Mapping[int, ModelRequest]) -> ModelCall:
    ask = request.metadata if request is not None else {}
    told = answer.metadata if answer is not None else {}
    replied = answer is not None and answer.event_type != "llm.error"
    content = answer.content if answer is not None else None
    caller = told.get("caller", ask.get("caller"))
    model = told.get("model_name") or ask.get("model_name")
    provider = told.get("model_provider") or ask.get("model_provider")
    usage = told.get("usage")
    cost = told.get("cost_usd")
    latency = told.get("latency_ms")
    first_token = told.get("time_to_first_token_ms")
    run_id = ask.get("llm_run_id")
    return ModelCall(
        index=index, caller=str(caller) if caller is not None else LEAD_AGENT,
        model=model if isinstance(model, str) else None,
        provider=provider if isinstance(provider, str) else None,
        request=resolved.get(request.seq) if request is not None else None,
        reply=content if replied and isinstance(content, dict) else None,
        error=content if not replied and isinstance(content, dict) else None,
        usage=usage if isinstance(usage, dict) else None,
        cost_usd=float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None,
        latency_ms=latency if isinstance(latency, int) else None,
        time_to_first_token_ms=first_token if isinstance(first_token, int) else None,
        request_seq=request.seq if request is not None else None,
        reply_seq=answer.seq if answer is not None else None,
        llm_run_id=run_id if isinstance(run_id, str) else None,
    )


def _digest(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class BodyResolver:
    """Reads one thread's bodies for requests, each body once, in as few store calls as it can."""

    def __init__(self, store: RunEventStore, thread_id: str) -> None:
        self.store = store
        self.thread_id = thread_id
        self.found: dict[str, bytes] = {}
        self.absent: set[str] = set()
        self.listed = False
        self.reads = 0
        self._chains: dict[str, tuple[list[str], tuple[str, ...]]] = {}
        self._values: dict[str, Any] = {}

    async def fetch(self, digests: Iterable[str]) -> None:
        """Read what is not read yet (by digest, or by listing the thread once it was)."""
        wanted = [d for d in dict.fromkeys(digests) if d not in self.found and d not in self.absent]
        if not wanted:
            return
        if not self.listed:
            for start in range(0, len(wanted), READ_LIMIT):
                self.reads += 1
                chunk = wanted[start:start + READ_LIMIT]
                self.found.update(await self.store.get_bodies(self.thread_id, chunk))
        self.absent.update(d for d in wanted if d not in self.found)

    async def list_all(self) -> None:
        """Every body of the thread, a page at a time."""
        if self.listed:
            return
        after: str | None = None
        while True:
            self.reads += 1
            page = await self.store.list_bodies(self.thread_id, after=after, limit=READ_LIMIT)
            for body in page:
                self.found[body.digest] = body.data
            if len(page) < READ_LIMIT:
                break
            after = page[-1].digest
        self.listed = True
        self.absent.clear()

    def value(self, digest: str) -> Any:
        if digest not in self._values:
            self._values[digest] = json.loads(self.found[digest])
        return self._values[digest]

    async def requests(self, events: Sequence[RunEvent]) -> dict[int, ModelRequest]:
        """Each ``llm.request`` resolved, by seq."""
        heads: list[tuple[RunEvent, str | None, str | None, str | None]] = []
        for event in events:
            content = event.content if isinstance(event.content, dict) else {}
            heads.append((event, _digest(content.get("messages_sha256")),
                          _digest(content.get("tools_sha256")), _digest(content.get("params_sha256"))))
        await self.fetch(d for _, *named in heads for d in named if d is not None)
        by_length = sorted((head for head in heads if head[1] is not None), key=lambda head: _count(head[0]))
        chains = await self.chains([link for _, link, _, _ in by_length if link is not None],
                                   max((_count(e) for e, *_ in heads), default=0))
        await self.fetch(d for messages, _ in chains.values() for d in messages)
        resolved: dict[int, ModelRequest] = {}
        for event, link, tools, params in heads:
            messages, missing = chains.get(link, ([], ())) if link is not None else ([], ())
            lost = list(missing)
            values: list[JsonObject] = []
            for digest in messages:
                if digest in self.found:
                    value = self.value(digest)
                    values.append(dict(value) if isinstance(value, dict) else
                                  {"type": "unknown", "content": value})
                else:
                    lost.append(digest)
            tools_value = None
            if tools is not None:
                if tools in self.found:
                    tools_value = list(self.value(tools))
                else:
                    lost.append(tools)
            params_value: JsonObject = {}
            if params is not None:
                if params in self.found:
                    params_value = dict(self.value(params))
                else:
                    lost.append(params)
            resolved[event.seq] = ModelRequest(values, tools_value, params_value, _count(event),
                                               tuple(dict.fromkeys(lost)))
        return resolved

    async def chains(self, heads: Sequence[str], depth: int) -> dict[str, tuple[list[str], tuple[str, ...]]]:
        """Each chain's message digests in order, and the links missing from it, by its last link."""
        rounds = 0
        while True:
            frontier = [prev for head in heads if (prev := self._unread_link(head)) is not None]
            if not frontier:
                break
            rounds += 1
            if rounds > LINK_ROUNDS or (depth > LINK_ROUNDS * 2 and not self.listed):
                await self.list_all()
                self.absent.update(d for d in frontier if d not in self.found)
            else:
                await self.fetch(frontier)
        return {head: self._chain(head) for head in heads}  # shorter chains first: longer ones reuse them

    def _unread_link(self, head: str) -> str | None:
        """The first link of the chain that is neither read nor known to be absent (None: none)."""
        link: str | None = head
        while link is not None and link not in self._chains and link not in self.absent:
            if link not in self.found:
                return link
            value = self.value(link)
            link = _digest(value.get("prev")) if isinstance(value, dict) else None
        return None

    def _chain(self, head: str) -> tuple[list[str], tuple[str, ...]]:
        """The chain's message digests in order and its missing link, if any (the messages after
        it are all that can be known). Digests cannot form a cycle: a store checks each body's
        digest against its data."""
        walk: list[str | None] = []  # message digests from the end
        link: str | None = head
        base: list[str] = []
        missing: tuple[str, ...] = ()
        while link is not None:
            memo = self._chains.get(link)
            if memo is not None:
                base, missing = memo
                break
            value = self.value(link) if link in self.found else None
            if not isinstance(value, dict):
                missing = (link,)
                break
            walk.append(_digest(value.get("message")))
            link = _digest(value.get("prev"))
        chain = ([*base, *(digest for digest in reversed(walk) if digest is not None)], missing)
        self._chains[head] = chain
        return chain


def _count(event: RunEvent) -> int:
    content = event.content if isinstance(event.content, dict) else {}
    count = content.get("message_count")
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


async def request_problems(store: RunEventStore, thread_id: str) -> list[tuple[int, str]]:
    """``(seq, problem)`` for each ``llm.request`` of the thread whose bodies do not all resolve: a
    missing link, message, tool list or parameters, or a chain shorter or longer than its
    ``message_count``."""
    events = [event async for event in iter_events(store, thread_id, event_types=["llm.request"])]
    if not events:
        return []
    resolver = BodyResolver(store, thread_id)
    problems: list[tuple[int, str]] = []
    resolved = await resolver.requests(events)
    for event in events:
        request = resolved[event.seq]
        for digest in request.missing:
            problems.append((event.seq, f"llm.request body {digest} is missing (a link, message, "
                                        "tool list or parameters)"))
        if not request.missing and len(request.messages) != request.message_count:
            problems.append((event.seq, f"llm.request message chain holds {len(request.messages)} "
                                        f"messages, message_count says {request.message_count}"))
    return problems
