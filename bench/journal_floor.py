"""The floor under bench_journal's targets: what the work issue 4 requires costs on its own.

``FloorHandler`` writes the same events and the same run row as ``RunJournal`` for
``bench_journal``'s turn (checked below, field by field, before anything is timed) with the same
helpers (message payloads, redaction, usage, previews, digests, ``NewEvent``, ``RunRow``), but with
none of what makes a journal safe to ship: no lock, no guard around callbacks, no writer (one
``put_run_close`` at ``aclose()``: no batching by time, no retries, no backpressure, no row updates
during the run), and only the happy path of this one turn (no errors, interrupts, resumes, repeated
ends, subagents). ``TuplesHandler`` goes further down: the message dumps and the eight events as
tuples of JSON text in a list, nothing stored.

Same process, variants interleaved, median per turn over the no-op ``run_inline`` handler:

    .venv/bin/python bench/journal_floor.py [--turns 400] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from run_journal import RunJournal, open_store
from run_journal.journal import payloads as p
from run_journal.catalog import EVENTS
from run_journal.envelope import NewEvent, Normalized, new_event_id, utc_now
from run_journal.redact import redact_secrets
from run_journal.runs import RunRow, RunStatus
from run_journal.stores.base import RunEventStore
from run_journal.usage import RunTally, cap_text, extract_usage, model_name_of

sys.path.insert(0, str(Path(__file__).parent))
from bench_journal import NoOp, build_graph  # the benchmark's own turn and baseline


def _ai_message(response: LLMResult) -> AIMessage:
    """The one reply of the bench's fake chat model."""
    generation = response.generations[0][0]
    assert isinstance(generation, ChatGeneration)
    assert isinstance(generation.message, AIMessage)
    return generation.message


class FloorHandler(BaseCallbackHandler):
    """RunJournal's output for this turn, computed as directly as the helpers allow (see above)."""

    run_inline = True

    def __init__(self, store: RunEventStore, thread_id: str) -> None:
        self.store, self.thread_id, self.run_id = store, thread_id, new_event_id()
        self.events: list[NewEvent] = []
        self.payloads: dict[str, tuple[BaseMessage, Normalized]] = {}
        self.tally = RunTally()
        self.root: uuid.UUID | None = None
        self.models: dict[uuid.UUID, tuple[str, str | None, int, float]] = {}
        self.tools: dict[uuid.UUID, tuple[str, str, str, float]] = {}
        self.baseline: set[str] | None = None
        self.llm_index = self.input_count = 0

    def _event(self, event_type: str, content: Any, metadata: dict[str, Any], created: Any = None) -> None:
        self.events.append(NewEvent._checked_by_producer(
            self.thread_id, self.run_id, event_type, EVENTS[event_type].category, content, metadata,
            created or utc_now(), None,
        ))

    def _payload(self, message: BaseMessage) -> Normalized:
        cached = self.payloads.get(message.id) if message.id else None
        if cached is None or cached[0] is not message:
            cached = (message, p.message_payload(message, redact_secrets))
            if message.id:
                self.payloads[message.id] = cached
        return cached[1]

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: uuid.UUID,
                       parent_run_id: uuid.UUID | None = None, tags: list[str] | None = None,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if parent_run_id is not None:
            first_node = self.baseline is None and parent_run_id == self.root
            messages = inputs.get("messages") if first_node else None
            if isinstance(messages, list):
                self.baseline = {m.id for m in messages[: max(0, len(messages) - self.input_count)]}
            return
        self.root, self.started_at, self.started = run_id, utc_now(), time.monotonic()
        self.caller, self.name = p.caller_of(tags), str(kwargs.get("name"))
        user_meta = {k: v for k, v in (metadata or {}).items() if k not in p.LANGGRAPH_KEYS}
        self._event(
            "run.start",
            {"run_name": self.name, "input_preview": p.input_preview(inputs), "resumed_from": None},
            {"caller": self.caller, "langgraph": p.bounded(redact_secrets(p.langgraph_identity(metadata))),
             "tags": list(tags or []), "run_metadata": p.bounded(redact_secrets(user_meta)),
             "resumed_from": None},
            self.started_at,
        )
        messages = p.input_messages(inputs)
        self.input_count = len(messages)
        human = next(m for m in messages if p.is_visible_human(m))
        self.tally.messages += 1
        self.tally.first_human = cap_text(p.message_text(human))
        self._event("llm.human.input", self._payload(human), {"caller": self.caller, "message_id": human.id})

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: uuid.UUID,
                            tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                            **kwargs: Any) -> None:
        params = kwargs.get("invocation_params") or {}
        model = params.get("model_name") or params.get("model") or (metadata or {}).get("ls_model_name")
        self.models[run_id] = (p.caller_of(tags), model, self.llm_index, time.monotonic())
        self.llm_index += 1

    def on_llm_end(self, response: LLMResult, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        caller, asked, index, started = self.models.pop(run_id)
        message = _ai_message(response)
        model, usage = model_name_of(response, asked), extract_usage(response)
        priced = self.tally.add_call(caller, model, usage)
        self.tally.messages += 1
        if text := p.message_text(message):
            self.tally.last_ai = cap_text(text)
        self._event("llm.ai.response", self._payload(message), {
            "caller": caller, "llm_call_index": index, "model_name": model,
            "usage": usage.to_dict() if usage else None, "cost_usd": priced.cost_usd,
            "latency_ms": int((time.monotonic() - started) * 1000), "time_to_first_token_ms": None,
            "message_id": message.id,
        })
        for call in message.tool_calls:
            preview, cut = p.args_preview(call["args"], redact_secrets)
            self._event(
                "tool.call",
                {"tool_call_id": call["id"], "tool_name": call["name"], "args_preview": preview,
                 "args_truncated": cut},
                {"caller": caller, "tool_call_id": call["id"], "llm_call_index": index},
            )

    def on_tool_start(self, serialized: Any, input_str: str, *, run_id: uuid.UUID,
                      tags: list[str] | None = None, **kwargs: Any) -> None:
        self.tools[run_id] = (serialized["name"], kwargs["tool_call_id"], p.caller_of(tags), time.monotonic())
        self.tally.tool_calls += 1

    def on_tool_end(self, output: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        name, call_id, caller, started = self.tools.pop(run_id)
        for message in p.tool_messages(output):
            self.tally.messages += 1
            self._event("llm.tool.result", self._payload(message), {
                "caller": caller, "tool_call_id": message.tool_call_id,
                "tool_name": message.name or name, "status": message.status,
            })
        size, digest = p.result_digest(output)
        self._event("tool.outcome", {
            "tool_call_id": call_id, "tool_name": name, "outcome": "success",
            "duration_ms": int((time.monotonic() - started) * 1000), "result_size": size,
            "result_sha256": digest,
        }, {"caller": caller, "tool_call_id": call_id})

    def on_chain_end(self, outputs: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        if run_id != self.root:
            return
        produced, truncated, keys = p.produced_messages(outputs, self.baseline, redact_secrets, self._payload)
        self.ended_at = utc_now()
        self._event("run.end", p.end_content(produced, truncated, keys), {
            "status": "success", "duration_ms": int((time.monotonic() - self.started) * 1000),
            "caller": self.caller,
        }, self.ended_at)

    async def aclose(self) -> None:
        row = RunRow(
            run_id=self.run_id, thread_id=self.thread_id, status=RunStatus.SUCCESS,
            started_at=self.started_at, ended_at=self.ended_at,
            metadata={"run_name": self.name, "caller": self.caller}, **self.tally.row_fields(),
        )
        await self.store.put_run_close(self.events[:-1], self.events[-1], row)


class TuplesHandler(BaseCallbackHandler):
    """Below the floor: the four message dumps and eight events as JSON text in a list."""

    run_inline = True

    def __init__(self, store: RunEventStore, thread_id: str) -> None:
        self.events: list[tuple[str, str]] = []
        self.root: uuid.UUID | None = None

    def _add(self, event_type: str, content: Any) -> None:
        self.events.append((event_type, json.dumps(content)))

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: uuid.UUID,
                       parent_run_id: uuid.UUID | None = None, **kwargs: Any) -> None:
        if parent_run_id is None:
            self.root = run_id
            self._add("run.start", {"run_name": kwargs.get("name")})
            self._add("llm.human.input", inputs["messages"][-1].model_dump())

    def on_llm_end(self, response: LLMResult, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        message = _ai_message(response)
        self._add("llm.ai.response", message.model_dump())
        for call in message.tool_calls:
            self._add("tool.call", call)

    def on_tool_end(self, output: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        self._add("llm.tool.result", output.model_dump())
        self._add("tool.outcome", {"tool_call_id": output.tool_call_id})

    def on_chain_end(self, outputs: Any, *, run_id: uuid.UUID, **kwargs: Any) -> None:
        if run_id == self.root:
            self._add("run.end", {"messages": len(outputs["messages"])})

    async def aclose(self) -> None:
        return None


VOLATILE = {"id", "message_id", "duration_ms", "latency_ms", "run_id", "event_id", "created_at",
            "started_at", "ended_at", "updated_at", "thread_id"}


def comparable(value: Any) -> Any:
    """``value`` with what differs between two runs of the same turn (ids, clocks) blanked."""
    if isinstance(value, dict):
        return {key: "*" if key in VOLATILE else comparable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [comparable(item) for item in value]
    return value


async def same_output(store: RunEventStore, graph: Any) -> None:
    """Refuse to time a floor that does less than the journal: same events, same row."""
    recorded = []
    for thread, kind in (("same-journal", RunJournal), ("same-floor", FloorHandler)):
        handler = kind(store, thread_id=thread)
        await graph.ainvoke({"messages": [HumanMessage("what is 1+2?")]}, {"callbacks": [handler]})
        await handler.aclose()
        events = await store.list_events(thread)
        row = await store.get_run(events[0].run_id)
        assert row is not None
        recorded.append(([(e.event_type, comparable(e.content), comparable(e.metadata)) for e in events],
                         comparable(row.to_dict())))
    if recorded[0] != recorded[1]:
        raise SystemExit(f"the floor's output differs from RunJournal's:\n{recorded[0]}\n{recorded[1]}")


async def main(turns: int) -> None:
    graph = build_graph()
    with tempfile.TemporaryDirectory() as tmp:
        async with open_store("memory://") as memory, \
                open_store(f"sqlite:///{Path(tmp) / 'floor.db'}") as sqlite:
            await same_output(memory, graph)
            variants: dict[str, Any] = {
                "no-op handler": None,
                "tuples in a list": (TuplesHandler, memory),
                "floor, memory": (FloorHandler, memory),
                "RunJournal, memory": (RunJournal, memory),
                "floor, SQLite": (FloorHandler, sqlite),
                "RunJournal, SQLite": (RunJournal, sqlite),
            }
            times: dict[str, list[float]] = {name: [] for name in variants}

            async def turn(name: str, index: int) -> None:
                inputs = {"messages": [HumanMessage("what is 1+2?")]}
                started = time.perf_counter()
                if variants[name] is None:
                    await graph.ainvoke(inputs, {"callbacks": [NoOp()]})
                else:
                    kind, store = variants[name]
                    handler = kind(store, thread_id=f"{index}-{name}")
                    await graph.ainvoke(inputs, {"callbacks": [handler]})
                    await handler.aclose()
                times[name].append(time.perf_counter() - started)

            names = list(variants)
            for index in range(-20, turns):
                if index == 0:
                    for values in times.values():
                        values.clear()
                shift = index % len(names)
                for name in names[shift:] + names[:shift]:
                    await turn(name, index)
    base = statistics.median(times["no-op handler"])
    print(f"turns per variant: {turns}; the floor writes what RunJournal writes (checked)")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:>20}: {median * 1000:7.3f} ms/turn  +{(median - base) * 1e6:5.0f} us  "
              f"{median / base:5.3f}x")
    print("targets (issue 4): RunJournal on memory <= 1.10x, on SQLite <= 1.25x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--quick", action="store_true", help="40 turns per variant")
    args = parser.parse_args()
    asyncio.run(main(40 if args.quick else args.turns))
