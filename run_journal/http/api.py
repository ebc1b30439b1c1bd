"""The HTTP API and the run viewer, as a FastAPI router over one open store: it reads, but for one
write, feedback on a run (a ``run.score``), taken only when the router has a token.

``router(store)`` holds every endpoint (and, unless ``viewer=False``, the viewer page at ``/`` and its
files under ``/static/``). Its route class turns every failure into a JSON error itself, so the
router behaves the same included in a FastAPI app (``app.include_router``), mounted in any ASGI
framework (``create_app``), or served by ``run-journal URL serve``:

- 400 ``bad_request``: an id that fails validation, a bad query parameter or ``Last-Event-ID``;
- 401 ``unauthorized``: a token is configured and the request does not carry it as a bearer token,
  or a user scope is configured and the request names no user;
- 403 ``forbidden``: feedback sent to a router without a token;
- 404 ``not_found``: an unknown thread or run, or one the caller's user scope cannot see;
- 503 ``unavailable``: the store failed (``StoreError``); 500 ``internal``: anything else (logged).

No response ever carries a traceback. Payloads are returned as stored: the journal redacted them
before they were written.
"""

# No ``from __future__ import annotations`` here: FastAPI reads the endpoints' annotations at run time,
# and the endpoints are closures whose annotations name local types (``User``).
import asyncio
import contextlib
import hmac
import inspect
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Annotated, Any, Final

import anyio
from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.exceptions import HTTPException

from run_journal.catalog import TERMINAL_RUN_EVENTS
from run_journal.envelope import validate_id
from run_journal.http import schema, views
from run_journal.http.views import NotFound
from run_journal.moments import parse_moment
from run_journal.runs import RunStatus
from run_journal.stores.base import MAX_SEQ, RunEventStore, StoreError
from run_journal.stores.urls import open_store
from run_journal.trends import TREND_KEYS

__all__ = ["create_app", "router"]

log = logging.getLogger("run_journal.http")

UserResolver = Callable[[Request], str | Awaitable[str | None] | None]
"""Returns the id of the user a request acts for (None: refuse the request with 401)."""

MAX_LIMIT: Final = 1000
PING_SECONDS: Final = 15
SHUTDOWN_GRACE: Final = 1.0
"""Seconds a stream has to end by itself when the server stops (before it is cut off)."""
_JSON_HEADERS: Final = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
_VIEWER_HEADERS: Final = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
}
_STATIC_TYPES: Final = {
    "index.html": "text/html; charset=utf-8",
    "viewer.css": "text/css; charset=utf-8",
    "viewer.js": "text/javascript; charset=utf-8",
}
_ERROR_RESPONSES: Final[dict[int | str, dict[str, Any]]] = {
    400: {"model": schema.Error, "description": "An id or a parameter is not valid."},
    401: {"model": schema.Error, "description": "Missing or wrong bearer token, or no user."},
    404: {"model": schema.Error, "description": "Unknown thread or run (or another user's)."},
}


# -- responses and errors ----------------------------------------------------------------------------
def json_response(data: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return Response(body, status_code=status_code, media_type="application/json",
                    headers={**_JSON_HEADERS, **(headers or {})})


def error_response(status_code: int, error: str, detail: str,
                   headers: dict[str, str] | None = None) -> Response:
    return json_response({"error": error, "detail": detail}, status_code, headers)


_ERROR_NAMES: Final = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                       405: "not_allowed", 503: "unavailable"}


def _validation_text(error: RequestValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(part) for part in item.get("loc", ()) if part not in {"query", "path",
                                                                                  "header"})
        parts.append(f"{where}: {item.get('msg', 'invalid')}" if where else str(item.get("msg")))
    return "; ".join(parts) or "invalid request"


class JournalRoute(APIRoute):
    """Every failure of an endpoint becomes a JSON error (see the module docstring), whichever app
    the route ends up in: the router needs no exception handler from its host application."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as error:
                return error_response(400, "bad_request", _validation_text(error))
            except HTTPException as error:
                name = _ERROR_NAMES.get(error.status_code, "error")
                return error_response(error.status_code, name, str(error.detail),
                                      dict(error.headers or {}))
            except NotFound as error:
                return error_response(404, "not_found", str(error))
            except (ValueError, TypeError) as error:  # the store's argument checks
                return error_response(400, "bad_request", str(error))
            except StoreError as error:
                log.warning("store failed on %s %s: %s", request.method, request.url.path, error)
                return error_response(503, "unavailable", f"the store failed: {type(error).__name__}")
            except Exception:  # logged here; the client gets a JSON 500, never a traceback
                log.exception("error on %s %s", request.method, request.url.path)
                return error_response(500, "internal", "internal error (see the server's log)")

        return guarded


# -- who may ask -------------------------------------------------------------------------------------
_bearer = HTTPBearer(auto_error=False, description="The token given to the server (``--token``).")


def _authorizer(token: str) -> Callable[..., Coroutine[Any, Any, None]]:
    expected = token.encode("utf-8")

    async def authorize(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        given = credentials.credentials.encode("utf-8") if credentials else b""
        if not hmac.compare_digest(given, expected):
            raise HTTPException(401, "a valid bearer token is required (Authorization: Bearer ...)",
                                headers={"WWW-Authenticate": "Bearer"})

    return authorize


def _scoper(user_header: str | None, user_id: UserResolver | None) -> Callable[..., Awaitable[str | None]]:
    async def scope(request: Request) -> str | None:
        if user_id is not None:
            value = user_id(request)
            found = await value if inspect.isawaitable(value) else value
        elif user_header is not None:
            found = request.headers.get(user_header)
        else:
            return None
        if found is None or found == "":
            raise HTTPException(401, f"no user: this API is scoped by user"
                                     f"{f' (header {user_header})' if user_header else ''}")
        return validate_id("user_id", found)

    return scope


# -- the router ----------------------------------------------------------------------------------------
def _moment(name: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_moment(value)
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None


def run_filters(
    status: Annotated[list[str] | None, Query(
        description="One of these statuses; repeatable or comma-separated (error,cancelled).")] = None,
    since: Annotated[str | None, Query(
        description="Started at or after: an age (90s, 30m, 2h, 1d, 2w: that long ago) or an ISO "
                    "date or time (UTC when no offset).")] = None,
    until: Annotated[str | None, Query(description="Started before (as since).")] = None,
    model: Annotated[str | None, Query(description="Called this model.")] = None,
    tool: Annotated[str | None, Query(description="Called this tool.")] = None,
    caller: Annotated[str | None, Query(description="Has calls of this caller (lead_agent, "
                                                    "subagent:NAME, ...).")] = None,
    min_cost: Annotated[float | None, Query(ge=0, description="Cost at least this (USD).")] = None,
    min_tokens: Annotated[int | None, Query(ge=0, description="Total tokens at least this.")] = None,
    errors: Annotated[bool | None, Query(description="true: only runs where something failed (the "
                                                     "run, a model call or a tool); false: none.")] = None,
    user_id: Annotated[str | None, Query(description="Only this user's runs.")] = None,
    thread_id: Annotated[str | None, Query(description="Only this thread's runs.")] = None,
) -> dict[str, Any]:
    """The ``search_runs`` filters of ``/api/runs`` and ``/api/usage`` (a ValueError names a bad one)."""
    statuses = _types(status)
    known = {value.value for value in RunStatus}
    for name in statuses or ():
        if name not in known:
            raise ValueError(f"status: {name!r} is not a run status ({', '.join(sorted(known))})")
    return {
        "statuses": statuses, "since": _moment("since", since), "until": _moment("until", until),
        "model": model, "tool": tool, "caller": caller, "min_cost_usd": min_cost, "min_tokens": min_tokens,
        "has_error": errors,
        "user_id": validate_id("user_id", user_id) if user_id is not None else None,
        "thread_id": validate_id("thread_id", thread_id) if thread_id is not None else None,
    }


def _types(values: list[str] | None) -> list[str] | None:
    """``event_types`` repeated and/or comma-separated (names never contain commas)."""
    if values is None:
        return None
    return [name for value in values for name in value.split(",") if name]


def router(
    store: RunEventStore,
    *,
    token: str | None = None,
    user_header: str | None = None,
    user_id: UserResolver | None = None,
    viewer: bool = True,
) -> APIRouter:
    """The API over ``store`` (open, and owned by the caller), plus the run viewer; it only reads,
    but for feedback on a run, which needs ``token`` (a 403 without one).

    ``token``: every API request must carry ``Authorization: Bearer <token>``. ``user_header``: every
    request must name its user in that header and sees only that user's rows; trust it only behind
    your own authentication, which sets it. ``user_id``: the same from a function of the request
    (sync or async; ``None`` refuses the request). ``viewer=False`` leaves out the viewer page.
    """
    if token is not None and not token:
        raise ValueError("token must not be empty")
    dependencies = [Depends(_authorizer(token))] if token is not None else []
    api = APIRouter(route_class=JournalRoute, responses=_ERROR_RESPONSES)
    scoped = _scoper(user_header, user_id)
    User = Annotated[str | None, Depends(scoped)]  # noqa: N806 - a type, named like one

    def thread_of(thread_id: str) -> str:
        return validate_id("thread_id", thread_id)

    def ids(thread_id: str, run_id: str) -> tuple[str, str]:
        return validate_id("thread_id", thread_id), validate_id("run_id", run_id)

    api_get = api.get  # every endpoint but feedback is a GET

    @api_get("/api/threads", response_model=schema.ThreadPage, dependencies=dependencies,
             summary="Threads, most recently active first, with their counts and latest run")
    async def list_threads(
        user: User,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
        after: Annotated[str | None, Query(max_length=300,
                                           description="The previous page's next_after.")] = None,
    ) -> Response:
        return json_response(await views.thread_page(store, limit=limit, after=after, user_id=user))

    @api_get("/api/runs", response_model=schema.SearchPage, dependencies=dependencies,
             summary="Runs of every thread that match the filters, newest first")
    async def search_runs(
        user: User, filters: Annotated[dict[str, Any], Depends(run_filters)],
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
        cursor: Annotated[str | None, Query(description="The previous page's next_cursor.")] = None,
    ) -> Response:
        return json_response(await views.search_page(store, filters, user_id=user, limit=limit,
                                                     cursor=cursor))

    @api_get("/api/usage", response_model=schema.UsageTrend, dependencies=dependencies,
             summary="Token and cost totals per day, model or caller of the runs that match the filters")
    async def usage(
        user: User, filters: Annotated[dict[str, Any], Depends(run_filters)],
        by: Annotated[str, Query(description="day (UTC, of the run's start), model or caller")] = "day",
    ) -> Response:
        if by not in TREND_KEYS:
            raise ValueError(f"by must be one of {', '.join(TREND_KEYS)}, got {by!r}")
        return json_response(await views.usage_trend_of(store, filters, by=by, user_id=user))

    @api_get("/api/threads/{thread_id}/runs", response_model=schema.RunPage,
             dependencies=dependencies, summary="A thread's runs, newest first")
    async def list_runs(
        thread_id: str, user: User,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
        offset: Annotated[int, Query(ge=0)] = 0,
        after: Annotated[str | None, Query(description="The previous page's next_after (instead "
                                                       "of offset).")] = None,
    ) -> Response:
        cursor = validate_id("after", after) if after is not None else None
        return json_response(await views.run_page(store, thread_of(thread_id), limit=limit,
                                                  offset=offset, after=cursor, user_id=user))

    @api_get("/api/threads/{thread_id}/runs/{run_id}", response_model=schema.RunDetail,
             dependencies=dependencies, summary="One run row, with usage by model and caller")
    async def get_run(thread_id: str, run_id: str, user: User) -> Response:
        return json_response(await views.run_detail(store, *ids(thread_id, run_id), user))

    @api.post("/api/threads/{thread_id}/runs/{run_id}/feedback", response_model=schema.Score,
              status_code=201, dependencies=dependencies,
              summary="Give feedback on a run (thumbs up or down, or a number; a comment)",
              responses={403: {"model": schema.Error,
                               "description": "The server runs without a token: nothing is written."}})
    async def feedback(thread_id: str, run_id: str, user: User, body: schema.Feedback) -> Response:
        if token is None:
            raise HTTPException(403, "feedback is taken only by a server that runs with a token "
                                     "(router(token=...), run-journal URL serve --token)")
        return json_response(await views.give_feedback(
            store, *ids(thread_id, run_id), value=body.value, comment=body.comment, name=body.name,
            user_id=user), 201)

    @api_get("/api/threads/{thread_id}/messages/page", response_model=schema.HistoryPage,
             dependencies=dependencies, summary="Thread history (the chat page)")
    async def messages_page(
        thread_id: str, user: User,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
        before_seq: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None,
        hidden_run_ids: Annotated[list[str] | None, Query(
            description="Runs to leave out (superseded by a regenerated answer); repeatable.")] = None,
    ) -> Response:
        hidden = [validate_id("hidden_run_ids", run) for run in hidden_run_ids or []]
        return json_response(await views.history_page(
            store, thread_of(thread_id), limit=limit, before_seq=before_seq, hidden_run_ids=hidden,
            user_id=user))

    @api_get("/api/threads/{thread_id}/runs/{run_id}/messages", response_model=schema.MessagePage,
             dependencies=dependencies, summary="A run's messages")
    async def run_messages(
        thread_id: str, run_id: str, user: User,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
        before_seq: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None,
        after_seq: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None,
    ) -> Response:
        return json_response(await views.run_message_page(
            store, *ids(thread_id, run_id), limit=limit, before_seq=before_seq, after_seq=after_seq,
            user_id=user))

    @api_get("/api/threads/{thread_id}/runs/{run_id}/events", response_model=schema.EventPage,
             dependencies=dependencies, summary="A run's events (debug, audit, subtask cards)")
    async def run_events(
        thread_id: str, run_id: str, user: User,
        event_types: Annotated[list[str] | None, Query(
            description="Event types to keep; repeatable or comma-separated.")] = None,
        task_id: Annotated[str | None, Query(description="Subagent task (metadata.task_id).")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 200,
        after_seq: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    ) -> Response:
        task = validate_id("task_id", task_id) if task_id is not None else None
        return json_response(await views.event_page(
            store, *ids(thread_id, run_id), event_types=_types(event_types), task_id=task,
            limit=limit, after_seq=after_seq, user_id=user))

    @api_get("/api/threads/{thread_id}/runs/{run_id}/calls", response_model=schema.ModelCallList,
             dependencies=dependencies, summary="A run's model calls: what each was sent and answered")
    async def run_calls(thread_id: str, run_id: str, user: User) -> Response:
        return json_response(await views.model_call_list(store, *ids(thread_id, run_id), user))

    @api_get("/api/threads/{thread_id}/runs/{run_id}/workspace-changes",
             response_model=schema.WorkspaceReview, dependencies=dependencies,
             summary="The run's latest workspace_changes (files and diffs)")
    async def workspace_changes(
        thread_id: str, run_id: str, user: User,
        include_files: bool = True, include_diffs: bool = True,
    ) -> Response:
        return json_response(await views.workspace_review(
            store, *ids(thread_id, run_id), include_files=include_files, include_diffs=include_diffs,
            user_id=user))

    @api_get("/api/threads/{thread_id}/token-usage", response_model=schema.UsageSummary,
             dependencies=dependencies, summary="Token and cost totals by run, model and caller")
    async def token_usage(thread_id: str, user: User) -> Response:
        return json_response(await views.thread_usage(store, thread_of(thread_id), user))

    @api_get("/api/threads/{thread_id}/compare", response_model=schema.Comparison,
             dependencies=dependencies, summary="Two runs of the thread compared (compare_runs)")
    async def compare(
        thread_id: str, user: User,
        a: Annotated[str, Query(description="Run A, the baseline.")],
        b: Annotated[str, Query(description="Run B, compared with A.")],
    ) -> Response:
        return json_response(await views.comparison(
            store, thread_of(thread_id), validate_id("a", a), validate_id("b", b), user))

    @api_get(
        "/api/threads/{thread_id}/events/stream", dependencies=dependencies,
        summary="Follow a thread live (server-sent events)",
        responses={200: {"content": {"text/event-stream": {}}, "description": (
            "One message per event: `id` is its seq, `data` its JSON. Resume with the "
            "`Last-Event-ID` header (or `after_seq`): no gap, no repeat.")},
            204: {"description": "run_id names a run that ended at or before the cursor."}},
    )
    async def stream(
        thread_id: str, user: User,
        after_seq: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None,
        run_id: Annotated[str | None, Query(description="Only this run's events; the stream ends "
                                                        "with its terminal event.")] = None,
        limit: Annotated[int | None, Query(ge=1, description="End after this many events.")] = None,
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> Response:
        thread = thread_of(thread_id)
        cursor = after_seq or 0
        if last_event_id is not None:
            text = last_event_id.strip()
            if not (text.isascii() and text.isdigit()) or len(text) > 19 or int(text) > MAX_SEQ:
                raise ValueError(f"Last-Event-ID must be a seq (an integer from 0 to 2**63-1), "
                                 f"got {last_event_id[:40]!r}")
            cursor = int(text)
        run = validate_id("run_id", run_id) if run_id is not None else None
        if run is not None:
            await views.find_run(store, thread, run, user)
            ended = await views.terminal_seq(store, thread, run, user)
            if ended is not None and ended <= cursor:
                return Response(status_code=204, headers=_JSON_HEADERS)
        stop = anyio.Event()  # set by sse-starlette when the server shuts down
        return EventSourceResponse(_follow(store, thread, cursor, run, limit, user, stop),
                                   ping=PING_SECONDS, shutdown_event=stop,
                                   shutdown_grace_period=SHUTDOWN_GRACE,
                                   headers={"X-Content-Type-Options": "nosniff"})

    if viewer:
        files = {name: _static_bytes(name) for name in _STATIC_TYPES}  # read here, not on the loop

        @api.get("/", include_in_schema=False)
        async def index() -> Response:
            return _static(files, "index.html")

        @api.get("/static/{name}", include_in_schema=False)
        async def static(name: str) -> Response:
            if name not in files or name == "index.html":
                raise NotFound(f"no file {name!r}")
            return _static(files, name)

    return api


async def _follow(
    store: RunEventStore, thread_id: str, cursor: int, run_id: str | None, limit: int | None,
    user_id: str | None, stop: anyio.Event,
) -> AsyncIterator[ServerSentEvent]:
    """The stream's messages; it ends by itself at ``limit``, at the run's terminal event, or when
    the server shuts down (``stop``), so the response is always completed, never cut off."""
    feed = store.follow(thread_id, after_seq=cursor, user_id=user_id).__aiter__()
    stopping = asyncio.ensure_future(stop.wait())
    following: asyncio.Future[Any] | None = None
    sent = 0
    try:
        while True:
            following = asyncio.ensure_future(anext(feed))
            await asyncio.wait({following, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not following.done():
                return  # the server is stopping
            try:
                event = following.result()
            except StopAsyncIteration:  # the store was closed
                return
            if run_id is not None and event.run_id != run_id:
                continue
            data = json.dumps(event.to_dict(), ensure_ascii=False, separators=(",", ":"))
            yield ServerSentEvent(data=data, id=str(event.seq))
            sent += 1
            if limit is not None and sent >= limit:
                return
            if run_id is not None and event.event_type in TERMINAL_RUN_EVENTS:
                return
    finally:
        stopping.cancel()
        if following is not None and not following.done():
            following.cancel()  # ends the follower (it was waiting for new events)
            await asyncio.wait({following})
        close = getattr(feed, "aclose", None)  # follow is an async generator: end it now, not at GC
        if close is not None:
            await close()


@cache
def _static_bytes(name: str) -> bytes:
    return resources.files("run_journal.http").joinpath("static", name).read_bytes()


def _static(files: dict[str, bytes], name: str) -> Response:
    return Response(files[name], media_type=_STATIC_TYPES[name], headers=_VIEWER_HEADERS)


def store_lifespan(store: RunEventStore | str) -> tuple[RunEventStore, Any]:
    """The store an application serves, and its lifespan: a URL's store is set up at startup and
    closed at shutdown; a store given is the caller's to open and close."""
    owned = isinstance(store, str)
    opened = open_store(store) if isinstance(store, str) else store

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if owned:
            await opened.setup()
        try:
            yield
        finally:
            if owned:
                await opened.aclose()

    return opened, lifespan


def create_app(
    store: RunEventStore | str,
    *,
    token: str | None = None,
    user_header: str | None = None,
    user_id: UserResolver | None = None,
    viewer: bool = True,
) -> FastAPI:
    """A FastAPI application serving ``router(...)``, with the OpenAPI schema at ``/api/openapi.json``.

    Given a URL, the application opens the store at startup and closes it at shutdown; given a
    store, the caller keeps it open for as long as the application serves. Mount it under a prefix
    of any ASGI application (``Mount("/journal", create_app(store))``); the viewer uses relative
    links, so it works under any prefix (open it with the trailing slash: ``/journal/``).
    """
    opened, lifespan = store_lifespan(store)
    app = FastAPI(
        title="run-journal", summary="API over a run-journal store (reads, and feedback on runs)",
        docs_url=None, redoc_url=None, openapi_url="/api/openapi.json", lifespan=lifespan,
    )
    app.include_router(router(opened, token=token, user_header=user_header, user_id=user_id,
                              viewer=viewer))
    app.add_exception_handler(HTTPException, _outside_a_route)
    return app


async def _outside_a_route(request: Request, error: Exception) -> Response:
    """The application's own errors, raised before any route runs (an unknown path: 404, a known
    path with another method: 405), in the shape every endpoint answers with."""
    assert isinstance(error, HTTPException)
    status = error.status_code
    if status == 404:
        detail = f"no such path: {request.url.path}"
    elif status == 405:
        detail = f"{request.method} is not allowed here"
    else:
        detail = str(error.detail)
    return error_response(status, _ERROR_NAMES.get(status, "error"), detail, dict(error.headers or {}))
