"""Run rows of the Redis store (a mixin of ``RedisRunEventStore``).

A run row is a hash ``<prefix>run/<run_id>`` written by one Lua script (``_redis_lua.PUT_RUN``) that
also checks the owning thread and the status guard and keeps two sorted indexes (all runs, and the
thread's runs) scored by start time; rows past their retention TTL leave the indexes lazily.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

import redis.asyncio as aioredis

from run_journal.envelope import utc_now, validate_id
from run_journal.runs import TERMINAL_STATUSES, RunRow
from run_journal.stores._redis_records import RedisRetention, text
from run_journal.stores.base import check_statuses


class RedisRuns:
    """``put_run`` / ``get_run`` / ``list_runs``; the client, scripts and keys are the store's."""

    _prefix: str
    _retention: RedisRetention
    _client: aioredis.Redis
    _put_run_script: Any

    async def _open(self) -> None:
        raise NotImplementedError

    def _thread_key(self, thread_id: str, suffix: str) -> str:
        raise NotImplementedError

    async def put_run(self, row: RunRow) -> RunRow:
        await self._open()
        row_json = json.dumps(row.to_dict(), ensure_ascii=False, separators=(",", ":"))
        args: list[str | int] = [
            self._prefix, row.run_id, row.thread_id, str(row.status), row_json,
            self._retention.ttl_seconds or 0,
            _micros(row.started_at) if row.started_at is not None else "", _micros(utc_now()),
            *sorted(TERMINAL_STATUSES),
        ]
        stored = await self._put_run_script(args=args)
        if isinstance(stored, list):  # ['thread', owner]: the run belongs to another thread
            owner = text(stored[1])
            raise ValueError(f"run {row.run_id!r} belongs to thread {owner!r}, not {row.thread_id!r}")
        return RunRow.from_dict(json.loads(stored if stored is not None else row_json))

    async def get_run(self, run_id: str) -> RunRow | None:
        validate_id("run_id", run_id)
        await self._open()
        text = await self._client.hget(f"{self._prefix}run/{run_id}", "row")
        return RunRow.from_dict(json.loads(text)) if text is not None else None

    async def list_runs(
        self, thread_id: str | None = None, *, statuses: Sequence[str] | None = None
    ) -> list[RunRow]:
        statuses = check_statuses(statuses)
        await self._open()
        if thread_id is None:
            index = self._prefix + "runs"
        else:
            index = self._thread_key(validate_id("thread_id", thread_id), "runs")
        run_ids = [text(run_id) for run_id in await self._client.zrange(index, 0, -1)]  # type: ignore[arg-type]  # plain zrange gives members only
        async with self._client.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hget(f"{self._prefix}run/{run_id}", "row")
            texts = await pipe.execute()
        expired = [run_id for run_id, row in zip(run_ids, texts, strict=True) if row is None]
        if expired:  # rows that outlived their retention TTL leave the index lazily
            await self._client.zrem(index, *expired)
        wanted = set(statuses) if statuses is not None else None
        rows = [RunRow.from_dict(json.loads(text)) for text in texts if text is not None]
        return [row for row in rows if wanted is None or row.status in wanted]


def _micros(moment: datetime) -> int:
    """A sort score: whole microseconds since the epoch (exact in a double until year 2255)."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
