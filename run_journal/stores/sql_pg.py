"""PostgreSQL LISTEN/NOTIFY for ``SqlRunEventStore.follow``: wake followers as soon as a write commits.

Writers send ``pg_notify(channel, "<thread_id>\\n<last_seq>")`` inside their transaction, so a
notification is delivered only if (and after) the events are committed. One dedicated asyncpg
connection per store listens; followers of a thread wait on it with a fallback timeout, so a lost
notification or connection costs latency, never events.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

ListenState = Literal["listening", "started", "unavailable"]


class PgListener:
    """Tracks the highest seq notified per followed thread and wakes its waiters."""

    def __init__(self, engine: AsyncEngine, channel: str) -> None:
        self._engine = engine
        self._channel = channel
        self._connection: AsyncConnection | None = None
        self._driver: Any = None
        self._lock = asyncio.Lock()
        self._interest: Counter[str] = Counter()
        self._latest: dict[str, int] = {}
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._closed = False
        self._discarding: set[asyncio.Task[None]] = set()

    @contextlib.contextmanager
    def interest(self, thread_id: str) -> Iterator[None]:
        """Record notifications for ``thread_id`` while a follower is iterating it."""
        self._interest[thread_id] += 1
        try:
            yield
        finally:
            self._interest[thread_id] -= 1
            if self._interest[thread_id] <= 0:
                del self._interest[thread_id]
                self._latest.pop(thread_id, None)

    async def ensure(self) -> ListenState:
        """Listen if not yet listening. ``started`` means: poll once more, a write may have slipped
        in between the caller's last read and the LISTEN."""
        if self._connection is not None:
            return "listening"
        if self._closed:
            return "unavailable"
        async with self._lock:
            if self._connection is not None:
                return "listening"
            try:
                connection = await self._engine.connect()
                raw = await connection.get_raw_connection()
                driver: Any = raw.driver_connection
                await driver.add_listener(self._channel, self._on_notify)
                driver.add_termination_listener(self._on_lost)
            except Exception:  # noqa: BLE001 - no LISTEN just means followers poll instead
                return "unavailable"
            self._connection, self._driver = connection, driver
            return "started"

    async def wait(self, thread_id: str, after_seq: int, fallback: float) -> None:
        """Return when a seq above ``after_seq`` was notified for the thread, or after ``fallback`` s."""
        if self._latest.get(thread_id, 0) > after_seq:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(thread_id, set())
        waiters.add(waiter)
        try:
            await asyncio.wait({waiter}, timeout=fallback)
        finally:
            waiters.discard(waiter)
            if not waiters:
                self._waiters.pop(thread_id, None)

    def _on_notify(self, _connection: object, _pid: int, _channel: str, payload: str) -> None:
        thread_id, _, seq = payload.rpartition("\n")
        if thread_id in self._interest:
            self._latest[thread_id] = max(self._latest.get(thread_id, 0), int(seq or 0))
        self._wake(self._waiters.get(thread_id, ()))

    def _on_lost(self, _connection: object) -> None:
        lost, self._connection, self._driver = self._connection, None, None
        if lost is not None:  # hand the dead connection back to the pool as invalid (no leaked checkout)
            task = asyncio.get_running_loop().create_task(self._discard(lost))
            self._discarding.add(task)
            task.add_done_callback(self._discarding.discard)
        self._wake_all()

    @staticmethod
    async def _discard(connection: Any) -> None:
        with contextlib.suppress(Exception):
            await connection.invalidate()
            await connection.close()

    def _wake_all(self) -> None:
        for waiters in list(self._waiters.values()):
            self._wake(waiters)

    @staticmethod
    def _wake(waiters: Any) -> None:
        for waiter in list(waiters):
            if not waiter.done():
                waiter.set_result(None)

    async def close(self) -> None:
        """Stop listening and drop the dedicated connection (it is not returned to the pool)."""
        self._closed = True
        self._wake_all()
        connection, driver = self._connection, self._driver
        self._connection = self._driver = None
        if connection is None:
            return
        with contextlib.suppress(Exception):
            driver.remove_termination_listener(self._on_lost)
            await driver.remove_listener(self._channel, self._on_notify)
        with contextlib.suppress(Exception):
            await connection.invalidate()
            await connection.close()
