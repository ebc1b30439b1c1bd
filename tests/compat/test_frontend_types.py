"""The fields DeerFlow's web frontend reads, with the types its TypeScript client declares, on every
backend, from one real recorded thread: ``RunMessage`` / ``ThreadMessagesPageResponse``
(core/threads/types.ts, hooks.ts), ``FeedbackData`` (core/api/feedback.ts), ``SubtaskStep`` from the
events endpoint (core/tasks/steps.ts, api.ts), ``WorkspaceChangesResponse`` (core/workspace-changes/
types.ts) and ``ThreadTokenUsageResponse`` (core/threads/types.ts).

A spec is a Python type (``int`` is a TypeScript ``number`` that is an integer), a tuple (a union),
a frozenset (a string literal union), a list of one spec (an array), or a dict of field specs;
``Optional(spec)`` marks a field the type declares with ``?``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from run_journal import RunEventStore, RunJournal, WorkspaceSnapshot
from run_journal import arecord_workspace_changes as record_changes
from run_journal.testing import reply

from ._support import THREAD, gateway, search
from .test_run_events_endpoint import create_agent_run, delegating_run

NUMBER = (int, float)


@dataclasses.dataclass(frozen=True)
class Optional:
    spec: Any


def check(value: Any, spec: Any, where: str = "$") -> None:
    if isinstance(spec, Optional):
        check(value, spec.spec, where)
    elif isinstance(spec, dict):
        assert isinstance(value, dict), f"{where}: an object expected, got {value!r}"
        for key, field in spec.items():
            if key not in value:
                assert isinstance(field, Optional), f"{where}.{key}: missing"
                continue
            check(value[key], field, f"{where}.{key}")
    elif isinstance(spec, list):
        assert isinstance(value, list), f"{where}: an array expected, got {value!r}"
        for index, item in enumerate(value):
            check(item, spec[0], f"{where}[{index}]")
    elif isinstance(spec, frozenset):
        assert value in spec, f"{where}: one of {sorted(map(str, spec))} expected, got {value!r}"
    elif isinstance(spec, tuple):
        errors = []
        for option in spec:
            try:
                check(value, option, where)
                return
            except AssertionError as error:
                errors.append(str(error))
        raise AssertionError(f"{where}: no type of the union fits: {errors}")
    elif spec is None:
        assert value is None, f"{where}: null expected, got {value!r}"
    elif spec is Any:
        return
    else:
        fits = isinstance(value, spec) and not (spec is not bool and isinstance(value, bool))
        assert fits, f"{where}: {spec.__name__} expected, got {value!r}"


MESSAGE = {  # @langchain/langgraph-sdk Message, as the history rows carry it
    "type": frozenset({"human", "ai", "tool", "system", "remove"}),
    "content": (str, [Any]),
    "id": Optional((str, None)),
    "additional_kwargs": Optional(dict),
    "tool_calls": Optional([{"name": str, "args": dict, "id": Optional((str, None))}]),
    "tool_call_id": Optional(str),
    "usage_metadata": Optional({"input_tokens": int, "output_tokens": int, "total_tokens": int}),
}
FEEDBACK_DATA = {"feedback_id": str, "rating": NUMBER, "comment": (str, None)}
RUN_MESSAGE = {
    "run_id": str, "seq": int, "content": MESSAGE,
    "metadata": {"caller": str}, "created_at": str,
    "feedback": Optional((FEEDBACK_DATA, None)),
}
THREAD_MESSAGES_PAGE = {"data": [RUN_MESSAGE], "has_more": bool, "next_before_seq": (int, None)}
SUBTASK_STEP = {
    "message_index": int, "kind": frozenset({"ai", "tool"}), "text": str,
    "truncated": Optional(bool),
    "tool_calls": Optional([{"name": Optional(str), "args": Optional(Any)}]),
    "tool_name": Optional((str, None)),
    "task_id": Optional(str),
}
SUBTASK_EVENT = {"event_type": str, "seq": int, "content": SUBTASK_STEP,
                 "metadata": {"task_id": str}}
WORKSPACE_FILE_CHANGE = {
    "path": str, "root": str,
    "status": frozenset({"created", "modified", "deleted", "symlink_created"}),
    "binary": bool, "sensitive": bool, "size_before": (int, None), "size_after": (int, None),
    "sha256_before": (str, None), "sha256_after": (str, None), "diff": str, "diff_truncated": bool,
    "diff_unavailable_reason": (frozenset({"binary", "large", "sensitive", "truncated", "symlink"}),
                                None),
    "additions": int, "deletions": int, "symlink": bool,
    "symlink_target_before": (str, None), "symlink_target_after": (str, None),
}
WORKSPACE_CHANGES = {
    "available": bool, "version": int,
    "summary": {"created": int, "modified": int, "deleted": int, "symlink_created": int,
                "additions": int, "deletions": int, "truncated": bool},
    "files": [WORKSPACE_FILE_CHANGE], "limits": dict,
}
THREAD_TOKEN_USAGE = {
    "thread_id": str, "total_tokens": int, "total_input_tokens": int, "total_output_tokens": int,
    "total_runs": int, "by_model": dict,
    "by_caller": {"lead_agent": int, "subagent": int, "middleware": int},
    "context_usage": Optional(({"token_count": int, "max_context_tokens": (int, None),
                                "percentage": (NUMBER, None)}, None)),
}
MODEL_BREAKDOWN = {"tokens": int, "runs": int}


@pytest.fixture
async def recorded(store: RunEventStore, tmp_path: Path) -> dict[str, str]:
    """A thread with a delegating run (subagent steps) and a run that searched and wrote files."""
    delegated = await delegating_run(store, {"task-A": 3})
    (tmp_path / "notes.txt").write_text("old\n", encoding="utf-8")
    async with RunJournal(store, thread_id=THREAD) as journal:
        before = await WorkspaceSnapshot.acapture(tmp_path)
        await create_agent_run(journal, [reply("", tool_calls=[("search", {"query": "weather"}, "c1")]),
                                         reply("Sunny.")], [search])
        (tmp_path / "notes.txt").write_text("new\n", encoding="utf-8")
        (tmp_path / "report.md").write_text("# Weather\nsunny\n", encoding="utf-8")
        (tmp_path / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00")
        await record_changes(journal, before)
    return {"delegated": delegated, "changed": journal.run_id}


async def test_thread_history_rows_are_run_messages(store: RunEventStore, recorded: dict[str, str]) -> None:
    async with gateway(store, token="secret", headers={"Authorization": "Bearer secret"}) as client:
        await client.put(f"/api/threads/{THREAD}/runs/{recorded['changed']}/feedback",
                         json={"rating": 1})
        page = (await client.get(f"/api/threads/{THREAD}/messages/page", params={"limit": 3})).json()
        older = (await client.get(f"/api/threads/{THREAD}/messages/page",
                                  params={"before_seq": page["next_before_seq"]})).json()
        legacy = (await client.get(f"/api/threads/{THREAD}/messages")).json()
    check(page, THREAD_MESSAGES_PAGE)
    check(older, THREAD_MESSAGES_PAGE)
    check(legacy, [RUN_MESSAGE])
    assert page["has_more"] is True
    last = page["data"][-1]
    assert last["feedback"]["rating"] == 1
    assert isinstance(last["content"]["additional_kwargs"]["turn_duration"], int)


async def test_subtask_steps_are_subtask_steps(store: RunEventStore, recorded: dict[str, str]) -> None:
    async with gateway(store) as client:
        events = (await client.get(
            f"/api/threads/{THREAD}/runs/{recorded['delegated']}/events",
            params={"event_types": "subagent.step", "task_id": "task-A", "limit": 500})).json()
    check(events, [SUBTASK_EVENT])
    assert [event["content"]["kind"] for event in events] == ["ai", "tool", "ai"]


async def test_workspace_changes_are_a_workspace_changes_response(
    store: RunEventStore, recorded: dict[str, str],
) -> None:
    async with gateway(store) as client:
        body = (await client.get(f"/api/threads/{THREAD}/runs/{recorded['changed']}/workspace-changes",
                                 params={"include_files": "true", "include_diff": "true"})).json()
    check(body, WORKSPACE_CHANGES)
    assert body["summary"]["created"] == 2
    assert body["summary"]["modified"] == 1
    assert {entry["status"] for entry in body["files"]} == {"created", "modified"}


async def test_token_usage_is_a_thread_token_usage_response(
    store: RunEventStore, recorded: dict[str, str],
) -> None:
    async with gateway(store, context_windows={"fake-gpt": 128_000}) as client:
        body = (await client.get(f"/api/threads/{THREAD}/token-usage")).json()
    check(body, THREAD_TOKEN_USAGE)
    for breakdown in body["by_model"].values():
        check(breakdown, MODEL_BREAKDOWN)
    assert body["thread_id"] == THREAD
    assert body["total_runs"] == 2
    assert body["by_model"]["fake-gpt"]["runs"] == 2
    assert body["total_tokens"] == body["total_input_tokens"] + body["total_output_tokens"] > 0
    assert body["context_usage"]["max_context_tokens"] == 128_000


async def test_run_rows_carry_the_totals_and_metadata_token_usage(
    store: RunEventStore, recorded: dict[str, str],
) -> None:
    async with gateway(store) as client:
        runs = (await client.get(f"/api/threads/{THREAD}/runs")).json()
    assert [run["run_id"] for run in runs] == [recorded["changed"], recorded["delegated"]]  # newest first
    for run in runs:
        check(run, {"run_id": str, "thread_id": str, "status": str, "created_at": str,
                    "updated_at": str, "total_tokens": int, "total_input_tokens": int,
                    "total_output_tokens": int, "llm_call_count": int, "message_count": int,
                    "metadata": {"token_usage": {"input_tokens": int, "output_tokens": int,
                                                 "total_tokens": int}}})
        assert run["metadata"]["token_usage"]["total_tokens"] == run["total_tokens"]


def test_the_checker_refuses_what_the_types_refuse() -> None:
    with pytest.raises(AssertionError, match="missing"):
        check({"has_more": False, "data": []}, THREAD_MESSAGES_PAGE)
    with pytest.raises(AssertionError, match="int expected"):
        check(True, int)
    with pytest.raises(AssertionError, match="one of"):
        check("renamed", WORKSPACE_FILE_CHANGE["status"])
