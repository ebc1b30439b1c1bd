"""A JSONL thread's bodies: one file per body, ``threads/<name>/bodies/<digest>``, holding its data.

A body file is created whole or not at all (``files.create_exclusive``: a complete temporary file
linked to the name), so a killed writer leaves no partial body, and a digest already there is left
as it is (the link fails: the first writer's file stays). Writers hold the thread's lock, so a
thread's delete never races a body being added. Blocking: call from a worker thread.
"""

from __future__ import annotations

import bisect
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from run_journal.bodies import Body
from run_journal.stores.jsonl.files import create_exclusive

FOLDER: Final = "bodies"
_DIGEST_LENGTH: Final = 64


def keep(directory: Path, bodies: Sequence[Body], *, durable: bool) -> None:
    """Under the thread's lock (``directory`` is the thread's): each body the thread lacks."""
    if not bodies:
        return
    folder = directory / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    for body in bodies:
        path = folder / body.digest
        if not path.exists():
            create_exclusive(path, body.data, durable=durable)


def read(directory: Path, digests: Sequence[str]) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    folder = directory / FOLDER
    for digest in digests:
        try:
            found[digest] = (folder / digest).read_bytes()
        except FileNotFoundError:
            continue
    return found


def page(directory: Path, thread_id: str, after: str | None, limit: int) -> list[Body]:
    """The thread's bodies by digest after ``after``; a file removed meanwhile is passed over."""
    folder = directory / FOLDER
    try:
        names = sorted(name for name in (path.name for path in folder.iterdir())
                       if len(name) == _DIGEST_LENGTH and not name.startswith("."))
    except FileNotFoundError:
        return []
    start = 0 if after is None else bisect.bisect_right(names, after)
    found: list[Body] = []
    for name in names[start:]:
        try:
            found.append(Body(thread_id, name, (folder / name).read_bytes()))
        except FileNotFoundError:
            continue
        if len(found) == limit:
            break
    return found


def drop(directory: Path) -> None:
    """Under the thread's lock: every body of the thread."""
    shutil.rmtree(directory / FOLDER, ignore_errors=True)
