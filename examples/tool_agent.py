"""A tool-calling agent (LangGraph's prebuilt ReAct agent) with its usage and cost from a pricing table.

The journal adds up every model call's token usage into the run row, per model and per caller, and
prices it with the ``pricing`` table you pass (USD per million tokens). A model missing from the
table has ``cost_usd`` None: unknown is not free.

    python examples/tool_agent.py
"""

from __future__ import annotations

import asyncio
import warnings

from _models import FAKE_MODEL_NAME, chat_model, reply
from langchain_core.tools import tool

from run_journal import RunJournal, open_store

with warnings.catch_warnings():
    # LangGraph 1.x points to langchain.agents.create_agent; the prebuilt agent still works the same.
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent

PRICING = {FAKE_MODEL_NAME: {"input": 2.50, "output": 10.00, "cache_read": 1.25}}
"""USD per million tokens, keyed by the model name the provider reports."""


@tool
def lookup_order(order_id: str) -> str:
    """Find an order's status."""
    return f"order {order_id}: shipped on 2024-05-02, arriving Friday"


@tool
def refund_policy(days: int) -> str:
    """Whether an order is still refundable after this many days."""
    return "refundable" if days <= 30 else "not refundable"


SCRIPT = [
    reply("Let me look that up.", input_tokens=1200, output_tokens=40, tool_calls=[
        {"name": "lookup_order", "args": {"order_id": "A-1001"}, "id": "call-1"},
        {"name": "refund_policy", "args": {"days": 12}, "id": "call-2"},
    ]),
    reply("Order A-1001 shipped on 2024-05-02 and arrives Friday; it is still refundable.",
          input_tokens=1350, output_tokens=60),
]


async def main() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = create_react_agent(chat_model(SCRIPT), [lookup_order, refund_policy])
    async with open_store("sqlite:///journal.db") as store:
        async with RunJournal(store, pricing=PRICING, user_id="customer-42") as journal:
            config = {"callbacks": [journal], "configurable": {"thread_id": "support-1"}}
            result = await agent.ainvoke({"messages": [("user", "Where is order A-1001?")]}, config)
        print("answer:", result["messages"][-1].content)

        row = await store.get_run(journal.run_id)
        assert row is not None
        print(f"run {row.run_id} status {row.status}")
        print(f"tool calls {row.tool_call_count} ({row.tool_error_count} failed), "
              f"messages {row.message_count}")
        usage = row.usage
        print(f"tokens: {usage.input_tokens} input + {usage.output_tokens} output = {usage.total_tokens} "
              f"in {usage.llm_calls} model calls")
        print(f"cost: ${usage.cost_usd:.6f}")
        for model, totals in row.usage_by_model.items():
            print(f"  by model {model}: {totals.total_tokens} tokens ${totals.cost_usd:.6f}")
        for caller, totals in row.usage_by_caller.items():
            print(f"  by caller {caller}: {totals.total_tokens} tokens")
        outcomes = await store.list_events(journal.thread_id, journal.run_id, event_types=["tool.outcome"])
        for event in outcomes:
            print(f"  seq {event.seq}: {event.content['tool_name']} -> {event.content['outcome']}")


if __name__ == "__main__":
    asyncio.run(main())
