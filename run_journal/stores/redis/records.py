"""How ``RedisRunEventStore`` encodes records and pages through its sorted-set indexes.

A record is stored as one JSON object whose ``content`` and ``metadata`` are the ``NewEvent``'s
already serialized text, spliced in, so a write serializes nothing twice and a read is one
``json.loads`` (which also makes every returned payload the caller's own copy).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from run_journal.envelope import NewEvent, RunEvent

Keep = Callable[[RunEvent], bool]


def text(value: bytes | str) -> str:
    """Replies are bytes unless the caller's client was built with ``decode_responses=True``."""
    return value.decode() if isinstance(value, bytes) else value


def task_key(task_id: str) -> str:
    """Task ids are free text of any length; their index key uses a digest (sha1, as Lua can)."""
    return hashlib.sha1(task_id.encode(), usedforsecurity=False).hexdigest()


def encode(event: NewEvent) -> str:
    """The stored text of an event (its thread and seq are the key and the hash field)."""
    head = json.dumps(
        {
            "run_id": event.run_id, "event_type": event.event_type, "category": event.category,
            "created_at": event.created_at.isoformat(), "event_id": event.event_id,
            "user_id": event.user_id,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return f'{head[:-1]},"metadata":{event.metadata_json},"content":{event.content_json}}}'


def decode(thread_id: str, seq: int, raw: bytes | str | dict[str, Any]) -> RunEvent:
    """A stored record (its text, or the object a page reply already parsed) as a ``RunEvent``."""
    data = json.loads(raw) if not isinstance(raw, dict) else raw
    return RunEvent(
        thread_id=thread_id,
        run_id=data["run_id"],
        seq=seq,
        event_type=data["event_type"],
        category=data["category"],
        content=data["content"],
        metadata=data["metadata"],
        created_at=datetime.fromisoformat(data["created_at"]),
        event_id=data["event_id"],
        user_id=data["user_id"],
    )


def fresh_copy(event: RunEvent) -> RunEvent:
    """Another record with payloads of its own (a repeated event_id in one batch gets one)."""
    return RunEvent.from_dict(json.loads(json.dumps(event.to_dict())))


ScriptCall = tuple[AsyncScript, list[str], list[str | int | bytes]]


async def run_scripts(client: Redis, calls: Sequence[ScriptCall]) -> list[Any]:
    """Run script calls (script, keys, args) in one round trip.

    One call goes straight to EVALSHA; several share a pipeline, which costs redis-py one more
    round trip (SCRIPT EXISTS) per execute, so the common single-thread write never pays it.
    """
    if len(calls) == 1:
        script, keys, args = calls[0]
        return [await script(keys=keys, args=args)]
    async with client.pipeline(transaction=False) as pipe:
        for script, keys, args in calls:
            await script(keys=keys, args=args, client=pipe)
        return list(await pipe.execute())


async def read_page(
    client: Redis,
    page_script: AsyncScript,
    thread_id: str,
    index_keys: Sequence[str],
    records_key: str,
    *,
    limit: int,
    before_seq: int | None,
    after_seq: int | None,
    keep: Keep,
) -> list[RunEvent]:
    """An ``EventQuery`` page (``stores/base.py``) over the union of the sorted sets ``index_keys``.

    ``after_seq`` reads upwards from it (below ``before_seq`` if both are given); otherwise the
    page is the last ``limit`` rows below ``before_seq`` (or the latest). Chunks are fetched until
    ``limit`` records pass ``keep``, so a filter the index does not cover is still exact; with an
    index per filter, the loop ends after one round trip (one script call per index, pipelined).
    """
    descending = after_seq is None
    low = f"({after_seq}" if after_seq is not None else "-inf"
    high = f"({before_seq}" if before_seq is not None else "+inf"
    found: list[RunEvent] = []
    chunk = limit
    while True:
        args: list[str | int | bytes] = [low, high, chunk, "1" if descending else "0"]
        replies = await run_scripts(client, [(page_script, [key, records_key], args) for key in index_keys])
        rows: dict[int, dict[str, Any] | None] = {}
        bound: int | None = None
        for reply in replies:
            flat = json.loads(reply)
            rows.update(zip(flat[::2], flat[1::2], strict=True))
            if len(flat) == 2 * chunk:  # this index has more: only seqs up to its last are certain
                edge = flat[-2]
                bound = edge if bound is None else (max if descending else min)(bound, edge)
        seqs = sorted(rows, reverse=descending)
        if bound is not None:
            seqs = [seq for seq in seqs if (seq >= bound if descending else seq <= bound)]
        for seq in seqs:
            raw = rows[seq]
            if raw is None:
                continue  # an index entry whose record expired (retention) a moment earlier
            event = decode(thread_id, seq, raw)
            if keep(event):
                found.append(event)
                if len(found) == limit:
                    break
        if len(found) == limit or bound is None or not seqs:
            break
        if descending:
            high = f"({seqs[-1]}"
        else:
            low = f"({seqs[-1]}"
        chunk = min(max(chunk * 2, 100), 10_000)
    if descending:
        found.reverse()
    return found

