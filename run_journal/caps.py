"""Content caps: oversized content is cut to its category's limit, keeping its shape.

The longest strings are shortened first, so a capped payload still reads like the original (a message
with a huge tool result keeps its type, id and tool calls); ``metadata["content_truncated"]`` records
the original size and sha256. Metadata is filterable evidence: oversize metadata is refused, not cut.
"""

from __future__ import annotations

from typing import Any, Final

from run_journal.catalog import Category
from run_journal.ids import sha256_hex
from run_journal.normalization import JsonObject, JsonValue, dumps

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
_TRUNCATION_MARK: Final = "…[truncated]"


def cap_content(
    content: JsonValue, content_json: str, metadata: JsonObject, limit: int
) -> tuple[JsonValue, str, JsonObject]:
    original = content_json.encode("utf-8")
    note: JsonObject = {"original_bytes": len(original), "sha256": sha256_hex(original), "limit": limit}
    for _ in range(8):
        excess = len(content_json.encode("utf-8")) - limit
        if excess <= 0:
            return content, content_json, {**metadata, "content_truncated": note}
        content = _shorten_longest_text(content, excess + len(_TRUNCATION_MARK.encode()) + 16)
        content_json = dumps(content)
    # JSON-escaping the preview at most doubles its bytes (the text holds no raw control characters).
    preview = original[: (limit - 64) // 2].decode("utf-8", "ignore")
    content = {"truncated": True, "preview": preview}
    return content, dumps(content), {**metadata, "content_truncated": note}


def _shorten_longest_text(value: JsonValue, excess: int) -> JsonValue:
    """Cut ``excess`` characters (at least ``excess`` bytes) from the longest string leaf."""
    path: list[str | int] = []
    best: tuple[int, list[str | int]] = (-1, [])

    def visit(node: JsonValue) -> None:
        nonlocal best
        if isinstance(node, str):
            if len(node) > best[0]:
                best = (len(node), list(path))
        elif isinstance(node, dict | list):
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, child in items:
                path.append(key)
                visit(child)
                path.pop()

    visit(value)
    length, where = best
    keep = max(0, length - excess)
    if not where:
        return value[:keep] + _TRUNCATION_MARK if isinstance(value, str) else value
    parent: Any = value
    for step in where[:-1]:
        parent = parent[step]
    parent[where[-1]] = parent[where[-1]][:keep] + _TRUNCATION_MARK
    return value


_new_record = object.__new__
