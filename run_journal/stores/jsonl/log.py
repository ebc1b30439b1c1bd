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
Every write is whole or an error (``files.write_fully``): the commit comes only after all the lines
and index words are written (and, with ``durable``, synced), so the committed count never covers
bytes that are not there, and ``n`` never goes down (``damage``: what a writer does when the files
disagree with it), so no seq is handed out twice.
Readers take no lock: they read ``n`` and never look past ``end(n)``. Seq k spans
``[end(k-1), end(k))``; a deleted event keeps its index word with a zero-length span, so seq numbers
are never reused and seq k is always found with one seek. Deleting rewrites a new generation and
switches ``meta.json`` atomically; open readers keep reading the old (unlinked) files consistently.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Final

from run_journal.envelope import NewEvent, dumps
from run_journal.stores.jsonl import damage
from run_journal.stores.jsonl.files import (
    PACK,
    WORD,
    CorruptRecordWarning,
    Record,
    last_line,
    locked,
    parse_line,
    read_at,
    write_atomic,
    write_fully,
)

__all__ = [  # what the store and the tests take from here
    "WORD", "CorruptRecordWarning", "Record", "Snapshot", "append", "clear", "event_line", "locked",
    "open_for_write", "read_at", "read_meta", "rewrite", "snapshot", "write_atomic",
]

_PACK: Final = PACK
Predicate = Callable[[Record], bool]
read_meta = damage.read_meta


class Snapshot:
    """A consistent view of one generation of a thread: open files and the committed count.

    ``count`` is the committed count, or fewer when the index lost words (``damaged``, then).
    ``damaged`` is also set when a committed line could not be read; ``index_id`` tells one index
    file from the one a repair wrote in its place.
    """

    def __init__(self, directory: Path, generation: str, *, writable: bool = False) -> None:
        mode = "r+b" if writable else "rb"
        self.directory = directory
        self.generation = generation
        self.damaged = False
        self.events: IO[bytes] = open(directory / f"events-{generation}.jsonl", mode)  # noqa: SIM115 - closed by close()
        try:
            self.index: IO[bytes] = open(directory / f"index-{generation}.bin", mode)  # noqa: SIM115 - closed by close()
        except BaseException:
            self.events.close()
            raise
        status = os.fstat(self.index.fileno())
        self.index_id = (status.st_dev, status.st_ino)
        header = read_at(self.index, 0, WORD)
        self.header = _PACK.unpack(header)[0] if len(header) == WORD else 0
        self.count = min(self.header, max(0, status.st_size // WORD - 1))
        self.damaged = self.count < self.header

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
                else:
                    self.damaged = True

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
    """One committed line as a dict; a damaged line is reported and skipped, never raised.

    A span that holds damaged bytes before its line (kept in place when an index was rebuilt around
    them) yields its last line.
    """
    record = parse_line(line)
    if record is not None and record["seq"] == seq:
        return record
    tail = last_line(line)
    found = parse_line(tail) if tail is not None else None
    if found is not None and found["seq"] == seq:
        return found
    problem = f"carries seq {record['seq']!r}" if record is not None else "is not valid JSON"
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
            damage.restore_index(directory, meta["generation"])
            continue  # or a delete switched generations between reading meta and opening the files
        try:
            yield view
        finally:
            view.close()
        return
    raise RuntimeError(f"{directory}: the thread keeps changing generation; try again")


# -- writing (caller holds ``locked(directory)``) -------------------------------------------------
def open_for_write(directory: Path, thread_id: str, *, durable: bool) -> Snapshot:
    """The current generation, created if new and repaired if a writer died before committing or
    the files were damaged (``damage.repair``): what it returns agrees with its files."""
    meta = read_meta(directory)
    if meta is None:
        generation = uuid.uuid4().hex
        events, index = directory / f"events-{generation}.jsonl", directory / f"index-{generation}.bin"
        try:
            write_atomic(events, b"", durable=durable)
            write_atomic(index, _PACK.pack(0), durable=durable)
            _write_meta(directory, thread_id, generation, durable=durable)
        except BaseException:
            for path in (events, index):
                path.unlink(missing_ok=True)
            raise
    else:
        generation = meta["generation"]
        if meta.get("damaged"):  # read_meta found the data files beside a damaged meta.json
            _write_meta(directory, thread_id, generation, durable=durable)
        index_path = directory / f"index-{generation}.bin"
        if not index_path.exists():
            damage.reindex(directory, generation, None)
    view = Snapshot(directory, generation, writable=True)
    try:
        if not damage.consistent(view):
            known = damage.trusted_count(view)
            view.close()
            damage.reindex(directory, generation, known)
            view = Snapshot(directory, generation, writable=True)
        cut_tail(view)
    except BaseException:
        view.close()
        raise
    return view


def cut_tail(view: Snapshot) -> None:
    """Cut an uncommitted tail (a torn line, index words past the header) left by a killed writer
    (or a failed write): the next batch goes where the committed data ends."""
    end = view.committed_end()
    if os.fstat(view.index.fileno()).st_size > WORD * (view.count + 1):
        os.ftruncate(view.index.fileno(), WORD * (view.count + 1))
    if os.fstat(view.events.fileno()).st_size > end:
        os.ftruncate(view.events.fileno(), end)


def append(view: Snapshot, lines: list[bytes], *, durable: bool) -> None:
    """Append committed-at-once lines for seq ``count+1 ..``; the header write is the commit.

    Every byte is written (and, ``durable``, synced) before the commit; a failure raises
    ``OSError`` with nothing committed, and the partial tail is cut at once (or by the next writer).
    """
    end = start = view.committed_end()
    offsets = []
    for line in lines:
        end += len(line)
        offsets.append(_PACK.pack(end))
    events_path = view.directory / f"events-{view.generation}.jsonl"
    index_path = view.directory / f"index-{view.generation}.bin"
    try:
        write_fully(view.events.fileno(), b"".join(lines), start, events_path)
        if durable:
            os.fsync(view.events.fileno())
        write_fully(view.index.fileno(), b"".join(offsets), WORD * (view.count + 1), index_path)
        commit(view, view.count + len(lines), durable=durable)
    except OSError:
        with contextlib.suppress(OSError):  # the next writer cuts it otherwise
            cut_tail(view)
        raise


def commit(view: Snapshot, count: int, *, durable: bool) -> None:
    """Overwrite word 0 with ``count``: one aligned 8-byte write, whole or an error."""
    if durable:
        os.fsync(view.index.fileno())
    write_fully(view.index.fileno(), _PACK.pack(count), 0,
                view.directory / f"index-{view.generation}.bin")
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


def _write_meta(directory: Path, thread_id: str, generation: str, *, durable: bool) -> None:
    meta = {"thread_id": thread_id, "generation": generation}
    write_atomic(directory / "meta.json", json.dumps(meta).encode(), durable=durable)
