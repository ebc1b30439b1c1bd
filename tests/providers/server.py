"""A local HTTP server that answers each request with the next scripted reply, and keeps what it was
sent (a real socket on 127.0.0.1, in a thread of the test process)."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclasses.dataclass(frozen=True)
class Reply:
    """One HTTP answer: a JSON body, or a stream (SSE, NDJSON, AWS event stream) sent as it is."""

    body: bytes
    content_type: str = "application/json"
    status: int = 200

    @classmethod
    def json(cls, data: Any, status: int = 200) -> Reply:
        return cls(json.dumps(data).encode(), "application/json", status)


@dataclasses.dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class ProviderServer:
    """``script`` is the queue of replies; every request is kept in ``requests``."""

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with server._lock:
                    server.requests.append(Request(self.command, self.path, dict(self.headers.items()), body))
                    reply = server.script.pop(0) if server.script else Reply.json(
                        {"error": f"no reply scripted for {self.command} {self.path}"}, 500)
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                self.send_header("Connection", "close")  # no connection outlives the test's event loop
                self.close_connection = True
                self.end_headers()
                self.wfile.write(reply.body)

            do_POST = do_GET = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="provider-server",
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> ProviderServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def expect(self, *replies: Reply) -> None:
        with self._lock:
            self.script = list(replies)
            self.requests = []


def sse(events: Iterator[tuple[str | None, Any]] | list[tuple[str | None, Any]], done: bool = False) -> bytes:
    """Server-sent events: ``event:`` lines where the provider names its events, ``data:`` JSON."""
    out = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {json.dumps(data)}\n\n")
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out).encode()


def ndjson(lines: list[Any]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()
