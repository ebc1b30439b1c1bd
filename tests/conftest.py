"""Backends for the test suite: every store test runs once per backend URL.

Server backends use the servers named by environment variables (defaults: this machine's loopback
PostgreSQL and Redis). On a laptop without them those tests skip; with ``RUN_JOURNAL_REQUIRE_SERVERS=1``
(set by ``.ci/run``) an unreachable server is a failure, so CI can never pass by skipping.
Each test session works in its own PostgreSQL database and Redis key prefix and removes them at the end.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from run_journal import RunEventStore, open_store

POSTGRES_URL = os.environ.get(
    "RUN_JOURNAL_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("RUN_JOURNAL_REDIS_URL", "redis://127.0.0.1:6379/0")
REQUIRE_SERVERS = os.environ.get("RUN_JOURNAL_REQUIRE_SERVERS") == "1"
BACKENDS = ("memory", "jsonl", "sqlite", "postgres", "redis")

_session_tag = uuid.uuid4().hex[:8]
_counter = itertools.count()


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
    except Exception as error:  # noqa: BLE001 - any failure to reach the server means "unavailable"
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
    except Exception as error:  # noqa: BLE001 - any failure to reach the server means "unavailable"
        _unavailable(f"Redis at {REDIS_URL}", error)
    prefix = f"rjtest:{_session_tag}:"
    yield f"{REDIS_URL}?prefix={prefix}"
    for key in client.scan_iter(match=prefix + "*", count=1000):
        client.delete(key)
    client.close()


def backend_url(
    backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """A fresh, empty store URL of ``backend`` for one test."""
    n = next(_counter)
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
