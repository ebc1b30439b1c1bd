"""A store that cannot be opened never fails the user's program.

``RUN_JOURNAL_URL`` set to a mistyped URL, an unreachable or unresponsive server, or a path that
cannot hold a database: a script that never imports run_journal still runs to completion, in bounded
time, with one warning naming the variable, the URL (password hidden) and the cause. An explicit
``RunJournal(url)`` whose store cannot be opened lets the graph run and raises at ``flush()`` /
``close()``. Failed attempts leak no thread and no file descriptor.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from run_journal import JournalError, RunJournal
from run_journal.writer import OPEN_TIMEOUT, sources

SCRIPT = textwrap.dedent("""
    import asyncio, time
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph

    model = GenericFakeChatModel(messages=iter([AIMessage(f"answer {n}") for n in range(4)]))
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_edge(START, "agent")
    graph = builder.compile()
    began = time.monotonic()
    answers = [graph.invoke({"messages": [HumanMessage("q")]})["messages"][-1].content for _ in range(3)]
    answers.append(asyncio.run(graph.ainvoke({"messages": [HumanMessage("q")]}))["messages"][-1].content)
    print(answers, f"{time.monotonic() - began:.2f}")
""")


class SilentServer:
    """A TCP port that accepts connections and never says a word (a hung PostgreSQL or Redis)."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port: int = self.listener.getsockname()[1]
        self.held: list[socket.socket] = []
        """The server's side of every connection (descriptors of this process too)."""


@pytest.fixture(scope="module")
def silent_server(silent: SilentServer) -> int:
    return silent.port


@pytest.fixture(scope="module")
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    listener, held = server.listener, server.held
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server
    stop.set()
    thread.join()
    for connection in held:
        connection.close()
    listener.close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def bad_urls(tmp_path: Path, silent_port: int) -> dict[str, tuple[str, str]]:
    """case -> (RUN_JOURNAL_URL, a piece of the cause the warning must name)."""
    not_a_directory = tmp_path / "a-file"
    not_a_directory.write_text("not a directory")
    return {
        "two slashes": ("sqlite://act.db", "needs a file"),
        "mistyped scheme": ("sqlit:///act.db", "unknown store URL scheme"),
        "postgres down": (f"postgresql://ada:s3cret-pw@127.0.0.1:{closed_port()}/db", "Connect call failed"),
        "redis down": (f"redis://:s3cret-pw@127.0.0.1:{closed_port()}/0", "Connect call failed"),
        "no directory": (f"sqlite:///{not_a_directory}/journal.db", "Error"),
        "postgres silent": (f"postgresql://ada:s3cret-pw@127.0.0.1:{silent_port}/db",
                            f"no answer within {OPEN_TIMEOUT:g} s"),
        "redis silent": (f"redis://:s3cret-pw@127.0.0.1:{silent_port}/0",
                         f"no answer within {OPEN_TIMEOUT:g} s"),
    }


CASES = ["two slashes", "mistyped scheme", "postgres down", "redis down", "no directory", "postgres silent",
         "redis silent"]


@pytest.mark.parametrize("case", CASES)
def test_a_bad_store_url_never_fails_a_script_that_never_imports_run_journal(
    case: str, tmp_path: Path, silent_server: int
) -> None:
    url, cause = bad_urls(tmp_path, silent_server)[case]
    script = tmp_path / "agent.py"
    script.write_text(SCRIPT, encoding="utf-8")
    environment = {key: value for key, value in os.environ.items() if not key.startswith("RUN_JOURNAL_")}
    began = time.monotonic()
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                          env={**environment, "RUN_JOURNAL_URL": url},
                          capture_output=True, text=True, timeout=60, check=False)
    elapsed = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("['answer 0', 'answer 1', 'answer 2', 'answer 3']"), done.stdout
    warnings = [line for line in done.stderr.splitlines() if line.startswith("run-journal:")]
    assert len(warnings) == 1, done.stderr  # one warning for the process, not one per run
    (warning,) = warnings
    assert "RUN_JOURNAL_URL=" in warning
    assert cause in warning
    assert "s3cret-pw" not in done.stderr
    assert "Traceback" not in done.stderr
    assert elapsed < OPEN_TIMEOUT + 25  # the connect deadline once, plus starting Python and LangChain
    runs_took = float(done.stdout.split()[-1])
    assert runs_took < OPEN_TIMEOUT + 5  # only the first run waited, at most the connect deadline


def one_node_graph() -> Any:
    model = GenericFakeChatModel(messages=iter([AIMessage("still answered")] * 100))
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_edge(START, "agent")
    return builder.compile()


async def test_an_explicit_journal_whose_store_cannot_open_lets_the_graph_run_and_raises_at_flush() -> None:
    journal = RunJournal("sqlit:///journal.db", thread_id="typo")
    out = await one_node_graph().ainvoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
    assert out["messages"][-1].content == "still answered"
    with pytest.raises(JournalError, match="unknown store URL scheme 'sqlit'"):
        await journal.flush()
    unwritten = journal.unwritten_events()
    assert [e.event_type for e in unwritten] == [
        "run.start", "llm.human.input", "llm.request", "llm.ai.response", "run.end"]
    assert len(unwritten.bodies) == 3  # the human message, its link, the parameters: kept to write by hand
    with pytest.raises(JournalError, match="unknown store URL scheme"):
        await journal.aclose()


def test_a_sync_journal_whose_store_cannot_open_lets_the_graph_run_and_raises_at_close(
    silent_server: int,
) -> None:
    journal = RunJournal(f"redis://127.0.0.1:{silent_server}/0", thread_id="silent", open_timeout=0.3)
    began = time.monotonic()
    out = one_node_graph().invoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
    assert out["messages"][-1].content == "still answered"
    assert time.monotonic() - began < 0.3  # the graph never waited for the store
    with pytest.raises(JournalError, match=r"no answer within 0\.3 s"):
        journal.close()
    assert time.monotonic() - began < 3


@pytest.mark.parametrize("case", ["postgres down", "postgres silent", "redis silent", "no directory"])
def test_twenty_failed_runs_leak_no_thread_and_no_descriptor(
    case: str, tmp_path: Path, silent: SilentServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run tries the store again (the retry interval is 0 here): nothing piles up."""
    monkeypatch.setattr(sources, "REOPEN_INTERVAL", 0.0)
    url, _ = bad_urls(tmp_path, silent.port)[case]

    def open_descriptors() -> int:  # the client's: the silent server's side is in this process too
        return len(os.listdir("/proc/self/fd")) - len(silent.held)

    def failed_run() -> None:
        journal = RunJournal(url, thread_id="leak", open_timeout=0.2)
        one_node_graph().invoke({"messages": [HumanMessage("hi")]}, {"callbacks": [journal]})
        with pytest.raises(JournalError, match="cannot open the store"):
            journal.close()

    def threads() -> int:  # an event loop's default executor is a pool of its own bounded size
        return len([t for t in threading.enumerate() if not t.name.startswith("asyncio_")])

    failed_run()  # the process's writer thread, drivers and their pools start once
    time.sleep(0.5)
    before, descriptors = threads(), open_descriptors()
    for _ in range(20):
        failed_run()
    time.sleep(0.5)  # abandoned connection attempts are being closed
    assert threads() <= before
    assert open_descriptors() <= descriptors + 2
