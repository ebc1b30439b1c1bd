"""``RedisRunEventStore``: the event stream in Redis, shared by a fleet of workers at low latency.

Every write is one Lua script (``_redis_lua``), so seq assignment, event_id dedupe and indexing are a
single atomic step on the server: seq stays dense whoever writes. Reads never scan a thread: each
filter has a sorted set of seqs (score = seq) and a page is ``ZRANGEBYSCORE ... LIMIT`` + ``HMGET`` in
one script call. ``follow`` subscribes to the thread's channel, which every append publishes to.

Retention (optional): ``retention=RedisRetention(ttl_seconds=N)`` (or ``?ttl_seconds=N`` in the URL)
gives every key of a thread a time to live that each append refreshes, so a thread untouched for N
seconds disappears with its run rows. The refresh costs one EXPIRE per index key of the thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis.asyncio as aioredis

from run_journal.envelope import NewEvent, RunEvent, validate_id
from run_journal.stores import _redis_lua as lua
from run_journal.stores._redis_records import (
    Keep,
    RedisRetention,
    ScriptCall,
    decode,
    encode,
    fresh_copy,
    read_page,
    run_scripts,
    task_key,
    text,
    wait_for_notification,
)
from run_journal.stores._redis_runs import RedisRuns
from run_journal.stores.base import (
    CONTRACT_MAJOR,
    CONTRACT_VERSION,
    IncompatibleStoreError,
    RunEventStore,
    check_after_thread,
    check_cursor,
    check_limit,
    check_user_id,
    expand_event_types,
    metadata_task_id,
)

DEFAULT_PREFIX: Final = "run_journal:"


class RedisRunEventStore(RedisRuns, RunEventStore):
    """Run events and run rows in one Redis database, under a key prefix (see ``_redis_lua``)."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        retention: RedisRetention | Mapping[str, Any] | None = None,
        owns_client: bool = False,
    ) -> None:
        if not isinstance(prefix, str) or "/" in prefix:
            raise ValueError(f"prefix must be a string without '/', got {prefix!r}")
        self._client = client
        self._prefix = prefix
        if isinstance(retention, Mapping):
            retention = RedisRetention(**retention)
        self._retention = retention or RedisRetention()
        self._owns_client = owns_client
        self._ready = False
        self._closing = asyncio.Event()
        self._register_scripts(flags=True)

    def _register_scripts(self, *, flags: bool) -> None:
        """Script flags (Redis 7+): a write script is refused up front when the server is out of
        memory, instead of failing at its first write; reads run on replicas and under OOM; deletes
        may run under OOM. Older servers get the scripts without the ``#!lua`` line."""
        register = self._client.register_script

        def header(line: str) -> str:
            return line + "\n" if flags else ""

        self._append_script = register(header("#!lua") + lua.APPEND)
        self._put_run_script = register(header("#!lua") + lua.PUT_RUN)
        self._page_script = register(header("#!lua flags=no-writes") + lua.PAGE)
        self._delete_thread_script = register(header("#!lua flags=allow-oom") + lua.DELETE_THREAD)
        self._delete_run_script = register(header("#!lua flags=allow-oom") + lua.DELETE_RUN)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisRunEventStore:
        """``redis://host:port/db?prefix=app:&ttl_seconds=86400``; other parameters go to redis-py."""
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {key: value for key, value in query if key in {"prefix", "ttl_seconds"}}
        rest = urlencode([(key, value) for key, value in query if key not in ours])
        if "prefix" in ours:
            options.setdefault("prefix", ours["prefix"])
        if "ttl_seconds" in ours:
            options.setdefault("retention", RedisRetention(ttl_seconds=int(ours["ttl_seconds"])))
        client = aioredis.Redis.from_url(urlunsplit(parts._replace(query=rest)))
        return cls(client, owns_client=True, **options)

    @property
    def prefix(self) -> str:
        return self._prefix

    def _thread_key(self, thread_id: str, suffix: str) -> str:
        return f"{self._prefix}t/{thread_id}/{suffix}"

    # -- lifecycle -------------------------------------------------------------------------------
    async def setup(self) -> None:
        """Stamp the prefix with the contract version, and refuse one written by another major."""
        if self._ready:
            return
        server = await self._client.info("server")
        if int(str(server.get("redis_version", "7")).split(".", 1)[0]) < 7:
            self._register_scripts(flags=False)
        key = self._prefix + "contract"
        await self._client.set(key, CONTRACT_VERSION, nx=True)
        stored = text(await self._client.get(key) or CONTRACT_VERSION)
        if stored.split(".", 1)[0] != str(CONTRACT_MAJOR):
            raise IncompatibleStoreError(
                f"Redis prefix {self._prefix!r} holds contract {stored}; "
                f"this library reads {CONTRACT_MAJOR}.x"
            )
        self._ready = True

    async def aclose(self) -> None:
        if self._closed:
            return
        await super().aclose()
        self._closing.set()
        if self._owns_client:
            await self._client.aclose()

    async def _open(self) -> None:
        self._check_open()
        if not self._ready:
            await self.setup()

    # -- writes ----------------------------------------------------------------------------------
    async def _append(self, batch: Sequence[NewEvent]) -> list[RunEvent]:
        return [event for event, _ in await self._write(batch, "append")]

    async def _put_if_absent(self, event: NewEvent, types: tuple[str, ...]) -> tuple[RunEvent, bool]:
        (result,) = await self._write([event], "once", types)
        return result

    async def _write(
        self, batch: Sequence[NewEvent], mode: str, types: Sequence[str] = ()
    ) -> list[tuple[RunEvent, bool]]:
        """One script call per thread, all in one round trip; results in input order.

        Each result says whether this call wrote the event (False: it was stored before, or it
        repeats an earlier event_id of the batch, or ``mode="once"`` found an event of ``types``
        in the run).
        """
        await self._open()
        by_thread: dict[str, list[int]] = {}
        for position, event in enumerate(batch):
            by_thread.setdefault(event.thread_id, []).append(position)
        ttl = self._retention.ttl_seconds or 0
        calls: list[ScriptCall] = []
        for thread_id, positions in by_thread.items():
            args: list[str | int] = [self._prefix, thread_id, mode, ttl, len(types), *types]
            for position in positions:
                event = batch[position]
                task_id = event.task_id
                args += [
                    event.event_id, event.run_id, event.event_type,
                    "1" if event.category == "message" else "0",
                    task_key(task_id) if task_id is not None else "",
                    event.user_id or "", encode(event),
                ]
            calls.append((self._append_script, [], args))
        replies = await run_scripts(self._client, calls)
        results: list[tuple[RunEvent, bool]] = [None] * len(batch)  # type: ignore[list-item]  # filled below
        for (thread_id, positions), reply in zip(by_thread.items(), replies, strict=True):
            written: dict[int, RunEvent] = {}
            for index, position in enumerate(positions):
                seq, stored = int(reply[2 * index]), reply[2 * index + 1]
                if stored is not None:
                    results[position] = (decode(thread_id, seq, stored), False)
                elif seq in written:
                    results[position] = (fresh_copy(written[seq]), False)
                else:
                    written[seq] = RunEvent.stored(batch[position], seq)
                    results[position] = (written[seq], True)
        return results

    # -- reads -----------------------------------------------------------------------------------
    async def list_messages(
        self,
        thread_id: str,
        *,
        limit: int = 50,
        before_seq: int | None = None,
        after_seq: int | None = None,
        user_id: str | None = None,
    ) -> list[RunEvent]:
        validate_id("thread_id", thread_id)
        index = f"u/{validate_id('user_id', user_id)}/msg" if user_id is not None else "msg"
        return await self._page(
            thread_id, [index], limit=limit, before_seq=before_seq, after_seq=after_seq,
            keep=lambda event: event.category == "message" and _user_matches(event, user_id),
        )

    async def list_messages_by_run(
        self,
        thread_id: str,
        run_id: str,
        *,
        limit: int = 50,
        before_seq: int | None = None,
        after_seq: int | None = None,
        user_id: str | None = None,
    ) -> list[RunEvent]:
        validate_id("thread_id", thread_id)
        validate_id("run_id", run_id)
        if user_id is not None:
            validate_id("user_id", user_id)
        return await self._page(
            thread_id, [f"r/{run_id}/msg"], limit=limit, before_seq=before_seq, after_seq=after_seq,
            keep=lambda event: event.category == "message"
            and event.run_id == run_id
            and _user_matches(event, user_id),
        )

    async def list_events(
        self,
        thread_id: str,
        run_id: str | None = None,
        *,
        event_types: Sequence[str] | None = None,
        task_id: str | None = None,
        limit: int = 500,
        after_seq: int | None = None,
        user_id: str | None = None,
    ) -> list[RunEvent]:
        """The most selective index drives the page; every filter is re-checked on each record."""
        validate_id("thread_id", thread_id)
        if run_id is not None:
            validate_id("run_id", run_id)
        if user_id is not None:
            validate_id("user_id", user_id)
        names = expand_event_types(event_types)
        run_part = f"r/{run_id}/" if run_id is not None else ""
        if names is not None:
            indexes = [f"{run_part}ty/{name}" for name in names]
        elif task_id is not None:
            indexes = [f"task/{task_key(task_id)}"]
        elif run_id is not None:
            indexes = [f"r/{run_id}/all"]
        elif user_id is not None:
            indexes = [f"u/{user_id}/all"]
        else:
            indexes = ["all"]

        def keep(event: RunEvent) -> bool:
            return (
                (run_id is None or event.run_id == run_id)
                and (names is None or event.event_type in names)
                and (task_id is None or metadata_task_id(event.metadata) == task_id)
                and _user_matches(event, user_id)
            )

        return await self._page(
            thread_id, indexes, limit=limit, after_seq=after_seq if after_seq is not None else 0,
            before_seq=None, keep=keep,
        )

    async def _page(
        self,
        thread_id: str,
        indexes: Sequence[str],
        *,
        limit: int,
        before_seq: int | None,
        after_seq: int | None,
        keep: Keep,
    ) -> list[RunEvent]:
        await self._open()
        return await read_page(
            self._client, self._page_script, thread_id,
            [self._thread_key(thread_id, index) for index in indexes], self._thread_key(thread_id, "ev"),
            limit=limit, before_seq=before_seq, after_seq=after_seq, keep=keep,
        )

    async def count_messages(self, thread_id: str, *, user_id: str | None = None) -> int:
        validate_id("thread_id", thread_id)
        check_user_id(user_id)
        index = f"u/{user_id}/msg" if user_id is not None else "msg"
        await self._open()
        return int(await self._client.zcard(self._thread_key(thread_id, index)))

    async def list_threads(
        self, *, user_id: str | None = None, limit: int = 1000, after: str | None = None
    ) -> list[str]:
        """Threads in byte order (= code point order for UTF-8); expired ones are dropped lazily."""
        check_limit(limit)
        check_user_id(user_id)
        check_after_thread(after)
        await self._open()
        if user_id is None:
            index, marker = self._prefix + "threads", "all"
        else:
            index, marker = f"{self._prefix}u/{user_id}/threads", f"u/{user_id}/all"
        threads: list[str] = []
        start = "-" if after is None else "(" + after
        while len(threads) < limit:
            batch = [text(name) for name in await self._client.zrangebylex(
                index, start, "+", start=0, num=limit - len(threads)
            )]
            if not batch:
                break
            async with self._client.pipeline(transaction=False) as pipe:
                for thread_id in batch:
                    pipe.exists(self._thread_key(thread_id, marker))
                alive = await pipe.execute()
            stale = [thread_id for thread_id, ok in zip(batch, alive, strict=True) if not ok]
            if stale:
                await self._client.zrem(index, *stale)
            threads += [thread_id for thread_id, ok in zip(batch, alive, strict=True) if ok]
            start = "(" + batch[-1]
        return threads

    async def last_seq(self, thread_id: str) -> int:
        validate_id("thread_id", thread_id)
        await self._open()
        value = await self._client.get(self._thread_key(thread_id, "seq"))
        return int(value) if value is not None else 0

    async def follow(
        self, thread_id: str, *, after_seq: int = 0, user_id: str | None = None
    ) -> AsyncIterator[RunEvent]:
        """Subscribe to the thread's channel first, then read: no write can fall between the two.

        Waits for a publish (or the store closing, or ``FOLLOW_FALLBACK_SECONDS``) only when a read
        came back empty; notifications that arrived meanwhile just trigger one more read.
        """
        validate_id("thread_id", thread_id)
        cursor = check_cursor("after_seq", after_seq) or 0
        await self._open()
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(self._thread_key(thread_id, "new"))
            while not self._closed:
                page = await self.list_events(thread_id, limit=500, after_seq=cursor, user_id=user_id)
                for event in page:
                    cursor = event.seq
                    yield event
                if not page and not self._closed:
                    await wait_for_notification(pubsub, self._closing, lambda: self._closed)
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated

    # -- deletes ---------------------------------------------------------------------------------
    async def delete_by_thread(self, thread_id: str) -> int:
        validate_id("thread_id", thread_id)
        await self._open()
        return int(await self._delete_thread_script(args=[self._prefix, thread_id]))

    async def delete_by_run(self, thread_id: str, run_id: str) -> int:
        validate_id("thread_id", thread_id)
        validate_id("run_id", run_id)
        await self._open()
        return int(await self._delete_run_script(args=[self._prefix, thread_id, run_id]))



def _user_matches(event: RunEvent, user_id: str | None) -> bool:
    return user_id is None or event.user_id == user_id


__all__ = ["DEFAULT_PREFIX", "RedisRetention", "RedisRunEventStore"]

