"""Recording switched on by RUN_JOURNAL_URL alone: a script that never imports run_journal is journaled."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import backend_url

from run_journal import RunJournal, open_store, status_of

SCRIPT = textwrap.dedent("""
    import asyncio, sys
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph

    model = GenericFakeChatModel(messages=iter([AIMessage("sync answer"), AIMessage("async answer")]))

    def agent(state):
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    graph = builder.compile()
    config = {"configurable": {"thread_id": "activated"}}
    callbacks = []
    if len(sys.argv) > 1:  # a journal passed explicitly: the hook must not add a second one
        from run_journal import RunJournal
        callbacks = [RunJournal(sys.argv[1])]
    graph.invoke({"messages": [HumanMessage("first")]}, {**config, "callbacks": callbacks})
    if callbacks:
        callbacks[0].close()
    else:
        asyncio.run(graph.ainvoke({"messages": [HumanMessage("second")]}, config))
    assert "run_journal.journal" in sys.modules or not callbacks
    print("ran")
""")


def run_script(tmp_path: Path, env: dict[str, str], *args: str) -> None:
    script = tmp_path / "graph_only.py"
    script.write_text(SCRIPT, encoding="utf-8")
    environment = {key: value for key, value in os.environ.items() if not key.startswith("RUN_JOURNAL_")}
    done = subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, env={**environment, **env},
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ran"
    assert "could not" not in done.stderr, done.stderr


@pytest.fixture(params=["sqlite", "postgres"])
def server_or_file_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return backend_url(request.param, request, tmp_path_factory)


async def test_setting_the_variable_journals_every_run_of_a_script_that_never_imports_it(
    server_or_file_url: str, tmp_path: Path
) -> None:
    url = server_or_file_url
    run_script(tmp_path, {"RUN_JOURNAL_URL": url, "RUN_JOURNAL_USER_ID": "ada"})
    async with open_store(url) as store:
        runs = await store.list_runs("activated")
        assert [(run.status, run.user_id, run.first_human_message) for run in runs] == [
            ("success", "ada", "first"), ("success", "ada", "second")]
        for run in runs:
            events = await store.list_events("activated", run.run_id)
            assert [e.event_type for e in events] == ["run.start", "llm.human.input", "llm.request",
                                                      "llm.ai.response", "run.end"]
            assert status_of(events) == "success"


async def test_a_journal_passed_explicitly_is_not_doubled(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    activated, explicit = (f"sqlite:///{tmp_path_factory.mktemp('act')}/journal.db" for _ in range(2))
    run_script(tmp_path, {"RUN_JOURNAL_URL": activated}, explicit)
    async with open_store(explicit) as store:
        (run,) = await store.list_runs("activated")
        assert len(await store.list_events("activated", run.run_id)) == 5  # with the model's request
    async with open_store(activated) as store:
        assert await store.list_runs("activated") == []


def test_a_journal_without_a_store_needs_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUN_JOURNAL_URL", raising=False)
    with pytest.raises(ValueError, match="RUN_JOURNAL_URL"):
        RunJournal()
