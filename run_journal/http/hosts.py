"""Which ``Host`` a server answers: the defence against DNS rebinding.

A web page the user visits can point a name it controls at 127.0.0.1 and then read from the
journal's port as if it were its own origin; the browser still sends that name in ``Host``. A
server that answers only the names of the address it is bound to (and the ones its operator
allows) gives such a page nothing but a 400.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, Final

__all__ = ["LOOPBACK_NAMES", "HostCheck", "host_name", "served_names"]

LOOPBACK_NAMES: Final = frozenset({"127.0.0.1", "localhost", "::1"})

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def host_name(value: str) -> str:
    """The name part of a ``Host`` value (or of an address): lower case, without port, brackets
    or a trailing dot: ``[::1]:8765`` -> ``::1``, ``LocalHost.:80`` -> ``localhost``."""
    text = value.strip().lower()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    return text.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def served_names(host: str, bound: str, allowed: Iterable[str] = ()) -> tuple[set[str], bool]:
    """The ``Host`` names a server listening on ``host`` (bound to the address ``bound``) answers,
    and whether it answers any IP address too (bound to every interface)."""
    names = {*LOOPBACK_NAMES, host_name(host), host_name(bound), *(host_name(name) for name in allowed)}
    wildcard = _is_ip(host_name(host)) and ipaddress.ip_address(host_name(host)).is_unspecified
    return names, wildcard


class HostCheck:
    """ASGI middleware: an HTTP request whose ``Host`` is not one of ``names`` gets a JSON 400.

    ``any_ip``: also answer a ``Host`` that is an IP address (a server bound to every interface is
    reached by its addresses; an address cannot be rebound, only a name can).
    """

    def __init__(self, app: App, names: Iterable[str], *, any_ip: bool = False) -> None:
        self.app = app
        self.names = frozenset(host_name(name) for name in names)
        self.any_ip = any_ip

    def allows(self, value: str | None) -> bool:
        if value is None:
            return False
        name = host_name(value)
        return name in self.names or (self.any_ip and _is_ip(name))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in {"http", "websocket"}:
            await self.app(scope, receive, send)
            return
        host = next((value.decode("latin-1") for key, value in scope.get("headers", ())
                     if key == b"host"), None)
        if self.allows(host):
            await self.app(scope, receive, send)
            return
        shown = "no Host header" if host is None else f"Host {host[:100]!r}"
        body = json.dumps({"error": "bad_request", "detail": (
            f"{shown} is not served here; this server answers {', '.join(sorted(self.names))} "
            "(run-journal serve --allow-host NAME adds a name)")}).encode("utf-8")
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": 400, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff")]})
        await send({"type": "http.response.body", "body": body})
