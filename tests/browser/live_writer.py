"""A run that is still going while the browser watches: run as its own process by the viewer tests.

    python live_writer.py STORE_URL GO_FILE

Journals one tool turn in thread ``live`` (run ``live-run``); the tool waits until ``GO_FILE`` exists,
so everything before it is in the store (the journal flushes every 50 ms) while the run is
``running``. Then the tool answers, the model replies and the run ends.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from langchain_core.tools import tool

from run_journal import RunJournal, open_store

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the shared test tools
sys.path.insert(0, str(Path(__file__).resolve().parent))
from recorded import PRICING, reply, tool_loop  # type: ignore[import-not-found]  # a script: found beside it


async def main(url: str, go: Path) -> None:
    @tool
    async def wait_for_approval(request: str) -> str:
        """Wait until a person approves the request."""
        while not await asyncio.to_thread(go.exists):  # noqa: ASYNC110 - another process makes the file
            await asyncio.sleep(0.05)
        return f"approved: {request}"

    graph = tool_loop([
        reply("Asking for approval first.", ("wait_for_approval", {"request": "deploy v2"}, "call-1")),
        reply("Approved; deploying v2 now."),
    ], [wait_for_approval])
    async with open_store(url) as store, RunJournal(store, thread_id="live", run_id="live-run",
                                                    pricing=PRICING, flush_interval=0.05) as journal:
        await graph.ainvoke({"messages": [("user", "Deploy v2 once it is approved.")]},
                            {"callbacks": [journal]})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
