"""The AWS event-stream binary framing (``application/vnd.amazon.eventstream``), as Bedrock's
ConverseStream sends it: each message is a prelude (total length, headers length, the prelude's
CRC32), headers (name, type 7 = string, value), the JSON payload and the message's CRC32."""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

STRING: int = 7


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    value = struct.pack("!BH", STRING, len(raw_value)) + raw_value
    return struct.pack("!B", len(raw_name)) + raw_name + value


def message(event_type: str, payload: Any) -> bytes:
    headers = (_header(":event-type", event_type) + _header(":content-type", "application/json")
               + _header(":message-type", "event"))
    body = json.dumps(payload).encode()
    total = 12 + len(headers) + len(body) + 4
    prelude = struct.pack("!II", total, len(headers))
    head = prelude + struct.pack("!I", zlib.crc32(prelude))
    framed = head + headers + body
    return framed + struct.pack("!I", zlib.crc32(framed))


def stream(events: list[tuple[str, Any]]) -> bytes:
    return b"".join(message(name, payload) for name, payload in events)
