"""``RecordedChatModel``: a LangChain chat model that answers every call from a recorded run."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    BaseCallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda, RunnableMap, RunnablePassthrough
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, PrivateAttr

from run_journal.redact import Redactor, resolve_redactor
from run_journal.replay.callers import CallStart, CallStarts, caller_of, started_call
from run_journal.replay.divergence import CallDivergence
from run_journal.replay.matching import MATCHES, CallBook, Match
from run_journal.replay.recorded import RecordedCall, read_recorded_calls
from run_journal.replay.replies import chat_result, chunks, recorded_error
from run_journal.replay.requests import incoming_request
from run_journal.stores.base import RunEventStore


class RecordedChatModel(BaseChatModel):
    """A chat model answering each call with the reply a recorded run got (see ``docs/replay.md``).

    Build it with ``await RecordedChatModel.from_store(store, thread_id, run_id)`` and give it to the
    graph wherever the real model was: the lead agent, its middleware, every subagent. One instance
    (and every ``bind_tools`` / ``with_structured_output`` of it) shares one record of what was used.

    ``match="request"`` answers a call with the recorded call that had the same request (messages,
    tools offered, ``tool_choice``); ``match="order"`` with the caller's next recorded call.
    ``strict`` (the default) raises ``ReplayDivergence`` at the first call the recording does not
    answer; ``strict=False`` keeps it in ``divergences`` and answers by the caller's order.
    """

    match: Match = "request"
    strict: bool = True
    _book: CallBook = PrivateAttr()
    _redact: Redactor = PrivateAttr()
    _compares: bool = PrivateAttr(default=False)

    def __init__(self, calls: Sequence[RecordedCall], *, match: Match = "request", strict: bool = True,
                 redact: Redactor | bool | None = None, **kwargs: Any) -> None:
        if match not in MATCHES:
            raise ValueError(f"match must be 'request' or 'order', got {match!r}")
        super().__init__(match=match, strict=strict, **kwargs)  # type: ignore[call-arg]  # pydantic fields
        self._book = CallBook(calls, match=match, strict=strict)
        self._redact = resolve_redactor(redact)
        self._compares = any(call.request is not None for call in self._book.calls)
        if match == "request" and self._book.calls and not self._compares:
            raise ValueError("match='request' needs the runs' recorded requests, and none of their "
                             "model calls has one (journaled with record_requests=False, or before "
                             "requests were recorded): use match='order'")
        if isinstance(self.callbacks, BaseCallbackManager):
            self.callbacks.add_handler(CallStarts(), inherit=False)
        else:
            self.callbacks = [*(self.callbacks or []), CallStarts()]

    @classmethod
    async def from_store(cls, store: RunEventStore, thread_id: str, run_id: str | Sequence[str], *,
                         match: Match = "request", strict: bool = True,
                         redact: Redactor | bool | None = None) -> RecordedChatModel:
        """The model calls of run ``run_id`` of ``thread_id`` (or of several runs, answered in the
        order given: an interrupted run, then the run that resumed it). ``redact`` is the redaction
        the runs were journaled with (the journal's default when None), applied to incoming requests
        before they are compared with the recorded ones."""
        run_ids = [run_id] if isinstance(run_id, str) else list(run_id)
        if not run_ids:
            raise ValueError("run_id names no run")
        calls = await read_recorded_calls(store, thread_id, run_ids)
        if not calls and all([await store.get_run(run) is None for run in run_ids]):
            raise LookupError(f"no run {', '.join(map(repr, run_ids))} in thread {thread_id!r}")
        return cls(calls, match=match, strict=strict, redact=redact)

    # -- what the replay used ------------------------------------------------------------------------
    @property
    def recorded_calls(self) -> tuple[RecordedCall, ...]:
        return self._book.calls

    @property
    def divergences(self) -> list[CallDivergence]:
        """Every divergence so far, raised or not, in order."""
        return list(self._book.divergences)

    @property
    def unused_calls(self) -> tuple[RecordedCall, ...]:
        """Recorded calls no call of the replay was answered with."""
        return self._book.unused

    @property
    def answered(self) -> int:
        """How many calls of the replay were answered."""
        return len(self._book.answers)

    # -- LangChain -----------------------------------------------------------------------------------
    @property
    def _llm_type(self) -> str:
        return "recorded-chat-model"

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        # No provider of its own: the journal reads each reply's recorded provider instead.
        params = LangSmithParams(ls_model_type="chat")
        if stop:
            params["ls_stop"] = stop
        return params

    def bind_tools(self, tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool], *,
                   tool_choice: str | None = None, **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        schemas = [convert_to_openai_tool(tool) for tool in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=schemas, **kwargs)

    def with_structured_output(self, schema: dict[str, Any] | type, *, include_raw: bool = False,
                               **kwargs: Any) -> Runnable[LanguageModelInput, dict[str, Any] | BaseModel]:
        """The recorded reply read as ``schema``: its tool call of the schema's name (how LangChain
        asks for structured output by tool calling), else its text as JSON (a provider's JSON mode)."""
        kwargs.pop("method", None)
        kwargs.pop("strict", None)
        if kwargs:
            raise ValueError(f"unsupported arguments: {', '.join(sorted(kwargs))}")
        tool = convert_to_openai_tool(schema)
        bound = self.bind_tools([schema], tool_choice="any", ls_structured_output_format={
            "kwargs": {"method": "function_calling"}, "schema": tool})
        parse = RunnableLambda(lambda message: structured_value(message, schema, tool["function"]["name"]))
        if not include_raw:
            return bound | parse
        parsed = RunnablePassthrough.assign(parsed=itemgetter("raw") | parse, parsing_error=lambda _: None)
        unparsed = RunnablePassthrough.assign(parsed=lambda _: None)
        return RunnableMap(raw=bound) | parsed.with_fallbacks([unparsed], exception_key="parsing_error")

    def _recorded(self, start: CallStart | None, messages: list[BaseMessage], kwargs: dict[str, Any]
                  ) -> RecordedCall:
        request = None
        if self._compares:  # compared as the journal saw the call start, when this model saw it too
            shown = start.messages if start is not None and start.messages is not None else messages
            params = start.params if start is not None and start.params is not None else kwargs
            request = incoming_request(shown, params, self._redact)
        call = self._book.answer(caller_of(start), request)
        if call.failed:
            raise recorded_error(call)
        return call

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        return chat_result(self._recorded(_start_of(run_manager), messages, kwargs))

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None,
                         **kwargs: Any) -> ChatResult:
        return chat_result(self._recorded(_start_of(run_manager), messages, kwargs))

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        yield from chunks(self._recorded(_start_of(run_manager), messages, kwargs))

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in chunks(self._recorded(_start_of(run_manager), messages, kwargs)):
            yield chunk


def _start_of(run_manager: CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | None
              ) -> CallStart | None:
    """The call's start as this model's callback noted it (a streamed call is not given its run
    manager), else from its run manager."""
    noted = started_call()
    if run_manager is None or (noted is not None and noted.run_id == run_manager.run_id):
        return noted
    return CallStart(run_manager.run_id, tuple(run_manager.tags), dict(run_manager.metadata))


def structured_value(message: AIMessage, schema: dict[str, Any] | type, name: str) -> Any:
    """``schema``'s value in a reply: its tool call named ``name``, else its text as JSON."""
    call = next((c for c in message.tool_calls if c["name"] == name), None)
    if call is not None:
        value: Any = call["args"]
    else:
        text = message.text if isinstance(message.text, str) else str(message.content)
        try:
            value = json.loads(text)
        except ValueError:
            raise ValueError(f"the recorded reply holds no {name!r} tool call and no JSON text "
                             f"to read as structured output: {text[:80]!r}") from None
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema.model_validate(value)
    return value
