"""LangChain v1 ``create_agent`` with middleware, journaled: who did what, and what each hook changed.

The agent summarizes long conversations with a cheaper model (``SummarizationMiddleware``) and caps
its model calls (``ModelCallLimitMiddleware``). The journal attributes the summarizer's call to
``middleware:summarization`` (its tokens in their own bucket, kept out of thread history), writes a
``middleware:<tag>`` event for every hook that changed the agent's state, and takes the turn's human
input from the last message of the conversation the caller passed in.

    python examples/agent_middleware.py
"""

from __future__ import annotations

import asyncio
import uuid

from _models import chat_model, reply
from langchain.agents import create_agent
from langchain.agents.middleware import ModelCallLimitMiddleware, SummarizationMiddleware
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from run_journal import RunJournal, open_store
from run_journal.projections import thread_history


@tool
def convert(amount: float, currency: str) -> str:
    """Convert an amount of euros to another currency."""
    return f"{amount * 1.08:.2f} {currency}"


AGENT_SCRIPT = [
    reply("", tool_calls=[{"name": "convert", "args": {"amount": 120, "currency": "USD"}, "id": "c1"}]),
    reply("120 EUR is 129.60 USD.", output_tokens=9),
]
SUMMARIZER_SCRIPT = [reply("The user plans a trip to New York and thinks in euros.", input_tokens=300)] * 3


async def main() -> None:
    agent = create_agent(
        chat_model(AGENT_SCRIPT),
        [convert],
        middleware=[
            SummarizationMiddleware(model=chat_model(SUMMARIZER_SCRIPT), trigger=("messages", 4),
                                    keep=("messages", 2)),
            ModelCallLimitMiddleware(run_limit=5),
        ],
    )
    conversation = [  # a stateless caller passes the whole conversation every turn
        HumanMessage("I am planning a trip."), AIMessage("Where to?"),
        HumanMessage("New York. Prices are in euros for me."), AIMessage("Noted."),
        HumanMessage("How much is 120 EUR in dollars?"),
    ]
    thread = f"middleware-{uuid.uuid4().hex[:8]}"
    async with open_store("sqlite:///journal.db") as store:
        async with RunJournal(store, thread_id=thread) as journal:
            await agent.ainvoke({"messages": conversation}, {"callbacks": [journal]})
        row = await store.get_run(journal.run_id)
        assert row is not None
        print("human input:", row.first_human_message)
        print("last answer:", row.last_ai_message)
        for caller, totals in sorted(row.usage_by_caller.items()):
            print(f"tokens by {caller}: {totals.total_tokens} in {totals.llm_calls} call(s)")
        for event in await store.list_events(thread, event_types=["middleware:summarization",
                                                                  "middleware:model_call_limit"]):
            content = event.content
            changes = {k: v for k, v in content["changes"].items() if not k.startswith("preview")}
            print(f"{event.event_type}: {content['hook']} {content['action']} {changes}")
        page = await thread_history(store, thread)
        print("thread history:", [event.event_type for event in page.data])


if __name__ == "__main__":
    asyncio.run(main())
