"""``run-journal URL serve``: the read-only HTTP API and the run viewer on one store (needs the
``serve`` extra: FastAPI, uvicorn, sse-starlette).

Listens on 127.0.0.1 by default. ``--token`` (or ``$RUN_JOURNAL_TOKEN``) makes every API request
carry ``Authorization: Bearer <token>``; the viewer asks for it once per browser tab. Listening on
another address without a token prints a warning: anyone who reaches the port reads every run.
Requests are answered only when their ``Host`` header names the bound address, localhost,
127.0.0.1, [::1] or a name given with ``--allow-host`` (a 400 otherwise: no DNS rebinding).
``--compat`` serves DeerFlow's gateway read API at ``/api/...`` instead, and our own API and the
viewer under ``/journal/``.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
from collections.abc import Sequence
from typing import Any, Final, TextIO

from run_journal.cli.common import CliError, add_command, emit
from run_journal.stores.base import RunEventStore
from run_journal.stores.urls import display_url

__all__ = ["add_serve_command", "cmd_serve"]

TOKEN_VARIABLE: Final = "RUN_JOURNAL_TOKEN"


def add_serve_command(sub: Any) -> None:
    """Register ``serve`` on the command's subparsers."""
    text = "serve the read-only HTTP API and the run viewer (pip install 'run-journal[serve]')"
    serve = add_command(sub, "serve", cmd_serve, text)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    serve.add_argument("--token", help=f"require this bearer token (default: ${TOKEN_VARIABLE})")
    serve.add_argument("--user-header", metavar="NAME",
                       help="scope every request to the user named in this header (only behind "
                            "your own authentication, which sets it)")
    serve.add_argument("--allow-host", dest="allow_hosts", action="append", default=[], metavar="NAME",
                       help="also answer requests whose Host header names NAME (repeatable); by "
                            "default only the bound address, localhost, 127.0.0.1 and [::1]")
    serve.add_argument("--compat", action="store_true",
                       help="serve DeerFlow's gateway read API at /api/... (its paths and shapes); "
                            "our own API and the viewer move under /journal/")
    serve.add_argument("--access-log", action="store_true", help="log every request")


def _listen(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as error:
        raise CliError(f"cannot listen on {host}:{port}: {error.strerror or error}") from error
    return sock


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def served_app(store: RunEventStore, *, token: str | None, user_header: str | None, host: str,
               bound: str, allow_hosts: Sequence[str], compat: bool = False) -> Any:
    """The application ``serve`` runs (``create_app``, or ``create_deerflow_app`` with ``compat``),
    answering only the ``Host`` names of the address it listens on (``host`` as given, ``bound`` as
    the socket has it) and ``allow_hosts``."""
    from run_journal.http import create_app, create_deerflow_app
    from run_journal.http.hosts import HostCheck, served_names

    build = create_deerflow_app if compat else create_app
    app = build(store, token=token, user_header=user_header)
    names, any_ip = served_names(host, bound, allow_hosts)
    app.add_middleware(HostCheck, names=names, any_ip=any_ip)
    return app


async def cmd_serve(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    try:
        import uvicorn

        import run_journal.http  # noqa: F401 - only checks the serve extra is installed
    except ImportError as error:
        raise CliError("serve needs the serve extra: pip install 'run-journal[serve]'", 2) from error
    token = args.token if args.token is not None else os.environ.get(TOKEN_VARIABLE) or None
    if token is not None and not token.strip():
        raise CliError("--token must not be empty", 2)
    for name in args.allow_hosts:
        if not name.strip() or "/" in name:
            raise CliError(f"--allow-host takes a host name, not {name!r}", 2)
    sock = _listen(args.host, args.port)
    host, port = sock.getsockname()[:2]
    app = served_app(store, token=token, user_header=args.user_header, host=args.host, bound=host,
                     allow_hosts=args.allow_hosts, compat=args.compat)
    shown_host = f"[{host}]" if ":" in host else host
    if not _is_loopback(args.host) and token is None:
        print(f"run-journal: warning: listening on {args.host} without --token: anyone who can reach "
              "this port can read every run", file=sys.stderr)
    viewer = "journal/" if args.compat else ""
    emit(out, f"run-journal: serving {display_url(args.url)} at http://{shown_host}:{port}/{viewer} "
              f"({'token required' if token else 'no token'}); Ctrl-C stops")
    out.flush()
    config = uvicorn.Config(app, log_level="info" if args.access_log else "warning",
                            access_log=args.access_log, lifespan="on", timeout_graceful_shutdown=3)
    await uvicorn.Server(config).serve(sockets=[sock])
    return 0
