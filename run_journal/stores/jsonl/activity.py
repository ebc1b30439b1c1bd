"""The activity order of a JSONL store: threads by their newest event, read without opening them.

Under the store's root::

    activity/<hour>/<entry>                  one entry per thread that holds events
    users/<user>/activity/<hour>/<entry>     one per thread that holds events of the user
    threads/<name>/activity                  the thread's entry, as ``<hour>/<entry>``
    threads/<name>/users/<user>              the user's entry of the thread

An entry is a symbolic link named ``<stamp>_<name>`` whose target is the thread id (it is never
followed): ``<stamp>`` is the created_at of the thread's (or the user's) newest event, fixed width,
so names sort in time order, and ``<hour>`` (``YYYYMMDDHH`` of it) keeps each directory small. A
page of the most recent threads lists the newest hours, newest first, and stops when it has enough:
it costs the same however many threads the store holds. The links in the thread's directory say
which entry is current: a writer (under the thread's lock) makes the new entry, points the thread's
link at it (an atomic rename) and removes the old one, so a reader that finds an entry its thread
does not point at (left by a writer that died half-way) skips it.

A store written before this order existed gets it at ``setup()`` (``build``, once, under a store
lock). Blocking: call from a worker thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Final

from run_journal.stores.jsonl import log
from run_journal.stores.jsonl.layout import Layout, file_name
from run_journal.stores.queries import RecentThreadQuery, ThreadActivity, stamp

STAMP_WIDTH: Final = len("20240501T130000.123456")
COMPLETE: Final = ".complete"
"""A file in ``activity/``: the order holds every thread (``build`` ran)."""


def compact(moment: str) -> str:
    """``2024-05-01T13:00:00.123456+00:00`` (a ``stamp``) as ``20240501T130000.123456``."""
    return moment[0:4] + moment[5:7] + moment[8:10] + "T" + moment[11:13] + moment[14:16] + moment[17:26]


def hour(moment: str) -> str:
    """The directory of a compact stamp's entries: ``YYYYMMDDHH``."""
    return moment[0:8] + moment[9:11]


def expand(name: str) -> str:
    """The ``stamp`` of an entry's compact stamp."""
    return (f"{name[0:4]}-{name[4:6]}-{name[6:8]}T{name[9:11]}:{name[11:13]}:{name[13:15]}"
            f"{name[15:22]}+00:00")


class Activity:
    """The order of one store directory, and of each user's threads in it."""

    def __init__(self, layout: Layout) -> None:
        self._layout = layout

    def _order(self, user_id: str | None) -> Path:
        root = self._layout.root
        return root / "activity" if user_id is None else root / "users" / file_name(user_id) / "activity"

    @staticmethod
    def _link(directory: Path, user_id: str | None) -> Path:
        return directory / "activity" if user_id is None else directory / "users" / file_name(user_id)

    # -- writes (the caller holds the thread's lock) ---------------------------------------------
    def place(self, thread_id: str, directory: Path, user_id: str | None, moment: str | None) -> None:
        """Put the thread at ``moment`` (a ``stamp``) in the order (of ``user_id``), or, None, take
        it out."""
        link = self._link(directory, user_id)
        try:
            old = os.readlink(link)
        except FileNotFoundError:
            old = None
        new = None
        if moment is not None:
            new = f"{hour(compact(moment))}/{compact(moment)}_{directory.name}"
            if new == old:
                return
            entry = self._order(user_id) / new
            try:
                os.symlink(thread_id, entry)
            except FileNotFoundError:
                entry.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileExistsError):
                    os.symlink(thread_id, entry)
            except FileExistsError:
                pass
            temp = link.with_name(f".{link.name}.{uuid.uuid4().hex}.tmp")
            link.parent.mkdir(exist_ok=True)
            os.symlink(new, temp)
            os.replace(temp, link)
        elif old is not None:
            link.unlink(missing_ok=True)
        if old is not None:
            (self._order(user_id) / old).unlink(missing_ok=True)

    def users_of(self, directory: Path) -> list[str]:
        """The file names of the users the thread has entries for (``place`` with their user ids)."""
        folder = directory / "users"
        return sorted(path.name for path in folder.iterdir() if not path.name.startswith(".")) \
            if folder.is_dir() else []

    def replace_from(self, thread_id: str, directory: Path, view: log.Snapshot | None) -> None:
        """After a delete: the thread and each of its users where its newest remaining event says."""
        newest = newest_events(view)
        self.place(thread_id, directory, None, newest.get(None))
        named = {file_name(user): user for user in newest if user is not None}
        for user_name in self.users_of(directory):
            if user_name in named:
                self.place(thread_id, directory, named[user_name], newest[named[user_name]])
            else:  # the user has no event left here: the entry and the link go
                link = directory / "users" / user_name
                with contextlib.suppress(FileNotFoundError):
                    entry = os.readlink(link)
                    (self._layout.root / "users" / user_name / "activity" / entry).unlink(missing_ok=True)
                link.unlink(missing_ok=True)

    # -- reads -------------------------------------------------------------------------------------
    def page(self, query: RecentThreadQuery) -> list[ThreadActivity]:
        order = self._order(query.user_id)
        if not order.is_dir():
            return []
        before = (compact(query.before[0]), query.before[1]) if query.before is not None else None
        found: list[ThreadActivity] = []
        for folder in sorted((name for name in os.listdir(order) if not name.startswith(".")), reverse=True):
            if before is not None and folder > hour(before[0]):
                continue
            for moment, thread_ids in _by_moment(order / folder, query.user_id, self._layout):
                for thread_id in sorted(thread_ids, reverse=True):
                    if before is None or (moment, thread_id) < before:
                        found.append(ThreadActivity(thread_id, datetime.fromisoformat(expand(moment))))
                        if len(found) == query.limit:
                            return found
        return found

    # -- the upgrade of an older store ---------------------------------------------------------------
    def build(self) -> None:
        """Give every thread its place (and its users theirs) unless it has one: once per store,
        under a store-wide lock; later ``setup()`` calls find it done."""
        order = self._order(None)
        if (order / COMPLETE).exists():
            return
        order.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._layout.root / "activity.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if (order / COMPLETE).exists():
                return
            for thread_id, directory in self._layout.threads():
                with log.locked(directory):
                    if not (directory / "activity").is_symlink():
                        with log.snapshot(directory) as view:
                            self._place_all(thread_id, directory, newest_events(view))
            (order / COMPLETE).touch()
        finally:
            os.close(fd)

    def _place_all(self, thread_id: str, directory: Path, newest: Mapping[str | None, str]) -> None:
        for user_id, moment in newest.items():
            self.place(thread_id, directory, user_id, moment)


def _by_moment(folder: Path, user_id: str | None, layout: Layout) -> Iterator[tuple[str, list[str]]]:
    """An hour's entries, newest first, grouped by moment (compact stamp) with their thread ids;
    an entry its thread does not point at (a writer died half-way) is left out."""
    names = sorted((name for name in os.listdir(folder) if not name.startswith(".")), reverse=True)
    group: list[str] = []
    moment = ""
    for name in names:
        if name[:STAMP_WIDTH] != moment and group:
            yield moment, group
            group = []
        moment = name[:STAMP_WIDTH]
        thread_id = _current(folder, name, user_id, layout)
        if thread_id is not None:
            group.append(thread_id)
    if group:
        yield moment, group


def _current(folder: Path, name: str, user_id: str | None, layout: Layout) -> str | None:
    """The thread id of an entry, if the thread's link points at it."""
    try:
        thread_id = os.readlink(folder / name)
        directory = layout.thread_dir(thread_id)
        link = directory / "activity" if user_id is None else directory / "users" / file_name(user_id)
        if os.readlink(link) != f"{folder.name}/{name}":
            return None
    except (OSError, ValueError):  # gone meanwhile, or a name no thread id makes
        return None
    return thread_id


def newest_events(view: log.Snapshot | None) -> dict[str | None, str]:
    """The stamp of the thread's newest event (key None) and of each user's newest there."""
    newest: dict[str | None, str] = {}
    if view is None:
        return newest
    for record in _backwards(view):
        moment = stamp(datetime.fromisoformat(record["created_at"]))
        newest.setdefault(None, moment)
        user_id = record.get("user_id")
        if isinstance(user_id, str):
            newest.setdefault(user_id, moment)
    return newest


def _backwards(view: log.Snapshot) -> Iterable[log.Record]:
    last, width = view.count, 256
    while last >= 1:
        first = max(1, last - width + 1)
        yield from reversed(list(view.records(first, last)))
        last, width = first - 1, min(width * 2, 8192)


def newest_of_batch(lines: Iterable[tuple[str | None, str]]) -> dict[str | None, str]:
    """From (user_id, stamp) of a batch's written events in seq order: the newest per user, and
    overall (key None)."""
    newest: dict[str | None, str] = {}
    for user_id, moment in lines:
        newest[None] = moment
        if user_id is not None:
            newest[user_id] = moment
    return newest
