"""The on-disk log of one JSONL thread: synchronous, process-safe, read without rereading the file.

A thread directory holds::

    lock                 flock target; never deleted, so every process locks the same inode
    meta.json            {"thread_id", "generation"}: names the current pair of data files
    events-<gen>.jsonl   one ``RunEvent.to_dict()`` JSON line per event, in seq order
    index-<gen>.bin      8-byte big-endian words: word 0 is the committed count ``n``,
                         word k (k >= 1) is the byte offset where seq k's line ends

Writers hold ``flock(LOCK_EX)`` on ``lock`` while they read ``n``, append lines, append index words
and finally overwrite word 0: that aligned 8-byte write is the commit, so a batch appears all at once
and a writer killed at any point leaves only an uncommitted tail, which the next writer cuts off.
Readers take no lock: they read ``n`` and never look past ``end(n)``. Seq k spans
``[end(k-1), end(k))``; a deleted event keeps its index word with a zero-length span, so seq numbers
are never reused and seq k is always found with one seek. Deleting rewrites a new generation and
switches ``meta.json`` atomically; open readers keep reading the old (unlinked) files consistently.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import struct
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Final

from run_journal.envelope import NewEvent, dumps

WORD: Final = 8
_PACK: Final = struct.Struct(">Q")
Record = dict[str, Any]
Predicate = Callable[[Record], bool]


class CorruptRecordWarning(RuntimeWarning):
    """A committed JSONL line could not be decoded; readers skip it instead of failing."""


def read_at(handle: IO[bytes], offset: int, size: int) -> bytes:
    """Every byte a reader takes from an events or index file goes through here (tests count them)."""
    if size <= 0:
        return b""
    return os.pread(handle.fileno(), size, offset)


def write_atomic(path: Path, data: bytes, *, durable: bool) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new content, never a mix."""
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(temp, "wb") as handle:
        handle.write(data)
        if durable:
            os.fsync(handle.fileno())
    os.replace(temp, path)


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


def read_meta(directory: Path) -> dict[str, str] | None:
    try:
        meta: dict[str, str] = json.loads((directory / "meta.json").read_bytes())
    except FileNotFoundError:
        return None
    return meta


class Snapshot:
    """A consistent view of one generation of a thread: open files and the committed count."""

    def __init__(self, directory: Path, generation: str, *, writable: bool = False) -> None:
        mode = "r+b" if writable else "rb"
        self.directory = directory
        self.generation = generation
        self.events: IO[bytes] = open(directory / f"events-{generation}.jsonl", mode)  # noqa: SIM115 - closed by close()
        try:
            self.index: IO[bytes] = open(directory / f"index-{generation}.bin", mode)  # noqa: SIM115 - closed by close()
        except BaseException:
            self.events.close()
            raise
        header = read_at(self.index, 0, WORD)
        self.count = _PACK.unpack(header)[0] if len(header) == WORD else 0

    def close(self) -> None:
        self.events.close()
        self.index.close()

    def ends(self, first: int, last: int) -> list[int]:
        """End offsets of seq ``first-1 .. last`` (``first >= 1``), so spans are consecutive pairs."""
        words = read_at(self.index, WORD * (first - 1), WORD * (last - first + 2))
        values = [_PACK.unpack_from(words, i)[0] for i in range(0, len(words) - len(words) % WORD, WORD)]
        if first == 1:
            values[0] = 0  # word 0 is the header, not an offset
        return values

    def committed_end(self) -> int:
        return self.ends(self.count, self.count)[-1] if self.count else 0

    def window(self, first: int, last: int) -> Iterator[tuple[int, bytes]]:
        """The raw lines of seq ``first..last`` (clamped to the committed range), deleted ones empty."""
        last = min(last, self.count)
        if first > last:
            return
        ends = self.ends(first, last)
        data = read_at(self.events, ends[0], ends[-1] - ends[0])
        for position, seq in enumerate(range(first, last + 1)):
            yield seq, data[ends[position] - ends[0] : ends[position + 1] - ends[0]]

    def records(self, first: int, last: int) -> Iterator[Record]:
        for seq, line in self.window(first, last):
            if line:
                record = decode(line, seq, self.directory)
                if record is not None:
                    yield record

    def forward(
        self, after_seq: int, limit: int, keep: Predicate, stop_before: int | None = None
    ) -> list[Record]:
        """The first ``limit`` matching records above ``after_seq``, reading in growing windows."""
        found: list[Record] = []
        last = self.count if stop_before is None else min(self.count, stop_before - 1)
        first, width = after_seq + 1, max(16, limit)
        while first <= last and len(found) < limit:
            for record in self.records(first, min(last, first + width - 1)):
                if keep(record):
                    found.append(record)
                    if len(found) == limit:
                        break
            first, width = first + width, min(width * 2, 8192)
        return found

    def backward(self, before_seq: int | None, limit: int, keep: Predicate) -> list[Record]:
        """The last ``limit`` matching records below ``before_seq`` (or the latest), ascending."""
        found: list[Record] = []
        last = self.count if before_seq is None else min(self.count, before_seq - 1)
        width = max(16, limit)
        while last >= 1 and len(found) < limit:
            first = max(1, last - width + 1)
            matches = [record for record in self.records(first, last) if keep(record)]
            found.extend(reversed(matches))
            last, width = first - 1, min(width * 2, 8192)
        found = found[:limit]
        found.reverse()
        return found

    def record_at(self, seq: int) -> Record | None:
        return next(self.records(seq, seq), None)


def decode(line: bytes, seq: int, directory: Path) -> Record | None:
    """One committed line as a dict; a damaged line is reported and skipped, never raised."""
    try:
        record: Record = json.loads(line)
        if record.get("seq") == seq:
            return record
        problem = f"carries seq {record.get('seq')!r}"
    except (ValueError, AttributeError) as error:
        problem = f"is not valid JSON ({error})"
    message = f"{directory}: the line of seq {seq} {problem}; skipped"
    warnings.warn(message, CorruptRecordWarning, stacklevel=2)
    return None


def event_line(event: NewEvent, seq: int) -> bytes:
    """The ``RunEvent.to_dict()`` JSON line of ``event`` at ``seq``, built from the stored JSON text.

    ``content_json`` and ``metadata_json`` are spliced in as serialized by the envelope, so the bytes
    on disk are exactly the one normalization. Newlines inside strings are escaped by JSON; other line
    separators (U+2028, U+2029, U+0085) stay raw, which is why readers split on ``b"\\n"`` only.
    """
    text = (
        f'{{"thread_id":{dumps(event.thread_id)},"run_id":{dumps(event.run_id)},"seq":{seq},'
        f'"event_type":{dumps(event.event_type)},"category":{dumps(event.category)},'
        f'"content":{event.content_json},"metadata":{event.metadata_json},'
        f'"created_at":{dumps(event.created_at.isoformat())},"event_id":{dumps(event.event_id)},'
        f'"user_id":{dumps(event.user_id)}}}\n'
    )
    return text.encode("utf-8")


@contextlib.contextmanager
def snapshot(directory: Path) -> Iterator[Snapshot | None]:
    """The thread's current generation for reading, or None when the thread has no events."""
    for _ in range(10):
        meta = read_meta(directory)
        if meta is None:
            yield None
            return
        try:
            view = Snapshot(directory, meta["generation"])
        except FileNotFoundError:
            _restore_index(directory, meta["generation"])
            continue  # or a delete switched generations between reading meta and opening the files
        try:
            yield view
        finally:
            view.close()
        return
    raise RuntimeError(f"{directory}: the thread keeps changing generation; try again")


def _restore_index(directory: Path, generation: str) -> None:
    """A reader found events without their index (lost or removed): rebuild it under the lock."""
    if (directory / f"events-{generation}.jsonl").exists():
        with locked(directory):
            meta = read_meta(directory)
            index = directory / f"index-{generation}.bin"
            if meta and meta["generation"] == generation and not index.exists():
                rebuild_index(directory, generation)


# -- writing (caller holds ``locked(directory)``) -------------------------------------------------
def open_for_write(directory: Path, thread_id: str, *, durable: bool) -> Snapshot:
    """The current generation, created if new and repaired if a writer died before committing."""
    meta = read_meta(directory)
    if meta is None:
        generation = uuid.uuid4().hex
        (directory / f"events-{generation}.jsonl").touch()
        (directory / f"index-{generation}.bin").write_bytes(_PACK.pack(0))
        _write_meta(directory, thread_id, generation, durable=durable)
    else:
        generation = meta["generation"]
        index_path = directory / f"index-{generation}.bin"
        if not index_path.exists():
            rebuild_index(directory, generation)
    view = Snapshot(directory, generation, writable=True)
    repair(view)
    return view


def repair(view: Snapshot) -> None:
    """Cut an uncommitted tail (torn line, index words past the header) left by a killed writer."""
    index_size = os.fstat(view.index.fileno()).st_size
    if index_size < WORD * (view.count + 1):  # the index lost words it had committed
        view.count = max(0, index_size // WORD - 1)
        commit(view, view.count, durable=False)
    events_size = os.fstat(view.events.fileno()).st_size
    while view.count and view.committed_end() > events_size:  # lost a committed line (power loss)
        view.count -= 1
        commit(view, view.count, durable=False)
    os.ftruncate(view.index.fileno(), WORD * (view.count + 1))
    if events_size > view.committed_end():
        os.ftruncate(view.events.fileno(), view.committed_end())


def append(view: Snapshot, lines: list[bytes], *, durable: bool) -> None:
    """Append committed-at-once lines for seq ``count+1 ..``; the header write is the commit."""
    end = view.committed_end()
    offsets = []
    for line in lines:
        end += len(line)
        offsets.append(_PACK.pack(end))
    os.pwrite(view.events.fileno(), b"".join(lines), view.committed_end())
    if durable:
        os.fsync(view.events.fileno())
    os.pwrite(view.index.fileno(), b"".join(offsets), WORD * (view.count + 1))
    commit(view, view.count + len(lines), durable=durable)


def commit(view: Snapshot, count: int, *, durable: bool) -> None:
    if durable:
        os.fsync(view.index.fileno())
    os.pwrite(view.index.fileno(), _PACK.pack(count), 0)
    if durable:
        os.fsync(view.index.fileno())
    view.count = count


def rewrite(view: Snapshot, thread_id: str, drop: Predicate, *, durable: bool) -> int:
    """Write a new generation without the records ``drop`` selects; their seqs stay, empty."""
    generation = uuid.uuid4().hex
    directory = view.directory
    kept: list[bytes] = []
    offsets = [_PACK.pack(view.count)]
    end = dropped = 0
    for seq, line in view.window(1, view.count):
        record = decode(line, seq, directory) if line else None
        if record is not None and drop(record):
            dropped += 1
        elif line:
            kept.append(line)
            end += len(line)
        offsets.append(_PACK.pack(end))
    write_atomic(directory / f"events-{generation}.jsonl", b"".join(kept), durable=durable)
    write_atomic(directory / f"index-{generation}.bin", b"".join(offsets), durable=durable)
    _write_meta(directory, thread_id, generation, durable=durable)
    remove_data(directory, keep=generation)
    return dropped


def clear(view: Snapshot, thread_id: str, *, durable: bool) -> int:
    """Write a new generation with no events, every seq kept as an empty span (never reused).

    Returns the number of events the old generation held (damaged lines included).
    """
    generation = uuid.uuid4().hex
    directory = view.directory
    count = sum(1 for _, line in view.window(1, view.count) if line)
    words = _PACK.pack(view.count) + bytes(WORD * view.count)  # all ends at offset 0
    write_atomic(directory / f"events-{generation}.jsonl", b"", durable=durable)
    write_atomic(directory / f"index-{generation}.bin", words, durable=durable)
    _write_meta(directory, thread_id, generation, durable=durable)
    remove_data(directory, keep=generation)
    return count


def remove_data(directory: Path, *, keep: str | None = None) -> None:
    """Delete data files of every generation but ``keep`` (and temp files of a crashed rewrite)."""
    for path in directory.iterdir():
        name = path.name
        stale_data = name.startswith(("events-", "index-")) and (keep is None or keep not in name)
        if stale_data or (name.startswith(".") and name.endswith(".tmp")):
            path.unlink(missing_ok=True)


def rebuild_index(directory: Path, generation: str) -> None:
    """Recreate a lost index from the events file: whole, decodable lines with rising seqs.

    Seqs missing between lines (deleted events) get zero-length spans; the first damaged line and
    everything after it is reported and left out (the next write cuts it off).
    """
    data = (directory / f"events-{generation}.jsonl").read_bytes()
    offsets: list[int] = []
    end = 0
    lines = data.split(b"\n")
    for number, line in enumerate(lines):
        if number == len(lines) - 1 and not line:
            break  # the file ends with a whole line
        try:
            seq = json.loads(line)["seq"] if number < len(lines) - 1 else None
            valid = isinstance(seq, int) and seq > len(offsets)
        except (ValueError, KeyError, TypeError):
            valid = False
        if not valid or seq is None:  # seq None: the unterminated last line
            warnings.warn(
                f"{directory}: dropped a damaged line at byte {end} while rebuilding the index",
                CorruptRecordWarning,
                stacklevel=2,
            )
            break
        offsets.extend([end] * (seq - 1 - len(offsets)))
        end += len(line) + 1
        offsets.append(end)
    words = [_PACK.pack(len(offsets)), *(_PACK.pack(offset) for offset in offsets)]
    write_atomic(directory / f"index-{generation}.bin", b"".join(words), durable=False)


def _write_meta(directory: Path, thread_id: str, generation: str, *, durable: bool) -> None:
    meta = {"thread_id": thread_id, "generation": generation}
    write_atomic(directory / "meta.json", json.dumps(meta).encode(), durable=durable)
