"""The file primitives of a JSONL store: the index word format, whole writes, locks, and reading one line.

Every write here either writes all of its bytes or raises ``OSError`` (a full disk, a file size limit):
a short write is never taken for a whole one. Blocking: call from a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Final

WORD: Final = 8
PACK: Final = struct.Struct(">Q")
Record = dict[str, Any]
_CHUNK: Final = 1 << 20


class CorruptRecordWarning(RuntimeWarning):
    """A committed JSONL line or file could not be decoded; readers skip it instead of failing."""


def read_at(handle: IO[bytes], offset: int, size: int) -> bytes:
    """Every byte a reader takes from an events or index file goes through here (tests count them)."""
    if size <= 0:
        return b""
    return os.pread(handle.fileno(), size, offset)


def write_fully(fd: int, data: bytes, offset: int, path: Path) -> None:
    """``pwrite`` all of ``data`` at ``offset`` or raise ``OSError`` naming ``path`` (a short write,
    on a full disk or at a file size limit, is finished or reported, never taken as done)."""
    view = memoryview(data)
    done = 0
    while done < len(data):
        try:
            written = os.pwrite(fd, view[done:], offset + done)
        except OSError as error:
            raise OSError(error.errno, f"{path}: wrote {done} of {len(data)} bytes at byte {offset}: "
                                       f"{error.strerror}") from error
        if written <= 0:
            raise OSError(errno.ENOSPC, f"{path}: wrote {done} of {len(data)} bytes at byte {offset}: "
                                        "no more room")
        done += written


def write_atomic(path: Path, data: bytes, *, durable: bool) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new content, never a mix; a
    failed write leaves the old file and no temporary one."""
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            write_fully(fd, data, 0, path)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if durable:
        sync_directory(path.parent)


def sync_directory(directory: Path) -> None:
    """``fsync`` a directory, so a file created or renamed in it survives a power loss."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_exclusive(path: Path, data: bytes, *, durable: bool) -> bool:
    """Create ``path`` holding ``data``, whole, unless it exists (False then): a written temporary
    file is ``link``ed to the name, which fails if the name is taken, even by another process."""
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        write_atomic(temp, data, durable=durable)
        os.link(temp, path)
        if durable:
            sync_directory(path.parent)
        return True
    except FileExistsError:
        return False
    finally:
        temp.unlink(missing_ok=True)


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold the thread's exclusive OS lock (blocks; call from a worker thread, never the loop)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


@contextlib.contextmanager
def try_locked(directory: Path) -> Iterator[bool]:
    """The thread's lock if it is free right now (True), else nothing (False); never waits, so a
    writer holding its own thread's lock may take another's without two writers waiting crosswise."""
    if not directory.is_dir():
        yield True  # no such thread: nobody writes it
        return
    fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def parse_line(line: bytes) -> Record | None:
    """One JSON line (its newline may be included) as a record with an integer ``seq``, or None."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if isinstance(record, dict) and type(record.get("seq")) is int:
        return record
    return None


def last_line(span: bytes) -> bytes | None:
    """The last line of a span that holds more than one (damaged bytes before a line), or None."""
    cut = span.rfind(b"\n", 0, len(span) - 1)
    return span[cut + 1 :] if cut >= 0 else None


def scan_lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """Every line of a file as ``(offset, line without its newline, ends with a newline)``, read in
    chunks (the file may be large)."""
    with open(path, "rb") as handle:
        offset, pending = 0, b""
        while chunk := handle.read(_CHUNK):
            pending += chunk
            start = 0
            while (cut := pending.find(b"\n", start)) >= 0:
                yield offset + start, pending[start:cut], True
                start = cut + 1
            offset, pending = offset + start, pending[start:]
        if pending:
            yield offset, pending, False
