"""When a JSONL thread's files are not what its writers left them: found, contained, reported.

A full disk, a file size limit, a power loss without ``fsync`` or a hand edit can leave a thread whose
committed count covers bytes that are not there, whose lines moved (bytes cut out of, or pasted into,
the middle), whose index lost words, or whose ``meta.json`` is unreadable. The rules:

* the committed count never goes down, so no seq is ever handed out twice: seqs whose lines are
  gone stay as holes (``find_gaps`` and ``verify`` show them);
* a writer checks the committed tail before it appends (``consistent``: one read of the last line's
  head) and, when it disagrees, rebuilds the index from the lines (``reindex``): every whole line
  with its seq is found again where it is now; damaged bytes stay in place, inside the span of the
  line after them, where readers skip them (``log.decode`` reads a span's last line);
* a reader that meets a damaged line asks for that repair once (``JsonlRunEventStore``), so intact
  events stay readable before anyone writes;
* ``check_thread`` (``run-journal URL verify``) reports every disagreement with the file and byte.

Blocking: call from a worker thread.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import warnings
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

from run_journal.stores.base import CorruptStoreError, StorageProblem
from run_journal.stores.jsonl.files import (
    PACK,
    WORD,
    CorruptRecordWarning,
    last_line,
    locked,
    parse_line,
    read_at,
    scan_lines,
    write_atomic,
)

if TYPE_CHECKING:
    from run_journal.stores.jsonl.log import Snapshot

GENERATION: Final = re.compile(r"[0-9a-f]{32}")
TAIL_SEQS: Final = 64
"""Index words a writer reads back to find the last committed line (deleted seqs have none)."""
HEAD: Final = 8192
"""Bytes of a line that hold its ``seq`` (after ``thread_id`` and ``run_id``, 255 characters each)."""
MIN_LINE: Final = 100
"""Fewer bytes than any event line (its fixed fields alone are longer)."""
REPORTED: Final = 20
"""Damaged spans ``check_thread`` lists one by one per file; the rest are counted."""
_LINE_START: Final = b'{"thread_id":'


# -- meta.json ---------------------------------------------------------------------------------------
def read_meta(directory: Path) -> dict[str, str] | None:
    """``meta.json`` of a thread (None: the thread has no events yet).

    A damaged one is replaced by what its directory says when that is unambiguous (exactly one
    generation of data files; the thread id from its first line), with a ``CorruptRecordWarning``
    naming the file and ``"damaged"`` set, so a writer puts a good file back. Otherwise
    ``CorruptStoreError`` names the file.
    """
    path = directory / "meta.json"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    problem = meta_problem(data)
    if problem is None:
        meta: dict[str, str] = json.loads(data)
        return meta
    generations = sorted(p.name[len("events-"):-len(".jsonl")] for p in directory.glob("events-*.jsonl"))
    if len(generations) != 1 or not GENERATION.fullmatch(generations[0]):
        raise CorruptStoreError(
            f"{path} {problem}, and the thread's data files do not tell which generation is current "
            f"({len(generations)} found); restore the file, or copy the store's other threads elsewhere"
        )
    generation = generations[0]
    lines = scan_lines(directory / f"events-{generation}.jsonl")
    first = next((record for _, line, whole in lines if whole and (record := parse_line(line))), None)
    thread_id = first.get("thread_id") if first is not None else None
    warnings.warn(f"{path} {problem}; reading the thread's only data files (generation {generation})",
                  CorruptRecordWarning, stacklevel=2)
    return {"thread_id": thread_id if isinstance(thread_id, str) else "", "generation": generation,
            "damaged": problem}


def meta_problem(data: bytes) -> str | None:
    """What is wrong with the bytes of a ``meta.json``, or None."""
    try:
        meta = json.loads(data)
    except ValueError as error:
        return f"is not valid JSON ({type(error).__name__}: {error})"
    if not isinstance(meta, dict) or not isinstance(meta.get("thread_id"), str) \
            or not GENERATION.fullmatch(str(meta.get("generation"))):
        return "does not name the thread and its generation"
    return None


# -- a writer's check and repair ---------------------------------------------------------------------
def consistent(view: Snapshot) -> bool:
    """Whether the committed data ends where the index says: the index holds every committed word,
    the offsets of the last seqs rise, and the last committed line is whole, at its place, of its seq."""
    if view.count < view.header:
        return False
    if view.count == 0:
        return True
    first = max(1, view.count - TAIL_SEQS + 1)
    ends = view.ends(first, view.count)
    if any(later < earlier for earlier, later in itertools.pairwise(ends)):
        return False
    if ends[-1] > os.fstat(view.events.fileno()).st_size:
        return False
    for position in range(len(ends) - 1, 0, -1):
        start, end = ends[position - 1], ends[position]
        if end > start:
            return _line_is(view, start, end, first + position - 1)
    return True


def _line_is(view: Snapshot, start: int, end: int, seq: int) -> bool:
    if read_at(view.events, end - 1, 1) != b"\n" or (start and read_at(view.events, start - 1, 1) != b"\n"):
        return False
    head = read_at(view.events, start, min(end - start, HEAD))
    if head.startswith(_LINE_START) and b',"seq":%d,' % seq in head:
        return True
    span = read_at(view.events, start, end - start)  # damaged bytes before the line (rare): read it all
    record = parse_line(span)
    tail = last_line(span)
    found = record if record is not None else (parse_line(tail) if tail is not None else None)
    return found is not None and found["seq"] == seq


def trusted_count(view: Snapshot) -> int:
    """The count a repair keeps: the committed header unless the files could not hold that many
    seqs (a damaged header), else the index words there are. It is never lowered below a
    plausible header, so no seq is handed out twice."""
    words = max(0, os.fstat(view.index.fileno()).st_size // WORD - 1)
    if view.header <= words + os.fstat(view.events.fileno()).st_size // MIN_LINE:
        return view.header
    warnings.warn(f"{view.directory}: the index header says {view.header} events, more than the files "
                  f"could hold; keeping {words}", CorruptRecordWarning, stacklevel=2)
    return words


def reindex(directory: Path, generation: str, known: int | None, *, durable: bool = False) -> None:
    """Rebuild the index of a generation from its lines (under the thread's lock).

    Whole lines with a rising seq are indexed where they are now; a seq without its line keeps an
    empty span (a hole, never reused), and damaged bytes stay inside the span of the line after them.
    ``known``: the committed count, which the count never goes below; lines above it were never
    committed and are left out (the writer cuts them). None (the index is lost): every whole line.
    """
    ends: list[int] = []
    last = prev_end = 0
    damaged: list[int] = []
    for offset, line, whole in scan_lines(directory / f"events-{generation}.jsonl"):
        record = parse_line(line) if whole else None
        seq = record["seq"] if record is not None else None
        if seq is not None and seq > last and (known is None or seq <= known):
            ends.extend([prev_end] * (seq - 1 - last))
            prev_end = offset + len(line) + 1
            ends.append(prev_end)
            last = seq
        elif seq is None or known is None or seq <= known:
            damaged.append(offset)
    count = max(known or 0, last)
    ends.extend([prev_end] * (count - last))
    data = PACK.pack(count) + b"".join(PACK.pack(end) for end in ends)
    write_atomic(directory / f"index-{generation}.bin", data, durable=durable)
    if damaged:
        warnings.warn(
            f"{directory}: rebuilt the index of events-{generation}.jsonl: {len(damaged)} damaged "
            f"line(s) left out, the first at byte {damaged[0]}; every seq up to {count} stays taken",
            CorruptRecordWarning, stacklevel=2,
        )


def restore_index(directory: Path, generation: str) -> None:
    """A reader found events without their index (lost or removed): rebuild it under the lock."""
    if (directory / f"events-{generation}.jsonl").exists():
        with locked(directory):
            meta = read_meta(directory)
            index = directory / f"index-{generation}.bin"
            if meta and meta["generation"] == generation and not index.exists():
                reindex(directory, generation, None)


# -- verify ------------------------------------------------------------------------------------------
def check_thread(directory: Path, root: Path) -> list[StorageProblem]:
    """Every disagreement between a thread's files: ``meta.json``, the index against the events
    file (committed length, offsets), each committed span against the line it should hold."""
    name = directory.relative_to(root).as_posix()
    meta_path = directory / "meta.json"
    try:
        problem = meta_problem(meta_path.read_bytes())
    except FileNotFoundError:
        return []  # run rows only, no events
    problems = [StorageProblem(f"{name}/meta.json", problem)] if problem else []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CorruptRecordWarning)
            meta = read_meta(directory)
    except CorruptStoreError as error:
        return [*problems, StorageProblem(f"{name}/meta.json", str(error))]
    assert meta is not None
    generation = meta["generation"]
    events_path, index_path = directory / f"events-{generation}.jsonl", directory / f"index-{generation}.bin"
    for path in (events_path, index_path):
        if not path.exists():
            return [*problems, StorageProblem(f"{name}/{path.name}", "is missing (the next read or "
                                                                      "write rebuilds the index)")]
    with open(events_path, "rb") as events_file, open(index_path, "rb") as index_file:
        problems += _check_log(events_file, index_file, f"{name}/{events_path.name}",
                               f"{name}/{index_path.name}")
    return problems


def _check_log(
    events_file: IO[bytes], index_file: IO[bytes], events_name: str, index_name: str
) -> list[StorageProblem]:
    problems: list[StorageProblem] = []
    events_size = os.fstat(events_file.fileno()).st_size
    index_size = os.fstat(index_file.fileno()).st_size
    header_bytes = read_at(index_file, 0, WORD)
    header = PACK.unpack(header_bytes)[0] if len(header_bytes) == WORD else 0
    words = max(0, index_size // WORD - 1)
    if words < header:
        problems.append(StorageProblem(index_name, f"commits {header} events but holds the offsets of "
                                                   f"{words}"))
    count = min(header, words)
    committed_end = PACK.unpack(read_at(index_file, WORD * count, WORD))[0] if count else 0
    if committed_end > events_size:
        problems.append(StorageProblem(
            events_name, f"the index commits {count} events ending at byte {committed_end}, but the "
            f"file holds {events_size} bytes: the commit covers bytes that were never written or were "
            "lost (the next write keeps those seqs as holes)"))
    damaged = 0
    previous = 0
    for first in range(1, count + 1, 1024):
        last = min(count, first + 1023)
        raw = read_at(index_file, WORD * first, WORD * (last - first + 1))
        ends = [PACK.unpack_from(raw, i)[0] for i in range(0, len(raw), WORD)]
        low = min(previous, *ends)
        data = read_at(events_file, low, min(max(ends), events_size) - low)
        for seq, end in zip(range(first, last + 1), ends, strict=True):
            start = previous
            previous = end
            if end < start:
                problems.append(StorageProblem(f"{index_name} byte {WORD * seq}",
                                               f"the offset of seq {seq} ({end}) is below the one before"))
                continue
            if end == start:
                continue  # a deleted event, or a hole left by damage
            if end > events_size:
                return problems  # reported above
            what = _span_problem(data[start - low : end - low], seq)
            if what is not None:
                damaged += 1
                if damaged <= REPORTED:
                    problems.append(StorageProblem(f"{events_name} byte {start}", what))
    if damaged > REPORTED:
        problems.append(StorageProblem(events_name, f"{damaged - REPORTED} more damaged span(s)"))
    return problems


def _span_problem(span: bytes, seq: int) -> str | None:
    record = parse_line(span) if span.endswith(b"\n") else None
    if record is not None and record["seq"] == seq:
        return None
    tail = last_line(span) if span.endswith(b"\n") else None
    found = parse_line(tail) if tail is not None else None
    if found is not None and found["seq"] == seq:
        return f"{len(span) - len(tail or b'')} bytes of damaged data before the line of seq {seq}"
    if record is not None:
        return f"the line of seq {seq} carries seq {record['seq']}"
    return f"the {len(span)} bytes of seq {seq} are not a whole JSON line (damaged; the event is lost)"
