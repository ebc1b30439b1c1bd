"""With a user scope (``user_header=``), every gateway route reads as the caller's user: another
user's run in the same thread, or another user's thread, shows nothing of itself (an empty answer,
or a 404 where the gateway names a run it cannot find), on every backend."""

from __future__ import annotations

from pathlib import Path

from run_journal import RunEventStore, RunJournal, WorkspaceSnapshot
from run_journal import arecord_workspace_changes as record_changes
from run_journal.checks import record_score

from ._support import THREAD, answers, gateway, record_turn
from .test_run_events_endpoint import create_agent_run


async def test_another_users_rows_never_show(store: RunEventStore, tmp_path: Path) -> None:
    mine = await record_turn(store, "bob asks", answers("bob's answer"), user="bob")
    async with RunJournal(store, thread_id=THREAD, user_id="alice") as journal:
        before = await WorkspaceSnapshot.acapture(tmp_path)
        await create_agent_run(journal, answers("alice's secret answer"))
        (tmp_path / "alice.txt").write_text("alice's file\n", encoding="utf-8")
        await record_changes(journal, before)
    theirs = journal.run_id
    await record_score(store, THREAD, theirs, "feedback", 1, comment="alice liked it", source="human")
    run_path = f"/api/threads/{THREAD}/runs/{theirs}"
    async with gateway(store, user_header="X-User", headers={"X-User": "bob"}) as client:
        page = (await client.get(f"/api/threads/{THREAD}/messages/page")).json()
        legacy = (await client.get(f"/api/threads/{THREAD}/messages")).json()
        runs = (await client.get(f"/api/threads/{THREAD}/runs")).json()
        usage = (await client.get(f"/api/threads/{THREAD}/token-usage")).json()
        answers_for_bob = {
            "run": (await client.get(run_path)).status_code,
            "messages": (await client.get(f"{run_path}/messages")).json(),
            "stateless messages": (await client.get(f"/api/runs/{theirs}/messages")).status_code,
            "events": (await client.get(f"{run_path}/events")).json(),
            "workspace": (await client.get(f"{run_path}/workspace-changes")).json()["available"],
            "feedback": (await client.get(f"{run_path}/feedback")).json(),
            "stateless feedback": (await client.get(f"/api/runs/{theirs}/feedback")).status_code,
        }
    async with gateway(store, user_header="X-User") as client:
        nobody = await client.get(f"/api/threads/{THREAD}/messages/page")
    assert {row["run_id"] for row in page["data"]} == {mine}
    assert {row["run_id"] for row in legacy} == {mine}
    assert [run["run_id"] for run in runs] == [mine]
    assert usage["total_runs"] == 1
    assert answers_for_bob == {"run": 404, "messages": {"data": [], "has_more": False},
                               "stateless messages": 404, "events": [], "workspace": False,
                               "feedback": [], "stateless feedback": 404}
    assert "alice" not in str([page, legacy, runs, usage])
    assert nobody.status_code == 401
