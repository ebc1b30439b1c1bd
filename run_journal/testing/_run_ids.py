"""Conformance tests: a run id names one run (never silently reused), and a run that started without a
run row is found and closed exactly once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from run_journal.envelope import NewEvent, RunEvent
from run_journal.projections import reconcile_orphans
from run_journal.runs import RunRow, RunStatus
from run_journal.stores.base import RunEventStore, StoreError
from run_journal.testing._support import StoreFactory, StoreSuiteBase, new_event, read_all

LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)


def start(thread_id: str, run_id: str, event_id: str, **fields: Any) -> NewEvent:
    return new_event(thread_id, run_id, "run.start", "trace", content={"run_name": "agent"},
                     event_id=event_id, **fields)


def human(thread_id: str, run_id: str, text: str, **fields: Any) -> NewEvent:
    return new_event(thread_id, run_id, "llm.human.input", "message",
                     content={"type": "human", "content": text}, **fields)


def assert_run_id_taken(error: BaseException, run_id: str) -> None:
    """The refusal is a store error and a ValueError (the journal reports it at once, no retries)."""
    assert isinstance(error, StoreError), type(error)
    assert isinstance(error, ValueError), type(error)
    assert repr(run_id) in str(error), str(error)


class RunIdTests(StoreSuiteBase):
    """A second ``run.start`` under a run id that has one is refused; row-less runs are reconciled."""

    async def test_a_run_id_is_never_taken_by_a_second_run(self, store: RunEventStore) -> None:
        first = await store.put_batch([start("t1", "fixed", "s1"), human("t1", "fixed", "hi")])
        refusals: dict[str, Callable[[], Awaitable[object]]] = {
            "same thread": lambda: store.put_batch([human("t1", "other", "x", event_id="x1"),
                                                    start("t1", "fixed", "s2")]),
            "another thread": lambda: store.put_batch([start("t2", "fixed", "s3")]),
            "a batch over two threads": lambda: store.put_batch([human("t3", "mine", "y", event_id="y1"),
                                                                 start("t2", "fixed", "s4")]),
            "put_if_absent": lambda: store.put_if_absent(
                thread_id="t2", run_id="fixed", event_type="run.start", category="trace", event_id="s5"),
            "put_run_close": lambda: store.put_run_close(
                [start("t4", "fixed", "s6")], new_event("t4", "fixed", "run.end", "outputs"),
                RunRow(run_id="fixed", thread_id="t4", status=RunStatus.SUCCESS)),
        }
        for name, attempt in refusals.items():
            try:
                await attempt()
            except ValueError as error:
                assert_run_id_taken(error, "fixed")
            else:
                pytest.fail(f"{name}: a second run.start of run 'fixed' was written")
        # nothing of a refused write was written, anywhere
        assert [e.event_id for e in await read_all(store, "t1")] == [e.event_id for e in first]
        assert await store.list_threads() == ["t1"]
        assert [await store.last_seq(t) for t in ("t1", "t2", "t3", "t4")] == [2, 0, 0, 0]
        assert await store.get_run("fixed") is None
        # a retry of the same run.start (same event_id) is the same write: idempotent
        again = await store.put_batch([start("t1", "fixed", "s1"), human("t1", "fixed", "hi",
                                                                         event_id=first[1].event_id)])
        assert [e.to_dict() for e in again] == [e.to_dict() for e in first]
        retried, created = await store.put_if_absent(
            thread_id="t1", run_id="fixed", event_type="run.start", category="trace", event_id="s1")
        assert (retried.seq, created) == (1, False)
        assert await store.last_seq("t1") == 2

    async def test_two_run_starts_of_one_run_in_one_batch_are_refused(self, store: RunEventStore) -> None:
        for batch in ([start("t", "r", "a"), start("t", "r", "b")],
                      [start("t", "r", "a"), start("u", "r", "b")]):
            with pytest.raises(ValueError, match="already used by another run") as caught:
                await store.put_batch(batch)
            assert_run_id_taken(caught.value, "r")
        assert await store.list_threads() == []
        twice = await store.put_batch([start("t", "r", "a"), start("t", "r", "a")])  # one event, repeated
        assert [e.seq for e in twice] == [1, 1]

    async def test_runs_racing_for_one_run_id_leave_exactly_one(
        self, store: RunEventStore, store_factory: StoreFactory
    ) -> None:
        await store.put(thread_id="probe", run_id="p", event_type="tool.call", category="trace")
        async with AsyncExitStack() as stack:
            stores = [store]
            for _ in range(3):  # more connections to the same data, where the backend has them
                other = await stack.enter_async_context(store_factory())
                if await other.last_seq("probe") == 1:
                    stores.append(other)
            attempts = [stores[i % len(stores)].put_batch([start(f"t{i % 3}", "race", f"e{i}")])
                        for i in range(12)]
            results = await asyncio.gather(*attempts, return_exceptions=True)
        won = [result for result in results if isinstance(result, list)]
        assert len(won) == 1, results
        for result in results:
            if not isinstance(result, list):
                assert isinstance(result, BaseException)
                assert_run_id_taken(result, "race")
        stored = [e for t in ("t0", "t1", "t2") for e in await read_all(store, t)]
        assert [e.event_id for e in stored] == [won[0][0].event_id]

    async def test_a_deleted_run_frees_its_run_id(self, store: RunEventStore) -> None:
        await store.put_batch([start("t", "r", "old"), human("t", "r", "a")])
        await store.put_batch([start("keep", "k", "k0")])
        assert await store.delete_by_run("t", "r") == 2
        again = await store.put(thread_id="u", run_id="r", event_type="run.start", category="trace",
                                event_id="new")
        assert (again.thread_id, again.seq) == ("u", 1)
        assert await store.delete_by_thread("keep") == 1
        assert (await store.put_batch([start("t", "k", "k1")]))[0].seq == 3

    # -- runs that started without a row ---------------------------------------------------------
    async def test_a_run_started_without_a_row_is_listed(self, store: RunEventStore) -> None:
        rowless = await store.put_batch([start("t", "lost", "s-lost", user_id="u"), human("t", "lost", "hi"),
                                         start("t", "kept", "s-kept"), start("u", "b-lost", "s-b")])
        await store.put_run(RunRow(run_id="kept", thread_id="t", status=RunStatus.RUNNING))
        listed = await store.list_runs_without_row()
        assert [(e.run_id, e.event_id, e.thread_id) for e in listed] == [
            ("b-lost", "s-b", "u"), ("lost", "s-lost", "t")]
        assert listed[1].to_dict() == rowless[0].to_dict()
        assert [e.run_id for e in await store.list_runs_without_row(limit=1)] == ["b-lost"]
        assert [e.run_id for e in await store.list_runs_without_row(after="b-lost")] == ["lost"]
        await store.put_run(RunRow(run_id="lost", thread_id="t"))
        assert [e.run_id for e in await store.list_runs_without_row()] == ["b-lost"]
        await store.delete_by_thread("u")
        assert await store.list_runs_without_row() == []

    async def test_a_run_killed_before_its_first_row_is_closed_exactly_once(
        self, store: RunEventStore, store_factory: StoreFactory
    ) -> None:
        # what the journal's first batch writes before its first put_run; the worker then died
        await store.put_batch([start("t", "dead", "s-dead", created_at=LONG_AGO, user_id="u"),
                               human("t", "dead", "hi", created_at=LONG_AGO, user_id="u")])
        # a run that is still starting (recent) and one that ended without ever writing a row
        await store.put_batch([start("t", "young", "s-young"), start("t", "ended", "s-end",
                                                                     created_at=LONG_AGO),
                               new_event("t", "ended", "run.end", "outputs", created_at=LONG_AGO)])
        async with store_factory() as other:
            results = await asyncio.gather(reconcile_orphans(store, older_than=timedelta(minutes=5)),
                                           reconcile_orphans(other, older_than=timedelta(minutes=5)))
        closed = [item for result in results for item in result]
        assert [item.row.run_id for item in closed] == ["dead"]
        (item,) = closed
        assert (item.event.event_type, item.event.metadata["reconciled"]) == ("run.cancel", True)
        assert item.last_activity == LONG_AGO
        row = await store.get_run("dead")
        assert row is not None
        assert (row.thread_id, row.user_id, row.status) == ("t", "u", RunStatus.CANCELLED)
        assert row.started_at == LONG_AGO
        cancels = await store.list_events("t", "dead", event_types=["run.cancel"])
        assert [e.event_id for e in cancels] == [item.event.event_id]
        assert await store.get_run("young") is None
        assert await store.list_events("t", "ended", event_types=["run.cancel"]) == []
        assert await reconcile_orphans(store, older_than=timedelta(minutes=5)) == []

    async def test_an_interrupted_reconciliation_of_a_row_less_run_is_finished(
        self, store: RunEventStore
    ) -> None:
        await store.put_batch([start("t", "dead", "s", created_at=LONG_AGO)])
        closed = await reconcile_orphans(store, older_than=timedelta(minutes=5))
        assert [item.row.run_id for item in closed] == ["dead"]
        cancel: RunEvent = closed[0].event
        # the reconciler died between its run.cancel and the row: the next one writes the row only
        await store.delete_by_run("t", "dead")
        await store.put_batch([start("t", "dead", "s", created_at=LONG_AGO), cancel.as_new_event()])
        assert await store.get_run("dead") is None
        assert await reconcile_orphans(store, older_than=timedelta(minutes=5)) == []
        row = await store.get_run("dead")
        assert row is not None
        assert row.status == RunStatus.CANCELLED
        assert len(await store.list_events("t", "dead", event_types=["run.cancel"])) == 1
