"""Which run.start holds each run id in a JSONL store: ``run_starts/<name>`` claim files.

A claim is ``{"run_id", "thread_id", "event_id"}`` of the ``run.start`` that took the run id. A writer
takes it, under its thread's lock, before it appends a new ``run.start``; a claim stays the run's while
its ``run.start`` is stored, so a second run under the same id is refused in any thread (and in any
process: a claim is created with ``link``, which fails when the name exists). A claim whose event is
gone (a deleted run, a write that failed after the claim) is stale and is taken over. Blocking: call
from a worker thread.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

from run_journal.envelope import NewEvent, RunEvent, validate_id
from run_journal.stores.base import RUN_START, CorruptStoreError, RunIdTakenError, StartQuery
from run_journal.stores.jsonl import log
from run_journal.stores.jsonl.facts import Facts, ThreadFacts
from run_journal.stores.jsonl.files import create_exclusive, try_locked, write_atomic
from run_journal.stores.jsonl.layout import Layout

Claim = tuple[str, str]
"""(thread_id, event_id) of the run.start that holds a run id."""


class RunStarts:
    """The claims of one store directory."""

    def __init__(self, layout: Layout, facts: ThreadFacts, *, durable: bool) -> None:
        self._layout = layout
        self._facts = facts
        self._durable = durable

    def claim(self, event: NewEvent, own: Facts) -> None:
        """Take the run id for ``event``, a ``run.start`` about to be appended to its thread (whose
        lock the caller holds; ``own`` are that thread's facts), or raise ``RunIdTakenError``."""
        path = self._layout.start_claim(event.run_id)
        data = json.dumps({"run_id": event.run_id, "thread_id": event.thread_id,
                           "event_id": event.event_id}).encode()
        mine = (event.thread_id, event.event_id)
        while True:
            found = read_claim(path)
            if found is None:
                if create_exclusive(path, data, durable=self._durable):
                    return
                continue  # another writer claimed it first: look at its claim
            if found == mine:
                return
            owner, owner_event = found
            if owner == event.thread_id:  # this thread: its facts under the lock held now decide
                if owner_event in own.event_ids:
                    raise RunIdTakenError(event.run_id, owner, owner_event)
                write_atomic(path, data, durable=self._durable)
                return
            if self._take_over(path, found, data):
                return

    def _take_over(self, path: Path, found: Claim, data: bytes) -> bool:
        """A claim of another thread: refused while its run.start is stored or its thread is being
        written (its lock is taken without waiting); taken over when stale. False: look again."""
        owner, owner_event = found
        run_id = json.loads(data)["run_id"]
        directory = self._layout.thread_dir(owner)
        with try_locked(directory) as free:
            if not free or self._stored(directory, owner_event):
                raise RunIdTakenError(run_id, owner, owner_event)
            if read_claim(path) != found:
                return False
            write_atomic(path, data, durable=self._durable)
            return True

    def _stored(self, directory: Path, event_id: str) -> bool:
        with log.snapshot(directory) as view:
            return event_id in self._facts.refresh(directory, view).event_ids

    def check(self, batch: Iterable[NewEvent]) -> None:
        """Before a batch over several threads (each written under its own lock, one after the
        other): refuse it whole if one of its new run.starts names a taken run id."""
        for event in batch:
            if event.event_type != RUN_START:
                continue
            found = read_claim(self._layout.start_claim(event.run_id))
            if found is not None and found != (event.thread_id, event.event_id) \
                    and self._stored(self._layout.thread_dir(found[0]), found[1]):
                raise RunIdTakenError(event.run_id, *found)

    def release(self, thread_id: str, run_ids: Iterable[str]) -> None:
        """After a delete (under the thread's lock): the claims the thread held are free again."""
        for run_id in run_ids:
            path = self._layout.start_claim(run_id)
            found = read_claim(path)
            if found is not None and found[0] == thread_id:
                path.unlink(missing_ok=True)

    def without_row(self, query: StartQuery, has_row: Callable[[str], bool]) -> list[RunEvent]:
        """``list_runs_without_row``: the stored run.start of each claimed run id without a row."""
        found: list[RunEvent] = []
        folder = self._layout.root / "run_starts"
        claims = []
        for path in folder.iterdir() if folder.is_dir() else ():
            try:
                claim = json.loads(path.read_bytes())
                run_id = validate_id("run_id", claim["run_id"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a temporary file, or a damaged claim (verify reports it)
            if query.after is None or run_id > query.after:
                claims.append((run_id, claim))
        for run_id, claim in sorted(claims, key=lambda item: item[0]):
            if has_row(run_id):
                continue
            try:
                event = self._event(str(claim["thread_id"]), str(claim["event_id"]))
            except (ValueError, CorruptStoreError):
                continue  # a damaged claim or thread: verify reports it
            if event is not None:
                found.append(event)
                if len(found) == query.limit:
                    break
        return found

    def _event(self, thread_id: str, event_id: str) -> RunEvent | None:
        directory = self._layout.thread_dir(validate_id("thread_id", thread_id))
        with log.snapshot(directory) as view:
            if view is None:
                return None
            seq = self._facts.refresh(directory, view).event_ids.get(event_id)
            record = view.record_at(seq) if seq is not None else None
        return RunEvent.from_dict(record) if record is not None else None


def read_claim(path: Path) -> Claim | None:
    """The claim in a file, or None (no file). A damaged claim holds nothing: it reads as a claim of
    nobody, which a writer takes over."""
    try:
        data = json.loads(path.read_bytes())
        return str(data["thread_id"]), str(data["event_id"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return ("", "")
