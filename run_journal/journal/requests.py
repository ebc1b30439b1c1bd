"""Model requests, stored once per thread: what each model call was sent, as content-addressed bodies.

A request is an ``llm.request`` event whose content names bodies by digest (the sha256 of a body's
bytes, which are canonical JSON):

- each message is a body: its compact dump, normalized and redacted (the payload ``llm.ai.response``
  and ``llm.tool.result`` carry), capped at the message limit;
- the message list is a chain of link bodies ``{"prev": <link digest or null>, "message": <message
  digest>}``, one per position, and the request names the last link: a history that grows by one
  message costs one new message and one new link, however long it is;
- the tools offered are one body, a list in OpenAI tool format (``convert_to_openai_tool``);
- the invocation parameters (model, temperature, max tokens, tool choice, ...) are one body, redacted.

A message is hashed once: :class:`ThreadBodies` keeps each message object's digest (and, for the
copies of a message a checkpointer hands to a later run, its digest by message id while the copy is
equal), each link by its two digests, tools and parameters by their encoded text. It also remembers
which bodies the store acknowledged for the thread, so this process does not send them again.
"""

from __future__ import annotations

import collections
import json
import threading
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Final

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from run_journal.bodies import Body
from run_journal.caps import CONTENT_LIMITS, cap_content
from run_journal.catalog import Category
from run_journal.journal.payloads import message_payload
from run_journal.normalization import Normalized, encode, loads, normalize
from run_journal.redact import Redactor, redacted_text
from run_journal.stores.base import RunEventStore
from run_journal.writer import SharedStore

MESSAGE_LIMIT: Final = CONTENT_LIMITS[Category.MESSAGE]
"""Bytes of a message body at most (a longer message is cut as an event's content is)."""
CACHED_MESSAGES: Final = 20_000
"""Message digests one thread keeps (then the cache starts over: messages are hashed again)."""
CACHED_BYTES: Final = 64 * 1024 * 1024
"""The messages the process keeps for its digest caches, in bytes of their bodies: one thread's cache
starts over past it, and as a thread remembers a message the least recently used other threads are
forgotten while all of them hold more (``_Registry.trim``)."""
CACHED_LINKS: Final = 50_000
CACHED_THREADS: Final = 128
"""Threads whose bodies the process remembers (least recently used ones are forgotten)."""

MessageKey = tuple[Any, ...]
PayloadOf = Callable[[BaseMessage, MessageKey | None], Normalized]
"""A message's payload, given its :func:`message_key` when the caller has it."""


def message_key(message: BaseMessage) -> MessageKey:
    """What a message's digest is cached under besides the object: cheap to compute, and changed by
    what agents change in a message they hold (``create_agent`` names a reply after its agent):
    its name, id, text (a string's hash is computed once per string), tool calls and extra fields."""
    content = message.content
    text: Any = hash(content) if isinstance(content, str) else (id(content), len(content))
    calls = len(message.tool_calls) if isinstance(message, AIMessage) else 0  # a field of AI messages only
    return (message.name, message.id, text, calls, len(message.additional_kwargs),
            len(message.response_metadata))


def link_data(prev: str | None, message: str) -> bytes:
    """The bytes of the body ``{"prev": prev, "message": message}`` (``Body.of``'s canonical JSON,
    keys sorted), written out directly."""
    tail = b'"prev":null}' if prev is None else b'"prev":"' + prev.encode() + b'"}'
    return b'{"message":"' + message.encode() + b'",' + tail


def request_content(messages: str | None, count: int, tools: str | None, params: str) -> Normalized:
    """The content of ``llm.request`` (digests and a count), its JSON written out directly."""
    def digest(value: str | None) -> str:
        return "null" if value is None else f'"{value}"'
    return Normalized.from_text(f'{{"messages_sha256":{digest(messages)},"message_count":{count},'
                                f'"tools_sha256":{digest(tools)},"params_sha256":"{params}"}}')


_SORTED: Final = json.JSONEncoder(
    ensure_ascii=False, check_circular=False, allow_nan=False, separators=(",", ":"), sort_keys=True,
).encode
"""``Body.of``'s canonical JSON for a value that is normalized already (decoded from its payload's
text): the same bytes, without normalizing it again."""


def message_body(thread_id: str, payload: Normalized) -> Body:
    """A message's body: its payload (normalized, redacted), cut like an event's content when its
    JSON is over the message limit."""
    text = payload.text
    value = loads(text)
    if len(text) > MESSAGE_LIMIT // 4 and len(text.encode("utf-8")) > MESSAGE_LIMIT:
        value = cap_content(value, text, {}, MESSAGE_LIMIT)[0]
    return Body.from_data(thread_id, _SORTED(value).encode("utf-8"))


def tool_specs(tools: Any) -> list[Any]:
    """The tools a call offered, each in OpenAI tool format where ``convert_to_openai_tool`` can read
    it (OpenAI, Anthropic and Bedrock dicts, LangChain tools, functions, pydantic models), else as
    normalized."""
    specs: list[Any] = []
    for tool in tools if isinstance(tools, list | tuple) else [tools]:
        try:
            specs.append(convert_to_openai_tool(tool))
        except Exception:  # noqa: BLE001 - a provider's own tool shape (a built-in tool) is kept as is
            specs.append(normalize(tool))
    return specs


def params_value(params: Mapping[str, Any]) -> dict[str, Any]:
    """The invocation parameters without the tools (which are a body of their own)."""
    return {key: value for key, value in params.items() if key != "tools"}


class ThreadBodies:
    """One thread's bodies as this process knows them for one store: digests of what it hashed, and
    which bodies the store acknowledged. Shared by the journals of the thread (any OS thread)."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self.lock = threading.Lock()
        self.acknowledged: set[str] = set()
        self.by_object: dict[int, tuple[BaseMessage, MessageKey, str, int]] = {}
        self.by_id: dict[str, tuple[BaseMessage, MessageKey, str, int]] = {}
        """(message, its key, its digest, the size of its body) by object and by message id."""
        self.held = 0
        """Bytes of the bodies of the messages the caches above keep alive."""
        self.budget: _Budget | None = None
        """The process's count of such bytes, while the registry remembers this thread."""
        self.links: dict[tuple[str | None, str], str] = {}
        self.texts: dict[str, Body] = {}
        """Encoded tools or parameters -> their body."""
        self.owner: weakref.ref[Any] | None = None

    def hold(self, size: int) -> None:
        """Under ``lock``: the caches keep ``size`` more bytes of bodies alive (less, when negative)."""
        budget = self.budget
        if budget is None:
            self.held += size
            return
        with budget.lock:
            if self.budget is budget:
                budget.held += size
            self.held += size

    def stored(self, digests: Sequence[str]) -> None:
        """The store holds these bodies now (the writer tells, once it wrote them)."""
        with self.lock:
            self.acknowledged.update(digests)


class RequestBuilder:
    """One run's requests: the ``llm.request`` content of each call and the bodies to send with it
    (those neither the store acknowledged for the thread nor this run sent already)."""

    def __init__(self, bodies: ThreadBodies, redact: Redactor, payload_of: PayloadOf | None = None) -> None:
        self.bodies = bodies
        self.redact = redact
        self.payload_of = payload_of or (lambda message, _: message_payload(message, redact))
        """A message's redacted payload (the journal's, which it computed for the message's own event)."""
        self.sent: set[str] = set()

    def build(self, messages: Sequence[BaseMessage],
              params: Mapping[str, Any]) -> tuple[Normalized, list[Body]]:
        """``(the llm.request content, the bodies to send)`` for one call."""
        thread = self.bodies
        new: list[Body] = []
        with thread.lock:
            known = thread.acknowledged
            sent = self.sent
            link: str | None = None
            for message in messages:
                digest = self._message(message, new, known)
                key = (link, digest)
                following = thread.links.get(key)
                if following is None:
                    body = Body.from_data(thread.thread_id, link_data(link, digest))
                    following = body.digest
                    if len(thread.links) >= CACHED_LINKS:
                        thread.links.clear()
                    thread.links[key] = following
                    if following not in known and following not in sent:
                        sent.add(following)
                        new.append(body)
                elif following not in known and following not in sent:
                    sent.add(following)
                    new.append(Body.from_data(thread.thread_id, link_data(link, digest)))
                link = following
            tools = params.get("tools")
            tools_digest = None
            if tools:
                tools_digest = self._text_body("t" + encode(tools), new, known,
                                               lambda: encode(tool_specs(tools)))
            raw = encode(params_value(params))
            params_digest = self._text_body("p" + raw, new, known, lambda: raw)
        return request_content(link, len(messages), tools_digest, params_digest), new

    def _message(self, message: BaseMessage, new: list[Body], known: set[str]) -> str:
        """The message's digest (hashed only when neither this object in this state nor an equal
        copy of it was hashed before); its body goes in ``new`` unless the store has it."""
        thread = self.bodies
        key = message_key(message)
        cached = thread.by_object.get(id(message))
        digest = ""
        if cached is not None and cached[0] is message and cached[1] == key:
            digest = cached[2]
        else:
            message_id = message.id if isinstance(message.id, str) and message.id else None
            copy = thread.by_id.get(message_id) if message_id is not None else None
            if copy is not None and copy[1] == key and copy[0] is not message and copy[0] == message:
                digest = copy[2]  # a checkpointer's copy of a message hashed before
                self._remember(message, key, digest, copy[3])
        if digest and (digest in known or digest in self.sent):
            return digest
        body = message_body(thread.thread_id, self.payload_of(message, key))
        if not digest:
            digest = body.digest
            self._remember(message, key, digest, len(body.data))
        self.sent.add(digest)
        new.append(body)
        return digest

    def _remember(self, message: BaseMessage, key: MessageKey, digest: str, size: int) -> None:
        thread = self.bodies
        if len(thread.by_object) >= CACHED_MESSAGES or thread.held + size > CACHED_BYTES:
            thread.by_object.clear()
            thread.by_id.clear()
            thread.hold(-thread.held)
        entry = (message, key, digest, size)
        thread.by_object[id(message)] = entry
        thread.hold(size)
        if isinstance(message.id, str) and message.id:
            thread.by_id[message.id] = entry
        budget = thread.budget
        if budget is not None and budget.held > CACHED_BYTES:
            REGISTRY.trim(thread)

    def _text_body(self, key: str, new: list[Body], known: set[str], text: Callable[[], str]) -> str:
        """The body of the tools or the parameters, cached by their encoded form."""
        thread = self.bodies
        body = thread.texts.get(key)
        if body is None:
            shared = (key, id(self.redact))
            made = _TEXT_BODIES.get(shared)  # the same parameters in another thread: one encoding
            if made is None:
                made = Body.from_data("", _SORTED(loads(redacted_text(text(), self.redact))).encode("utf-8"))
                if len(_TEXT_BODIES) >= 512:
                    _TEXT_BODIES.clear()
                _TEXT_BODIES[shared] = made
            body = made.in_thread(thread.thread_id)
            if len(thread.texts) >= 256:
                thread.texts.clear()
            thread.texts[key] = body
        digest = body.digest
        if digest not in known and digest not in self.sent:
            self.sent.add(digest)
            new.append(body)
        return digest


_TEXT_BODIES: Final[dict[tuple[str, int], Body]] = {}
"""The process's tool lists and parameter sets: (encoded text, redactor) -> their body (of no thread)."""


class _Budget:
    """The bytes of message bodies the registry's threads keep alive, kept as they change (their
    ``hold``), so that checking it against ``CACHED_BYTES`` costs nothing per message.

    Lock order: a thread's lock, then the registry's, then this one's."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held = 0

    def add(self, thread: ThreadBodies) -> None:
        with self.lock:
            thread.budget = self
            self.held += thread.held

    def release(self, thread: ThreadBodies) -> None:
        with self.lock:
            if thread.budget is self:
                thread.budget = None
                self.held -= thread.held


class _Registry:
    """The process's :class:`ThreadBodies`, by store and thread (least recently used forgotten)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: collections.OrderedDict[tuple[Hashable, str, int], ThreadBodies] = \
            collections.OrderedDict()
        self._budget = _Budget()

    def get(self, store_key: Hashable | None, owner: Any, thread_id: str, redact: Redactor) -> ThreadBodies:
        if store_key is None:
            return ThreadBodies(thread_id)
        key = (store_key, thread_id, id(redact))
        with self._lock:
            found = self._threads.get(key)
            if found is not None and (found.owner is None or found.owner() is owner):
                self._threads.move_to_end(key)
                return found
            found = ThreadBodies(thread_id)
            if owner is not None:
                found.owner = weakref.ref(owner)
            budget = self._budget
            budget.add(found)
            replaced = self._threads.pop(key, None)
            if replaced is not None:
                budget.release(replaced)
            self._threads[key] = found
            while len(self._threads) > CACHED_THREADS:  # the bytes are held to CACHED_BYTES by trim
                budget.release(self._threads.popitem(last=False)[1])
            return found

    def trim(self, active: ThreadBodies) -> None:
        """Forget the least recently used threads but ``active`` while they all keep more than
        ``CACHED_BYTES`` alive (``active``'s lock held: a thread's lock, then the registry's)."""
        with self._lock:
            threads, budget = self._threads, self._budget
            for key in list(threads):
                if budget.held <= CACHED_BYTES:
                    break
                if threads[key] is not active:
                    budget.release(threads.pop(key))

    def held(self) -> int:
        """Bytes of message bodies the remembered threads keep alive (see ``CACHED_BYTES``)."""
        with self._budget.lock:
            return self._budget.held


REGISTRY: Final = _Registry()


def store_identity(store: RunEventStore | str | SharedStore) -> tuple[Hashable | None, Any]:
    """``(key, owner)``: what tells this store's data apart from another's in the process, and the
    object the key is good for while it lives (None: the key names the data itself). A None key: a
    store of the journal's own (a ``memory://`` URL it opens), whose bodies nobody else shares."""
    if isinstance(store, str):
        return (None, None) if "memory" in store.split("?", 1)[0] else (("url", store), None)
    if isinstance(store, SharedStore):  # one per URL for the process
        return ("shared", id(store)), store
    location = store.location
    if location is not None:
        return ("at", type(store).__name__, str(location)), None
    return ("object", id(store)), store
