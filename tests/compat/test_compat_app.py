"""``create_deerflow_app`` (what ``serve --compat`` runs): the gateway's paths at the root, our own
API and the viewer under ``/journal/``, one store; a URL is opened at startup and closed at
shutdown; bad options are refused with a clear error."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from run_journal import MemoryRunEventStore, RunEventStore, open_store
from run_journal.cli import build_parser
from run_journal.http import create_deerflow_app, deerflow_router

from ._support import THREAD, answers, record_turn


async def test_the_gateway_api_and_ours_are_served_side_by_side(store: RunEventStore) -> None:
    run = await record_turn(store, "hello", answers("Hi there."))
    app = create_deerflow_app(store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as client:
        theirs = (await client.get(f"/api/threads/{THREAD}/runs")).json()
        ours = (await client.get(f"/journal/api/threads/{THREAD}/runs")).json()
        viewer = await client.get("/journal/")
        usage_theirs = (await client.get(f"/api/threads/{THREAD}/token-usage")).json()
        usage_ours = (await client.get(f"/journal/api/threads/{THREAD}/token-usage")).json()
        schema = (await client.get("/api/openapi.json")).json()
    assert [row["run_id"] for row in theirs] == [run]  # the gateway's list of RunResponse
    assert [row["run_id"] for row in ours["data"]] == [run]  # our page, unchanged
    assert viewer.status_code == 200
    assert viewer.headers["content-type"].startswith("text/html")
    assert usage_theirs["total_tokens"] == usage_ours["total"]["total_tokens"] > 0
    assert {"/api/threads/{thread_id}/messages/page", "/api/runs/{run_id}/messages",
            "/api/threads/{thread_id}/runs/{run_id}/events"} <= set(schema["paths"])
    assert "put" not in schema["paths"]["/api/threads/{thread_id}/runs/{run_id}/feedback"]  # no token


async def test_a_url_is_opened_at_startup_and_closed_at_shutdown(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/journal.db"
    async with open_store(url) as store:
        await record_turn(store, "hello", answers("Hi."))
    app = create_deerflow_app(url, token="secret")
    transport = httpx.ASGITransport(app=app)
    async with (app.router.lifespan_context(app),
                httpx.AsyncClient(transport=transport, base_url="http://x",
                                  headers={"Authorization": "Bearer secret"}) as client):
        page = (await client.get(f"/api/threads/{THREAD}/messages/page")).json()
        refused = await client.get(f"/api/threads/{THREAD}/messages/page",
                                   headers={"Authorization": "Bearer wrong"})
    assert [row["content"]["content"] for row in page["data"]] == ["hello", "Hi."]
    assert refused.status_code == 401


def test_bad_options_are_refused() -> None:
    store = MemoryRunEventStore()
    with pytest.raises(ValueError, match="token"):
        deerflow_router(store, token="")
    with pytest.raises(ValueError, match="context_windows"):
        deerflow_router(store, context_windows={"gpt": 0})
    with pytest.raises(ValueError, match="journal_prefix"):
        create_deerflow_app(store, journal_prefix="journal/")


def test_serve_takes_compat() -> None:
    args = build_parser().parse_args(["memory://", "serve", "--compat", "--port", "0"])
    assert args.compat is True
    assert build_parser().parse_args(["memory://", "serve"]).compat is False
