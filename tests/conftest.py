"""Backends for the test suite: every store test runs once per backend URL.

Server backends use the servers named by environment variables (defaults: this machine's loopback
PostgreSQL and Redis). On a laptop without them those tests skip; with ``RUN_JOURNAL_REQUIRE_SERVERS=1``
(set by ``.ci/run``) an unreachable server is a failure, so CI can never pass by skipping.
Each test session works in its own PostgreSQL database and Redis key prefix and removes them at the end.

Tiers. Plain ``pytest`` runs everything (except the ``soak`` runs, below). ``pytest -m "not slow"`` is the
quick tier: it leaves out the tests marked ``slow`` here, by the tables ``SLOW_MODULES`` and
``SLOW_TESTS`` (or by a ``slow`` mark in the test file): tests that start other processes (workers, the
CLI, scripts, examples, docs blocks, a server), drive a browser, or take a second or more on their own
(real timers and deadlines, cut connections, big files). Every backend keeps its conformance suite and
its store tests in the quick tier. Tests marked ``soak`` (the long reliability runs: 20 kills per
backend, 300 hypothesis examples, 8 writer processes) are skipped unless ``--run-soak`` (alias
``--run-slow``) is given or ``RUN_JOURNAL_SLOW=1`` is set; they count as ``slow`` too.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from run_journal import RunEventStore, open_store

POSTGRES_URL = os.environ.get(
    "RUN_JOURNAL_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("RUN_JOURNAL_REDIS_URL", "redis://127.0.0.1:6379/0")
REQUIRE_SERVERS = os.environ.get("RUN_JOURNAL_REQUIRE_SERVERS") == "1"
BACKENDS = ("memory", "jsonl", "sqlite", "postgres", "redis")

_session_tag = uuid.uuid4().hex[:8]
TESTS = Path(__file__).resolve().parent

SLOW_MODULES: dict[str, str] = {
    # path under tests/ -> why every test of it is slow
    "browser/test_viewer.py": "drives Chromium against a served viewer",
    "test_imports.py": "imports each module in a fresh interpreter",
    "test_examples.py": "runs each example script in a process of its own",
    "reliability/test_follow_reconnect.py": "cuts the follower's connections and waits for it to reconnect",
    "reliability/test_frozen_network.py": "waits out the writer's flush deadline through a frozen proxy",
    "reliability/test_full_disk.py": "writer processes under RLIMIT_FSIZE, then the verify CLI",
    "reliability/test_jsonl_damage.py": "runs the verify CLI after each damage",
    "reliability/test_orphans_and_contention.py": "SIGKILLed and racing worker processes",
    "reliability/test_rowless_runs.py": "a SIGKILLed worker, then the verify CLI",
    "reliability/test_unavailable_store.py": "scripts in processes, connect deadlines of a silent server",
}

SLOW_TESTS: dict[str, tuple[str, ...]] = {
    # path under tests/ -> names of its slow tests (every parametrization), each group with why
    "test_activation.py": (  # run a script in a process
        "test_setting_the_variable_journals_every_run_of_a_script_that_never_imports_it",
        "test_a_journal_passed_explicitly_is_not_doubled",
    ),
    "test_docs.py": ("test_runnable_blocks_run_and_print_what_the_docs_show",),  # blocks in processes
    "test_http_app.py": (  # a fresh interpreter, the CLI, the server process
        "test_the_core_package_never_imports_the_web_stack",
        "test_serve_listens_on_loopback_asks_for_the_token_and_stops_cleanly_on_ctrl_c",
        "test_serve_refuses_a_port_in_use_in_one_line",
        "test_serve_help_names_its_options",
    ),
    "test_otel.py": (  # the CLI
        "test_the_export_command_sends_otlp_and_a_dead_collector_never_fails_the_journal",
    ),
    "test_pricing.py": (  # a fresh interpreter, the CLI
        "test_import_run_journal_does_not_load_the_price_database",
        "test_the_reprice_command_fills_in_unknown_costs",
    ),
    "test_journal_writer.py": ("test_the_end_of_a_run_is_written_soon_without_a_flush",),  # a 1 s timer
    "test_writer.py": ("test_a_store_that_never_answers_fails_the_flush_within_its_deadline",),  # deadline
    "test_jsonl_store.py": (  # writer processes; a long thread written first
        "test_four_processes_write_one_thread_with_seq_1_to_800_exactly_once",
        "test_a_page_of_a_long_thread_reads_a_bounded_number_of_bytes",
    ),
    "test_projections.py": ("test_two_processes_reconcile_a_sqlite_store_exactly_once",),  # processes
    "test_prune.py": ("test_pruning_while_another_process_writes_to_a_young_thread",),  # a writer process
    "test_redis_store.py": ("test_processes_share_one_dense_thread",),  # writer processes
    "test_sql_store.py": (  # processes
        "test_two_processes_set_up_a_fresh_store_at_once",
        "test_processes_retrying_the_same_event_ids_store_each_once",
        "test_postgres_follow_wakes_on_notify_from_another_process",
    ),
    "test_store_conformance.py": (  # processes (the conformance class itself stays quick)
        "test_processes_write_one_thread_with_dense_seq",
        "test_a_killed_writer_leaves_a_readable_dense_store",
        "test_processes_set_up_a_fresh_store_at_once",
        "test_follow_sees_writes_of_another_process",
    ),
    "reliability/test_crash.py": (  # SIGKILLed worker processes, then the verify CLI
        "test_killed_writers_lose_no_acknowledged_event",
        "test_jsonl_torn_tail_is_cut_not_read",
    ),
}


def soak_enabled(config: pytest.Config) -> bool:
    """True when the ``soak`` tests run: ``--run-soak`` (or ``--run-slow``) or ``RUN_JOURNAL_SLOW=1``."""
    return bool(config.getoption("run_soak", default=False)) or os.environ.get("RUN_JOURNAL_SLOW") == "1"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-soak", "--run-slow", dest="run_soak", action="store_true", default=False,
        help="run the tests marked soak: the long reliability runs (also: RUN_JOURNAL_SLOW=1)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "soak: a long run (many kills, big property runs), skipped unless --run-soak or RUN_JOURNAL_SLOW=1",
    )


def listed_slow(item: pytest.Item) -> bool:
    """Whether ``SLOW_MODULES`` or ``SLOW_TESTS`` lists the item."""
    try:
        module = item.path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return False
    name = item.nodeid.split("[", 1)[0].rsplit("::", 1)[-1]
    return module in SLOW_MODULES or name in SLOW_TESTS.get(module, ())


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_soak = soak_enabled(config)
    skip_soak = pytest.mark.skip(reason="long reliability run: pass --run-soak or set RUN_JOURNAL_SLOW=1")
    for item in items:
        if item.get_closest_marker("soak") is not None:
            item.add_marker(pytest.mark.slow)
            if not run_soak:
                item.add_marker(skip_soak)
        elif item.get_closest_marker("slow") is None and listed_slow(item):
            item.add_marker(pytest.mark.slow)
    if not any("::" in arg for arg in config.args):  # whole modules collected: the tables can be checked
        warn_of_stale_entries(items)


def warn_of_stale_entries(items: list[pytest.Item]) -> None:
    """A renamed module or test would silently join the quick tier: say so."""
    collected: dict[str, set[str]] = {}
    for item in items:
        with contextlib.suppress(ValueError):
            module = item.path.resolve().relative_to(TESTS).as_posix()
            collected.setdefault(module, set()).add(item.nodeid.split("[", 1)[0].rsplit("::", 1)[-1])
    stale = [module for module in SLOW_MODULES if not (TESTS / module).exists()]
    stale += [f"{module}::{name}" for module, names in SLOW_TESTS.items() if module in collected
              for name in names if name not in collected[module]]
    stale += [module for module in SLOW_TESTS if not (TESTS / module).exists()]
    if stale:
        message = f"tests/conftest.py lists as slow what is not there (renamed?): {', '.join(stale)}"
        warnings.warn(pytest.PytestWarning(message), stacklevel=1)


def _unavailable(what: str, error: BaseException) -> None:
    message = f"{what} is not reachable: {type(error).__name__}: {error}"
    if REQUIRE_SERVERS:
        pytest.fail(message + " (RUN_JOURNAL_REQUIRE_SERVERS=1 makes this mandatory)")
    pytest.skip(message)


async def _postgres_admin(sql: str) -> None:
    import asyncpg

    connection = await asyncpg.connect(POSTGRES_URL.replace("postgresql+asyncpg", "postgresql"))
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


@pytest.fixture(scope="session")
def postgres_database_url() -> Iterator[str]:
    """A database of this test session's own on the PostgreSQL server, dropped at the end."""
    try:
        import asyncpg  # noqa: F401 - only checks the extra is installed
    except ImportError as error:
        _unavailable("asyncpg (pip install 'run-journal[postgres]')", error)
    name = f"run_journal_test_{_session_tag}"
    try:
        asyncio.run(_postgres_admin(f'CREATE DATABASE "{name}"'))
    except Exception as error:
        _unavailable(f"PostgreSQL at {POSTGRES_URL}", error)
    base, _, _ = POSTGRES_URL.rpartition("/")
    yield f"{base}/{name}"
    asyncio.run(_postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def redis_prefix_url() -> Iterator[str]:
    """A key prefix of this test session's own on the Redis server, deleted at the end."""
    try:
        import redis
    except ImportError as error:
        _unavailable("redis (pip install 'run-journal[redis]')", error)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except Exception as error:
        _unavailable(f"Redis at {REDIS_URL}", error)
    prefix = f"rjtest:{_session_tag}:"
    yield f"{REDIS_URL}?prefix={prefix}"
    for key in client.scan_iter(match=prefix + "*", count=1000):
        client.delete(key)
    client.close()


def backend_url(
    backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """A fresh, empty store URL of ``backend`` for one test.

    The schema and key prefix are random, not numbered: a module that imports this file under a second
    name (``tests.conftest`` beside ``conftest``) gets a second copy of it, and two counters would hand
    out the same names in one database."""
    n = uuid.uuid4().hex[:12]
    if backend == "memory":
        return "memory://"
    if backend == "jsonl":
        return f"jsonl:///{tmp_path_factory.mktemp('jsonl')}/journal"
    if backend == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('sqlite')}/journal.db"
    if backend == "postgres":
        database: str = request.getfixturevalue("postgres_database_url")
        return f"{database}?schema=t{n}"
    if backend == "redis":
        prefix: str = request.getfixturevalue("redis_prefix_url")
        return f"{prefix}t{n}:"
    raise ValueError(backend)


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """One fresh store URL per backend (file URLs are absolute: four slashes)."""
    return backend_url(request.param, request, tmp_path_factory)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[RunEventStore]:
    async with open_store(store_url) as opened:
        yield opened


@dataclasses.dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """``run-journal ARGS...`` in this process: its exit status and what it printed (test_cli.py
    has its own, with a deadline)."""
    from run_journal.cli import main

    def call(*args: str) -> CliResult:
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as stop:  # argparse: --help, usage errors
            code = stop.code if isinstance(stop.code, int) else 0
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return call


# -- one store per backend holding every kind of recorded run (tests/_recorded_runs.py) ------------
CLI_BACKENDS = tuple(backend for backend in BACKENDS if backend != "memory")
"""The backends another process (the command line) can open by URL."""


@pytest.fixture(scope="module", params=BACKENDS)
def recorded_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A module's store URL on each backend (made outside any loop: the servers are set up)."""
    return backend_url(request.param, request, tmp_path_factory)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(recorded_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Any]:
    """One store per backend holding every kind of recorded run, for a module's read-only tests:
    ``(store, Recorded)``."""
    from _recorded_runs import record_runs  # the agents it records load only for the modules using it

    async with open_store(recorded_url) as store:
        yield store, await record_runs(store, tmp_path_factory.mktemp("workspace"))
