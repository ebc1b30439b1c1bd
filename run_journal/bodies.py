"""Bodies: values stored once per thread under the sha256 of their bytes, referenced by events.

A long conversation sends the model the same messages and tool schemas on every call. Storing each
request whole would grow with calls times history; a ``Body`` lets a store keep each distinct value
once per thread, and an event name it by its ``digest`` (``llm.request`` in its content, other
events listed in ``metadata["bodies"]``, which ``check_integrity`` verifies). The
bytes are the value's canonical JSON (normalized as event payloads are, keys sorted), so the same
value gives the same digest in any process, and a later run of the thread finds what an earlier one
stored. Stores write bodies in the same step as the events that reference them
(``RunEventStore.put_batch(events, bodies=...)``) and read them back with ``get_bodies``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable
from typing import Any, Final, TypeGuard

from run_journal.ids import validate_id
from run_journal.normalization import JsonValue, encode_sorted, loads

BODY_LIMIT: Final = 4 * 1024 * 1024
"""The largest body, in bytes of its canonical JSON (4 MiB); a larger one is a ValueError before
anything is written."""
MAX_BODY_READ: Final = 1000
"""The most digests one ``get_bodies`` call reads, and the largest ``list_bodies`` page."""
BODIES_KEY: Final = "bodies"
"""The metadata key under which an event lists the digests it references."""

_DIGEST: Final = re.compile(r"[0-9a-f]{64}")


@dataclasses.dataclass(frozen=True, slots=True)
class Body:
    """One stored value of a thread: ``data`` (canonical JSON bytes) under ``digest``, the sha256
    of ``data`` as 64 lowercase hex digits. Build one with ``Body.of``; a store checks that the
    digest matches the data before it writes anything."""

    thread_id: str
    digest: str
    data: bytes
    hashed: bool = dataclasses.field(default=False, init=False, compare=False, repr=False)
    """The digest was computed from the data here (``of``, ``from_data``): a store does not hash it
    again. A body built field by field is checked by the store that writes it."""

    @classmethod
    def of(cls, thread_id: str, value: Any) -> Body:
        """The body of ``value`` in ``thread_id``: normalized like any event payload, encoded with
        sorted keys, hashed. A ValueError when it is larger than ``BODY_LIMIT``."""
        data = encode_sorted(value).encode("utf-8")
        check_size(len(data))
        return cls.from_data(validate_id("thread_id", thread_id), data)

    @classmethod
    def from_data(cls, thread_id: str, data: bytes) -> Body:
        """The body of ``data``, bytes of canonical JSON as ``of`` encodes them, hashed here."""
        body = cls(thread_id, digest_of(data), data)
        object.__setattr__(body, "hashed", True)  # frozen: set once, by the one who hashed
        return body

    def in_thread(self, thread_id: str) -> Body:
        """The same data in another thread (hashed as this one was)."""
        body = Body(thread_id, self.digest, self.data)
        object.__setattr__(body, "hashed", self.hashed)
        return body

    def value(self) -> JsonValue:
        """The value the body holds, decoded afresh."""
        return loads(self.data.decode("utf-8"))  # type: ignore[no-any-return]  # JSON data


def digest_of(data: bytes) -> str:
    """The digest a body of ``data`` is stored under."""
    return hashlib.sha256(data).hexdigest()


def check_size(size: int) -> None:
    if size > BODY_LIMIT:
        raise ValueError(f"a body is {size} bytes of JSON; the limit is {BODY_LIMIT} bytes (4 MiB)")


def is_digest(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a digest as stores keep it: 64 lowercase hex digits."""
    return type(value) is str and _DIGEST.fullmatch(value) is not None


def check_digest(name: str, digest: object) -> str:
    """A digest as stores keep it: 64 lowercase hex digits."""
    if not is_digest(digest):
        raise ValueError(f"{name} must be a sha256 digest (64 lowercase hex digits), got {digest!r}")
    return digest


def check_body(body: object, thread_checked: str | None = None) -> Body:
    """A body a store may write: a ``Body`` of a valid thread id (``thread_checked``: one known to
    be valid) whose digest is its data's sha256 and whose data is within ``BODY_LIMIT``."""
    if not isinstance(body, Body):
        raise TypeError(f"bodies are Body objects (Body.of(thread_id, value)), got {type(body).__name__}")
    if body.thread_id != thread_checked:
        validate_id("thread_id", body.thread_id)
    if body.hashed:
        check_size(len(body.data))
        return body
    if not isinstance(body.data, bytes):
        raise TypeError(f"Body.data is bytes, got {type(body.data).__name__}")
    check_size(len(body.data))
    check_digest("Body.digest", body.digest)
    if digest_of(body.data) != body.digest:
        raise ValueError(f"body {body.digest} of thread {body.thread_id!r}: its data does not hash "
                         "to its digest (build bodies with Body.of)")
    return body


def check_bodies(bodies: Iterable[Body]) -> tuple[Body, ...]:
    """``bodies`` checked, one per (thread, digest), in input order."""
    if isinstance(bodies, Body | bytes | str):
        raise TypeError("bodies is a sequence of Body objects, not a single one")
    seen: dict[tuple[str, str], Body] = {}
    thread_id = None  # the bodies of one write are mostly one thread's: its id is checked once
    for body in bodies:
        checked = check_body(body, thread_id)
        thread_id = checked.thread_id
        seen.setdefault((thread_id, checked.digest), checked)
    return tuple(seen.values())
