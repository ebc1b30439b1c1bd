"""A TCP proxy in front of PostgreSQL that reads the client's side of the wire protocol and counts.

What a store sends, whatever the driver does with it: ``statements`` (an Execute of the extended
protocol, or a simple Query such as ``BEGIN;``), ``round_trips`` (a Sync or a simple Query: the
client then waits for the server's ReadyForQuery), and the text of every statement it parsed or sent
(``texts``). Point a store at ``url`` instead of the server.
"""

from __future__ import annotations

import asyncio
import struct
from urllib.parse import urlsplit, urlunsplit


class PgWireCounter:
    def __init__(self, server_url: str) -> None:
        parts = urlsplit(server_url)
        self._server_url = parts
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self.statements = 0
        self.round_trips = 0
        self.texts: list[str] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        """The server URL with this proxy's port (start it first)."""
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        host = f"{self._server_url.username}@" if self._server_url.username else ""
        return urlunsplit(self._server_url._replace(netloc=f"{host}127.0.0.1:{port}"))

    def reset(self) -> None:
        self.statements = self.round_trips = 0
        self.texts.clear()

    async def __aenter__(self) -> PgWireCounter:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection(*self.upstream)
        outgoing = asyncio.ensure_future(self._client_side(client_reader, server_writer))
        incoming = asyncio.ensure_future(self._pipe(server_reader, client_writer))
        self._tasks |= {outgoing, incoming}
        await asyncio.wait({outgoing, incoming}, return_when=asyncio.FIRST_COMPLETED)
        for task in (outgoing, incoming):
            task.cancel()
            self._tasks.discard(task)
        for writer in (client_writer, server_writer):
            writer.transport.abort()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()

    async def _client_side(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # untyped messages first: an SSLRequest (answered 'N' by a server without TLS) and the startup
        while True:
            head = await reader.readexactly(8)
            length, code = struct.unpack("!ii", head)
            body = await reader.readexactly(length - 8)
            writer.write(head + body)
            await writer.drain()
            if code != 80877103:  # not an SSLRequest: that was the startup message
                break
        while True:
            kind = await reader.readexactly(1)
            size = await reader.readexactly(4)
            body = await reader.readexactly(struct.unpack("!i", size)[0] - 4)
            self._count(kind, body)
            writer.write(kind + size + body)
            await writer.drain()

    def _count(self, kind: bytes, body: bytes) -> None:
        if kind == b"Q":
            self.statements += 1
            self.round_trips += 1
            self.texts.append(body.rstrip(b"\0").decode(errors="replace"))
        elif kind == b"P":  # Parse: name \0 query \0 ...
            self.texts.append(body.split(b"\0")[1].decode(errors="replace"))
        elif kind == b"E":
            self.statements += 1
        elif kind == b"S":
            self.round_trips += 1
