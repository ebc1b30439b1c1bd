"""Run ids are not silently reused: a second journaled run under a run id that has a run is refused.

Rerunning a script with a fixed ``run_id`` used to append the second run into the first one (two
``run.start`` events, one row overwritten). Now the store refuses the second run's first batch before
anything of it is written, the journal reports it at once (a ``ValueError`` is not retried) as a
``JournalError`` naming the run id, and the first run stays exactly as it was, on every backend.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage

from run_journal import JournalError, RetryPolicy, RunJournal, open_store
from run_journal.testing import read_all

from ._support import agent_graph

pytestmark = pytest.mark.reliability


def run_graph() -> object:
    return agent_graph([AIMessage("the answer")], [])


async def test_a_second_run_under_a_used_run_id_is_refused_and_the_first_is_untouched(store_url: str) -> None:
    async with open_store(store_url) as store:
        first = RunJournal(store, thread_id="t1", run_id="fixed")
        await agent_graph([AIMessage("first answer")], []).ainvoke(
            {"messages": [("user", "first")]}, config={"callbacks": [first]})
        await first.aclose()
        kept = [event.to_dict() for event in await read_all(store, "t1")]
        kept_row = await store.get_run("fixed")
        assert kept_row is not None
        assert kept_row.status == "success"
        for thread_id in ("t1", "t2"):  # the same thread (a rerun), and another one
            second = RunJournal(store, thread_id=thread_id, run_id="fixed",
                                retry=RetryPolicy(attempts=4, initial_delay=0.01))
            await agent_graph([AIMessage("second answer")], []).ainvoke(
                {"messages": [("user", "second")]}, config={"callbacks": [second]})
            with pytest.raises(JournalError, match="run id 'fixed' is already used by another run"):
                await second.aclose()
            assert second.stats.retried == 0  # refused at once, not retried
            assert second.stats.written == 0
        assert [event.to_dict() for event in await read_all(store, "t1")] == kept
        assert await read_all(store, "t2") == []
        assert await store.get_run("fixed") == kept_row
        print(f"run id reuse, {store_url.split(':', maxsplit=1)[0]}: 2 second runs refused, "
              f"{len(kept)} events of the first run untouched, 0 written twice")
