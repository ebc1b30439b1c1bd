"""The HTTP API as an application: its schema, the viewer's files, mounting, and ``run-journal serve``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the HTTP API needs the serve extra")
httpx = pytest.importorskip("httpx", reason="the HTTP tests need httpx (dev extra)")

from fastapi import FastAPI  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.routing import Mount  # noqa: E402

from run_journal import MemoryRunEventStore, open_store  # noqa: E402
from run_journal.cli.serve import served_app  # noqa: E402
from run_journal.http import create_app, router  # noqa: E402

RUN_JOURNAL = str(Path(sys.executable).with_name("run-journal"))
ENDPOINTS = {
    "/api/runs",
    "/api/usage",
    "/api/threads",
    "/api/threads/{thread_id}/runs",
    "/api/threads/{thread_id}/runs/{run_id}",
    "/api/threads/{thread_id}/messages/page",
    "/api/threads/{thread_id}/runs/{run_id}/messages",
    "/api/threads/{thread_id}/runs/{run_id}/events",
    "/api/threads/{thread_id}/runs/{run_id}/workspace-changes",
    "/api/threads/{thread_id}/token-usage",
    "/api/threads/{thread_id}/events/stream",
    "/api/threads/{thread_id}/compare",
    "/api/threads/{thread_id}/runs/{run_id}/calls",
    "/api/threads/{thread_id}/runs/{run_id}/feedback",
}


async def seeded() -> MemoryRunEventStore:
    store = MemoryRunEventStore()
    await store.put(thread_id="t1", run_id="r1", event_type="run.start", category="trace")
    return store


async def test_the_openapi_schema_documents_every_endpoint() -> None:
    app = create_app(await seeded(), token="x")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://j") as client:
        schema = (await client.get("/api/openapi.json")).json()
        assert (await client.get("/docs")).status_code == 404  # Swagger UI would load from a CDN
    assert set(schema["paths"]) == ENDPOINTS
    writes = {path for path, item in schema["paths"].items() if set(item) != {"get"}}
    assert writes == {"/api/threads/{thread_id}/runs/{run_id}/feedback"}  # the one write: feedback
    feedback = schema["paths"]["/api/threads/{thread_id}/runs/{run_id}/feedback"]
    assert set(feedback) == {"post"}
    assert set(feedback["post"]["responses"]) >= {"201", "400", "401", "403", "404"}
    events = schema["paths"]["/api/threads/{thread_id}/runs/{run_id}/events"]["get"]
    assert {p["name"] for p in events["parameters"]} >= {"event_types", "task_id", "limit", "after_seq"}
    assert set(events["responses"]) >= {"200", "400", "401", "404"}
    filters = {"status", "since", "until", "model", "tool", "caller", "min_cost", "min_tokens", "errors",
               "user_id", "thread_id"}
    runs = schema["paths"]["/api/runs"]["get"]
    assert {p["name"] for p in runs["parameters"]} == filters | {"limit", "cursor"}
    assert all(p.get("description") for p in runs["parameters"] if p["name"] in filters)
    usage = schema["paths"]["/api/usage"]["get"]
    assert {p["name"] for p in usage["parameters"]} == filters | {"by"}
    assert "HTTPBearer" in schema["components"]["securitySchemes"]


async def test_viewer_files_are_served_with_a_strict_content_security_policy() -> None:
    app = create_app(await seeded())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://j") as client:
        page = await client.get("/")
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        sources = re.findall(r'(?:src|href)="([^"#]+)"', page.text)
        assert sources == ["data:,", "static/viewer.css", "static/viewer.js"]  # relative: mountable
        for name, kind in (("viewer.js", "text/javascript"), ("viewer.css", "text/css")):
            response = await client.get(f"/static/{name}")
            assert response.status_code == 200
            assert response.headers["content-type"].startswith(kind)
            assert "http://" not in response.text
            assert "https://" not in response.text
        assert (await client.get("/static/index.html")).status_code == 404
        assert (await client.get("/static/..%2Fapi.py")).status_code == 404
    without = create_app(await seeded(), viewer=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=without), base_url="http://j") as client:
        assert (await client.get("/")).status_code == 404
        assert (await client.get("/api/threads")).status_code == 200


async def test_the_router_goes_into_a_fastapi_app_and_the_app_under_any_asgi_prefix() -> None:
    store = await seeded()
    host = FastAPI()
    host.include_router(router(store, token="t"), prefix="/journal")
    mounted = Starlette(routes=[Mount("/tools/journal", app=create_app(store))])
    for app, prefix, headers in ((host, "/journal", {"Authorization": "Bearer t"}),
                                 (mounted, "/tools/journal", {})):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://j", headers=headers) as client:
            threads = await client.get(f"{prefix}/api/threads")
            assert threads.status_code == 200
            assert threads.json()["data"][0]["thread_id"] == "t1"
            bad = await client.get(f"{prefix}/api/threads/t1/runs/r1/events", params={"limit": 0})
            assert bad.status_code == 400
            assert bad.json()["error"] == "bad_request"
            assert (await client.get(f"{prefix}/api/threads/t9/runs")).status_code == 404
            page = await client.get(f"{prefix}/")
            assert page.status_code == 200
            assert (await client.get(f"{prefix}/static/viewer.js")).status_code == 200


async def test_an_app_given_a_url_opens_and_closes_its_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/j.db"
    async with open_store(url) as store:
        await store.put(thread_id="t1", run_id="r1", event_type="run.start", category="trace")
    app = create_app(url)
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport,
                                                                   base_url="http://j") as client:
        assert (await client.get("/api/threads")).json()["data"][0]["thread_id"] == "t1"


def test_the_core_package_never_imports_the_web_stack() -> None:
    code = ("import sys, run_journal, run_journal.cli, run_journal.projections\n"
            "loaded = {'fastapi', 'starlette', 'uvicorn', 'sse_starlette'} & set(sys.modules)\n"
            "assert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- run-journal URL serve -----------------------------------------------------------------------------
@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    url = f"sqlite:///{tmp_path}/journal.db"
    seed = ("import asyncio\nfrom run_journal import open_store\nasync def main():\n"
            f"    async with open_store({url!r}) as s:\n"
            "        await s.put(thread_id='t1', run_id='r1', event_type='run.start', category='trace')\n"
            "asyncio.run(main())\n")
    subprocess.run([sys.executable, "-c", seed], check=True, timeout=60)
    env = {**os.environ, "RUN_JOURNAL_TOKEN": "from-env"}
    process = subprocess.Popen([RUN_JOURNAL, url, "serve", "--port", "0", "--allow-host", "journal.lan"],
                               stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    banner = process.stdout.readline()
    match = re.search(r"at (http://127\.0\.0\.1:\d+/)", banner)
    assert match, banner + (process.stderr.read() if process.stderr else "")
    yield match[1], process
    if process.poll() is None:
        process.kill()
        process.wait(10)


def test_serve_listens_on_loopback_asks_for_the_token_and_stops_cleanly_on_ctrl_c(
    served: tuple[str, subprocess.Popen[str]],
) -> None:
    base, process = served
    with httpx.Client(base_url=base, timeout=10) as client:
        assert client.get("api/threads").status_code == 401
        answer = client.get("api/threads", headers={"Authorization": "Bearer from-env"})
        assert answer.status_code == 200
        assert answer.json()["data"][0]["thread_id"] == "t1"
        assert client.get("").status_code == 200
        rebound = client.get("api/threads", headers={"Authorization": "Bearer from-env",
                                                     "Host": "attacker.example"})
        assert rebound.status_code == 400
        assert rebound.json()["error"] == "bad_request"
        allowed = client.get("api/threads", headers={"Authorization": "Bearer from-env",
                                                     "Host": "journal.lan"})
        assert allowed.status_code == 200
    lines: list[str] = []

    def follow() -> None:  # a viewer following the thread when the server is stopped
        with httpx.Client(base_url=base, timeout=30) as client, client.stream(
            "GET", "api/threads/t1/events/stream", headers={"Authorization": "Bearer from-env"}
        ) as response:
            lines.extend(response.iter_lines())

    reader = threading.Thread(target=follow)
    reader.start()
    for _ in range(100):
        if lines:
            break
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    assert process.wait(15) == 130  # interrupted, as a shell reports Ctrl-C
    reader.join(15)
    assert "id: 1" in lines  # the stream was open, and it was ended, not cut off
    errors = process.stderr.read() if process.stderr else ""
    assert "Traceback" not in errors
    assert "ERROR" not in errors


def test_serve_refuses_a_port_in_use_in_one_line(served: tuple[str, subprocess.Popen[str]]) -> None:
    base, _ = served
    port = base.rsplit(":", 1)[1].strip("/")
    started = time.monotonic()
    done = subprocess.run([RUN_JOURNAL, "memory://", "serve", "--port", port], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert time.monotonic() - started < 60
    assert done.stderr.count("\n") == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr


def test_serve_help_names_its_options() -> None:
    done = subprocess.run([RUN_JOURNAL, "memory://", "serve", "--help"], capture_output=True, text=True,
                          timeout=60, check=True)
    text: Any = done.stdout
    for option in ("--host", "--port", "--token", "--user-header"):
        assert option in text


async def test_errors_outside_a_route_answer_the_documented_json_shape() -> None:
    app = create_app(await seeded())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://j") as client:
        for method, path, status, name in (("POST", "/api/threads", 405, "not_allowed"),
                                           ("DELETE", "/api/threads/t1/runs/r1", 405, "not_allowed"),
                                           ("PUT", "/", 405, "not_allowed"),
                                           ("GET", "/api/nothing", 404, "not_found"),
                                           ("GET", "/api/threads/t1/runs/r1/nothing", 404, "not_found"),
                                           ("GET", "/elsewhere", 404, "not_found")):
            response = await client.request(method, path)
            assert response.status_code == status, (method, path)
            assert response.headers["content-type"].startswith("application/json")
            body = response.json()
            assert set(body) == {"error", "detail"}, body
            assert body["error"] == name
            assert body["detail"]
        not_allowed = await client.post("/api/threads")
        assert "GET" in not_allowed.headers["allow"]


# -- Host names (DNS rebinding) --------------------------------------------------------------------------
def fill(path: str) -> str:
    return re.sub(r"\{(\w+)(:\w+)?\}", lambda m: {"thread_id": "t1", "run_id": "r1"}.get(m[1], "x"), path)


def every_request(app: Any, store: MemoryRunEventStore) -> list[tuple[str, str]]:
    """(method, path) of every route the application serves, path parameters filled in: what its
    OpenAPI schema lists and the application's own routes, in every application mounted in it, and
    the viewer's routes (outside the schema) wherever an application is."""
    viewer = [route for route in router(store).routes if not route.include_in_schema]
    found: list[tuple[str, str]] = []

    def walk(application: Any, prefix: str) -> None:
        for path, item in application.openapi()["paths"].items():
            found.extend((method.upper(), prefix + fill(path)) for method in item)
        for route in [*application.routes, *viewer]:
            if isinstance(route, Mount):
                walk(route.app, prefix + route.path)
            elif hasattr(route, "path"):
                found.extend((method, prefix + fill(route.path)) for method in sorted(route.methods)
                             if method != "HEAD")

    walk(app, "")
    return sorted(set(found))


@pytest.mark.parametrize("foreign", ["evil.example", "evil.example:8765", "127.0.0.1.evil.example",
                                     "localhost.evil.example:8765", "", None])
@pytest.mark.parametrize("compat", [False, True], ids=["api", "compat"])
async def test_serve_answers_no_foreign_host_on_any_route(foreign: str | None, compat: bool) -> None:
    store = await seeded()
    app = served_app(store, token=None, user_header=None, host="127.0.0.1", bound="127.0.0.1",
                     allow_hosts=["journal.internal"], compat=compat)
    requests = every_request(app, store)
    prefix = "/journal" if compat else ""
    assert {path for _, path in requests} >= {prefix + p.format(thread_id="t1", run_id="r1")
                                              for p in ENDPOINTS}
    assert ("GET", "/api/openapi.json") in requests
    assert ("POST", f"{prefix}/api/threads/t1/runs/r1/feedback") in requests
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://j") as client:
        for method, path in requests:
            request = client.build_request(method, path)
            if foreign is None:
                del request.headers["host"]
            else:
                request.headers["host"] = foreign
            response = await client.send(request)
            assert response.status_code == 400, (method, path, foreign)
            body = response.json()
            assert body["error"] == "bad_request"
            assert "--allow-host" in body["detail"]
        for host in ("127.0.0.1:8765", "localhost:8765", "LOCALHOST", "[::1]:8765", "journal.internal",
                     "journal.internal.:80"):
            answer = await client.get(f"{prefix}/api/threads", headers={"host": host})
            assert answer.status_code == 200, host
            assert (await client.get(f"{prefix}/", headers={"host": host})).status_code == 200


async def test_serve_on_every_interface_answers_its_addresses_and_allowed_names_only() -> None:
    app = served_app(await seeded(), token=None, user_header=None, host="0.0.0.0", bound="0.0.0.0",
                     allow_hosts=["box.lan"])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://j") as client:
        for host, status in (("192.168.1.20:8765", 200), ("[fe80::1]:8765", 200), ("box.lan", 200),
                             ("localhost", 200), ("rebound.example", 400), ("box.lan.example", 400)):
            assert (await client.get("/api/threads", headers={"host": host})).status_code == status, host
