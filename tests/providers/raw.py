"""Every byte a store holds, read under the store (files, SQL rows, Redis keys and values), to check
that a secret reached none of them."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from run_journal import RunEventStore


async def stored_bytes(url: str, store: RunEventStore, thread_id: str) -> bytes:
    scheme = url.split(":", 1)[0]
    if scheme == "memory":
        return await _memory(store, thread_id)
    if scheme in ("jsonl", "sqlite"):
        path = Path(url.split(":///", 1)[1])
        root = path if scheme == "jsonl" else path.parent
        return b"".join(file.read_bytes() for file in sorted(root.rglob("*")) if file.is_file())
    if scheme.startswith("postgresql"):
        return await _postgres(url)
    if scheme == "redis":
        return await _redis(url)
    raise ValueError(url)


async def _memory(store: RunEventStore, thread_id: str) -> bytes:
    """A memory store has no bytes: every string reachable from it, and what it reads back."""
    found: list[str] = []
    seen: set[int] = set()
    todo: collections.deque[Any] = collections.deque([store])
    while todo:
        item = todo.popleft()
        if id(item) in seen or isinstance(item, int | float | bool | type(None)):
            continue
        seen.add(id(item))
        if isinstance(item, str | bytes):
            found.append(item if isinstance(item, str) else item.decode("utf-8", "replace"))
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset | collections.deque):
            todo.extend(item)
        else:
            todo.extend(getattr(item, "__dict__", {}).values())
            for name in getattr(type(item), "__slots__", ()):
                todo.append(getattr(item, name, None))
    events = await store.list_events(thread_id, limit=10_000)
    found += [repr(event.to_dict()) for event in events]
    found += [repr(row.to_dict()) for row in await store.list_runs(thread_id)]
    return "\n".join(found).encode()


async def _postgres(url: str) -> bytes:
    import asyncpg

    parts = urlsplit(url)
    schema = parse_qs(parts.query)["schema"][0]
    connection = await asyncpg.connect(parts._replace(query="").geturl())
    try:
        tables = await connection.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema)
        out = []
        for table in tables:
            rows = await connection.fetch(f'SELECT t::text AS row FROM "{schema}"."{table["table_name"]}" t')
            out += [row["row"] for row in rows]
        assert tables, f"no tables in schema {schema}"
        return "\n".join(out).encode()
    finally:
        await connection.close()


async def _redis(url: str) -> bytes:
    import redis.asyncio as aioredis

    parts = urlsplit(url)
    prefix = parse_qs(parts.query)["prefix"][0]
    client = aioredis.Redis.from_url(parts._replace(query="").geturl())
    out: list[bytes] = []
    try:
        async for key in client.scan_iter(match=prefix + "*", count=1000):
            out.append(key)
            kind = (await client.type(key)).decode()
            if kind == "string":
                out.append(await client.get(key) or b"")
            elif kind == "hash":
                for field, value in (await client.hgetall(key)).items():
                    out += [field, value]
            elif kind == "list":
                out += await client.lrange(key, 0, -1)
            elif kind == "set":
                out += list(await client.smembers(key))
            elif kind == "zset":
                out += [member for member, _ in await client.zrange(key, 0, -1, withscores=True)]
            elif kind == "stream":
                for _, fields in await client.xrange(key):
                    for field, value in fields.items():
                        out += [field, value]
            else:
                raise AssertionError(f"a Redis {kind} the scan cannot read: {key!r}")
        assert out, f"no keys under {prefix}"
        return b"\n".join(out)
    finally:
        await client.aclose()
