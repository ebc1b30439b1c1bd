"""Content caps: oversized content is cut to its category's limit, keeping its shape.

Limits count the bytes of the content's canonical JSON (UTF-8). When content is over its limit, the
longest strings are shortened first, all to the same length (the shortest length that makes the
content fit), so a capped payload still reads like the original: a message with a huge tool result
keeps its type, id and tool calls, and its text keeps as much of its beginning as the limit allows.
A cut string is a prefix of the original, cut between two characters (never inside one, never inside
a JSON escape), followed by ``…[truncated]``. ``metadata["content_truncated"]`` records the original
size and sha256. Content whose structure alone is over the limit (keys, numbers, thousands of short
strings) becomes ``{"truncated": true, "preview": <the beginning of its JSON text>}``.

Metadata is filterable evidence: oversize metadata is refused, not cut.
"""

from __future__ import annotations

import bisect
import itertools
from typing import Any, Final

from run_journal.catalog import Category
from run_journal.ids import sha256_hex
from run_journal.normalization import JsonObject, JsonValue, dumps, loads

CONTENT_LIMITS: Final = {
    Category.MESSAGE: 256 * 1024,
    Category.OUTPUTS: 256 * 1024,
    Category.TRACE: 64 * 1024,
    Category.ERROR: 64 * 1024,
    Category.MIDDLEWARE: 64 * 1024,
    Category.CONTEXT: 16 * 1024,
    Category.SUBAGENT: 64 * 1024,
    Category.WORKSPACE: 16 * 1024,
}
"""Serialized content bytes per category; larger content is cut (see ``NewEvent``)."""
METADATA_LIMIT: Final = 1024 * 1024
"""Serialized metadata bytes; metadata is filterable evidence, so oversize is rejected, not cut."""
TRUNCATION_MARK: Final = "…[truncated]"
"""What a cut string ends with (it has no character JSON escapes)."""
_MARK_BYTES: Final = len(TRUNCATION_MARK.encode("utf-8"))
SHORTEST_CUT: Final = 64
"""Bytes of JSON (quotes and mark included) a cut string keeps at least; content that does not fit
with every long string cut to this length falls back to a preview."""
_PREVIEW_SHELL: Final = len(dumps({"truncated": True, "preview": ""}).encode("utf-8"))


def cap_content(
    content: JsonValue, content_json: str, metadata: JsonObject, limit: int
) -> tuple[JsonValue, str, JsonObject]:
    """``content`` (decoded from ``content_json``, owned by the caller) within ``limit`` bytes, its
    JSON text, and ``metadata`` with the truncation note."""
    original = content_json.encode("utf-8")
    note: JsonObject = {"original_bytes": len(original), "sha256": sha256_hex(original), "limit": limit}
    capped = {**metadata, "content_truncated": note}
    if len(original) <= limit:
        return content, content_json, capped
    content = _shorten_strings(content, len(original), limit)
    if content is not None:
        text = dumps(content)
        if len(text.encode("utf-8")) <= limit:
            return content, text, capped
    preview: JsonObject = {"truncated": True, "preview": longest_prefix(content_json, limit - _PREVIEW_SHELL)}
    return preview, dumps(preview), capped


def longest_prefix(text: str, json_bytes: int) -> str:
    """The longest prefix of ``text`` whose JSON string (quotes included) takes at most
    ``json_bytes`` bytes of UTF-8: cut between characters, never inside a character or an escape."""
    if json_bytes < 2:
        return ""
    head = text[:json_bytes]  # every character takes at least one byte of JSON
    encoded = dumps(head).encode("utf-8")
    if len(encoded) <= json_bytes:
        return head
    opening = encoded[: json_bytes - 1].decode("utf-8", "ignore")  # a partial last character dropped
    for back in range(7):  # the longest escape, \u001f, is six characters
        try:
            prefix: str = loads(opening[: len(opening) - back] + '"')
        except ValueError:  # ends inside an escape
            continue
        return prefix
    return ""  # unreachable: the bare opening quote always closes


def _shorten_strings(content: JsonValue, size: int, limit: int) -> JsonValue | None:
    """``content`` with every string value longer than one threshold cut to it, the threshold being
    the largest that fits ``limit``; None when even ``SHORTEST_CUT`` bytes per string do not fit."""
    leaves: list[tuple[int, Any, Any]] = []  # (JSON bytes, container, key); container None: the root
    stack: list[tuple[Any, Any, JsonValue]] = [(None, None, content)]
    while stack:
        parent, key, node = stack.pop()
        if isinstance(node, str):
            leaves.append((_json_bytes(node), parent, key))
        elif isinstance(node, dict):
            stack.extend((node, name, child) for name, child in node.items())
        elif isinstance(node, list):
            stack.extend((node, index, child) for index, child in enumerate(node))
    if not leaves:
        return None
    leaves.sort(key=lambda leaf: leaf[0])
    sizes = [leaf[0] for leaf in leaves]
    fixed = size - sum(sizes)  # what no cut changes: keys, numbers, punctuation
    threshold = _threshold(sizes, limit - fixed)
    if threshold is None:
        return None
    for _, parent, key in reversed(leaves[bisect.bisect_right(sizes, threshold):]):
        old = content if parent is None else parent[key]
        assert isinstance(old, str)
        new = longest_prefix(old, threshold - _MARK_BYTES) + TRUNCATION_MARK
        if parent is None:
            return new
        parent[key] = new
    return content


def _threshold(sizes: list[int], room: int) -> int | None:
    """The largest ``t >= SHORTEST_CUT`` with ``sum(min(s, t) for s in sizes) <= room`` (``sizes``
    ascending), or None."""
    below = [0, *itertools.accumulate(sizes)]
    count = len(sizes)
    for kept in range(count - 1, -1, -1):  # sizes[kept:] are cut, sizes[:kept] kept whole
        threshold = (room - below[kept]) // (count - kept)
        if kept == 0 or threshold >= sizes[kept - 1]:  # the threshold lies between the two
            threshold = min(threshold, sizes[kept] - 1)
            return threshold if threshold >= SHORTEST_CUT else None
    return None  # no strings


def _json_bytes(text: str) -> int:
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return len(text) + 2  # nothing to escape: skip the encoding
    return len(dumps(text).encode("utf-8"))
