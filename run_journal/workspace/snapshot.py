"""Workspace snapshots: the files under some folders at one moment, read safely and within bounds.

``changes.py`` compares two snapshots into a run's ``workspace_changes``. The rules a snapshot follows
(secret-looking files fingerprinted with a key of the process but never kept, heavy folders skipped,
symlinks not followed, every bound in :class:`WorkspaceLimits`) are listed in the package's
docstring; which names look secret is :func:`is_sensitive`.
"""

from __future__ import annotations

import asyncio
import codecs
import fnmatch
import functools
import hashlib
import hmac
import os
import re
import secrets
import stat
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Final

SKIPPED_DIRS: Final = frozenset({
    ".git", ".hg", ".svn", ".bzr", "node_modules", ".venv", "venv", "__pycache__", ".mypy_cache",
    ".pytest_cache", ".ruff_cache", ".hypothesis", ".tox", ".nox", ".cache", ".eggs", "build", "dist",
    ".next", ".nuxt", ".parcel-cache", ".turbo", ".gradle", ".terraform", "site-packages",
})
"""Folder names never descended into (plus ``*.egg-info`` and any folder holding ``pyvenv.cfg``)."""
SENSITIVE_DIRS: Final = frozenset({".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker"})
"""Folder names whose files are all sensitive, at any depth."""
SENSITIVE_PATTERNS: Final = (
    ".env", ".env.*", "*.env", ".envrc", "*.pem", "*.key", "*.p12", "*.pfx", "*.keystore", "*.jks",
    "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", ".netrc", ".pgpass", ".htpasswd", "*.kdbx",
    ".npmrc", ".pypirc", ".dockercfg", ".s3cfg", ".git-credentials",
)
"""Lower-cased file-name patterns of well-known secret files (``fnmatch``, whole name).

The ``id_*`` patterns cover the ``.pub`` halves of SSH key pairs too: they sit next to the private
key, name a person or a host, and are never worth a diff."""
SENSITIVE_WORDS: Final = re.compile(
    r"(?:.*(?:secret|token|password|passwd|passphrase|credential|kubeconfig)s?"
    r"|(?:api|private|secret|access|signing|master|encryption|ssh|gpg|pgp|auth|client|deploy)?keys?"
    r"|creds)(?:file|store|pair)?"
)
"""A word of a file name that names a secret (matched against the whole word, lower-cased).

A name's words are its runs of letters, split at camelCase: ``client-secret.yaml`` is ``client``,
``secret``, ``yaml``; ``apiKey.txt`` is ``api``, ``key``, ``txt``. A word is a secret's name when it
ends with secret, token, password, passwd, passphrase, credential or kubeconfig (plural allowed:
``mysecrets``, ``githubtoken``, ``dbpassword``), is creds, or is key(s), alone or after a qualifier
(``apikey``, ``privatekey``, ``sshkeys``); any of these may be followed by file, store or pair
(``keyfile``, ``keypair``, ``tokenstore``). Words that merely contain one (``keyboard``, ``monkey``,
``tokenizer``, ``secretary``, ``passwordless``) are not."""
_FINGERPRINT_KEY: Final = secrets.token_bytes(32)
"""The key of the fingerprints of sensitive files: made when the process starts, kept in its memory,
written nowhere, so a fingerprint can tell two versions apart in this process and confirm no guess."""
_SNIFF_BYTES: Final = 8192
_READ_CHUNK: Final = 1024 * 1024
_OPEN_FLAGS: Final = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
_CAMEL_BOUNDARY: Final = re.compile(r"(?<=[a-z])(?=[A-Z])")
_LETTERS: Final = re.compile(r"[^\W\d_]+")
_BOMS: Final = (  # UTF-32 first: its little-endian mark starts with UTF-16's (FF FE)
    (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"),
)


@dataclass(frozen=True, slots=True)
class WorkspaceLimits:
    """Every bound a snapshot and a payload respect; all are recorded in the payload's ``limits``."""

    max_files: int = 10_000
    """Files (and symlinks) scanned per snapshot; past it the snapshot is incomplete."""
    max_file_bytes: int = 256 * 1024
    """Largest text file whose content a snapshot keeps (larger ones are hashed, not diffed)."""
    max_diff_bytes_per_file: int = 32 * 1024
    max_total_diff_bytes: int = 256 * 1024
    max_listed_files: int = 500
    """Changed files listed in the payload; the summary still counts every change."""
    max_snapshot_text_bytes: int = 64 * 1024 * 1024
    """Text kept by one snapshot in total (its memory bound)."""
    max_hash_bytes: int = 64 * 1024 * 1024
    """Larger files are compared by size and mtime instead of sha256."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"WorkspaceLimits.{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True, slots=True)
class FileState:
    """What a snapshot knows about one path. Sensitive files carry size, mtime and a keyed
    ``fingerprint``, never their text or a plain hash."""

    size: int
    mtime_ns: int
    sha256: str | None = None
    text: str | None = None
    binary: bool = False
    sensitive: bool = False
    link_target: str | None = None
    text_omitted: bool = False
    """A text file whose content was not kept (over a limit): it can be compared but not diffed."""
    fingerprint: str | None = None
    """A sensitive file's HMAC-SHA256 under a key of this process (its ``sha256`` is None): it tells
    two versions apart when snapshots of one process are compared, and never leaves the process."""

    @property
    def symlink(self) -> bool:
        return self.link_target is not None

    def same_as(self, other: FileState) -> bool:
        if self.symlink or other.symlink:
            return self.link_target == other.link_target
        if self.sha256 is not None and other.sha256 is not None:
            return self.sha256 == other.sha256
        if self.fingerprint is not None and other.fingerprint is not None:
            return self.fingerprint == other.fingerprint
        return (self.size, self.mtime_ns) == (other.size, other.mtime_ns)


Key = tuple[str, str]
"""(root, path relative to the root with ``/`` separators)."""


@dataclass(frozen=True)
class WorkspaceSnapshot:
    """The state of some folders at one moment. Immutable; compare two with ``workspace_changes``."""

    roots: tuple[str, ...]
    files: Mapping[Key, FileState]
    limits: WorkspaceLimits = field(default_factory=WorkspaceLimits)
    complete: bool = True
    """False when ``max_files`` stopped the scan; paths after ``cutoff`` are then unknown."""
    cutoff: tuple[int, tuple[str, ...]] | None = None
    unreadable: int = 0

    @classmethod
    def capture(
        cls, roots: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
        *, limits: WorkspaceLimits | None = None,
    ) -> WorkspaceSnapshot:
        """Scan ``roots`` now (blocking; from async code use :meth:`acapture`)."""
        return _Scanner(_as_roots(roots), limits or WorkspaceLimits()).run()

    @classmethod
    async def acapture(
        cls, roots: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
        *, limits: WorkspaceLimits | None = None,
    ) -> WorkspaceSnapshot:
        """:meth:`capture` in a worker thread, so the event loop keeps running meanwhile."""
        return await asyncio.to_thread(cls.capture, roots, limits=limits)

    def order(self, key: Key) -> tuple[int, tuple[str, ...]]:
        """The scan order of a path: root position, then path parts (a sorted depth-first walk)."""
        root, path = key
        position = self.roots.index(root) if root in self.roots else len(self.roots)
        return position, tuple(path.split("/"))

    def knows(self, key: Key) -> bool:
        """Whether the scan reached ``key``'s place (an incomplete scan knows nothing after cutoff)."""
        return self.complete or self.cutoff is None or self.order(key) <= self.cutoff


def _as_roots(roots: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> tuple[str, ...]:
    items = [roots] if isinstance(roots, str | os.PathLike) else list(roots)
    return tuple(dict.fromkeys(os.path.abspath(os.fspath(item)) for item in items))


def is_sensitive(parts: tuple[str, ...]) -> bool:
    """Whether a relative path looks like it holds a secret.

    It does when a parent folder is one of :data:`SENSITIVE_DIRS`, the file name matches one of
    :data:`SENSITIVE_PATTERNS`, or a word of the name is a secret's name (:data:`SENSITIVE_WORDS`).
    """
    if any(part.lower() in SENSITIVE_DIRS for part in parts[:-1]):
        return True
    return _sensitive_name(parts[-1])


@functools.lru_cache(maxsize=4096)
def _sensitive_name(name: str) -> bool:
    lowered = name.lower()
    if any(fnmatch.fnmatchcase(lowered, pattern) for pattern in SENSITIVE_PATTERNS):
        return True
    words = _LETTERS.findall(_CAMEL_BOUNDARY.sub(" ", name).lower())
    return any(SENSITIVE_WORDS.fullmatch(word) for word in words)


def _skipped_dir(name: str, path: str) -> bool:
    return (
        name in SKIPPED_DIRS
        or name.endswith(".egg-info")
        or os.path.exists(os.path.join(path, "pyvenv.cfg"))
    )


class _Scanner:
    """A sorted depth-first walk that never follows a symlink and stops at ``max_files``."""

    def __init__(self, roots: tuple[str, ...], limits: WorkspaceLimits) -> None:
        self.roots = roots
        self.limits = limits
        self.files: dict[Key, FileState] = {}
        self.text_budget = limits.max_snapshot_text_bytes
        self.unreadable = 0

    def run(self) -> WorkspaceSnapshot:
        last: tuple[int, tuple[str, ...]] = (-1, ())
        for position, root in enumerate(self.roots):
            stack: list[tuple[tuple[str, ...], str, str]] = [((), root, "dir")]
            while stack:
                parts, path, kind = stack.pop()
                if kind == "dir":
                    stack.extend(reversed(self._children(parts, path)))
                    continue
                if len(self.files) >= self.limits.max_files:
                    return self._snapshot(complete=False, cutoff=last)
                state = self._state(parts, path, kind)
                if state is not None:
                    self.files[(root, "/".join(parts))] = state
                    last = (position, parts)
        return self._snapshot(complete=True, cutoff=None)

    def _snapshot(self, *, complete: bool, cutoff: tuple[int, tuple[str, ...]] | None) -> WorkspaceSnapshot:
        return WorkspaceSnapshot(
            self.roots, dict(self.files), self.limits, complete, cutoff, self.unreadable
        )

    def _children(self, parts: tuple[str, ...], path: str) -> list[tuple[tuple[str, ...], str, str]]:
        try:
            with os.scandir(path) as entries:
                found = sorted(entries, key=lambda entry: entry.name)
        except FileNotFoundError:
            return []  # a root that does not exist (yet) is an empty folder
        except OSError:
            self.unreadable += 1
            return []
        children = []
        for entry in found:
            try:
                if entry.is_symlink():
                    children.append(((*parts, entry.name), entry.path, "link"))
                elif entry.is_dir(follow_symlinks=False):
                    if not _skipped_dir(entry.name, entry.path):
                        children.append(((*parts, entry.name), entry.path, "dir"))
                elif entry.is_file(follow_symlinks=False):
                    children.append(((*parts, entry.name), entry.path, "file"))
            except OSError:
                self.unreadable += 1
        return children

    def _state(self, parts: tuple[str, ...], path: str, kind: str) -> FileState | None:
        sensitive = is_sensitive(parts)
        info = None
        try:
            info = os.lstat(path)
            if kind == "link":
                target = os.readlink(path)
                return FileState(info.st_size, info.st_mtime_ns, sensitive=sensitive, link_target=target)
            return self._read(path, sensitive)
        except FileNotFoundError:
            return None  # removed while we scanned: the next snapshot will say so
        except OSError:
            if sensitive and info is not None:  # a secret we may not read: compared by size and mtime
                return FileState(info.st_size, info.st_mtime_ns, sensitive=True)
            self.unreadable += 1
            return None

    def _read(self, path: str, sensitive: bool) -> FileState | None:
        """Hash the file (a sensitive one with the process's key); keep its text when it is text
        within the limits and not sensitive."""
        descriptor = os.open(path, _OPEN_FLAGS)
        with os.fdopen(descriptor, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                return None  # swapped for a FIFO or device since the listing: never read those
            size = info.st_size
            head = handle.read(_SNIFF_BYTES)
            encoding = None if sensitive else _text_encoding(head)
            binary = not sensitive and encoding is None
            if size > self.limits.max_hash_bytes:
                omitted = encoding is not None
                return FileState(size, info.st_mtime_ns, binary=binary, sensitive=sensitive,
                                 text_omitted=omitted)
            digest = hmac.new(_FINGERPRINT_KEY, head, "sha256") if sensitive else hashlib.sha256(head)
            keep = encoding is not None and size <= self.limits.max_file_bytes and size <= self.text_budget
            kept = [head] if keep else []
            while chunk := handle.read(_READ_CHUNK):
                digest.update(chunk)
                if keep:
                    kept.append(chunk)
        if sensitive:
            return FileState(size, info.st_mtime_ns, sensitive=True, fingerprint=digest.hexdigest())
        text = None
        if keep and encoding is not None:
            text = _decode(b"".join(kept), encoding)
            if text is None:
                binary = True
            else:
                self.text_budget -= size
        omitted = not binary and text is None
        return FileState(size, info.st_mtime_ns, digest.hexdigest(), text, binary, text_omitted=omitted)


def _text_encoding(head: bytes) -> str | None:
    """How a file that starts with ``head`` is decoded, or None for binary.

    A UTF-32 or UTF-16 byte-order mark makes it text in that encoding (either byte order); otherwise
    a NUL byte makes it binary and anything else is read as UTF-8.
    """
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            return encoding
    return None if b"\0" in head else "utf-8"


def _decode(data: bytes, encoding: str) -> str | None:
    """The text of ``data``, or None when it is not text in ``encoding`` (then it is binary).

    UTF-16 and UTF-32 text holds no NUL character: one means binary data that happens to start
    with a byte-order mark (FF FE is also the start of UTF-32).
    """
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError:
        return None
    return None if encoding != "utf-8" and "\0" in text else text
