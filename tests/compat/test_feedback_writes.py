"""Feedback written through the gateway's endpoints (``PUT``/``POST``/``DELETE .../feedback``): served
only with a token, scoped to the caller's user, each write a ``run.score`` event, read back by the
thread history, the run's feedback list and its stats, on every backend."""

from __future__ import annotations

import pytest

from run_journal import RunEventStore
from run_journal.checks import SCORE_EVENT

from ._support import THREAD, answers, gateway, record_turn

AUTH = {"Authorization": "Bearer secret"}


@pytest.fixture
async def alices_run(store: RunEventStore) -> str:
    return await record_turn(store, "a poem, please", answers("Roses are red."), user="alice")


async def test_without_a_token_feedback_is_read_only(store: RunEventStore, alices_run: str) -> None:
    async with gateway(store) as client:
        put = await client.put(f"/api/threads/{THREAD}/runs/{alices_run}/feedback", json={"rating": 1})
        listed = await client.get(f"/api/threads/{THREAD}/runs/{alices_run}/feedback")
    assert put.status_code == 405
    assert listed.json() == []


async def test_a_rating_is_upserted_per_user_and_shows_on_the_last_answer(
    store: RunEventStore, alices_run: str,
) -> None:
    url = f"/api/threads/{THREAD}/runs/{alices_run}/feedback"
    async with gateway(store, token="secret", user_header="X-User",
                       headers={**AUTH, "X-User": "alice"}) as client:
        first = (await client.put(url, json={"rating": 1, "comment": "nice"})).json()
        second = (await client.put(url, json={"rating": -1})).json()
        listed = (await client.get(url)).json()
        stats = (await client.get(f"{url}/stats")).json()
        page = (await client.get(f"/api/threads/{THREAD}/messages/page")).json()["data"]
        stateless = (await client.get(f"/api/runs/{alices_run}/feedback")).json()
    assert first["user_id"] == "alice"
    assert first["rating"] == 1
    assert first["comment"] == "nice"
    assert second["feedback_id"] == first["feedback_id"]  # the same feedback, changed
    assert [(row["feedback_id"], row["rating"]) for row in listed] == [(first["feedback_id"], -1)]
    assert stats == {"run_id": alices_run, "total": 1, "positive": 0, "negative": 1}
    assert [row["feedback"] for row in page] == [
        None, {"feedback_id": first["feedback_id"], "rating": -1, "comment": None}]
    assert stateless == listed
    scores = await store.list_events(THREAD, alices_run, event_types=[SCORE_EVENT])
    assert len(scores) == 2  # every write is kept, the latest stands
    assert {event.user_id for event in scores} == {"alice"}


async def test_created_feedback_is_withdrawn_and_bad_ratings_are_refused(
    store: RunEventStore, alices_run: str,
) -> None:
    url = f"/api/threads/{THREAD}/runs/{alices_run}/feedback"
    async with gateway(store, token="secret", user_header="X-User",
                       headers={**AUTH, "X-User": "alice"}) as client:
        bad = await client.post(url, json={"rating": 5})
        made = (await client.post(url, json={"rating": 1, "message_id": "msg-1"})).json()
        other = (await client.post(url, json={"rating": -1})).json()
        one = await client.delete(f"{url}/{made['feedback_id']}")
        left = (await client.get(url)).json()
        mine = await client.delete(url)
        again = await client.delete(url)
        after = (await client.get(url)).json()
    assert bad.status_code == 400
    assert made["message_id"] == "msg-1"
    assert one.json() == {"success": True}
    assert [row["feedback_id"] for row in left] == [other["feedback_id"]]
    assert mine.json() == {"success": True}
    assert again.status_code == 404
    assert after == []


async def test_another_user_can_neither_rate_nor_read_the_run(store: RunEventStore, alices_run: str) -> None:
    url = f"/api/threads/{THREAD}/runs/{alices_run}/feedback"
    async with gateway(store, token="secret", user_header="X-User",
                       headers={**AUTH, "X-User": "bob"}) as client:
        put = await client.put(url, json={"rating": 1})
        stateless = await client.get(f"/api/runs/{alices_run}/feedback")
    async with gateway(store, token="secret", user_header="X-User") as client:
        anonymous = await client.put(url, json={"rating": 1}, headers={"X-User": "alice"})
    assert put.status_code == 404
    assert stateless.status_code == 404
    assert anonymous.status_code == 401  # no bearer token
    assert await store.list_events(THREAD, alices_run, event_types=[SCORE_EVENT]) == []
