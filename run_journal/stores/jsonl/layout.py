"""Where a JSONL store keeps what, under its root directory::

    store.json                          contract version the directory was written with
    threads/<name>/                     one thread: see ``log`` (lock, meta, events, index)
    threads/<name>/runs/<name>.json     run rows of that thread, each replaced atomically
    threads/<name>/bodies/<digest>      the thread's bodies, one file each (``bodies``)
    run_index/<name>                    run id -> thread id, so ``get_run`` needs no scan
    run_starts/<name>                   run id -> the run.start that took it (``starts``)

``<name>`` is ``file_name(id)`` and every path is built through ``path_inside``, so no id can name a
path outside the root (checked again on the resolved path). Blocking: call from a worker
thread.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from run_journal.stores.base import (
    CONTRACT_MAJOR,
    CONTRACT_VERSION,
    CorruptStoreError,
    IncompatibleStoreError,
)
from run_journal.stores.jsonl.damage import read_meta
from run_journal.stores.jsonl.files import CorruptRecordWarning, write_atomic

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]")


def file_name(identifier: str) -> str:
    """A file name for an id: readable prefix + 16 hex digits of its sha256, unique per id, never
    path syntax (ids that differ only by case or by characters a filesystem dislikes get their own)."""
    digest = hashlib.sha256(identifier.encode("utf-8")).hexdigest()[:16]
    return f"{_UNSAFE.sub('_', identifier)[:48]}-{digest}"


def path_inside(root: Path, *names: str) -> Path:
    """``root / names...``, refused (ValueError) if it resolves outside ``root`` (a symlink swapped
    in, say). Blocking (it resolves the path): call it from a worker thread."""
    path = root.joinpath(*names)
    resolved_root = root.resolve()
    if not path.resolve().is_relative_to(resolved_root):
        raise ValueError(f"{path} resolves outside the store directory {resolved_root}")
    return path


class Layout:
    """The paths of one store directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def create(self, *, durable: bool) -> None:
        """Make the directories and the contract marker; refuse a directory of another major."""
        (self.root / "threads").mkdir(parents=True, exist_ok=True)
        (self.root / "run_index").mkdir(exist_ok=True)
        (self.root / "run_starts").mkdir(exist_ok=True)
        marker = self.root / "store.json"
        if not marker.exists():
            data = json.dumps({"contract_version": CONTRACT_VERSION, "format": "run-journal-jsonl"})
            write_atomic(marker, data.encode(), durable=durable)
        stored = str(json.loads(marker.read_bytes()).get("contract_version", "?"))
        if stored.split(".", 1)[0] != str(CONTRACT_MAJOR):
            raise IncompatibleStoreError(
                f"{self.root} was written with contract {stored}; this library reads "
                f"{CONTRACT_MAJOR}.x (copy it with a matching run-journal version)"
            )

    def thread_dir(self, thread_id: str) -> Path:
        return path_inside(self.root, "threads", file_name(thread_id))

    def run_file(self, thread_id: str, run_id: str) -> Path:
        return path_inside(self.root, "threads", file_name(thread_id), "runs", f"{file_name(run_id)}.json")

    def run_pointer(self, run_id: str) -> Path:
        return path_inside(self.root, "run_index", file_name(run_id))

    def start_claim(self, run_id: str) -> Path:
        return path_inside(self.root, "run_starts", file_name(run_id))

    def threads(self) -> Iterator[tuple[str, Path]]:
        """``(thread_id, directory)`` of every thread that ever held events (one whose ``meta.json``
        is damaged beyond recovery is left out, with a warning naming it)."""
        for directory in (self.root / "threads").iterdir():
            try:
                meta = read_meta(directory)
            except CorruptStoreError as error:
                warnings.warn(f"{error}; the thread is left out", CorruptRecordWarning, stacklevel=2)
                continue
            if meta is not None and meta["thread_id"]:
                yield meta["thread_id"], directory

    def run_folders(self, thread_id: str | None) -> list[Path]:
        """The folders of run rows: of one thread, or of all."""
        if thread_id is not None:
            return [self.thread_dir(thread_id) / "runs"]
        return [directory / "runs" for directory in (self.root / "threads").iterdir()]
