"""The read API of DeerFlow's gateway over a run-journal store: ``deerflow_router(store)``.

Its paths, parameter names and response shapes are the gateway's, so that gateway's web frontend
reads a journal unchanged: thread history (``/messages/page``), the legacy ``/messages`` list, a
run's messages (thread-scoped and stateless), its events (subtask cards, the memory audit), its
workspace changes, the thread's token usage, run rows and feedback. Every endpoint reads through the
same projections and views as our own API (``run_journal.http.router``), which keeps its shapes;
``create_deerflow_app`` serves both, ours under ``/journal``.

Errors are the gateway's: a bad parameter or id is 422 with FastAPI's ``detail`` list, an unknown
run 404 with a ``detail`` text; 401 and 503 are as in our API. Reads of a thread or run that has no
rows answer empty (a page with no rows, zero usage, ``available: false``), as the gateway does.
Feedback can be written (``PUT``/``POST``/``DELETE .../feedback``) only when the router has a token;
each write is a ``run.score`` event (``record_score``), scoped to the caller's user.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at run time.
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from run_journal.envelope import validate_id
from run_journal.http import compat_views as shapes
from run_journal.http.api import (
    UserResolver,
    _authorizer,
    _scoper,
    create_app,
    json_response,
    store_lifespan,
)
from run_journal.http.views import NotFound
from run_journal.stores.base import RunEventStore, StoreError

__all__ = ["create_deerflow_app", "deerflow_router"]

log = logging.getLogger("run_journal.http")

PAGE_LIMIT: Final = 200
EVENT_LIMIT: Final = shapes.MAX_EVENTS
JOURNAL_PREFIX: Final = "/journal"


def _detail(status_code: int, detail: Any, headers: Mapping[str, str] | None = None) -> Response:
    return json_response({"detail": detail}, status_code, dict(headers or {}))


class CompatRoute(APIRoute):
    """The gateway's error shapes, whichever app the route ends up in (see the module docstring)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as error:
                return _detail(422, jsonable_encoder(error.errors()))
            except HTTPException as error:
                return _detail(error.status_code, error.detail, error.headers)
            except NotFound as error:
                return _detail(404, str(error))
            except (ValueError, TypeError) as error:  # an id or a cursor the contract refuses
                return _detail(422, str(error))
            except StoreError as error:
                log.warning("store failed on %s %s: %s", request.method, request.url.path, error)
                return _detail(503, f"the store failed: {type(error).__name__}")
            except Exception:  # logged here; the client gets a JSON 500, never a traceback
                log.exception("error on %s %s", request.method, request.url.path)
                return _detail(500, "internal error (see the server's log)")

        return guarded


class FeedbackBody(BaseModel):
    rating: int = Field(description="+1 (thumbs up) or -1 (thumbs down).")
    comment: str | None = None


class FeedbackCreateBody(FeedbackBody):
    message_id: str | None = Field(default=None, description="The message the feedback is about.")


def _event_types(value: str | None) -> list[str] | None:
    names = [name for name in (value or "").split(",") if name]
    return names or None


def deerflow_router(
    store: RunEventStore,
    *,
    token: str | None = None,
    user_header: str | None = None,
    user_id: UserResolver | None = None,
    context_windows: Mapping[str, int] | None = None,
) -> APIRouter:
    """DeerFlow's gateway read API over ``store`` (open, and owned by the caller).

    ``token``, ``user_header`` and ``user_id`` are those of ``router``; with a token the feedback
    write endpoints are served too. ``context_windows`` maps a model name to its context window in
    tokens, for ``context_usage.max_context_tokens`` and ``percentage`` of ``/token-usage``.
    """
    if token is not None and not token:
        raise ValueError("token must not be empty")
    windows = dict(context_windows or {})
    for model, size in windows.items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"context_windows[{model!r}] must be a positive integer, got {size!r}")
    dependencies = [Depends(_authorizer(token))] if token is not None else []
    api = APIRouter(route_class=CompatRoute, dependencies=dependencies, tags=["deerflow"])
    User = Annotated[str | None, Depends(_scoper(user_header, user_id))]  # noqa: N806 - a type
    Limit = Annotated[int, Query(ge=1, le=PAGE_LIMIT)]  # noqa: N806 - a type, named like one
    Cursor = Annotated[int | None, Query(ge=1)]  # noqa: N806 - a type, named like one

    def thread_of(thread_id: str) -> str:
        return validate_id("thread_id", thread_id)

    def ids(thread_id: str, run_id: str) -> tuple[str, str]:
        return validate_id("thread_id", thread_id), validate_id("run_id", run_id)

    @api.get("/api/threads/{thread_id}/runs", summary="A thread's runs, newest first")
    async def list_runs(thread_id: str, user: User) -> Response:
        return json_response(await shapes.run_responses(store, thread_of(thread_id), user))

    @api.get("/api/threads/{thread_id}/runs/{run_id}", summary="One run")
    async def get_run(thread_id: str, run_id: str, user: User) -> Response:
        thread, run = ids(thread_id, run_id)
        row = await store.get_run(run)
        if row is None or row.thread_id != thread or (user is not None and row.user_id != user):
            raise NotFound(f"Run {run} not found")
        return json_response(shapes.run_response(row))

    @api.get("/api/threads/{thread_id}/messages", summary="A thread's message rows (legacy list)")
    async def legacy_messages(
        thread_id: str, user: User, limit: Limit = 50, before_seq: Cursor = None,
        after_seq: Cursor = None,
    ) -> Response:
        return json_response(await shapes.legacy_messages(
            store, thread_of(thread_id), limit=limit, before_seq=before_seq, after_seq=after_seq,
            user_id=user))

    @api.get("/api/threads/{thread_id}/messages/page", summary="Thread history, newest page first")
    async def messages_page(
        request: Request, thread_id: str, user: User, limit: Limit = 50, before_seq: Cursor = None,
        hidden_run_ids: Annotated[list[str] | None, Query(
            description="More runs to leave out, besides the superseded ones.")] = None,
    ) -> Response:
        if "after_seq" in request.query_params:
            raise HTTPException(422, "after_seq is not supported by this backward-only endpoint")
        hidden = [validate_id("hidden_run_ids", run) for run in hidden_run_ids or []]
        return json_response(await shapes.history_rows(
            store, thread_of(thread_id), limit=limit, before_seq=before_seq, hidden_run_ids=hidden,
            user_id=user))

    @api.get("/api/threads/{thread_id}/runs/{run_id}/messages", summary="A run's messages")
    async def run_messages(
        thread_id: str, run_id: str, user: User, limit: Limit = 50, before_seq: Cursor = None,
        after_seq: Cursor = None,
    ) -> Response:
        return json_response(await shapes.message_page(
            store, *ids(thread_id, run_id), limit=limit, before_seq=before_seq, after_seq=after_seq,
            user_id=user))

    @api.get("/api/runs/{run_id}/messages", summary="A run's messages, without its thread")
    async def stateless_messages(
        run_id: str, user: User, limit: Limit = 50, before_seq: Cursor = None,
        after_seq: Cursor = None,
    ) -> Response:
        row = await shapes.resolve_run(store, validate_id("run_id", run_id), user)
        return json_response(await shapes.message_page(
            store, row.thread_id, row.run_id, limit=limit, before_seq=before_seq,
            after_seq=after_seq, user_id=user))

    @api.get("/api/threads/{thread_id}/runs/{run_id}/events",
             summary="A run's events (debug, audit, subtask cards, memory audit)")
    async def run_events(
        thread_id: str, run_id: str, user: User,
        event_types: Annotated[str | None, Query(description="Comma-separated event types.")] = None,
        task_id: Annotated[str | None, Query(description="One subagent task.")] = None,
        limit: Annotated[int, Query(ge=1, le=EVENT_LIMIT)] = 500,
        after_seq: Cursor = None,
    ) -> Response:
        task = validate_id("task_id", task_id) if task_id is not None else None
        return json_response(await shapes.event_list(
            store, *ids(thread_id, run_id), event_types=_event_types(event_types), task_id=task,
            limit=limit, after_seq=after_seq, user_id=user))

    @api.get("/api/threads/{thread_id}/runs/{run_id}/workspace-changes",
             summary="The files a run changed")
    async def workspace_changes(
        thread_id: str, run_id: str, user: User, include_files: bool = True,
        include_diff: bool = True,
    ) -> Response:
        return json_response(await shapes.workspace_changes(
            store, *ids(thread_id, run_id), include_files=include_files, include_diff=include_diff,
            user_id=user))

    @api.get("/api/threads/{thread_id}/token-usage", summary="A thread's token usage")
    async def token_usage(thread_id: str, user: User, include_active: bool = False) -> Response:
        return json_response(await shapes.token_usage(
            store, thread_of(thread_id), include_active=include_active, user_id=user,
            context_windows=windows))

    @api.get("/api/threads/{thread_id}/runs/{run_id}/feedback", summary="A run's feedback")
    async def list_feedback(thread_id: str, run_id: str, user: User) -> Response:
        thread, run = ids(thread_id, run_id)
        return json_response(await shapes.feedback_of_run(store, thread, run, user))

    @api.get("/api/threads/{thread_id}/runs/{run_id}/feedback/stats",
             summary="A run's feedback, counted")
    async def feedback_stats(thread_id: str, run_id: str, user: User) -> Response:
        thread, run = ids(thread_id, run_id)
        rows = await shapes.feedback_of_run(store, thread, run, user)
        return json_response(shapes.feedback_stats(run, rows))

    @api.get("/api/runs/{run_id}/feedback", summary="A run's feedback, without its thread")
    async def stateless_feedback(run_id: str, user: User) -> Response:
        row = await shapes.resolve_run(store, validate_id("run_id", run_id), user)
        return json_response(await shapes.feedback_of_run(store, row.thread_id, row.run_id, user))

    if token is not None:
        _feedback_writes(api, store, User, ids)
    return api


def _feedback_writes(api: APIRouter, store: RunEventStore, User: Any,  # noqa: N803 - a type
                     ids: Callable[[str, str], tuple[str, str]]) -> None:
    """The feedback endpoints that write (a router with a token only)."""

    def rating_of(body: FeedbackBody) -> int:
        if body.rating not in (1, -1):
            raise HTTPException(400, "rating must be +1 or -1")
        return body.rating

    @api.put("/api/threads/{thread_id}/runs/{run_id}/feedback",
             summary="Give or change your feedback on a run")
    async def upsert_feedback(thread_id: str, run_id: str, body: FeedbackBody, user: User) -> Response:
        return json_response(await shapes.write_feedback(
            store, *ids(thread_id, run_id), rating=rating_of(body), comment=body.comment,
            message_id=None, user_id=user, replace=True))

    @api.post("/api/threads/{thread_id}/runs/{run_id}/feedback", summary="Add feedback on a run")
    async def create_feedback(
        thread_id: str, run_id: str, body: FeedbackCreateBody, user: User
    ) -> Response:
        message = validate_id("message_id", body.message_id) if body.message_id else None
        return json_response(await shapes.write_feedback(
            store, *ids(thread_id, run_id), rating=rating_of(body), comment=body.comment,
            message_id=message, user_id=user, replace=False))

    @api.delete("/api/threads/{thread_id}/runs/{run_id}/feedback",
                summary="Withdraw your feedback on a run")
    async def delete_my_feedback(thread_id: str, run_id: str, user: User) -> Response:
        if not await shapes.delete_feedback(store, *ids(thread_id, run_id), feedback_id=None,
                                            user_id=user):
            raise NotFound("No feedback found for this run")
        return json_response({"success": True})

    @api.delete("/api/threads/{thread_id}/runs/{run_id}/feedback/{feedback_id}",
                summary="Withdraw one feedback")
    async def delete_one_feedback(
        thread_id: str, run_id: str, feedback_id: str, user: User
    ) -> Response:
        chosen = validate_id("feedback_id", feedback_id)
        if not await shapes.delete_feedback(store, *ids(thread_id, run_id), feedback_id=chosen,
                                            user_id=user):
            raise NotFound(f"Feedback {chosen} not found")
        return json_response({"success": True})


def create_deerflow_app(
    store: RunEventStore | str,
    *,
    token: str | None = None,
    user_header: str | None = None,
    user_id: UserResolver | None = None,
    context_windows: Mapping[str, int] | None = None,
    journal_prefix: str = JOURNAL_PREFIX,
) -> FastAPI:
    """One application serving ``deerflow_router`` at the root and our own API and viewer
    (``create_app``) under ``journal_prefix``; a URL is opened at startup and closed at shutdown."""
    if not journal_prefix.startswith("/") or journal_prefix.endswith("/") or journal_prefix == "/":
        raise ValueError(f"journal_prefix is a path like '/journal', got {journal_prefix!r}")
    opened, lifespan = store_lifespan(store)
    app = FastAPI(title="run-journal (DeerFlow gateway API)", docs_url=None, redoc_url=None,
                  openapi_url="/api/openapi.json", lifespan=lifespan)
    app.include_router(deerflow_router(opened, token=token, user_header=user_header, user_id=user_id,
                                       context_windows=context_windows))
    app.mount(journal_prefix, create_app(opened, token=token, user_header=user_header,
                                         user_id=user_id))
    return app
