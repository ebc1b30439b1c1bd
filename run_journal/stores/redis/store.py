"""``RedisRunEventStore``: the event stream in Redis, shared by a fleet of workers at low latency.

Every write is one Lua script (``scripts``), so seq assignment, event_id dedupe and indexing are a
single atomic step on the server: seq stays dense whoever writes. Reads never scan a thread: each
filter has a sorted set of seqs (score = seq) and a page is ``ZRANGEBYSCORE ... LIMIT`` + ``HMGET`` in
one script call (``records.read_page``). ``follow`` subscribes to the thread's channel, which every
append publishes to.

A run row is a hash ``<prefix>run/<run_id>`` written by one script (``scripts.PUT_RUN``) that also
checks the owning thread and the status guard and keeps two sorted indexes (all runs, and the
thread's runs) scored by start time; rows past their retention TTL leave the indexes lazily.

Connections: a store built by ``from_url`` holds a blocking pool of ``max_connections`` (a call
waits up to ``connection_wait`` seconds for a free one); followers subscribe on a pool of their own,
so a tail never takes a writer's connection.

Retention (optional): ``retention=RedisRetention(ttl_seconds=N)`` (or ``?ttl_seconds=N`` in the URL)
gives every key of a thread a time to live that each append refreshes, so a thread untouched for N
seconds disappears with its run rows. The refresh costs one EXPIRE per index key of the thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, Final, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis.asyncio as aioredis

from run_journal.bodies import Body
from run_journal.envelope import NewEvent, RunEvent, dumps, utc_now
from run_journal.runs import TERMINAL_STATUSES, RunRow, stored_row
from run_journal.stores.base import (
    CONTRACT_MAJOR,
    CONTRACT_VERSION,
    RUN_START,
    EventQuery,
    IncompatibleStoreError,
    RecentThreadQuery,
    RunEventStore,
    RunIdTakenError,
    RunQuery,
    SearchQuery,
    StartQuery,
    ThreadActivity,
    ThreadQuery,
    Waiter,
    after_error,
    metadata_task_id,
    stamp,
)
from run_journal.stores.redis import scripts
from run_journal.stores.redis.records import (
    ScriptCall,
    decode,
    encode,
    fresh_copy,
    read_page,
    run_scripts,
    task_key,
    text,
)
from run_journal.stores.redis.search import SEPARATOR, micros, search, search_keys

DEFAULT_PREFIX: Final = "run_journal:"
MAX_CONNECTIONS: Final = 10
"""Connections of a store's pool by default (a blocking pool: a call waits for a free one)."""
CONNECTION_WAIT: Final = 30.0
LAYOUT_VERSION: Final = 5
"""The key layout of a prefix (``P layout``): 2 added the activity order (``P recent``), 3 the runs
by status (``P st/<status>``), 4 the bodies of each thread (``B bodies``, ``B bodyix``; an older
prefix has none, so it needs no upgrade step), 5 the search sets (``stores/redis/search.py``)."""
FOLLOW_FALLBACK_SECONDS: Final = 5.0
"""A follower re-reads at least this often even without a notification (a lost publish, a restart)."""


@dataclasses.dataclass(frozen=True, slots=True)
class RedisRetention:
    """How long an idle thread lives: every key of a thread expires ``ttl_seconds`` after its last
    append (run rows: after their last ``put_run``). ``None`` keeps everything until deleted."""

    ttl_seconds: int | None = None

    def __post_init__(self) -> None:
        ttl = self.ttl_seconds
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 1):
            raise ValueError(f"ttl_seconds must be a positive integer, got {ttl!r}")


class RedisRunEventStore(RunEventStore):
    """Run events and run rows in one Redis database, under a key prefix (see ``scripts``)."""

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
        self._subscriber: aioredis.Redis | None = None
        self._closing = asyncio.Event()
        self._register_scripts(flags=True)

    def _register_scripts(self, *, flags: bool) -> None:
        """Script flags (Redis 7+): a write script is refused up front when the server is out of
        memory, instead of failing at its first write; reads run on replicas and under OOM; deletes
        may run under OOM. Older servers get the scripts without the ``#!lua`` line."""
        register = self._client.register_script

        def header(line: str) -> str:
            return line + "\n" if flags else ""

        self._append_script = register(header("#!lua") + scripts.APPEND)
        self._put_run_script = register(header("#!lua") + scripts.PUT_RUN)
        self._page_script = register(header("#!lua flags=no-writes") + scripts.PAGE)
        self._delete_thread_script = register(header("#!lua flags=allow-oom") + scripts.DELETE_THREAD)
        self._delete_run_script = register(header("#!lua flags=allow-oom") + scripts.DELETE_RUN_STEP)
        self._place_thread_script = register(header("#!lua") + scripts.PLACE_THREAD)
        self._index_statuses_script = register(header("#!lua") + scripts.INDEX_RUN_STATUSES)
        self._index_search_script = register(header("#!lua") + scripts.INDEX_RUN_SEARCH)
        self._put_bodies_script = register(header("#!lua") + scripts.PUT_BODIES)
        self._list_bodies_script = register(header("#!lua flags=no-writes") + scripts.LIST_BODIES)
        self._drop_bodies_script = register(header("#!lua flags=allow-oom") + scripts.DROP_BODIES)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisRunEventStore:
        """``redis://host:port/db?prefix=app:&ttl_seconds=86400``; other parameters go to redis-py.
        Options: ``max_connections`` (the store's pool; default 10) and ``connection_wait`` (seconds
        a call waits for a free connection of it; default 30), and the constructor's."""
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {key: value for key, value in query if key in {"prefix", "ttl_seconds"}}
        rest = urlencode([(key, value) for key, value in query if key not in ours])
        if "prefix" in ours:
            options.setdefault("prefix", ours["prefix"])
        if "ttl_seconds" in ours:
            options.setdefault("retention", RedisRetention(ttl_seconds=int(ours["ttl_seconds"])))
        max_connections = int(options.pop("max_connections", MAX_CONNECTIONS))
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        wait = float(options.pop("connection_wait", CONNECTION_WAIT))
        pool = aioredis.BlockingConnectionPool.from_url(
            urlunsplit(parts._replace(query=rest)), max_connections=max_connections, timeout=wait)
        return cls(aioredis.Redis.from_pool(pool), owns_client=True, **options)

    @property
    def prefix(self) -> str:
        return self._prefix

    @property
    def location(self) -> str:
        """``redis://host:port/db?prefix=...`` (or ``unix://path?db=...&prefix=...``) of the server
        and key prefix the store uses."""
        options = self._client.connection_pool.connection_kwargs
        if "path" in options:
            return f"unix://{options['path']}?db={options.get('db', 0)}&prefix={self._prefix}"
        return f"redis://{options.get('host', 'localhost')}:{options.get('port', 6379)}/" \
               f"{options.get('db', 0)}?prefix={self._prefix}"

    def _thread_key(self, thread_id: str, suffix: str) -> str:
        return f"{self._prefix}t/{thread_id}/{suffix}"

    # -- lifecycle -------------------------------------------------------------------------------
    async def _setup(self) -> None:
        """Stamp the prefix with the contract version, and refuse one written by another major."""
        server = await self._client.info("server")
        if int(str(server.get("redis_version", "7")).split(".", 1)[0]) < 7:
            self._register_scripts(flags=False)
        key = self._prefix + "contract"
        fresh = bool(await self._client.set(key, CONTRACT_VERSION, nx=True))
        stored = text(await self._client.get(key) or CONTRACT_VERSION)
        if stored.split(".", 1)[0] != str(CONTRACT_MAJOR):
            raise IncompatibleStoreError(
                f"Redis prefix {self._prefix!r} holds contract {stored}; "
                f"this library reads {CONTRACT_MAJOR}.x"
            )
        layout = self._prefix + "layout"
        version = LAYOUT_VERSION if fresh else int(await self._client.get(layout) or 1)
        if version < 2:
            await self._place_every_thread()
        if version < 3:
            await self._index_every_run_status()
        if version < 5:
            await self._index_every_run_search()
        if version < LAYOUT_VERSION or fresh:
            await self._client.set(layout, LAYOUT_VERSION)

    async def _index_every_run_status(self) -> None:
        """The upgrade of a prefix written before the status index (layout 2): every run joins the
        sorted set of its status. Idempotent, like ``_place_every_thread``."""
        start = 0
        while run_ids := [text(run_id) for run_id in cast("list[bytes | str]", await self._client.zrange(
                self._prefix + "runs", start, start + 499))]:  # members only: no scores
            await self._index_statuses_script(args=[self._prefix, *run_ids])
            start += len(run_ids)

    async def _index_every_run_search(self) -> None:
        """The upgrade of a prefix written before the search sets (layout 5): every run joins the
        sets of what its row holds. Idempotent; a run a writer indexed meanwhile is left alone."""
        start = 0
        while run_ids := [text(run_id) for run_id in cast("list[bytes | str]", await self._client.zrange(
                self._prefix + "runs", start, start + 499))]:
            async with self._client.pipeline(transaction=False) as pipe:
                for run_id in run_ids:
                    pipe.hget(f"{self._prefix}run/{run_id}", "row")
                rows = await pipe.execute()
            calls: list[ScriptCall] = [(self._index_search_script, [],
                      [self._prefix, run_id, SEPARATOR.join(search_keys(RunRow.from_dict(json.loads(raw))))])
                     for run_id, raw in zip(run_ids, rows, strict=True) if raw is not None]
            if calls:
                await run_scripts(self._client, calls)
            start += len(run_ids)

    async def _place_every_thread(self) -> None:
        """The upgrade of a prefix written before the activity order (layout 1): every thread takes
        its place in ``P recent`` (and per user), from its newest event. Idempotent, so processes
        setting up at once may each do it; threads written meanwhile are placed by their writers."""
        start = "-"
        while names := [text(name) for name in await self._client.zrangebylex(
                self._prefix + "threads", start, "+", start=0, num=500)]:
            await run_scripts(self._client, [(self._place_thread_script, [], [self._prefix, name])
                                             for name in names])
            start = "(" + names[-1]

    async def _release(self) -> None:
        self._closing.set()
        if self._subscriber is not None:
            await self._subscriber.aclose()
        if self._owns_client:
            await self._client.aclose()

    def _subscriptions(self) -> aioredis.Redis:
        """A client for followers' subscriptions, on a pool of its own: a follower holds its
        connection while it follows, which must never take one from the store's bounded pool."""
        if self._subscriber is None:
            pool = self._client.connection_pool
            self._subscriber = aioredis.Redis.from_pool(
                aioredis.ConnectionPool(connection_class=pool.connection_class, **pool.connection_kwargs))
        return self._subscriber

    # -- writes ----------------------------------------------------------------------------------
    async def _append(self, batch: Sequence[NewEvent], bodies: Sequence[Body] = ()) -> list[RunEvent]:
        return [event for event, _ in await self._write(batch, "append", bodies=bodies)]

    async def _put_if_absent(self, event: NewEvent, types: tuple[str, ...]) -> tuple[RunEvent, bool]:
        (result,) = await self._write([event], "once", types)
        return result

    async def _write(
        self, batch: Sequence[NewEvent], mode: str, types: Sequence[str] = (), bodies: Sequence[Body] = ()
    ) -> list[tuple[RunEvent, bool]]:
        """One script call per thread, all in one round trip; results in input order. A thread's
        bodies go in its script; bodies of threads without events here follow once the events are
        written (no event of the batch references them, and a refused batch writes none).

        Each result says whether this call wrote the event (False: it was stored before, or it
        repeats an earlier event_id of the batch, or ``mode="once"`` found an event of ``types``
        in the run).
        """
        by_thread: dict[str, list[int]] = {}
        for position, event in enumerate(batch):
            by_thread.setdefault(event.thread_id, []).append(position)
        bodies_of = _bodies_by_thread(bodies)
        ttl = self._retention.ttl_seconds or 0
        calls: list[ScriptCall] = []
        for thread_id, positions in by_thread.items():
            args: list[str | int | bytes] = [self._prefix, thread_id, mode, ttl, len(types), *types]
            held = bodies_of.pop(thread_id, [])
            args.append(len(held))
            for body in held:
                args += [body.digest, body.data]
            for position in positions:
                event = batch[position]
                task_id = event.task_id
                args += [
                    event.event_id, event.run_id, event.event_type,
                    "1" if event.category == "message" else "0",
                    task_key(task_id) if task_id is not None else "",
                    event.user_id or "", encode(event), stamp(event.created_at),
                ]
            calls.append((self._append_script, [], args))
        if mode == "append" and len(calls) > 1 and any(e.event_type == RUN_START for e in batch):
            await self._check_starts(batch)  # a later thread's refusal must not follow earlier writes
        replies = await run_scripts(self._client, calls)
        for reply in replies:
            if reply and text(reply[0]) == "run_taken":
                raise RunIdTakenError(text(reply[1]), text(reply[2]), text(reply[3]))
        if bodies_of:
            await self._put_bodies([body for held in bodies_of.values() for body in held])
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

    async def _check_starts(self, batch: Sequence[NewEvent]) -> None:
        """Before a batch over several threads (one script each, so not one atomic step): refuse it
        whole if one of its new run.starts names a run id another stored run.start holds."""
        for event in batch:
            if event.event_type != RUN_START:
                continue
            claim = await self._client.get(f"{self._prefix}start/{event.run_id}")
            if claim is None:
                continue
            owner, _, owner_event = text(claim).partition("\n")
            if (owner, owner_event) != (event.thread_id, event.event_id) and await self._client.hexists(
                self._thread_key(owner, "ids"), owner_event
            ):
                raise RunIdTakenError(event.run_id, owner, owner_event)

    async def _select_starts_without_row(self, query: StartQuery) -> list[RunEvent]:
        """Run ids in ``P starts`` whose claim still names a stored run.start; stale ones (a thread
        deleted or expired) leave the set lazily."""
        found: list[RunEvent] = []
        start = "-" if query.after is None else "(" + query.after
        while len(found) < query.limit:
            names = [text(name) for name in await self._client.zrangebylex(
                self._prefix + "starts", start, "+", start=0, num=query.limit)]
            if not names:
                break
            stale = []
            for run_id in names:
                event = await self._start_of(run_id)
                if event is None:
                    stale.append(run_id)
                elif len(found) < query.limit:
                    found.append(event)
            if stale:
                await self._client.zrem(self._prefix + "starts", *stale)
            start = "(" + names[-1]
        return found

    async def _start_of(self, run_id: str) -> RunEvent | None:
        """The stored run.start of a run without a row, or None."""
        claim = await self._client.get(f"{self._prefix}start/{run_id}")
        if claim is None or await self._client.exists(f"{self._prefix}run/{run_id}"):
            return None
        thread_id, _, event_id = text(claim).partition("\n")
        seq = await self._client.hget(self._thread_key(thread_id, "ids"), event_id)
        raw = await self._client.hget(self._thread_key(thread_id, "ev"), seq) if seq is not None else None
        return decode(thread_id, int(seq), raw) if raw is not None and seq is not None else None

    async def _put_run(self, row: RunRow) -> RunRow:
        row_json = dumps(row.to_dict())
        args: list[str | int] = [
            self._prefix, row.run_id, row.thread_id, str(row.status), row_json,
            self._retention.ttl_seconds or 0,
            micros(row.started_at) if row.started_at is not None else "", micros(utc_now()),
            SEPARATOR.join(search_keys(row)), *sorted(TERMINAL_STATUSES),
        ]
        stored = await self._put_run_script(args=args)
        if isinstance(stored, list):  # ['thread', owner]: the run belongs to another thread
            owner = text(stored[1])
            raise ValueError(f"run {row.run_id!r} belongs to thread {owner!r}, not {row.thread_id!r}")
        return stored_row(json.loads(stored if stored is not None else row_json))

    # -- bodies ----------------------------------------------------------------------------------
    async def _put_bodies(self, bodies: Sequence[Body]) -> None:
        """One script call per thread, all in one round trip."""
        ttl = self._retention.ttl_seconds or 0
        calls: list[ScriptCall] = []
        for thread_id, held in _bodies_by_thread(bodies).items():
            args: list[str | int | bytes] = [self._prefix, thread_id, ttl]
            for body in held:
                args += [body.digest, body.data]
            calls.append((self._put_bodies_script, [], args))
        await run_scripts(self._client, calls)

    async def _get_bodies(self, thread_id: str, digests: tuple[str, ...]) -> dict[str, bytes]:
        found = await self._client.hmget(self._thread_key(thread_id, "bodies"), list(digests))
        return {digest: _raw(data) for digest, data in zip(digests, found, strict=True) if data is not None}

    async def _drop_bodies(self, thread_id: str, through_seq: int) -> bool:
        return bool(await self._drop_bodies_script(args=[self._prefix, thread_id, through_seq]))

    async def _list_bodies(self, thread_id: str, after: str | None, limit: int) -> list[Body]:
        start = "-" if after is None else "(" + after
        flat = await self._list_bodies_script(args=[self._prefix, thread_id, start, limit])
        return [Body(thread_id, text(flat[i]), _raw(flat[i + 1])) for i in range(0, len(flat), 2)]

    # -- reads -----------------------------------------------------------------------------------
    async def _select_events(self, query: EventQuery) -> list[RunEvent]:
        """The most selective index drives the page; ``query.admits`` re-checks every record."""
        def keep(event: RunEvent) -> bool:
            return query.admits(event.run_id, event.category, event.event_type, event.user_id,
                                metadata_task_id(event.metadata))

        return await read_page(
            self._client, self._page_script, query.thread_id,
            [self._thread_key(query.thread_id, index) for index in _indexes(query)],
            self._thread_key(query.thread_id, "ev"),
            limit=query.limit, before_seq=query.before_seq, after_seq=query.after_seq, keep=keep,
        )

    async def _count_messages(self, thread_id: str, user_id: str | None) -> int:
        index = f"u/{user_id}/msg" if user_id is not None else "msg"
        return int(await self._client.zcard(self._thread_key(thread_id, index)))

    async def _select_threads(self, query: ThreadQuery) -> list[str]:
        """Threads in byte order (= code point order for UTF-8); expired ones are dropped lazily."""
        if query.user_id is None:
            index, marker = self._prefix + "threads", "all"
        else:
            index, marker = f"{self._prefix}u/{query.user_id}/threads", f"u/{query.user_id}/all"
        threads: list[str] = []
        start = "-" if query.after is None else "(" + query.after
        while len(threads) < query.limit:
            batch = [text(name) for name in await self._client.zrangebylex(
                index, start, "+", start=0, num=query.limit - len(threads)
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

    async def _select_recent_threads(self, query: RecentThreadQuery) -> list[ThreadActivity]:
        """A reverse lexical range of ``P recent`` (or the user's); a member whose thread no longer
        holds it (its keys expired) leaves the set lazily."""
        if query.user_id is None:
            index, at_key = self._prefix + "recent", "at"
        else:
            index, at_key = f"{self._prefix}u/{query.user_id}/recent", f"u/{query.user_id}/at"
        found: list[ThreadActivity] = []
        high = "+" if query.before is None else "(" + "/".join(query.before)
        while len(found) < query.limit:
            members = [text(member) for member in await self._client.zrevrangebylex(
                index, high, "-", start=0, num=query.limit - len(found))]
            if not members:
                break
            places = [member.partition("/") for member in members]
            async with self._client.pipeline(transaction=False) as pipe:
                for _, _, thread_id in places:
                    pipe.get(self._thread_key(thread_id, at_key))
                current = [text(value) if value is not None else None for value in await pipe.execute()]
            stale = [member for member, now in zip(members, current, strict=True) if now != member]
            if stale:
                await self._client.zrem(index, *stale)
            found += [ThreadActivity(thread_id, datetime.fromisoformat(moment))
                      for (moment, _, thread_id), member, now in zip(places, members, current, strict=True)
                      if now == member]
            high = "(" + members[-1]
        return found

    async def _last_seq(self, thread_id: str) -> int:
        value = await self._client.get(self._thread_key(thread_id, "seq"))
        return int(value) if value is not None else 0

    def _watch(self, thread_id: str) -> AbstractAsyncContextManager[Waiter]:
        return self._subscribed(thread_id)

    @contextlib.asynccontextmanager
    async def _subscribed(self, thread_id: str) -> AsyncIterator[Waiter]:
        """Subscribed to the thread's channel before the first read, so no write falls between the
        two; a wait ends at a publish, the store closing, or ``FOLLOW_FALLBACK_SECONDS``, and drains
        what else arrived meanwhile (one read covers every notification already here)."""
        pubsub = self._subscriptions().pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(self._thread_key(thread_id, "new"))

            latest = 0  # the highest seq published for the thread since the subscription

            def learn(message: Mapping[str, Any] | None) -> bool:
                nonlocal latest
                if message is None:  # also a (skipped) subscribe confirmation
                    return False
                with contextlib.suppress(TypeError, ValueError):
                    latest = max(latest, int(message["data"]))
                return True

            async def notified(after_seq: int) -> None:
                clock = asyncio.get_running_loop().time
                deadline = clock() + FOLLOW_FALLBACK_SECONDS
                while latest <= after_seq and (left := deadline - clock()) > 0:
                    learn(await pubsub.get_message(ignore_subscribe_messages=True, timeout=left))

            async def wait(after_seq: int) -> int | None:
                message = asyncio.ensure_future(notified(after_seq))
                stopping = asyncio.ensure_future(self._closing.wait())
                try:
                    await asyncio.wait({message, stopping}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in (message, stopping):
                        task.cancel()
                    await asyncio.gather(message, stopping, return_exceptions=True)
                while not self._closed and learn(await pubsub.get_message(ignore_subscribe_messages=True,
                                                                           timeout=0)):
                    pass
                return latest if latest > after_seq and not self._closed else None

            yield wait
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated

    # -- runs ------------------------------------------------------------------------------------
    async def _get_run(self, run_id: str) -> RunRow | None:
        stored = await self._client.hget(f"{self._prefix}run/{run_id}", "row")
        return stored_row(json.loads(stored)) if stored is not None else None

    async def _select_runs(self, query: RunQuery) -> list[RunRow]:
        """A range of ``B runs`` (or ``P runs``) by rank, from the cursor's rank, in chunks until the
        filters have kept ``limit`` rows; rows past their retention TTL leave the index lazily."""
        if query.thread_id is None and query.statuses is not None:
            return await self._select_runs_by_status(query)
        index = self._runs_index(query)
        start = 0
        if query.after is not None:
            rank = await (self._client.zrevrank if query.newest_first else self._client.zrank)(
                index, query.after)
            if not isinstance(rank, int) or not await self._client.exists(f"{self._prefix}run/{query.after}"):
                raise after_error(query.after)
            start = rank + 1
        filtered = query.statuses is not None or query.user_id is not None
        chunk = 1000 if query.limit is None else min(query.limit * (2 if filtered else 1), 1000)
        found: list[RunRow] = []
        while query.limit is None or len(found) < query.limit:
            members = cast("list[bytes | str]", await self._client.zrange(  # members only: no scores
                index, start, start + chunk - 1, desc=query.newest_first))
            run_ids = [text(run_id) for run_id in members]
            if not run_ids:
                break
            async with self._client.pipeline(transaction=False) as pipe:
                for run_id in run_ids:
                    pipe.hget(f"{self._prefix}run/{run_id}", "row")
                rows = await pipe.execute()
            expired = [run_id for run_id, row in zip(run_ids, rows, strict=True) if row is None]
            if expired:
                await self._client.zrem(index, *expired)
            for row in (stored_row(json.loads(raw)) for raw in rows if raw is not None):
                if query.admits(row.thread_id, row.status, row.user_id):
                    found.append(row)
            start += len(run_ids) - len(expired)
            if len(run_ids) < chunk:
                break
            chunk = min(chunk * 2, 1000)  # the filters keep few: read further at once
        return found if query.limit is None else found[: query.limit]

    async def _select_runs_by_status(self, query: RunQuery) -> list[RunRow]:
        """Runs of some statuses in every thread (what reconcile reads): the sorted sets of those
        statuses merged in list order, so only runs of those statuses are read."""
        scored: list[tuple[float, str]] = []
        for status in query.statuses or ():
            members = cast("list[tuple[bytes | str, float]]", await self._client.zrange(
                f"{self._prefix}st/{status}", 0, -1, withscores=True))
            scored += [(float(score), text(run_id)) for run_id, score in members]
        scored.sort(reverse=query.newest_first)
        if query.after is not None:
            score = await self._client.zscore(self._prefix + "runs", query.after)
            if score is None or not await self._client.exists(f"{self._prefix}run/{query.after}"):
                raise after_error(query.after)
            key = (float(score), query.after)
            scored = [item for item in scored if (item < key if query.newest_first else item > key)]
        run_ids = [run_id for _, run_id in scored]
        async with self._client.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hget(f"{self._prefix}run/{run_id}", "row")
            rows = await pipe.execute()
        found = [row for row in (stored_row(json.loads(raw)) for raw in rows if raw is not None)
                 if query.admits(row.thread_id, row.status, row.user_id)]
        return found if query.limit is None else found[: query.limit]

    async def _search_runs(self, query: SearchQuery) -> list[tuple[str, RunRow]]:
        return await search(self._client, self._prefix, query)

    async def _count_runs(self, query: RunQuery) -> int:
        if query.statuses is None and query.user_id is None and self._retention.ttl_seconds is None:
            return int(await self._client.zcard(self._runs_index(query)))
        return len(await self._select_runs(query))

    def _runs_index(self, query: RunQuery) -> str:
        return self._prefix + "runs" if query.thread_id is None else self._thread_key(query.thread_id, "runs")

    # -- deletes ---------------------------------------------------------------------------------
    async def _delete_thread(self, thread_id: str) -> int:
        return int(await self._delete_thread_script(args=[self._prefix, thread_id]))

    async def _delete_run(self, thread_id: str, run_id: str) -> int:
        return await self._delete_run_through(thread_id, run_id, None)

    prune_step: int = 100
    """Events one delete step removes (one script call; ~5 ms of the server's time)."""

    async def _delete_run_through(self, thread_id: str, run_id: str, through_seq: int | None) -> int:
        """Delete a run's events (those with seq <= ``through_seq``; all with None), ``prune_step``
        per script call, then its row: one script for a 200,000-event run kept Redis busy past its
        script time limit, every other client answered BUSY (``bench/bench_prune.py --backend redis
        --shape big-runs``)."""
        through = "+inf" if through_seq is None else through_seq
        deleted = 0
        while True:
            step = int(await self._delete_run_script(
                args=[self._prefix, thread_id, run_id, through, self.prune_step]))
            deleted += step
            if step < self.prune_step:
                return deleted


def _raw(data: bytes | str) -> bytes:
    """A body's bytes (text when the client decodes replies: bodies are UTF-8 JSON)."""
    return data if isinstance(data, bytes) else data.encode("utf-8")


def _bodies_by_thread(bodies: Sequence[Body]) -> dict[str, list[Body]]:
    grouped: dict[str, list[Body]] = {}
    for body in bodies:
        grouped.setdefault(body.thread_id, []).append(body)
    return grouped


def _indexes(query: EventQuery) -> list[str]:
    """The sorted sets (under the thread's keys) whose union holds every event ``query`` can select:
    the narrowest the filters allow (see ``scripts`` for the key layout)."""
    if query.messages_only:
        if query.run_id is not None:
            return [f"r/{query.run_id}/msg"]
        return [f"u/{query.user_id}/msg" if query.user_id is not None else "msg"]
    run_part = f"r/{query.run_id}/" if query.run_id is not None else ""
    if query.event_types is not None:
        return [f"{run_part}ty/{name}" for name in query.event_types]
    if query.task_id is not None:
        return [f"task/{task_key(query.task_id)}"]
    if query.run_id is not None:
        return [f"r/{query.run_id}/all"]
    return [f"u/{query.user_id}/all" if query.user_id is not None else "all"]
