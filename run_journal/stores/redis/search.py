"""``search_runs`` on Redis: sorted sets per filter value, scored like ``P runs`` (the list order),
walked newest first.

Each run row is a member of the search sets of what it holds (``search_keys``): ``P x/<tag>`` per
model, tool and caller, ``P u/<user>/runs``, ``P err`` when it has an error, besides ``P st/<status>``
and ``B runs`` (its thread's). A search walks the smallest of the sets its filters name (all runs
when none does) from the cursor's score down, a chunk at a time; checks each member against the
other sets (``ZMSCORE``, one command per set and chunk) and reads the rows of those in every set, in
one pipelined round trip; the rest of the filters (time range, cost, tokens, several statuses) are
checked on the rows. A page costs about one round trip per chunk, and the chunks a page walks grow
with how few of the smallest set's runs pass the other filters.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any, Final, cast

from redis.asyncio import Redis

from run_journal.runs import RunRow, stored_row
from run_journal.stores.queries import SearchQuery, run_tags, stamp
from run_journal.stores.redis.records import text

SEPARATOR: Final = "\x00"
"""Between the search keys of a run hash's ``search`` field (no tag or id holds a NUL)."""
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
FIRST_CHUNK: Final = 50
LAST_CHUNK: Final = 1000


def search_keys(row: RunRow) -> list[str]:
    """The search sets (under the prefix) a run row is a member of."""
    keys = [f"x/{tag}" for tag in run_tags(row)]
    if row.user_id is not None:
        keys.append(f"u/{row.user_id}/runs")
    if row.has_error:
        keys.append("err")
    return keys


def micros(moment: datetime) -> int:
    """A sort score: whole microseconds since the epoch (exact in a double until year 2255)."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def place_of(score: float) -> str:
    """The stamp of a score (the inverse of ``micros``)."""
    return stamp(_EPOCH + timedelta(microseconds=int(score)))


def sets_of(query: SearchQuery, prefix: str) -> list[str]:
    """The sorted sets every match is a member of (all runs when the filters name none)."""
    sets = [f"{prefix}x/{tag}" for tag in query.tags]
    if query.thread_id is not None:
        sets.append(f"{prefix}t/{query.thread_id}/runs")
    if query.user_id is not None:
        sets.append(f"{prefix}u/{query.user_id}/runs")
    if query.has_error:
        sets.append(f"{prefix}err")
    if query.statuses is not None and len(query.statuses) == 1:
        sets.append(f"{prefix}st/{query.statuses[0]}")
    return sets or [f"{prefix}runs"]


def score_range(query: SearchQuery) -> tuple[str, str]:
    """The (max, min) scores a walk covers: below the cursor (its ties kept, for ``admits`` to
    settle by run id) and the time range."""
    high: tuple[int, bool] | None = None  # (score, inclusive)
    if query.until is not None:
        high = (micros(datetime.fromisoformat(query.until)), False)
    if query.before is not None:
        cursor = micros(datetime.fromisoformat(query.before[0]))
        if high is None or cursor < high[0]:
            high = (cursor, True)
    top = "+inf" if high is None else (str(high[0]) if high[1] else f"({high[0]}")
    bottom = "-inf" if query.since is None else str(micros(datetime.fromisoformat(query.since)))
    return top, bottom


async def search(client: Redis, prefix: str, query: SearchQuery) -> list[tuple[str, RunRow]]:
    """The first ``query.limit`` matches, newest first, each with the stamp of its place."""
    sets = sets_of(query, prefix)
    async with client.pipeline(transaction=False) as pipe:
        for key in sets:
            pipe.zcard(key)
        sizes = [int(size) for size in await pipe.execute()]
    if min(sizes) == 0:
        return []
    walked = sets[sizes.index(min(sizes))]
    others = [key for key in sets if key != walked]
    top, bottom = score_range(query)
    found: list[tuple[str, RunRow]] = []
    offset, chunk = 0, max(FIRST_CHUNK, min(query.limit * 2, LAST_CHUNK))
    while len(found) < query.limit:
        members = cast("list[tuple[bytes | str, float]]", await client.zrange(
            walked, top, bottom, desc=True, byscore=True, withscores=True, offset=offset, num=chunk))
        if not members:
            break
        offset += len(members)
        run_ids = [text(member) for member, _ in members]
        async with client.pipeline(transaction=False) as pipe:
            for key in others:
                pipe.zmscore(key, run_ids)
            for run_id in run_ids:
                pipe.hget(f"{prefix}run/{run_id}", "row")
            replies: list[Any] = await pipe.execute()
        scores_elsewhere, rows = replies[: len(others)], replies[len(others):]
        for n, ((_, score), raw) in enumerate(zip(members, rows, strict=True)):
            if raw is None or any(scores[n] is None for scores in scores_elsewhere):
                continue  # not in every set, or a row past its retention TTL
            row, place = stored_row(json.loads(raw)), place_of(score)
            if query.admits(row, place):
                found.append((place, row))
        if len(members) < chunk:
            break
        chunk = min(chunk * 2, LAST_CHUNK)
    return found[: query.limit]
