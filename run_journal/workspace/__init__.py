"""Workspace changes: what files a run created, modified or deleted, as one bounded ``workspace_changes``.

Take a :class:`WorkspaceSnapshot` before the run and call :func:`record_workspace_changes` after it.
The event is evidence for a reviewer, so it is safe by default:

- sensitive files are listed by path, status and size only: no content, no diff, no hash (a plain
  hash of a short secret can be reversed by guessing). A snapshot keeps none of their bytes; it
  compares two versions by an HMAC under a key made for the process, which is never written. A file
  is sensitive when it is under ``.ssh``, ``.gnupg``, ``.aws``, ``.azure``, ``.kube`` or
  ``.docker``, when it is a well-known secret file (``.env`` and ``.env.*``, ``*.pem``, ``*.key``,
  ``*.p12``, ``*.pfx``, SSH keys ``id_rsa``, ``id_ed25519``, ... and their ``.pub`` halves,
  ``.npmrc``, ``.netrc``, ``.pgpass``, ``.htpasswd``, ...), or when a word of its name names a
  secret: key, secret, token, credential, password, ``apikey``, ``kubeconfig``, ...
  (``api_key.txt``, ``client-secret.yaml``, ``.token``, ``aws_credentials``, but not
  ``keyboard.py``, ``monkey.txt`` or ``tokenizer.py``);
  see :func:`is_sensitive`;
- binary files are listed with sizes and hashes, without a diff; text is UTF-8, or UTF-16 / UTF-32
  when the file starts with a byte-order mark;
- symlinks are recorded by their target text and never followed; special files are ignored;
- heavy folders (VCS data, ``node_modules``, virtualenvs, caches, build output) are skipped;
- everything is bounded (:class:`WorkspaceLimits`): files scanned, text kept per file and in total,
  diff bytes per file and in total, files listed, and the payload as a whole (it lives in metadata,
  which a store caps at 1 MiB). Whatever a limit cut is flagged ``truncated``; the summary's counts
  (files, added and deleted lines) always cover every change, listed or not.

Scanning is blocking file I/O: async code uses ``acapture`` / ``arecord_workspace_changes``, which
run it in a worker thread so the event loop never waits on the disk.

:mod:`~run_journal.workspace.snapshot` takes snapshots; :mod:`~run_journal.workspace.changes` compares
two and records the event.
"""

from run_journal.workspace.changes import (
    PAYLOAD_BUDGET,
    PAYLOAD_VERSION,
    EventJournal,
    arecord_workspace_changes,
    record_workspace_changes,
    summary_line,
    unified_diff,
    workspace_changes,
)
from run_journal.workspace.snapshot import (
    SENSITIVE_DIRS,
    SENSITIVE_PATTERNS,
    SENSITIVE_WORDS,
    SKIPPED_DIRS,
    FileState,
    Key,
    WorkspaceLimits,
    WorkspaceSnapshot,
    is_sensitive,
)

__all__ = [
    "PAYLOAD_BUDGET",
    "PAYLOAD_VERSION",
    "SENSITIVE_DIRS",
    "SENSITIVE_PATTERNS",
    "SENSITIVE_WORDS",
    "SKIPPED_DIRS",
    "EventJournal",
    "FileState",
    "Key",
    "WorkspaceLimits",
    "WorkspaceSnapshot",
    "arecord_workspace_changes",
    "is_sensitive",
    "record_workspace_changes",
    "summary_line",
    "unified_diff",
    "workspace_changes",
]
