"""Journal a run into memory and look at what was recorded, in your own tests (no pytest needed).

``capture_run()`` is to the journal what structlog's ``capture_logs()`` is to logging: a memory store
and a ``RunJournal`` on it, closed when the block ends, after which the events and the run row are
plain attributes::

    with capture_run(thread_id="t1") as run:
        graph.invoke(inputs, run.config)
    assert run.status == "success"
    assert "tool.call" in run.event_types

    async with capture_run() as run:           # the same in async code
        await graph.ainvoke(inputs, run.config)

``ScriptedChatModel`` and ``reply()`` give the graph a model that answers from a script, with the
token usage and model name a provider reports, and accepts ``bind_tools`` (so ``create_agent`` and
``create_react_agent`` take it). ``model.received`` lists the messages of each call it answered, and
``model.tools_offered`` the tools of each (OpenAI tool format), to compare with what was journaled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from run_journal.envelope import RunEvent
from run_journal.journal import AsyncRunJournal, RunJournal
from run_journal.runs import RunRow
from run_journal.stores.memory import MemoryRunEventStore
from run_journal.writer import writer_thread

T = TypeVar("T")


class CapturedRun:
    """One journaled run in a memory store: ``journal`` and ``config`` while the block runs; ``events``,
    ``row`` and their shortcuts once it ended (the journal is closed then)."""

    def __init__(self, **options: Any) -> None:
        self.store = MemoryRunEventStore()
        self._options = options
        self.journal: RunJournal | None = None
        self.events: list[RunEvent] = []
        """Every event of the run, in seq order (after the block)."""
        self.row: RunRow | None = None
        """The stored run row (after the block)."""

    @property
    def config(self) -> dict[str, Any]:
        """``{"callbacks": [journal]}``: pass it (or merge it into yours) to ``invoke`` / ``ainvoke``."""
        if self.journal is None:
            raise RuntimeError("the run is captured inside 'with capture_run() as run:' only")
        return {"callbacks": [self.journal]}

    @property
    def event_types(self) -> list[str]:
        return [event.event_type for event in self.events]

    @property
    def status(self) -> str | None:
        return None if self.row is None else self.row.status

    def of_type(self, *event_types: str) -> list[RunEvent]:
        return [event for event in self.events if event.event_type in event_types]

    # -- sync ------------------------------------------------------------------------------------
    def __enter__(self) -> Self:
        self.journal = RunJournal(self.store, **self._options)
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        assert self.journal is not None
        self.journal.close()
        self._read(self._on_writer_thread)

    @staticmethod
    def _on_writer_thread(coroutine: Coroutine[Any, Any, T]) -> T:
        """A read of the store, on the loop it lives on (a sync journal's: the writer thread's)."""
        return asyncio.run_coroutine_threadsafe(coroutine, writer_thread().loop).result()

    # -- async -----------------------------------------------------------------------------------
    async def __aenter__(self) -> Self:
        self.journal = AsyncRunJournal(self.store, **self._options)
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        assert self.journal is not None
        await self.journal.aclose()
        thread_id, run_id = self.journal.thread_id, self.journal.run_id
        if thread_id is not None:
            self.events = await self.store.list_events(thread_id, run_id, limit=10_000)
        self.row = await self.store.get_run(run_id)

    def _read(self, run: Any) -> None:
        assert self.journal is not None
        thread_id, run_id = self.journal.thread_id, self.journal.run_id
        if thread_id is not None:
            self.events = run(self.store.list_events(thread_id, run_id, limit=10_000))
        self.row = run(self.store.get_run(run_id))


def capture_run(**journal_options: Any) -> CapturedRun:
    """A memory store and a journal for one run: ``with capture_run() as run:`` (or ``async with``).
    ``journal_options`` are ``RunJournal``'s (``thread_id``, ``pricing``, ``redact``, ...)."""
    return CapturedRun(**journal_options)


class ScriptedChatModel(GenericFakeChatModel):
    """A chat model answering each call with the next message of its script (``reply()`` builds
    them). ``bind_tools`` binds the tools (in OpenAI tool format) as a provider's model does, so a
    call's invocation parameters list them; the script already holds the tool calls.

    ``received``: the messages of each call, in call order; ``tools_offered``: the tools each call
    was given (an empty list when none)."""

    received: list[list[BaseMessage]] = Field(default_factory=list)
    tools_offered: list[list[dict[str, Any]]] = Field(default_factory=list)

    def __init__(self, script: Sequence[AIMessage], **kwargs: Any) -> None:
        super().__init__(messages=iter(list(script)), **kwargs)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        self.received.append(list(messages))
        self.tools_offered.append(list(kwargs.get("tools") or []))
        return super()._generate(messages, stop, run_manager, **kwargs)


def reply(text: str = "", *, tool_calls: Sequence[tuple[str, dict[str, Any], str]] = (),
          input_tokens: int = 40, output_tokens: int = 12, model: str = "fake-gpt") -> AIMessage:
    """One scripted model response with the usage and model name a provider would report;
    ``tool_calls`` are ``(name, args, call_id)``."""
    return AIMessage(
        content=text,
        tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}
                    for name, args, call_id in tool_calls],
        usage_metadata={"input_tokens": input_tokens, "output_tokens": output_tokens,
                        "total_tokens": input_tokens + output_tokens},
        response_metadata={"model_name": model},
    )
