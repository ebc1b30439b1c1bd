"""Port of DeerFlow's ``tests/test_thread_messages_feedback.py``: the legacy ``GET /api/threads/
{thread_id}/messages`` puts each run's feedback on its last AI response, on every backend. Feedback is
a ``run.score`` named ``feedback`` (``record_score``); a rating of ``"up"`` reads as +1."""

from __future__ import annotations

from run_journal import RunEventStore
from run_journal.checks import record_score

from ._support import THREAD, gateway, put_message, put_row


async def test_feedback_attached_to_last_ai_message_per_run(store: RunEventStore) -> None:
    await put_row(store, "r1")
    await put_row(store, "r2")
    await put_message(store, "r1", "human", "hi")
    await put_message(store, "r1", "ai", "first")
    await put_message(store, "r1", "ai", "final answer")  # the last AI of r1: gets the feedback
    await put_message(store, "r2", "ai", "other run")  # r2 has no feedback
    score = await record_score(store, THREAD, "r1", "feedback", "up", comment="nice", source="human")
    async with gateway(store) as client:
        response = await client.get(f"/api/threads/{THREAD}/messages")
    assert response.status_code == 200
    by_seq = {row["seq"]: row for row in response.json()}
    assert by_seq[3]["feedback"] == {"feedback_id": score.event_id, "rating": 1, "comment": "nice"}
    assert by_seq[2]["feedback"] is None  # an earlier AI message of the same run
    assert by_seq[1]["feedback"] is None  # the human message
    assert by_seq[4]["feedback"] is None  # r2's last AI message: no feedback on r2


async def test_no_feedback_query_when_thread_has_no_ai_message(store: RunEventStore) -> None:
    """A run with no AI message has nothing to carry its feedback (the original also checked that
    no feedback lookup ran: here no row shows any)."""
    await put_row(store, "r1")
    await put_message(store, "r1", "human", "hi")
    await record_score(store, THREAD, "r1", "feedback", 1, source="human")
    async with gateway(store) as client:
        response = await client.get(f"/api/threads/{THREAD}/messages")
    assert response.status_code == 200
    assert [row["feedback"] for row in response.json()] == [None]
