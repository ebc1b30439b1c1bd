"""Workspace changes captured around a run that writes files, then the review projection printed.

Take a ``WorkspaceSnapshot`` of the agent's folder before the run and record the difference after it:
one ``workspace_changes`` event lists the files created, modified and deleted, with bounded unified
diffs (secrets such as ``.env`` are listed with their path, status and size only: no content, no
hash). A reviewer reads it back with ``latest_workspace_changes``. The workspace here is
``./workspace`` under the current directory.

    python examples/workspace_changes.py
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from _models import chat_model, reply
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from run_journal import RunJournal, WorkspaceSnapshot, arecord_workspace_changes, open_store
from run_journal.projections import latest_workspace_changes

WORKSPACE = Path("workspace")


@tool
def write_file(path: str, text: str) -> str:
    """Write a text file in the workspace."""
    target = WORKSPACE / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return f"wrote {len(text)} characters to {path}"


@tool
def delete_file(path: str) -> str:
    """Delete a file from the workspace."""
    (WORKSPACE / path).unlink()
    return f"deleted {path}"


def build_graph() -> Any:
    model = chat_model([
        reply("Updating the project.", tool_calls=[
            {"name": "write_file", "args": {"path": "app.py", "text": "print('hello, world')\n"}, "id": "c1"},
            {"name": "write_file", "args": {"path": "README.md", "text": "# Demo\n\nRun app.py.\n"},
             "id": "c2"},
            {"name": "write_file", "args": {"path": ".env", "text": "API_KEY=not-a-real-key\n"}, "id": "c3"},
            {"name": "delete_file", "args": {"path": "notes.txt"}, "id": "c4"},
        ]),
        reply("Done: app.py now greets the world, README.md explains it, notes.txt is gone."),
    ]).bind_tools([write_file, delete_file])

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([write_file, delete_file]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


def prepare_workspace() -> None:
    """The files the agent finds when it starts (the same every time the example runs)."""
    WORKSPACE.mkdir(exist_ok=True)
    for created_by_the_agent in ("README.md", ".env"):  # left over from an earlier run
        (WORKSPACE / created_by_the_agent).unlink(missing_ok=True)
    (WORKSPACE / "app.py").write_text("print('hello')\n", encoding="utf-8")
    (WORKSPACE / "notes.txt").write_text("remember to write the README\n", encoding="utf-8")


async def main() -> None:
    await asyncio.to_thread(prepare_workspace)

    async with open_store("sqlite:///journal.db") as store:
        async with RunJournal(store, thread_id="workspace-1") as journal:
            before = await WorkspaceSnapshot.acapture(WORKSPACE)
            await build_graph().ainvoke({"messages": [("user", "Make app.py greet the world.")]},
                                        {"callbacks": [journal]})
            payload = await arecord_workspace_changes(journal, before)
        print("recorded:", "nothing changed" if payload is None else payload["summary"])

        review = await latest_workspace_changes(store, "workspace-1", journal.run_id)
        print(f"review of run {journal.run_id}: seq {review['seq']}, {review['summary_text']}")
        for entry in review["workspace_changes"]["files"]:
            flags = [name for name in ("sensitive", "binary", "truncated") if entry[name]]
            print(f"  {entry['status']:<8} {entry['path']:<10} +{entry['additions']} -{entry['deletions']}"
                  + (f" ({', '.join(flags)})" if flags else ""))
        secret = next(entry for entry in review["workspace_changes"]["files"] if entry["sensitive"])
        print(f"{secret['path']}: {secret['size_after']} bytes, content and hash not recorded"
              f" (sha256_after: {secret['sha256_after']})")
        diff = next(entry["diff"] for entry in review["workspace_changes"]["files"]
                    if entry["path"] == "app.py")
        print("diff of app.py:")
        print(diff, end="")


if __name__ == "__main__":
    asyncio.run(main())
