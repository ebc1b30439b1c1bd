"""Conformance tests: bodies, values stored once per thread by digest and written with events."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib

import pytest

from run_journal.bodies import BODY_LIMIT, MAX_BODY_READ, Body
from run_journal.runs import RunRow
from run_journal.stores.base import RunEventStore, RunIdTakenError, StorageProblem
from run_journal.stores.memory import MemoryRunEventStore
from run_journal.testing._prune import MONTH, OLD, old_thread
from run_journal.testing._support import TRICKY_PAYLOAD, StoreSuiteBase, new_event, read_all


def message(n: int, thread_id: str = "t") -> Body:
    return Body.of(thread_id, {"role": "user", "content": f"message {n}", "n": n})


class BodyTests(StoreSuiteBase):
    """Bodies: put and get by digest, once per thread, in the step of their events."""

    async def test_bodies_round_trip_as_bytes(self, store: RunEventStore) -> None:
        tricky = Body.of("t", TRICKY_PAYLOAD)
        plain = message(1)
        await store.put_bodies([tricky, plain])
        found = await store.get_bodies("t", [plain.digest, tricky.digest])
        assert found == {plain.digest: plain.data, tricky.digest: tricky.data}
        assert all(type(data) is bytes for data in found.values())
        assert Body("t", tricky.digest, found[tricky.digest]).value() == tricky.value()
        assert hashlib.sha256(found[plain.digest]).hexdigest() == plain.digest
        assert await store.list_bodies("t") == sorted([tricky, plain], key=lambda body: body.digest)

    async def test_equal_values_give_one_digest_whatever_their_key_order(self, store: RunEventStore) -> None:
        first = Body.of("t", {"b": [1, {"y": 2, "x": 1}], "a": "é"})
        second = Body.of("t", {"a": "é", "b": (1, {"x": 1, "y": 2})})
        assert first == second
        await store.put_bodies([first])
        await store.put_bodies([second])
        assert await store.list_bodies("t") == [first]

    async def test_missing_digests_are_absent(self, store: RunEventStore) -> None:
        stored, missing = message(1), message(2)
        await store.put_bodies([stored])
        assert await store.get_bodies("t", [missing.digest, stored.digest, stored.digest]) == {
            stored.digest: stored.data
        }
        assert await store.get_bodies("never-written", [stored.digest]) == {}
        assert await store.get_bodies("t", []) == {}
        assert await store.list_bodies("never-written") == []

    async def test_putting_a_body_again_keeps_one_copy(self, store: RunEventStore) -> None:
        bodies = [message(n) for n in range(5)]
        await store.put_bodies(bodies)
        await store.put_bodies([*reversed(bodies), bodies[0]])
        await store.put_batch([new_event(content="again")], bodies=bodies)
        assert await store.list_bodies("t") == sorted(bodies, key=lambda body: body.digest)

    async def test_put_batch_writes_bodies_with_its_events(self, store: RunEventStore) -> None:
        bodies = [message(1, "a"), message(2, "b")]
        events = [new_event("a", "r1", event_id="ea", metadata={"bodies": [bodies[0].digest]}),
                  new_event("b", "r2", event_id="eb", metadata={"bodies": [bodies[1].digest]})]
        written = await store.put_batch(events, bodies=bodies)
        assert [event.event_id for event in written] == ["ea", "eb"]
        for body in bodies:
            assert await store.get_bodies(body.thread_id, [body.digest]) == {body.digest: body.data}
        retried = await store.put_batch(events, bodies=bodies)  # a retry: nothing is written twice
        assert [event.seq for event in retried] == [1, 1]
        assert len(await store.list_bodies("a")) == len(await store.list_bodies("b")) == 1

    async def test_put_batch_of_bodies_alone_stores_them(self, store: RunEventStore) -> None:
        assert await store.put_batch([], bodies=[message(1)]) == []
        assert await store.list_bodies("t") == [message(1)]
        assert await read_all(store, "t") == []

    async def test_put_run_close_writes_bodies_with_the_run_end(self, store: RunEventStore) -> None:
        bodies = [message(n) for n in range(3)]
        await store.put(thread_id="t", run_id="r", event_type="run.start", category="trace")
        last = new_event(event_id="last", metadata={"bodies": [body.digest for body in bodies]})
        end = new_event(event_type="run.end", category="outputs", event_id="end")
        assert await store.put_run_close([last], end, RunRow("r", "t", "success"), bodies=bodies)
        assert await store.get_bodies("t", [body.digest for body in bodies]) == {
            body.digest: body.data for body in bodies
        }
        other = new_event(event_type="run.error", category="error", event_id="other")
        late = message(9)  # the run is already closed: the events and bodies are still written
        assert not await store.put_run_close([], other, RunRow("r", "t", "error"), bodies=[late])
        assert await store.get_bodies("t", [late.digest]) == {late.digest: late.data}

    async def test_a_refused_batch_stores_none_of_its_bodies(self, store: RunEventStore) -> None:
        await store.put(thread_id="t", run_id="taken", event_type="run.start", category="trace",
                        event_id="first-start")
        refused = [new_event("u", "taken", "run.start", "trace", event_id="second-start")]
        with pytest.raises(RunIdTakenError):
            await store.put_batch(refused, bodies=[message(1, "u")])
        end = new_event("u", "taken", "run.end", "outputs", event_id="end")
        with pytest.raises(RunIdTakenError):
            await store.put_run_close(refused, end, RunRow("taken", "u", "success"), bodies=[message(2, "u")])
        assert await store.list_bodies("u") == []
        assert await read_all(store, "u") == []

    async def test_bodies_belong_to_their_thread(self, store: RunEventStore) -> None:
        mine, theirs = Body.of("mine", "same value"), Body.of("theirs", "same value")
        assert mine.digest == theirs.digest
        await store.put_batch([new_event("mine")], bodies=[mine])
        assert await store.get_bodies("theirs", [mine.digest]) == {}
        await store.put_batch([new_event("theirs")], bodies=[theirs])
        assert await store.delete_by_thread("theirs") == 1
        assert await store.get_bodies("mine", [mine.digest]) == {mine.digest: mine.data}
        assert await store.list_bodies("theirs") == []

    async def test_delete_by_thread_removes_bodies_and_delete_by_run_keeps_them(
        self, store: RunEventStore
    ) -> None:
        shared, later = message(1), message(2)
        await store.put_batch([new_event(run_id="r1"), new_event(run_id="r2")], bodies=[shared])
        assert await store.delete_by_run("t", "r1") == 1
        assert await store.list_bodies("t") == [shared]
        await store.put_bodies([later])
        assert await store.delete_by_thread("t") == 1
        assert await store.list_bodies("t") == []
        assert await store.get_bodies("t", [shared.digest, later.digest]) == {}
        await store.put_batch([new_event(run_id="r3")], bodies=[later])  # the id used again
        assert await store.list_bodies("t") == [later]

    async def test_list_bodies_pages_by_digest(self, store: RunEventStore) -> None:
        bodies = [message(n) for n in range(25)]
        await store.put_bodies(bodies)
        await store.put_bodies([message(99, "other")])
        pages: list[list[Body]] = []
        after = None
        while page := await store.list_bodies("t", after=after, limit=10):
            pages.append(page)
            after = page[-1].digest
        assert [len(page) for page in pages] == [10, 10, 5]
        assert [body for page in pages for body in page] == sorted(bodies, key=lambda body: body.digest)
        middle = sorted(body.digest for body in bodies)[12]
        assert [body.digest for body in await store.list_bodies("t", after=middle, limit=3)] == sorted(
            body.digest for body in bodies)[13:16]

    async def test_bad_bodies_are_refused_before_anything_is_written(self, store: RunEventStore) -> None:
        good = message(1)
        forged = Body("t", message(2).digest, good.data)
        with pytest.raises(ValueError, match="does not hash"):
            await store.put_batch([new_event(event_id="kept-out")], bodies=[good, forged])
        swapped = dataclasses.replace(message(2), data=good.data)  # a hashed body's copy is checked again
        with pytest.raises(ValueError, match="does not hash"):
            await store.put_batch([new_event(event_id="kept-out")], bodies=[swapped])
        with pytest.raises(ValueError, match="sha256"):
            await store.put_bodies([Body("t", "ABC", good.data)])
        with pytest.raises(ValueError, match="thread_id"):
            await store.put_bodies([Body("a/b", good.digest, good.data)])
        with pytest.raises(TypeError, match="single"):
            await store.put_bodies(good)  # type: ignore[arg-type]  # the mistake under test
        with pytest.raises(TypeError, match="bytes"):
            await store.put_bodies([Body("t", good.digest, bytearray(good.data))])  # type: ignore[arg-type]
        assert await read_all(store, "t") == []
        assert await store.list_bodies("t") == []

    async def test_a_body_over_the_limit_is_refused(self, store: RunEventStore) -> None:
        with pytest.raises(ValueError, match="limit"):
            Body.of("t", "x" * BODY_LIMIT)
        data = b'"' + b"x" * BODY_LIMIT + b'"'
        with pytest.raises(ValueError, match="limit"):
            await store.put_bodies([Body("t", hashlib.sha256(data).hexdigest(), data)])
        at_limit = Body.of("t", "y" * (BODY_LIMIT - 2))
        await store.put_bodies([at_limit])
        assert await store.get_bodies("t", [at_limit.digest]) == {at_limit.digest: at_limit.data}

    async def test_reads_of_bodies_check_their_arguments(self, store: RunEventStore) -> None:
        digest = message(1).digest
        with pytest.raises(ValueError, match="digest"):
            await store.get_bodies("t", [digest.upper()])
        with pytest.raises(TypeError, match="single"):
            await store.get_bodies("t", digest)
        with pytest.raises(ValueError, match="at most"):
            await store.get_bodies("t", [message(n).digest for n in range(MAX_BODY_READ + 1)])
        assert await store.get_bodies("t", [digest] * (MAX_BODY_READ + 1)) == {}  # distinct ones count
        with pytest.raises(ValueError, match="thread_id"):
            await store.get_bodies("", [digest])
        for limit in (0, MAX_BODY_READ + 1, True):
            with pytest.raises(ValueError, match="limit"):
                await store.list_bodies("t", limit=limit)
        with pytest.raises(ValueError, match="after"):
            await store.list_bodies("t", after="not-a-digest")

    async def test_concurrent_writers_of_the_same_bodies(self, store: RunEventStore) -> None:
        bodies = [message(n) for n in range(20)]

        async def writer(w: int) -> None:
            for n in range(5):
                await store.put_batch([new_event(run_id=f"w{w}", event_id=f"w{w}-{n}")],
                                      bodies=bodies[n * 4:] + bodies[: n * 4])

        await asyncio.gather(*(writer(w) for w in range(8)))
        assert await store.list_bodies("t") == sorted(bodies, key=lambda body: body.digest)
        events = await read_all(store, "t")
        assert [event.seq for event in events] == list(range(1, 41))

    async def test_prune_archives_a_thread_with_its_bodies_then_removes_them(
        self, store: RunEventStore
    ) -> None:
        old, young = [message(n, "old") for n in range(3)], [message(7, "young")]
        await old_thread(store, "old")
        await store.put_batch([new_event("old", "old-r0", event_id="asked", created_at=OLD,
                                         metadata={"bodies": [body.digest for body in old]})], bodies=old)
        await store.put_batch([new_event("young")], bodies=young)
        dry = await store.prune(older_than=MONTH, dry_run=True)
        assert [item.outcome for item in dry.threads] == ["would_prune"]
        assert len(await store.list_bodies("old")) == 3
        async with MemoryRunEventStore() as archive:
            result = await store.prune(older_than=MONTH, archive=archive)
            assert [(item.thread_id, item.outcome, item.archived, item.archived_bodies)
                    for item in result.threads] == [("old", "pruned", 9, 3)]
            assert await archive.list_bodies("old") == sorted(old, key=lambda body: body.digest)
            assert await archive.check_integrity() == []
        assert await store.list_bodies("old") == []
        assert await store.list_bodies("young") == young
        await store.put_batch([new_event("old", "again")])  # the thread id used again starts bare
        assert await store.list_bodies("old") == []

    async def test_the_store_as_an_archive_takes_the_bodies_first(self, store: RunEventStore) -> None:
        bodies = [message(n, "old") for n in range(2)]
        async with MemoryRunEventStore() as source:
            await old_thread(source, "old", runs=1)
            await source.put_bodies(bodies)
            result = await source.prune(older_than=MONTH, archive=store)
            assert [(item.outcome, item.archived_bodies) for item in result.threads] == [("pruned", 2)]
            assert await source.list_bodies("old") == []
        assert await store.get_bodies("old", [body.digest for body in bodies]) == {
            body.digest: body.data for body in bodies
        }

    async def test_check_integrity_reports_references_to_bodies_the_thread_lacks(
        self, store: RunEventStore
    ) -> None:
        held, lost = message(1), message(2)
        await store.put_batch([
            new_event(metadata={"bodies": [held.digest]}),
            new_event(metadata={"bodies": [held.digest, lost.digest]}),
            new_event(metadata={"bodies": "not a list"}),
            new_event("other", metadata={"bodies": [held.digest]}),  # held by thread t only
        ], bodies=[held])
        lacks = "which the thread does not hold"
        assert await store.check_integrity() == [
            StorageProblem("thread other seq 1", f"references body {held.digest}, {lacks}"),
            StorageProblem("thread t seq 2", f"references body {lost.digest}, {lacks}"),
            StorageProblem("thread t seq 3", 'metadata["bodies"] is not a list of digests'),
        ]
        assert await store.check_integrity(["t"]) == (await store.check_integrity())[1:]
