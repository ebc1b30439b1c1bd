"""Port of the route-level tests of DeerFlow's ``tests/test_workspace_changes.py``:
``GET .../runs/{run_id}/workspace-changes`` answers with the payload's fields at the top level, each
file in the gateway's fields (``diff`` always a string, ``diff_unavailable_reason``,
``symlink_created``), ``include_files`` / ``include_diff``; on every backend, from real runs that
changed a real workspace (our own scanner and diff are tested in tests/test_workspace.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from run_journal import RunEventStore, RunJournal, WorkspaceLimits, WorkspaceSnapshot
from run_journal import arecord_workspace_changes as record_changes

from ._support import THREAD, answers, gateway
from .test_run_events_endpoint import create_agent_run


async def changing_run(store: RunEventStore, root: Path, change: Callable[[Path], None],
                       limits: WorkspaceLimits | None = None) -> str:
    """A real agent run during which ``change`` edits the workspace, its changes journaled."""
    async with RunJournal(store, thread_id=THREAD) as journal:
        before = await WorkspaceSnapshot.acapture(root, limits=limits)
        await create_agent_run(journal, answers("Done."))
        change(root)
        await record_changes(journal, before)
    return journal.run_id


async def changes(store: RunEventStore, run: str, **params: Any) -> dict[str, Any]:
    async with gateway(store) as client:
        response = await client.get(f"/api/threads/{THREAD}/runs/{run}/workspace-changes",
                                    params=params)
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def by_path(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["path"]: entry for entry in body["files"]}


async def test_workspace_changes_response_returns_summary_only_and_full_payload(
    store: RunEventStore, tmp_path: Path,
) -> None:
    run = await changing_run(store, tmp_path, lambda root: (root / "report.md").write_text("hello\n"))
    summary = await changes(store, run, include_files="false")
    metadata_only = await changes(store, run, include_files="true", include_diff="false")
    full = await changes(store, run, include_files="true")
    assert summary["available"] is True
    assert summary["summary"]["created"] == 1
    assert summary["files"] == []
    assert metadata_only["files"][0]["path"] == "report.md"
    assert metadata_only["files"][0]["diff"] == ""
    assert "+hello" in full["files"][0]["diff"]
    assert set(full) == {"available", "version", "summary", "files", "limits"}  # top level


async def test_workspace_changes_response_is_empty_when_no_event_exists(store: RunEventStore) -> None:
    async with RunJournal(store, thread_id=THREAD) as journal:
        await create_agent_run(journal, answers("Nothing to change."))
    for run in (journal.run_id, "no-such-run"):
        response = await changes(store, run)
        assert response["available"] is False
        assert response["summary"] == {"created": 0, "modified": 0, "deleted": 0, "symlink_created": 0,
                                       "additions": 0, "deletions": 0, "truncated": False}
        assert response["files"] == []


async def test_workspace_changes_route_forwards_include_files_flag(
    store: RunEventStore, tmp_path: Path,
) -> None:
    run = await changing_run(store, tmp_path, lambda root: (root / "report.md").write_text("hello\n"))
    response = await changes(store, run, include_files="false", include_diff="false")
    assert response["available"] is True
    assert response["files"] == []
    assert response["summary"]["additions"] == 1


async def test_compare_snapshots_hides_sensitive_and_binary_file_content(
    store: RunEventStore, tmp_path: Path,
) -> None:
    def change(root: Path) -> None:
        (root / ".env").write_text("SECRET_TOKEN=abc\n", encoding="utf-8")
        (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00binary")

    files = by_path(await changes(store, await changing_run(store, tmp_path, change)))
    env = files[".env"]
    assert env["sensitive"] is True
    assert env["sha256_before"] is None
    assert env["sha256_after"] is None
    assert env["diff"] == ""
    assert env["diff_unavailable_reason"] == "sensitive"
    image = files["image.png"]
    assert image["binary"] is True
    assert image["diff"] == ""
    assert image["diff_unavailable_reason"] == "binary"


@pytest.fixture
def symlink_support(tmp_path: Path) -> None:
    probe = tmp_path / "_symlink_probe"
    try:
        probe.symlink_to(tmp_path)
    except (OSError, NotImplementedError):
        pytest.skip("symlink creation is not permitted on this platform/user")
    probe.unlink()


async def test_compare_snapshots_classifies_symlink_replacing_file_as_symlink_created(
    store: RunEventStore, tmp_path: Path, symlink_support: None,
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    outside = tmp_path / "outside-secret.txt"
    outside.write_text("host-side content outside the workspace root\n", encoding="utf-8")
    (workspace / "config.txt").write_text("original tracked content\n", encoding="utf-8")

    def change(root: Path) -> None:  # rm config.txt && ln -s <outside path> config.txt
        (root / "config.txt").unlink()
        (root / "config.txt").symlink_to(outside)

    body = await changes(store, await changing_run(store, workspace, change))
    entry = by_path(body)["config.txt"]
    assert entry["status"] == "symlink_created"
    assert entry["symlink"] is True
    assert entry["symlink_target_after"] == str(outside)
    assert entry["diff_unavailable_reason"] == "symlink"
    assert entry["diff"] == ""
    assert body["summary"]["symlink_created"] == 1
    assert body["summary"]["deleted"] == 0
    assert body["summary"]["modified"] == 0


async def test_scan_workspace_roots_captures_symlinks_as_metadata_only_stubs(
    store: RunEventStore, tmp_path: Path, symlink_support: None,
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    outside = tmp_path / "outside-target.txt"
    outside.write_text("outside content\n", encoding="utf-8")
    body = await changes(store, await changing_run(
        store, workspace, lambda root: (root / "link.txt").symlink_to(outside)))
    entry = by_path(body)["link.txt"]
    assert entry["status"] == "symlink_created"
    assert entry["symlink_target_after"] == str(outside)
    assert entry["sha256_after"] is None
    assert entry["diff"] == ""
    assert "outside content" not in str(body)
    assert body["summary"]["created"] == 0  # counted as symlink_created only


async def test_compare_snapshots_reports_removed_symlink_without_replacement_as_deleted(
    store: RunEventStore, tmp_path: Path, symlink_support: None,
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    outside = tmp_path / "outside-target.txt"
    outside.write_text("outside content\n", encoding="utf-8")
    (workspace / "link.txt").symlink_to(outside)
    body = await changes(store, await changing_run(store, workspace,
                                                   lambda root: (root / "link.txt").unlink()))
    assert by_path(body)["link.txt"]["status"] == "deleted"


async def test_compare_snapshots_truncates_large_text_diffs(store: RunEventStore, tmp_path: Path) -> None:
    limits = WorkspaceLimits(max_file_bytes=32)
    body = await changes(store, await changing_run(
        store, tmp_path, lambda root: (root / "large.txt").write_text("0123456789\n" * 20), limits))
    entry = body["files"][0]
    assert entry["path"] == "large.txt"
    assert entry["diff"] == ""
    assert entry["diff_unavailable_reason"] == "large"
    assert body["summary"]["truncated"] is True
