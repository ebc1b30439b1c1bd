"""Comparing two workspace snapshots into one bounded ``workspace_changes`` payload, and recording it.

The rules both sides follow are in the package's docstring (:mod:`run_journal.workspace`).
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, Final

from run_journal.envelope import JsonObject, dumps
from run_journal.journal.producer import ProducerJournal
from run_journal.workspace.snapshot import FileState, Key, WorkspaceLimits, WorkspaceSnapshot

__all__ = [
    "PAYLOAD_BUDGET",
    "PAYLOAD_VERSION",
    "EventJournal",
    "arecord_workspace_changes",
    "record_workspace_changes",
    "summary_line",
    "unified_diff",
    "workspace_changes",
]

PAYLOAD_VERSION: Final = 1
PAYLOAD_BUDGET: Final = 768 * 1024
"""Bytes of serialized payload kept; beyond it the largest diffs are dropped (metadata caps at 1 MiB)."""
# -- comparing two snapshots -------------------------------------------------------------------


def workspace_changes(before: WorkspaceSnapshot, after: WorkspaceSnapshot) -> JsonObject | None:
    """The versioned ``metadata.workspace_changes`` payload, or None when nothing changed."""
    limits = after.limits
    changes: list[tuple[str, Key, FileState | None, FileState | None]] = []
    for key in sorted(set(before.files) | set(after.files), key=after.order):
        old, new = before.files.get(key), after.files.get(key)
        if old is None and new is not None and before.knows(key):
            changes.append(("created", key, None, new))
        elif new is None and old is not None and after.knows(key):
            changes.append(("deleted", key, old, None))
        elif old is not None and new is not None and not old.same_as(new):
            changes.append(("modified", key, old, new))
    if not changes:
        return None
    truncated = not (before.complete and after.complete) or len(changes) > limits.max_listed_files
    budget = limits.max_total_diff_bytes
    files: list[JsonObject] = []
    for status, key, old, new in changes[: limits.max_listed_files]:
        entry, used = _entry(status, key, old, new, limits, budget)
        budget -= used
        files.append(entry)
    truncated = _fit(files) or truncated
    truncated = truncated or any(entry["truncated"] for entry in files)
    summary: JsonObject = {
        status: sum(1 for change in changes if change[0] == status)
        for status in ("created", "modified", "deleted")
    }
    additions = sum(_int(entry["additions"]) for entry in files)
    deletions = sum(_int(entry["deletions"]) for entry in files)
    for _, _, old, new in changes[limits.max_listed_files :]:  # not listed, still counted
        more, fewer = _line_counts(old, new)
        additions, deletions = additions + more, deletions + fewer
    summary["additions"], summary["deletions"] = additions, deletions
    summary["truncated"] = truncated
    summary["files_omitted"] = len(changes) - len(files)
    summary["unreadable"] = before.unreadable + after.unreadable
    return {
        "version": PAYLOAD_VERSION,
        "summary": summary,
        "files": files,  # type: ignore[dict-item]  # a list of JSON objects is a JSON value
        "limits": {**asdict(limits), "payload_bytes": PAYLOAD_BUDGET},
    }


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _texts(old: FileState | None, new: FileState | None) -> tuple[str, str] | None:
    """The text before and after a change, or None when it is not diffed (sensitive, symlink,
    binary, or too large to keep)."""
    states = [state for state in (old, new) if state is not None]
    if any(state.sensitive or state.symlink or state.binary or state.text is None for state in states):
        return None
    return ("" if old is None else old.text or ""), ("" if new is None else new.text or "")


def _line_counts(old: FileState | None, new: FileState | None) -> tuple[int, int]:
    """Lines added and deleted by a change, as its diff counts them (0, 0 when it is not diffed)."""
    texts = _texts(old, new)
    if texts is None:
        return 0, 0
    matcher = difflib.SequenceMatcher(None, texts[0].splitlines(), texts[1].splitlines())
    additions = deletions = 0
    for tag, first, last, start, end in matcher.get_opcodes():
        if tag != "equal":
            deletions += last - first
            additions += end - start
    return additions, deletions


def _entry(
    status: str, key: Key, old: FileState | None, new: FileState | None,
    limits: WorkspaceLimits, budget: int,
) -> tuple[JsonObject, int]:
    states = [state for state in (old, new) if state is not None]
    sensitive = any(state.sensitive for state in states)
    symlink = any(state.symlink for state in states)
    binary = any(state.binary for state in states)
    root, path = key
    entry: JsonObject = {
        "path": path, "root": root, "status": status,
        "size_before": None if old is None or old.symlink else old.size,
        "size_after": None if new is None or new.symlink else new.size,
        "sha256_before": None if old is None else old.sha256,
        "sha256_after": None if new is None else new.sha256,
        "diff": None, "additions": 0, "deletions": 0,
        "binary": binary, "sensitive": sensitive, "truncated": False, "symlink": symlink,
    }
    if symlink and not sensitive:
        entry["link_target_before"] = None if old is None else old.link_target
        entry["link_target_after"] = None if new is None else new.link_target
    if sensitive or symlink or binary:
        return entry, 0
    texts = _texts(old, new)
    if texts is None:
        entry["truncated"] = True  # too large to keep: compared by hash, not diffed
        return entry, 0
    before_text, after_text = texts
    diff, additions, deletions = unified_diff(path, before_text, after_text, old is None, new is None)
    entry["additions"], entry["deletions"] = additions, deletions
    data = diff.encode("utf-8")
    cap = min(limits.max_diff_bytes_per_file, max(budget, 0))
    if len(data) > cap:
        entry["truncated"] = True
        data = data[:cap]
    entry["diff"] = data.decode("utf-8", "ignore") if data else None
    return entry, len(data)


def unified_diff(
    path: str, before: str, after: str, created: bool = False, deleted: bool = False
) -> tuple[str, int, int]:
    """A unified diff (git-style headers) and its added and deleted line counts."""
    lines = list(difflib.unified_diff(
        before.splitlines(), after.splitlines(),
        "/dev/null" if created else f"a/{path}", "/dev/null" if deleted else f"b/{path}",
        lineterm="",
    ))
    body = [line for line in lines[2:] if not line.startswith("@@")]
    additions = sum(1 for line in body if line.startswith("+"))
    deletions = sum(1 for line in body if line.startswith("-"))
    return ("\n".join(lines) + "\n" if lines else ""), additions, deletions


def _fit(files: list[JsonObject]) -> bool:
    """Drop the largest diffs until the file list fits ``PAYLOAD_BUDGET``; True if any was dropped."""
    size = len(dumps(files).encode("utf-8"))  # type: ignore[arg-type]  # list of JSON objects
    if size <= PAYLOAD_BUDGET:
        return False
    for entry in sorted(files, key=lambda item: len(str(item["diff"] or "")), reverse=True):
        if entry["diff"] is None:
            break
        size -= len(dumps(entry["diff"]).encode("utf-8"))
        entry["diff"], entry["truncated"] = None, True
        if size <= PAYLOAD_BUDGET:
            break
    return True


def summary_line(payload: Mapping[str, Any]) -> str:
    """The event's string content: ``"N file(s) changed +A -D"``."""
    summary = payload["summary"]
    changed = summary["created"] + summary["modified"] + summary["deleted"]
    return f"{changed} file(s) changed +{summary['additions']} -{summary['deletions']}"


# -- recording ---------------------------------------------------------------------------------


EventJournal = ProducerJournal
"""What the recorder needs from a journal (the one producer interface; ``RunJournal`` provides it)."""


def record_workspace_changes(
    journal: EventJournal, before: WorkspaceSnapshot, after: WorkspaceSnapshot | None = None
) -> JsonObject | None:
    """Write one ``workspace_changes`` event if files changed since ``before``; return its payload.

    ``after`` is captured now (same roots and limits as ``before``) when omitted. Nothing is written,
    and None is returned, when nothing changed. Blocking: async code uses
    :func:`arecord_workspace_changes`.
    """
    if after is None:
        after = WorkspaceSnapshot.capture(before.roots, limits=before.limits)
    return _record(journal, workspace_changes(before, after))


async def arecord_workspace_changes(
    journal: EventJournal, before: WorkspaceSnapshot, after: WorkspaceSnapshot | None = None
) -> JsonObject | None:
    """:func:`record_workspace_changes` with the scan and the diffs in a worker thread."""
    if after is None:
        after = await WorkspaceSnapshot.acapture(before.roots, limits=before.limits)
    payload = await asyncio.to_thread(workspace_changes, before, after)
    return _record(journal, payload)


def _record(journal: EventJournal, payload: JsonObject | None) -> JsonObject | None:
    if payload is not None:
        journal.record(
            "workspace_changes", content=summary_line(payload), metadata={"workspace_changes": payload}
        )
    return payload
