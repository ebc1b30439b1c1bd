"""Record an agent's run, then replay it as a regression test: no model is called the second time.

The first part journals a support agent's run into ``journal.db``. The replay builds the agent again
with a ``RecordedChatModel`` in place of the real model: every model call is answered with the reply
the recorded run got (text, tool calls, token usage), while the tools run for real, so the replay
tests today's code against yesterday's model decisions. ``assert_replays`` raises unless the replayed
run has the recorded trajectory (model calls, tool calls with arguments and results, final answer,
status) and the same usage.

Then the refund policy changes (a tool now answers differently) and the replay says where the run
went differently. Run it as a script, or as a test with pytest (``pytest examples/replay_test.py``):

    python examples/replay_test.py
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.tools import tool

from run_journal import RunJournal, open_store
from run_journal.replay import replay_run
from run_journal.testing import ScriptedChatModel, assert_replays, reply

SCRIPT_PATH = Path(__file__).resolve()
THREAD = "support-7"
PRICING = {"fake-gpt": {"input": 2.50, "output": 10.00}}
REFUND_DAYS = [30]
"""How many days an order stays refundable (the policy the ``refund_policy`` tool applies)."""


@tool
def lookup_order(order_id: str) -> str:
    """Find an order's status."""
    return f"order {order_id}: delivered 12 days ago"


@tool
def refund_policy(days: int) -> str:
    """Whether an order is still refundable after this many days."""
    return "refundable" if days <= REFUND_DAYS[-1] else "not refundable"


def build_agent(model: Any) -> Any:
    """The agent under test, on any chat model: the real one, or the replay's."""
    return create_agent(model, [lookup_order, refund_policy],
                        system_prompt="You are a support agent. Check the refund policy before answering.")


SCRIPT = [
    reply(tool_calls=[("lookup_order", {"order_id": "A-1001"}, "call-1")], input_tokens=320,
          output_tokens=18),
    reply(tool_calls=[("refund_policy", {"days": 12}, "call-2")], input_tokens=380, output_tokens=15),
    reply("Order A-1001 was delivered 12 days ago and can still be refunded.", input_tokens=430,
          output_tokens=22),
]
"""What the model answered when the run was recorded (a real model in production)."""


async def record(store: Any) -> str:
    """Journal one run of the agent; its run id."""
    async with RunJournal(store, thread_id=THREAD, pricing=PRICING) as journal:
        await build_agent(ScriptedChatModel(SCRIPT)).ainvoke(
            {"messages": [("user", "Can I still return order A-1001?")]}, {"callbacks": [journal]})
    return journal.run_id


async def check(url: str) -> None:
    async with open_store(url) as store:
        run_id = await record(store)
        print(f"recorded run {run_id} on thread {THREAD}")

        result = await assert_replays(store, THREAD, run_id, build_agent, pricing=PRICING)
        (replayed,) = result.runs
        row = replayed.replayed_row
        assert row is not None
        print(f"replayed: {result.report().splitlines()[0].split(': ', 1)[1]}; "
              f"{row.usage.llm_calls} model calls, {row.usage.total_tokens} tokens, no model called")

        REFUND_DAYS.append(7)  # the policy changed since the run was recorded
        try:
            changed = await replay_run(store, THREAD, run_id, build_agent, pricing=PRICING)
        finally:
            REFUND_DAYS.pop()
        print("after the policy change:")
        print("  " + "\n  ".join(changed.report().splitlines()))
        assert not changed.same

        print("replay it from the command line:")
        print(f"  run-journal {url} replay {run_id} --graph {SCRIPT_PATH}:build_agent")


def test_the_recorded_run_replays_the_same_way(tmp_path: Path) -> None:
    asyncio.run(check(f"sqlite:///{tmp_path / 'journal.db'}"))


if __name__ == "__main__":
    sys.exit(asyncio.run(check("sqlite:///journal.db")))
