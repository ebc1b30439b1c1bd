"""Workspace snapshots and the workspace_changes event, on real temporary directories."""

from __future__ import annotations

import codecs
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from blockbuster import blockbuster_ctx
from langgraph.graph import END, START, MessagesState, StateGraph

from run_journal.contract import validate_record
from run_journal.envelope import METADATA_LIMIT, NewEvent, RunEvent
from run_journal.projections import latest_workspace_changes
from run_journal.stores.base import RunEventStore
from run_journal.workspace import (
    WorkspaceLimits,
    WorkspaceSnapshot,
    arecord_workspace_changes,
    is_sensitive,
    record_workspace_changes,
    workspace_changes,
)

SECRET = "hunter2-super-secret-value"


class RecordingJournal:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def record(self, event_type: str, *, content: Any = "", metadata: Any = None) -> None:
        self.records.append({"event_type": event_type, "content": content, "metadata": metadata})

    def record_subagent_chunk(self, chunk: Any) -> None:
        raise AssertionError("the workspace recorder writes no subagent chunks")


def as_event(record: dict[str, Any]) -> NewEvent:
    return NewEvent(thread_id="t", run_id="r", category="workspace", **record)


def changes(root: Path, mutate: Any, limits: WorkspaceLimits | None = None) -> dict[str, Any] | None:
    """Snapshot ``root``, apply ``mutate``, record; check the one event against the contract."""
    journal = RecordingJournal()
    before = WorkspaceSnapshot.capture(root, limits=limits)
    mutate()
    payload = record_workspace_changes(journal, before)
    if payload is None:
        assert journal.records == []
        return None
    (record,) = journal.records
    assert record["event_type"] == "workspace_changes"
    event = as_event(record)
    assert validate_record(RunEvent.stored(event, 1).to_dict()) == []
    assert record["metadata"]["workspace_changes"] is payload
    return payload


def by_path(payload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["path"]: entry for entry in payload["files"]}


def write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def test_created_modified_deleted_with_diffs_and_summary(tmp_path: Path) -> None:
    write(tmp_path / "keep.txt", "same\n")
    write(tmp_path / "src" / "app.py", "a = 1\nb = 2\n")
    write(tmp_path / "old.md", "one\ntwo\n")
    journal = RecordingJournal()
    before = WorkspaceSnapshot.capture(tmp_path)
    write(tmp_path / "src" / "app.py", "a = 1\nb = 3\nc = 4\n")
    write(tmp_path / "new" / "notes.txt", "x\ny\nz\n")
    (tmp_path / "old.md").unlink()
    payload = record_workspace_changes(journal, before)
    assert payload is not None
    files = by_path(payload)
    assert set(files) == {"src/app.py", "new/notes.txt", "old.md"}
    app = files["src/app.py"]
    assert (app["status"], app["additions"], app["deletions"]) == ("modified", 2, 1)
    assert app["root"] == str(tmp_path)
    assert app["diff"].startswith("--- a/src/app.py\n+++ b/src/app.py\n")
    assert "-b = 2\n+b = 3\n+c = 4\n" in app["diff"]
    assert (app["size_before"], app["size_after"]) == (12, 18)
    assert app["sha256_before"] != app["sha256_after"]
    created = files["new/notes.txt"]
    assert (created["status"], created["additions"], created["size_before"]) == ("created", 3, None)
    assert created["diff"].startswith("--- /dev/null\n+++ b/new/notes.txt\n")
    deleted = files["old.md"]
    assert (deleted["status"], deleted["deletions"], deleted["sha256_after"]) == ("deleted", 2, None)
    assert payload["version"] == 1
    summary = payload["summary"]
    assert (summary["created"], summary["modified"], summary["deleted"]) == (1, 1, 1)
    assert (summary["additions"], summary["deletions"], summary["truncated"]) == (5, 3, False)
    assert journal.records[0]["content"] == "3 file(s) changed +5 -3"
    assert {"max_files", "max_file_bytes", "max_diff_bytes_per_file", "max_total_diff_bytes"} <= set(
        payload["limits"]
    )
    assert validate_record(RunEvent.stored(as_event(journal.records[0]), 1).to_dict()) == []


def test_no_event_when_nothing_changed_even_if_touched(tmp_path: Path) -> None:
    write(tmp_path / "a.txt", "content\n")

    def touch() -> None:
        os.utime(tmp_path / "a.txt", ns=(1, 1))
        write(tmp_path / "a.txt", "content\n")

    assert changes(tmp_path, touch) is None


def test_binary_files_have_hashes_but_no_diff(tmp_path: Path) -> None:
    write(tmp_path / "img.png", b"\x89PNG\x00\x01")
    payload = changes(tmp_path, lambda: write(tmp_path / "img.png", b"\x89PNG\x00\x02\x03"))
    assert payload is not None
    entry = by_path(payload)["img.png"]
    assert entry["binary"] is True
    assert entry["diff"] is None
    assert len(entry["sha256_before"]) == len(entry["sha256_after"]) == 64
    assert (entry["size_before"], entry["size_after"]) == (6, 7)


def test_invalid_utf8_counts_as_binary(tmp_path: Path) -> None:
    payload = changes(tmp_path, lambda: write(tmp_path / "latin1.txt", "café".encode("latin-1")))
    assert payload is not None
    assert by_path(payload)["latin1.txt"]["binary"] is True


@pytest.mark.parametrize(
    ("bom", "encoding"),
    [(codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"),
     (codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be")],
    ids=["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"],
)
def test_utf16_and_utf32_text_with_a_byte_order_mark_is_text_and_diffed(
    tmp_path: Path, bom: bytes, encoding: str
) -> None:
    def encoded(text: str) -> bytes:
        return bom + text.encode(encoding)

    write(tmp_path / "notes.txt", encoded("héllo\nwörld\n"))
    payload = changes(tmp_path, lambda: write(tmp_path / "notes.txt", encoded("héllo\nwörld\n€ 3\n")))
    assert payload is not None
    entry = by_path(payload)["notes.txt"]
    assert (entry["binary"], entry["truncated"], entry["additions"], entry["deletions"]) == (
        False, False, 1, 0
    )
    assert entry["diff"].startswith("--- a/notes.txt\n+++ b/notes.txt\n")
    assert "\n wörld\n+€ 3\n" in entry["diff"]
    assert entry["size_after"] == len(encoded("héllo\nwörld\n€ 3\n"))
    # Over the size limit it is still text: compared by hash, flagged truncated, not called binary.
    small = WorkspaceSnapshot.capture(tmp_path, limits=WorkspaceLimits(max_file_bytes=8))
    (state,) = small.files.values()
    assert (state.binary, state.text, state.text_omitted) == (False, None, True)


@pytest.mark.parametrize(
    "data",
    [codecs.BOM_UTF16_LE + b"\x00\x00\x01\x02", codecs.BOM_UTF16_BE + b"\x00\x00",
     codecs.BOM_UTF16_LE + b"\x00\xd8", codecs.BOM_UTF16_LE + b"\x41"],
    ids=["utf32-mark-cut-short", "nul-utf16-be", "lone-surrogate", "odd-length"],
)
def test_binary_data_behind_a_byte_order_mark_stays_binary(tmp_path: Path, data: bytes) -> None:
    payload = changes(tmp_path, lambda: write(tmp_path / "blob.dat", data))
    assert payload is not None
    entry = by_path(payload)["blob.dat"]
    assert (entry["binary"], entry["diff"]) == (True, None)


SENSITIVE_NAMES = [
    # well-known secret files (an SSH key's .pub half too: it sits next to the private key)
    ".env", ".env.local", ".env.production", "prod.env", "id_rsa", "id_rsa.pub", "id_ed25519",
    "id_ed25519.pub", "server.pem", "tls.key", "cert.p12", "cert.pfx", ".npmrc", ".netrc", ".pgpass",
    ".htpasswd", ".git-credentials", "credentials", "kubeconfig", "prod.kubeconfig", ".ssh/config",
    ".aws/config",
    # a word of the name names a secret, in any case and spelling
    "api_key.txt", "apikey", "APIKEY", "apiKey.json", "APIKey.txt", "private_key.json",
    "client-secret.yaml", ".token", "token.json", "github_token.txt", "GitHubToken.txt",
    "my_secrets.yaml", "mysecrets.json", "PASSWORDS.csv", "db-password.txt", "dbpassword",
    "aws_credentials", "gcp.credentials.json", "keys.txt", "key.json", "keyfile", "solana-keypair.json",
    "creds.json",
]
NOT_SENSITIVE_NAMES = [
    "keyboard.py", "KeyboardLayout.json", "monkey.txt", "monkeyPatch.py", "hotkeys.json", "keyword.py",
    "turkey.csv", "tokenizer.py", "tokenizer_config.json", "detokenize.py", "secretary.md",
    "passwordless.md", "env.py", "environment.yml", "pubkey.txt", "sacred.txt",
]


@pytest.mark.parametrize(
    ("name", "expected"),
    [*((name, True) for name in SENSITIVE_NAMES), *((name, False) for name in NOT_SENSITIVE_NAMES)],
)
def test_names_that_look_like_credentials_are_sensitive_by_word_not_substring(
    name: str, expected: bool
) -> None:
    assert is_sensitive(tuple(name.split("/"))) is expected


@pytest.mark.parametrize("name", SENSITIVE_NAMES)
def test_sensitive_files_are_listed_by_path_status_and_size_only(tmp_path: Path, name: str) -> None:
    first, second = f"KEY={SECRET}\n".encode(), f"KEY={SECRET}-rotated-and-longer\n".encode()
    write(tmp_path / name, first)
    journal = RecordingJournal()
    before = WorkspaceSnapshot.capture(tmp_path)
    (state,) = before.files.values()
    assert (state.sensitive, state.text, state.binary, state.sha256) == (True, None, False, None)
    assert state.fingerprint is not None  # keyed: it is not the plain hash a guess could confirm
    assert state.fingerprint != hashlib.sha256(first).hexdigest()
    assert SECRET not in repr(before)
    write(tmp_path / name, second)
    payload = record_workspace_changes(journal, before)
    assert payload is not None
    entry = by_path(payload)[name]
    assert (entry["status"], entry["sensitive"], entry["binary"]) == ("modified", True, False)
    assert (entry["diff"], entry["additions"], entry["deletions"]) == (None, 0, 0)
    assert [entry[key] for key in ("size_before", "size_after", "sha256_before", "sha256_after")] == [
        len(first), len(second), None, None
    ]
    assert journal.records[0]["content"] == "1 file(s) changed +0 -0"
    recorded = json.dumps(journal.records)
    assert SECRET not in recorded
    for data in (first, second):  # neither the plain hash nor the keyed one is written
        assert hashlib.sha256(data).hexdigest() not in recorded
    assert state.fingerprint not in recorded


def test_a_secret_the_scan_may_not_read_is_still_listed_by_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "id_rsa", "one\n")
    real_open = os.open

    def denied(path: str, flags: int, *args: Any) -> int:
        if os.path.basename(path) == "id_rsa":
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", denied)
    before = WorkspaceSnapshot.capture(tmp_path)
    (state,) = before.files.values()
    assert (state.sensitive, state.sha256, state.size, before.unreadable) == (True, None, 4, 0)
    write(tmp_path / "id_rsa", "longer\n")
    payload = record_workspace_changes(RecordingJournal(), before)
    assert payload is not None
    entry = by_path(payload)["id_rsa"]
    assert (entry["status"], entry["size_before"], entry["size_after"], entry["sha256_after"]) == (
        "modified", 4, 7, None
    )


@pytest.mark.parametrize("name", NOT_SENSITIVE_NAMES)
def test_names_that_merely_contain_a_secret_word_are_diffed(tmp_path: Path, name: str) -> None:
    write(tmp_path / name, "one\n")
    payload = changes(tmp_path, lambda: write(tmp_path / name, "one\ntwo\n"))
    assert payload is not None
    entry = by_path(payload)[name]
    assert (entry["sensitive"], entry["additions"]) == (False, 1)
    assert "+two" in entry["diff"]


def test_a_rotated_secret_of_the_same_size_and_mtime_is_a_change(tmp_path: Path) -> None:
    write(tmp_path / ".env", "API_KEY=aaaa\n")
    os.utime(tmp_path / ".env", ns=(10**18, 10**18))
    before = WorkspaceSnapshot.capture(tmp_path)
    write(tmp_path / ".env", "API_KEY=bbbb\n")
    os.utime(tmp_path / ".env", ns=(10**18, 10**18))
    payload = record_workspace_changes(RecordingJournal(), before)  # size and mtime are the same
    assert payload is not None
    entry = by_path(payload)[".env"]
    assert (entry["status"], entry["sensitive"], entry["diff"]) == ("modified", True, None)
    assert (entry["sha256_before"], entry["sha256_after"]) == (None, None)  # told apart by the keyed hash


def test_symlink_outside_the_root_is_recorded_never_followed(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    write(outside / "data.txt", f"{SECRET}\n")
    write(outside / "sub" / "deep.txt", "deep\n")
    write(root / "plain.txt", "p\n")
    journal = RecordingJournal()
    before = WorkspaceSnapshot.capture(root)
    (root / "link.txt").symlink_to(outside / "data.txt")
    (root / "linkdir").symlink_to(outside / "sub", target_is_directory=True)
    payload = record_workspace_changes(journal, before)
    assert payload is not None
    files = by_path(payload)
    assert set(files) == {"link.txt", "linkdir"}  # nothing from inside the linked folder
    link = files["link.txt"]
    assert (link["status"], link["symlink"], link["diff"], link["sha256_after"]) == (
        "created", True, None, None
    )
    assert link["link_target_after"] == str(outside / "data.txt")
    assert SECRET not in json.dumps(journal.records)
    # Changing what the link points to (outside the root) is not a change of the workspace.
    with_link = WorkspaceSnapshot.capture(root)
    write(outside / "data.txt", "changed outside\n")
    assert record_workspace_changes(RecordingJournal(), with_link) is None
    # Re-pointing the link is.
    (root / "link.txt").unlink()
    (root / "link.txt").symlink_to(outside / "sub" / "deep.txt")
    again = record_workspace_changes(RecordingJournal(), with_link)
    assert again is not None
    assert by_path(again)["link.txt"]["status"] == "modified"


@pytest.mark.parametrize(
    "folder",
    [".git", "node_modules/pkg", ".venv/lib", "__pycache__", ".mypy_cache", "build", "dist",
     "thing.egg-info", "custom_env"],
)
def test_heavy_folders_are_skipped(tmp_path: Path, folder: str) -> None:
    if folder == "custom_env":
        write(tmp_path / folder / "pyvenv.cfg", "home = /usr\n")  # a virtualenv by any name
    write(tmp_path / folder / "file.txt", "before\n")

    def mutate() -> None:
        write(tmp_path / folder / "file.txt", "after\n")
        write(tmp_path / folder / "other.txt", "new\n")

    assert changes(tmp_path, mutate) is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_special_files_are_ignored_never_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")  # opening it for reading would block the scan forever
    write(tmp_path / "a.txt", "a\n")
    snapshot = WorkspaceSnapshot.capture(tmp_path)
    assert [path for _, path in snapshot.files] == ["a.txt"]


def test_missing_root_then_created_files(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    payload = changes(out, lambda: write(out / "report.md", "# Report\n"))
    assert payload is not None
    assert by_path(payload)["report.md"]["status"] == "created"


def test_several_roots_are_told_apart(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write(a / "same.txt", "1\n")
    write(b / "same.txt", "1\n")
    journal = RecordingJournal()
    before = WorkspaceSnapshot.capture([a, b, a])
    assert before.roots == (str(a), str(b))
    write(b / "same.txt", "2\n")
    payload = record_workspace_changes(journal, before)
    assert payload is not None
    assert [(entry["root"], entry["path"]) for entry in payload["files"]] == [(str(b), "same.txt")]


# -- limits ------------------------------------------------------------------------------------


def test_file_count_limit_marks_truncated_without_inventing_deletes(tmp_path: Path) -> None:
    for name in "bcdef":
        write(tmp_path / f"{name}.txt", f"{name}\n")
    limits = WorkspaceLimits(max_files=3)

    def mutate() -> None:
        write(tmp_path / "a.txt", "new first file\n")  # pushes e.txt out of the scanned window
        write(tmp_path / "b.txt", "b changed\n")

    payload = changes(tmp_path, mutate, limits)
    assert payload is not None
    files = by_path(payload)
    assert {path: entry["status"] for path, entry in files.items()} == {
        "a.txt": "created", "b.txt": "modified"
    }
    assert payload["summary"]["truncated"] is True
    assert payload["limits"]["max_files"] == 3


def test_file_over_the_size_limit_is_compared_by_hash_not_diffed(tmp_path: Path) -> None:
    limits = WorkspaceLimits(max_file_bytes=100)
    write(tmp_path / "big.txt", "line\n" * 40)
    payload = changes(tmp_path, lambda: write(tmp_path / "big.txt", "line\n" * 41), limits)
    assert payload is not None
    entry = by_path(payload)["big.txt"]
    assert (entry["diff"], entry["truncated"], entry["binary"]) == (None, True, False)
    assert entry["sha256_before"] != entry["sha256_after"]
    assert payload["summary"]["truncated"] is True
    snapshot = WorkspaceSnapshot.capture(tmp_path, limits=limits)
    assert next(iter(snapshot.files.values())).text is None  # content over the limit is not kept


def test_diff_cut_at_the_per_file_limit(tmp_path: Path) -> None:
    limits = WorkspaceLimits(max_diff_bytes_per_file=200)
    payload = changes(tmp_path, lambda: write(tmp_path / "long.txt", "".join(f"{i}\n" for i in range(500))),
                      limits)
    assert payload is not None
    entry = by_path(payload)["long.txt"]
    assert entry["truncated"] is True
    assert len(entry["diff"].encode()) <= 200
    assert entry["additions"] == 500  # counts are for the whole change, not the kept part


def test_total_diff_budget_is_shared_in_path_order(tmp_path: Path) -> None:
    limits = WorkspaceLimits(max_diff_bytes_per_file=1000, max_total_diff_bytes=300)

    def mutate() -> None:
        for name in ("a", "b", "c"):
            write(tmp_path / f"{name}.txt", "".join(f"{name}{i}\n" for i in range(40)))

    payload = changes(tmp_path, mutate, limits)
    assert payload is not None
    diffs = [entry["diff"] for entry in payload["files"]]
    assert sum(len((diff or "").encode()) for diff in diffs) <= 300
    assert diffs[-1] is None
    assert payload["files"][-1]["truncated"] is True
    assert payload["summary"]["truncated"] is True


def test_listed_files_are_capped_but_all_changes_are_counted(tmp_path: Path) -> None:
    limits = WorkspaceLimits(max_listed_files=2)

    def mutate() -> None:
        for index in range(5):
            write(tmp_path / f"f{index}.txt", "x\n")

    payload = changes(tmp_path, mutate, limits)
    assert payload is not None
    assert [entry["path"] for entry in payload["files"]] == ["f0.txt", "f1.txt"]
    assert payload["summary"]["created"] == 5
    assert payload["summary"]["files_omitted"] == 3
    assert payload["summary"]["truncated"] is True


def test_capped_list_still_counts_the_lines_of_every_changed_file(tmp_path: Path) -> None:
    write(tmp_path / "c.txt", "old\n")
    write(tmp_path / "d.txt", "one\ntwo\nthree\n")

    def mutate() -> None:
        write(tmp_path / "a.txt", "a\n")  # +1
        write(tmp_path / "b.txt", "b\n")  # +1
        write(tmp_path / "c.txt", "new\n")  # +1 -1
        write(tmp_path / "d.txt", "one\nthree\n")  # -1
        write(tmp_path / "e.bin", b"\x00binary")  # +0 -0
        write(tmp_path / "f.env", "SECRET=x\n")  # sensitive: +0 -0

    journal = RecordingJournal()
    before = WorkspaceSnapshot.capture(tmp_path, limits=WorkspaceLimits(max_listed_files=1))
    mutate()
    payload = record_workspace_changes(journal, before)
    assert payload is not None
    assert [entry["path"] for entry in payload["files"]] == ["a.txt"]
    summary = payload["summary"]
    assert (summary["files_omitted"], summary["truncated"]) == (5, True)
    assert (summary["additions"], summary["deletions"]) == (3, 2)
    assert journal.records[0]["content"] == "6 file(s) changed +3 -2"
    # The same totals as when every file is listed.
    uncapped = WorkspaceSnapshot.capture(tmp_path)
    listed = workspace_changes(before, uncapped)  # the later snapshot's limits apply
    assert listed is not None
    assert sum(entry["additions"] for entry in listed["files"]) == listed["summary"]["additions"] == 3
    assert sum(entry["deletions"] for entry in listed["files"]) == listed["summary"]["deletions"] == 2


def test_payload_always_fits_in_metadata(tmp_path: Path) -> None:
    generous = WorkspaceLimits(max_diff_bytes_per_file=64 * 1024, max_total_diff_bytes=8 * 1024 * 1024)

    def mutate() -> None:
        for index in range(40):
            write(tmp_path / f"f{index:02}.txt", "".join(f'"quoted\\{index}" {i}\n' for i in range(3000)))

    payload = changes(tmp_path, mutate, generous)  # NewEvent would raise on metadata over 1 MiB
    assert payload is not None
    assert len(json.dumps(payload).encode()) < METADATA_LIMIT
    assert payload["summary"]["truncated"] is True
    assert any(entry["diff"] for entry in payload["files"])


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_limits_must_be_positive_integers(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_files"):
        WorkspaceLimits(max_files=bad)


# -- async -------------------------------------------------------------------------------------


async def test_async_capture_and_record_never_block_the_loop(tmp_path: Path) -> None:
    write(tmp_path / "a.txt", "a\n")
    write(tmp_path / ".env", f"{SECRET}\n")
    journal = RecordingJournal()
    with blockbuster_ctx():
        before = await WorkspaceSnapshot.acapture(tmp_path)
        await arecord_workspace_changes(journal, before)  # nothing changed yet
    assert journal.records == []
    write(tmp_path / "a.txt", "b\n")
    with blockbuster_ctx():
        payload = await arecord_workspace_changes(journal, before)
    assert payload is not None
    assert journal.records[0]["content"] == "1 file(s) changed +1 -1"


async def test_payload_reads_back_the_same_from_every_store(tmp_path: Path, store: RunEventStore) -> None:
    write(tmp_path / "a.txt", "héllo\n")
    journal = RecordingJournal()
    before = await WorkspaceSnapshot.acapture(tmp_path)
    write(tmp_path / "a.txt", "héllo wörld\n")
    write(tmp_path / "b.bin", b"\x00\xff")
    payload = await arecord_workspace_changes(journal, before)
    (record,) = journal.records
    await store.put(thread_id="t", run_id="r", category="workspace", **record)
    review = await latest_workspace_changes(store, "t", "r")
    assert review["available"] is True
    assert review["summary_text"] == "2 file(s) changed +1 -1"
    assert review["workspace_changes"] == json.loads(json.dumps(payload))


async def test_a_sensitive_file_reaches_no_store_with_a_hash(tmp_path: Path, store: RunEventStore) -> None:
    """Through a journaled run on every backend: the file is listed, its content and its hashes
    (plain and keyed) are in no stored event."""
    journal = pytest.importorskip("run_journal.journal").RunJournal(store, thread_id="ws-secret")
    write(tmp_path / ".env", "API_KEY=pqrs\n")  # no hex digits: an id cannot hold it by chance
    write(tmp_path / "notes.md", "one\n")
    rotated = b"API_KEY=wxyz\n"

    def edit(state: MessagesState) -> dict[str, Any]:
        write(tmp_path / ".env", rotated)
        write(tmp_path / "notes.md", "one\ntwo\n")
        return {}

    builder = StateGraph(MessagesState)
    builder.add_node("edit", edit)
    builder.add_edge(START, "edit")
    builder.add_edge("edit", END)
    async with journal:
        before = await WorkspaceSnapshot.acapture(tmp_path)
        await builder.compile().ainvoke({"messages": []}, config={"callbacks": [journal]})
        await arecord_workspace_changes(journal, before)
    after = await WorkspaceSnapshot.acapture(tmp_path)
    events = await store.list_events("ws-secret", journal.run_id)
    stored = "\n".join(json.dumps(event.to_dict()) for event in events)
    (change,) = [event.metadata["workspace_changes"] for event in events
                 if event.event_type == "workspace_changes"]
    assert isinstance(change, dict)
    files = {entry["path"]: entry for entry in change["files"]}  # type: ignore[index, union-attr]
    assert set(files) == {".env", "notes.md"}
    assert (files[".env"]["status"], files[".env"]["size_after"], files[".env"]["sha256_after"]) == (
        "modified", len(rotated), None)
    assert files["notes.md"]["sha256_after"] is not None  # ordinary files keep theirs
    for text in ("pqrs", "wxyz", hashlib.sha256(b"API_KEY=pqrs\n").hexdigest(),
                 hashlib.sha256(rotated).hexdigest(), str(after.files[(str(tmp_path), ".env")].fingerprint)):
        assert text not in stored


async def test_a_run_that_writes_files_records_its_changes_through_the_journal(
    tmp_path: Path, store: RunEventStore
) -> None:
    journal = pytest.importorskip("run_journal.journal").RunJournal(store, thread_id="ws-thread")
    write(tmp_path / "README.md", "hello\n")

    def edit(state: MessagesState) -> dict[str, Any]:
        write(tmp_path / "README.md", "hello\nworld\n")
        return {}

    builder = StateGraph(MessagesState)
    builder.add_node("edit", edit)
    builder.add_edge(START, "edit")
    builder.add_edge("edit", END)
    graph = builder.compile()
    async with journal:
        before = await WorkspaceSnapshot.acapture(tmp_path)
        await graph.ainvoke({"messages": []}, config={"callbacks": [journal]})
        payload = await arecord_workspace_changes(journal, before)
    assert payload is not None
    events = await store.list_events("ws-thread", journal.run_id)
    (change,) = [event for event in events if event.event_type == "workspace_changes"]
    assert change.category == "workspace"
    assert validate_record(change.to_dict()) == []
    review = await latest_workspace_changes(store, "ws-thread", journal.run_id)
    assert review["summary_text"] == "1 file(s) changed +1 -0"
    assert review["workspace_changes"]["files"][0]["path"] == "README.md"


@pytest.mark.slow  # a fresh interpreter
def test_importing_the_workspace_helpers_loads_no_callback_stack() -> None:
    import subprocess
    import sys

    code = ("import sys, run_journal.workspace; "
            "print(sorted(m for m in ('langchain_core', 'langgraph', 'run_journal.journal.handler') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
