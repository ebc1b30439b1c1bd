"""The HTTP API on every backend, through httpx's ASGI transport: each endpoint's filters and paging,
the server-sent event stream under concurrent writers, errors (400 / 401 / 404) and user scoping."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the HTTP API needs the serve extra")
httpx = pytest.importorskip("httpx", reason="the HTTP tests need httpx (dev extra)")

from run_journal import NewEvent, RunEventStore, RunRow, UsageTotals  # noqa: E402
from run_journal.http import create_app  # noqa: E402
from run_journal.testing import read_all  # noqa: E402

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
T = "thread-1"


def at(second: float) -> datetime:
    return START + timedelta(seconds=second)


def ev(run: str, event_type: str, category: str, content: Any = "", *, thread: str = T,
       user: str | None = None, second: float = 0, **meta: Any) -> NewEvent:
    return NewEvent(thread, run, event_type, category, content, {"caller": "lead_agent", **meta},
                    at(second), None, user)


def usage(tokens_in: int, tokens_out: int, calls: int = 1, cost: float | None = 0.001) -> UsageTotals:
    return UsageTotals(input_tokens=tokens_in, output_tokens=tokens_out,
                       total_tokens=tokens_in + tokens_out, llm_calls=calls, cost_usd=cost)


def row(run: str, *, thread: str = T, user: str | None = None, status: str = "success",
        second: float = 0, took: float = 2.0) -> RunRow:
    total = usage(100, 20, 2, 0.002)
    return RunRow(
        run_id=run, thread_id=thread, user_id=user, status=status, started_at=at(second),
        ended_at=at(second + took) if status != "running" else None, usage=total,
        usage_by_model={"gpt-a": usage(60, 10), "gpt-b": usage(40, 10)},
        usage_by_caller={"lead_agent": usage(70, 15), "subagent:researcher": usage(30, 5)},
        tool_call_count=1, message_count=3, first_human_message=f"hello from {run}",
    )


def a_turn(run: str, *, thread: str = T, user: str | None = None, second: float = 0,
           end: str = "run.end") -> list[NewEvent]:
    """A small run: start, human input, a model call with a tool call, its outcome, the answer, end."""
    ai = {"type": "ai", "content": "looking", "tool_calls": [{"name": "search", "args": {}, "id": "c1"}]}
    terminal_category = {"run.end": "outputs", "run.interrupt": "outputs"}.get(end, "error")
    return [
        ev(run, "run.start", "trace", {"run_name": "agent"}, thread=thread, user=user, second=second),
        ev(run, "llm.human.input", "message", {"type": "human", "content": f"question of {run}"},
           thread=thread, user=user, second=second + 0.1),
        ev(run, "llm.ai.response", "message", ai, thread=thread, user=user, second=second + 0.2,
           usage={"input_tokens": 10, "output_tokens": 5}, model_name="gpt-a"),
        ev(run, "tool.call", "trace", {"tool_call_id": "c1", "tool_name": "search", "args_preview": "{}"},
           thread=thread, user=user, second=second + 0.3, tool_call_id="c1"),
        ev(run, "tool.outcome", "trace", {"tool_call_id": "c1", "tool_name": "search",
                                          "outcome": "success", "result_size": 3},
           thread=thread, user=user, second=second + 0.4, tool_call_id="c1"),
        ev(run, "llm.ai.response", "message", {"type": "ai", "content": f"answer of {run}"},
           thread=thread, user=user, second=second + 0.5),
        ev(run, end, terminal_category, {}, thread=thread, user=user, second=second + 0.6),
    ]


@pytest.fixture
async def client(store: RunEventStore) -> AsyncIterator[Any]:
    transport = httpx.ASGITransport(app=create_app(store))
    async with httpx.AsyncClient(transport=transport, base_url="http://journal") as opened:
        yield opened


async def get_json(client: Any, path: str, status: int = 200, **params: Any) -> Any:
    response = await client.get(path, params=params)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


def seqs(page: dict[str, Any]) -> list[int]:
    return [event["seq"] for event in page["data"]]


def sse_events(text: str) -> list[tuple[int, dict[str, Any]]]:
    """``(id, data)`` of every message in a text/event-stream body (comments and pings skipped)."""
    found = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line
                      and not line.startswith(":"))
        if "data" in fields:
            found.append((int(fields["id"]), json.loads(fields["data"])))
    return found


# -- threads, runs, usage --------------------------------------------------------------------------
async def test_threads_page_by_page_with_counts_and_latest_run(store: RunEventStore, client: Any) -> None:
    for n in range(5):
        thread = f"t{n}"
        await store.put_batch(a_turn(f"{thread}-r1", thread=thread) + a_turn(f"{thread}-r2", thread=thread,
                                                                              second=10))
        await store.put_run(row(f"{thread}-r1", thread=thread))
        await store.put_run(row(f"{thread}-r2", thread=thread, second=10, status="error"))
    seen: list[str] = []
    after = None
    while True:
        page = await get_json(client, "/api/threads", limit=2, **({"after": after} if after else {}))
        assert len(page["data"]) <= 2
        seen += [thread["thread_id"] for thread in page["data"]]
        if not page["has_more"]:
            assert page["next_after"] is None
            break
        after = page["next_after"]
    assert seen == ["t4", "t3", "t2", "t1", "t0"]  # equally recent: the greater id first
    first = (await get_json(client, "/api/threads", limit=1))["data"][0]
    assert first["run_count"] == 2
    assert first["message_count"] == 6
    assert first["total_tokens"] == 240
    assert first["cost_usd"] == pytest.approx(0.004)
    latest = first["latest_run"]
    assert latest["run_id"] == "t4-r2"
    assert latest["status"] == "error"
    assert latest["duration_ms"] == 2000
    assert latest["total_tokens"] == 120
    assert latest["first_human_message"] == "hello from t4-r2"


async def test_runs_newest_first_with_usage_by_model_and_caller(store: RunEventStore, client: Any) -> None:
    for n in range(3):
        await store.put_batch(a_turn(f"r{n}", second=10 * n))
        await store.put_run(row(f"r{n}", second=10 * n, status="running" if n == 2 else "success"))
    page = await get_json(client, f"/api/threads/{T}/runs")
    assert [run["run_id"] for run in page["data"]] == ["r2", "r1", "r0"]
    assert page["total"] == 3
    assert page["has_more"] is False
    first, second = (await get_json(client, f"/api/threads/{T}/runs", limit=2)), \
        (await get_json(client, f"/api/threads/{T}/runs", limit=2, offset=2))
    assert [run["run_id"] for run in first["data"]] == ["r2", "r1"]
    assert [run["run_id"] for run in second["data"]] == ["r0"]
    assert second["next_offset"] is None
    by_cursor = await get_json(client, f"/api/threads/{T}/runs", limit=2, after=first["next_after"])
    assert by_cursor["data"] == second["data"]
    assert by_cursor["next_after"] is None

    run = await get_json(client, f"/api/threads/{T}/runs/r0")
    assert run["row"] is True
    assert run["status"] == "success"
    assert run["duration_ms"] == 2000
    assert run["usage"]["total_tokens"] == 120
    assert run["usage"]["cost_usd"] == pytest.approx(0.002)
    assert run["usage_by_model"]["gpt-a"]["input_tokens"] == 60
    assert run["usage_by_caller"]["subagent:researcher"]["total_tokens"] == 35
    assert (await get_json(client, f"/api/threads/{T}/runs/r2"))["duration_ms"] is None


async def test_threads_and_runs_are_listed_by_latest_activity_most_recent_first(store: RunEventStore) -> None:
    """Not by id: the thread written to last comes first, a page at a time, for everyone and within
    a user's scope (by that user's own newest event)."""
    await store.put_batch(a_turn("b-r1", thread="b", user="alice", second=0))
    await store.put_batch(a_turn("c-r1", thread="c", user="bob", second=10))
    await store.put_batch(a_turn("a-r1", thread="a", user="alice", second=20))
    await store.put_batch(a_turn("b-r2", thread="b", user="bob", second=30))  # b is active again
    for run, thread, user, second in (("b-r1", "b", "alice", 0), ("c-r1", "c", "bob", 10),
                                      ("a-r1", "a", "alice", 20), ("b-r2", "b", "bob", 30)):
        await store.put_run(row(run, thread=thread, user=user, second=second))
    for scope, expected in ((None, ["b", "a", "c"]), ("alice", ["a", "b"]), ("bob", ["b", "c"])):
        app = create_app(store, user_header="X-User") if scope else create_app(store)
        headers = {"X-User": scope} if scope else {}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://journal",
                                     headers=headers) as client:
            seen: list[str] = []
            stamps: list[str] = []
            after = None
            while True:
                page = await get_json(client, "/api/threads", limit=1, **({"after": after} if after else {}))
                seen += [thread["thread_id"] for thread in page["data"]]
                stamps += [thread["last_activity_at"] for thread in page["data"]]
                if not page["has_more"]:
                    break
                after = page["next_after"]
            assert seen == expected, scope
            assert stamps == sorted(stamps, reverse=True)
            if scope is None:
                assert stamps[0] == at(30.6).isoformat()
                runs = await get_json(client, "/api/threads/b/runs")
                assert [run["run_id"] for run in runs["data"]] == ["b-r2", "b-r1"]
            bad = await get_json(client, "/api/threads", 400, after="t1")
            assert "after" in bad["detail"]


async def test_a_run_with_events_but_no_row_is_folded_from_its_events(
    store: RunEventStore, client: Any
) -> None:
    await store.put_batch(a_turn("bare", end="run.interrupt"))
    run = await get_json(client, f"/api/threads/{T}/runs/bare")
    assert run["row"] is False
    assert run["status"] == "interrupted"
    assert run["started_at"] == at(0).isoformat()
    assert run["duration_ms"] == 600


async def test_token_usage_adds_up_the_threads_runs(store: RunEventStore, client: Any) -> None:
    for n in range(2):
        await store.put_batch(a_turn(f"r{n}", second=n))
        await store.put_run(row(f"r{n}", second=n))
    summary = await get_json(client, f"/api/threads/{T}/token-usage")
    assert [run["run_id"] for run in summary["runs"]] == ["r0", "r1"]
    assert summary["total"]["total_tokens"] == 240
    assert summary["total"]["llm_calls"] == 4
    assert summary["by_model"]["gpt-b"]["input_tokens"] == 80
    assert summary["by_caller"]["lead_agent"]["output_tokens"] == 30


# -- messages ----------------------------------------------------------------------------------------
async def test_history_hides_middleware_subagent_answers_and_superseded_runs(
    store: RunEventStore, client: Any
) -> None:
    batch = []
    for n in range(4):
        run = f"r{n}"
        batch += [
            ev(run, "llm.human.input", "message", {"type": "human", "content": f"q{n}"}, second=n),
            ev(run, "llm.ai.response", "message", {"type": "ai", "content": "checked"}, second=n,
               caller="middleware:guard"),
            ev(run, "llm.ai.response", "message", {"type": "ai", "content": "sub"}, second=n,
               caller="subagent:researcher"),
            ev(run, "llm.tool.result", "message", {"type": "tool", "content": "task done"}, second=n),
            ev(run, "tool.call", "trace", {"tool_name": "x"}, second=n),
            ev(run, "llm.ai.response", "message", {"type": "ai", "content": f"a{n}"}, second=n),
        ]
    await store.put_batch(batch)
    everything = await get_json(client, f"/api/threads/{T}/messages/page", limit=1000)
    texts = [event["content"]["content"] for event in everything["data"]]
    assert texts == [t for n in range(4) for t in (f"q{n}", "task done", f"a{n}")]
    assert everything["has_more"] is False
    assert everything["next_before_seq"] is None

    hidden = await get_json(client, f"/api/threads/{T}/messages/page", limit=1000,
                            hidden_run_ids=["r1", "r3"])
    assert {event["run_id"] for event in hidden["data"]} == {"r0", "r2"}

    collected: list[int] = []
    before = None
    while True:
        page = await get_json(client, f"/api/threads/{T}/messages/page", limit=4,
                              **({"before_seq": before} if before else {}))
        assert len(page["data"]) <= 4
        collected = seqs(page) + collected
        if not page["has_more"]:
            break
        before = page["next_before_seq"]
    assert collected == seqs(everything)


async def test_run_messages_page_backwards_and_forwards(store: RunEventStore, client: Any) -> None:
    await store.put_batch(a_turn("r1") + a_turn("r2", second=5) + a_turn("r1", second=9)[1:3])
    by_store = [e.seq for e in await store.list_messages_by_run(T, "r1", limit=100)]
    assert len(by_store) == 5
    last = await get_json(client, f"/api/threads/{T}/runs/r1/messages", limit=2)
    assert seqs(last) == by_store[-2:]
    assert last["has_more"] is True
    older = await get_json(client, f"/api/threads/{T}/runs/r1/messages", limit=2,
                           before_seq=last["next_before_seq"])
    assert seqs(older) == by_store[1:3]
    forwards: list[int] = []
    cursor = 0
    while True:
        page = await get_json(client, f"/api/threads/{T}/runs/r1/messages", limit=2, after_seq=cursor)
        forwards += seqs(page)
        if not page["has_more"]:
            break
        cursor = page["next_after_seq"]
    assert forwards == by_store


# -- run events ----------------------------------------------------------------------------------------
async def test_run_events_filter_by_type_and_task_and_page_by_after_seq(
    store: RunEventStore, client: Any
) -> None:
    batch = a_turn("r1")
    for n in range(7):
        for task in ("task-a", "task-b"):
            batch.append(ev("r1", "subagent.step", "subagent", {"task_id": task, "message_index": n,
                                                                "kind": "ai", "text": f"{task} {n}"},
                            caller="subagent:researcher", task_id=task))
    batch += a_turn("r2")
    await store.put_batch(batch)
    run_seqs = [e.seq for e in await read_all(store, T) if e.run_id == "r1"]

    walked: list[int] = []
    cursor = 0
    while True:
        page = await get_json(client, f"/api/threads/{T}/runs/r1/events", limit=4, after_seq=cursor)
        walked += seqs(page)
        if not page["has_more"]:
            assert page["next_after_seq"] is None
            break
        cursor = page["next_after_seq"]
    assert walked == run_seqs

    steps = await get_json(client, f"/api/threads/{T}/runs/r1/events", task_id="task-b", limit=5)
    assert [e["content"]["text"] for e in steps["data"]] == [f"task-b {n}" for n in range(5)]
    rest = await get_json(client, f"/api/threads/{T}/runs/r1/events", task_id="task-b",
                          after_seq=steps["next_after_seq"])
    assert [e["content"]["message_index"] for e in rest["data"]] == [5, 6]
    assert not rest["has_more"]

    repeated = await client.get(f"/api/threads/{T}/runs/r1/events",
                                params=[("event_types", "tool.call"), ("event_types", "run.end")])
    comma = await get_json(client, f"/api/threads/{T}/runs/r1/events", event_types="tool.call,run.end")
    assert [e["event_type"] for e in repeated.json()["data"]] == ["tool.call", "run.end"]
    assert repeated.json() == comma
    aliased = await get_json(client, f"/api/threads/{T}/runs/r1/events", event_types="ai_message")
    assert [e["event_type"] for e in aliased["data"]] == ["llm.ai.response"] * 2


async def test_workspace_changes_of_a_run(store: RunEventStore, client: Any) -> None:
    changes = {"version": 1, "summary": {"created": 1, "modified": 1, "deleted": 0},
               "files": [{"path": "app.py", "status": "modified", "diff": "@@ -1 +1 @@\n-a\n+b\n",
                          "additions": 1, "deletions": 1},
                         {"path": "new.txt", "status": "created", "diff": "+x\n", "additions": 1,
                          "deletions": 0}]}
    recorded = ev("r1", "workspace_changes", "workspace", "2 file(s) changed +2 -1", second=1,
                  workspace_changes=changes)
    await store.put_batch([*a_turn("r1"), recorded, *a_turn("r2", second=2)])
    review = await get_json(client, f"/api/threads/{T}/runs/r1/workspace-changes")
    assert review["available"] is True
    assert review["summary_text"] == "2 file(s) changed +2 -1"
    assert [f["diff"] for f in review["workspace_changes"]["files"]] == ["@@ -1 +1 @@\n-a\n+b\n", "+x\n"]
    no_diffs = await get_json(client, f"/api/threads/{T}/runs/r1/workspace-changes",
                              include_diffs="false")
    assert all("diff" not in f for f in no_diffs["workspace_changes"]["files"])
    no_files = await get_json(client, f"/api/threads/{T}/runs/r1/workspace-changes",
                              include_files="false")
    assert "files" not in no_files["workspace_changes"]
    assert (await get_json(client, f"/api/threads/{T}/runs/r2/workspace-changes"))["available"] is False


# -- the live stream -----------------------------------------------------------------------------------
async def test_stream_is_dense_under_concurrent_writers_and_resumes_by_last_event_id(
    store: RunEventStore, client: Any
) -> None:
    writers, per_writer = 4, 30

    async def write(n: int) -> None:
        for i in range(0, per_writer, 3):
            await store.put_batch([ev(f"w{n}", "tool.call", "trace", {"i": i + k}) for k in range(3)])
            await asyncio.sleep(0)

    async def read(limit: int, last_event_id: int | None) -> list[tuple[int, dict[str, Any]]]:
        headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
        response = await client.get(f"/api/threads/{T}/events/stream", params={"limit": limit},
                                    headers=headers)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return sse_events(response.text)

    total = writers * per_writer
    first_reader = asyncio.create_task(read(total // 3, None))
    await asyncio.wait_for(asyncio.gather(*(write(n) for n in range(writers))), 60)
    first = await asyncio.wait_for(first_reader, 60)
    rest = await asyncio.wait_for(read(total - len(first), first[-1][0]), 60)
    ids = [seq for seq, _ in first + rest]
    assert ids == list(range(1, total + 1))
    assert [data["seq"] for _, data in first + rest] == ids
    assert ids == [e.seq for e in await read_all(store, T)]


async def test_stream_of_one_run_ends_with_its_terminal_event(store: RunEventStore, client: Any) -> None:
    await store.put_batch(a_turn("r1") + a_turn("r2", second=1))
    response = await asyncio.wait_for(
        client.get(f"/api/threads/{T}/events/stream", params={"run_id": "r1"}), 30)
    events = sse_events(response.text)
    assert [data["event_type"] for _, data in events][-1] == "run.end"
    assert {data["run_id"] for _, data in events} == {"r1"}
    assert len(events) == 7
    done = await client.get(f"/api/threads/{T}/events/stream", params={"run_id": "r1"},
                            headers={"Last-Event-ID": str(events[-1][0])})
    assert done.status_code == 204  # an EventSource stops reconnecting


# -- errors ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("path", "params", "needle"), [
    ("/api/threads/bad%01id/runs", {}, "thread_id"),
    (f"/api/threads/{'x' * 256}/messages/page", {}, "thread_id"),
    ("/api/threads/.%2E/runs", {}, "thread_id"),
    (f"/api/threads/{T}/runs/r%00/events", {}, "run_id"),
    (f"/api/threads/{T}/messages/page", {"limit": "0"}, "limit"),
    (f"/api/threads/{T}/messages/page", {"limit": "lots"}, "limit"),
    (f"/api/threads/{T}/runs/r1/events", {"after_seq": "-1"}, "after_seq"),
    (f"/api/threads/{T}/runs/r1/events", {"limit": "1001"}, "limit"),
    (f"/api/threads/{T}/runs/r1/events", {"task_id": "a\nb"}, "task_id"),
    ("/api/threads", {"after": "\x7f"}, "after"),
])
async def test_invalid_ids_and_parameters_are_400_with_a_json_error(
    store: RunEventStore, client: Any, path: str, params: dict[str, str], needle: str
) -> None:
    await store.put_batch(a_turn("r1"))
    body = await get_json(client, path, 400, **params)
    assert body["error"] == "bad_request"
    assert needle in body["detail"]
    assert "Traceback" not in body["detail"]


async def test_unknown_threads_and_runs_are_404(store: RunEventStore, client: Any) -> None:
    await store.put_batch(a_turn("r1") + a_turn("other", thread="t2"))
    await store.put_run(row("other", thread="t2"))
    for path in ("/api/threads/nope/runs", "/api/threads/nope/messages/page", "/api/threads/nope/token-usage",
                 f"/api/threads/{T}/runs/nope", f"/api/threads/{T}/runs/nope/events",
                 f"/api/threads/{T}/runs/nope/messages", f"/api/threads/{T}/runs/nope/workspace-changes",
                 f"/api/threads/{T}/runs/other", f"/api/threads/{T}/events/stream?run_id=nope",
                 "/api/nothing", "/static/secret.py"):
        response = await client.get(path)
        assert response.status_code == 404, path
        if path.startswith("/api/threads"):
            assert response.json()["error"] == "not_found"
    stream = await client.get(f"/api/threads/{T}/events/stream", headers={"Last-Event-ID": "seven"})
    assert stream.status_code == 400
    assert "Last-Event-ID" in stream.json()["detail"]


async def test_a_token_is_required_when_configured(store: RunEventStore) -> None:
    await store.put_batch(a_turn("r1"))
    transport = httpx.ASGITransport(app=create_app(store, token="s3cret"))
    async with httpx.AsyncClient(transport=transport, base_url="http://journal") as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic czNjcmV0"}):
            for path in ("/api/threads", f"/api/threads/{T}/runs/r1/events",
                         f"/api/threads/{T}/events/stream"):
                response = await client.get(path, headers=headers)
                assert response.status_code == 401, (path, headers)
                assert response.json()["error"] == "unauthorized"
                assert response.headers["www-authenticate"] == "Bearer"
        good = {"Authorization": "Bearer s3cret"}
        assert (await client.get("/api/threads", headers=good)).status_code == 200
        assert (await client.get(f"/api/threads/{T}/runs/r1/events", headers=good)).status_code == 200
        viewer = await client.get("/")  # the page holds no data: it asks for the token itself
        assert viewer.status_code == 200
        assert "static/viewer.js" in viewer.text


# -- user scope ------------------------------------------------------------------------------------------
async def test_a_user_scope_never_returns_another_users_rows(store: RunEventStore) -> None:
    await store.put_batch(a_turn("alice-r1", thread="t-alice", user="alice")
                          + a_turn("bob-r1", thread="t-bob", user="bob")
                          + a_turn("alice-r2", thread="shared", user="alice", second=1)
                          + a_turn("bob-r2", thread="shared", user="bob", second=2)
                          + [ev("bob-r2", "workspace_changes", "workspace", "bob's files", thread="shared",
                                user="bob", workspace_changes={"version": 1, "files": []})])
    for run, thread, user in (("alice-r1", "t-alice", "alice"), ("bob-r1", "t-bob", "bob"),
                              ("alice-r2", "shared", "alice"), ("bob-r2", "shared", "bob")):
        await store.put_run(row(run, thread=thread, user=user))
    transport = httpx.ASGITransport(app=create_app(store, user_header="X-User"))
    async with httpx.AsyncClient(transport=transport, base_url="http://journal",
                                 headers={"X-User": "alice"}) as client:
        threads = await get_json(client, "/api/threads")
        assert [t["thread_id"] for t in threads["data"]] == ["shared", "t-alice"]
        shared = next(t for t in threads["data"] if t["thread_id"] == "shared")
        assert shared["run_count"] == 1
        assert shared["latest_run"]["run_id"] == "alice-r2"
        runs = await get_json(client, "/api/threads/shared/runs")
        assert [r["run_id"] for r in runs["data"]] == ["alice-r2"]
        history = await get_json(client, "/api/threads/shared/messages/page", limit=100)
        assert {e["user_id"] for e in history["data"]} == {"alice"}
        usage_runs = (await get_json(client, "/api/threads/shared/token-usage"))["runs"]
        assert [r["run_id"] for r in usage_runs] == ["alice-r2"]
        for path in ("/api/threads/t-bob/runs", "/api/threads/t-bob/messages/page",
                     "/api/threads/shared/runs/bob-r2", "/api/threads/shared/runs/bob-r2/events",
                     "/api/threads/shared/runs/bob-r2/messages",
                     "/api/threads/shared/runs/bob-r2/workspace-changes",
                     "/api/threads/t-bob/runs/bob-r1", "/api/threads/t-bob/token-usage"):
            assert (await client.get(path)).status_code == 404, path
        stream = await client.get("/api/threads/shared/events/stream", params={"limit": 7})
        assert {data["user_id"] for _, data in sse_events(stream.text)} == {"alice"}
        missing = await client.get("/api/threads", headers={"X-User": ""})
        assert missing.status_code == 401
        bad = await client.get("/api/threads", headers={"X-User": "a/b"})
        assert bad.status_code == 400
    bob = httpx.ASGITransport(app=create_app(store, user_header="X-User"))
    async with httpx.AsyncClient(transport=bob, base_url="http://journal",
                                 headers={"X-User": "bob"}) as client:
        review = await get_json(client, "/api/threads/shared/runs/bob-r2/workspace-changes")
        assert review["available"] is True
        assert review["summary_text"] == "bob's files"


# -- seq cursors -----------------------------------------------------------------------------------------
def seq_cursors(app: Any) -> list[tuple[str, str, str]]:
    """(path, where, name) of every seq cursor the API takes, read from its OpenAPI schema: query
    parameters named ``*_seq`` and the ``Last-Event-ID`` header, so a new endpoint is covered too."""
    found = []
    for path, item in app.openapi()["paths"].items():
        for parameter in item.get("get", {}).get("parameters", []):
            name, where = parameter["name"], parameter["in"]
            if (where == "query" and name.endswith("_seq")) or name.lower() == "last-event-id":
                found.append((path.format(thread_id=T, run_id="r1"), where, name))
    return found


@pytest.mark.parametrize("value", [str(2**63), str(2**64 + 5), "-1", "1" * 30, "1.5", "x"])
async def test_every_seq_cursor_out_of_range_is_a_400_naming_it(store: RunEventStore, value: str) -> None:
    await store.put_batch(a_turn("r1"))
    app = create_app(store)
    cursors = seq_cursors(app)
    assert len(cursors) >= 5
    assert ("/api/threads/thread-1/events/stream", "header", "last-event-id") in cursors
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://journal") as client:
        for path, where, name in cursors:
            if where == "header":
                response = await client.get(path, headers={name: value})
                shown = "Last-Event-ID"
            else:
                response = await client.get(path, params={name: value})
                shown = name
            assert response.status_code == 400, (path, name, response.text)
            body = response.json()
            assert body["error"] == "bad_request"
            assert shown in body["detail"], (path, body)
        highest = str(2**63 - 1)  # the largest seq is a valid cursor: an empty page, or the end
        page = await get_json(client, f"/api/threads/{T}/runs/r1/events", after_seq=highest)
        assert page["data"] == []
        older = await get_json(client, f"/api/threads/{T}/messages/page", before_seq=highest)
        assert len(older["data"]) == 3


async def test_an_unknown_cost_says_why_in_every_read_of_the_run(store: RunEventStore, client: Any) -> None:
    note = "no price for model 'acme-llm-7b' in genai-prices 0.0.99"
    await store.put_batch(a_turn("r1"))
    unpriced = usage(100, 20, 2, None)
    await store.put_run(RunRow(run_id="r1", thread_id=T, status="success", started_at=at(0), ended_at=at(1),
                               usage=unpriced, usage_by_model={"acme-llm-7b": unpriced}, cost_note=note))
    run = await get_json(client, f"/api/threads/{T}/runs/r1")
    assert run["usage"]["cost_usd"] is None
    assert run["cost_note"] == note
    assert (await get_json(client, f"/api/threads/{T}/runs"))["data"][0]["cost_note"] == note
    thread = (await get_json(client, "/api/threads"))["data"][0]
    assert thread["cost_usd"] is None
    assert thread["cost_note"] == note
    assert thread["latest_run"]["cost_note"] == note


# -- feedback ------------------------------------------------------------------------------------------
async def test_feedback_is_recorded_as_a_score_of_the_callers_own_run_and_read_back(
    store: RunEventStore,
) -> None:
    await store.put_batch(a_turn("alice-r1", thread="shared", user="alice")
                          + a_turn("bob-r1", thread="shared", user="bob", second=1))
    await store.put_run(row("alice-r1", thread="shared", user="alice"))
    app = create_app(store, token="s3cret", user_header="X-User")
    alice = {"Authorization": "Bearer s3cret", "X-User": "alice"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://journal") as client:
        path = "/api/threads/shared/runs/alice-r1/feedback"
        up = await client.post(path, json={"value": "up", "comment": "spot on"}, headers=alice)
        assert up.status_code == 201, up.text
        assert up.json()["value"] == "up"
        rating = await client.post(path, json={"value": 4, "name": "rating"}, headers=alice)
        assert rating.status_code == 201
        run = (await client.get("/api/threads/shared/runs/alice-r1", headers=alice)).json()
        assert [(s["name"], s["value"], s["source"], s["comment"]) for s in run["scores"]] == [
            ("feedback", "up", "human", "spot on"), ("rating", 4, "human", None)]
        events = (await client.get("/api/threads/shared/runs/alice-r1/events", headers=alice,
                                   params={"event_types": "run.score"})).json()["data"]
        assert [event["user_id"] for event in events] == ["alice", "alice"]  # the run's owner
        # a run without a row (bob's) is another user's: unknown to alice, as every read
        for other in ("/api/threads/shared/runs/bob-r1/feedback", "/api/threads/shared/runs/nope/feedback",
                      "/api/threads/t-none/runs/alice-r1/feedback"):
            refused = await client.post(other, json={"value": "down"}, headers=alice)
            assert refused.status_code == 404, other
            assert refused.json()["error"] == "not_found"
        for body in ({"value": "meh"}, {"value": True}, {"value": "up", "comment": "x" * 2001},
                     {"value": "up", "extra": 1}, {"comment": "no value"}, {"value": "up", "name": "a b"}):
            bad = await client.post(path, json=body, headers=alice)
            assert bad.status_code == 400, body
            assert bad.json()["error"] == "bad_request"
        assert (await client.post(path, json={"value": "up"}, headers={"X-User": "alice"})).status_code == 401
        assert (await client.post(path, json={"value": "up"},
                                  headers={"Authorization": "Bearer s3cret"})).status_code == 401
    bob = [e for e in await read_all(store, "shared") if e.event_type == "run.score"]
    assert len(bob) == 2  # nothing but alice's two scores was written


async def test_feedback_needs_a_server_with_a_token(store: RunEventStore, client: Any) -> None:
    await store.put_batch(a_turn("r1"))
    refused = await client.post(f"/api/threads/{T}/runs/r1/feedback", json={"value": "up"})
    assert refused.status_code == 403
    assert refused.json()["error"] == "forbidden"
    assert "token" in refused.json()["detail"]
    assert [e for e in await read_all(store, T) if e.event_type == "run.score"] == []
    assert (await get_json(client, f"/api/threads/{T}/runs/r1"))["scores"] == []
