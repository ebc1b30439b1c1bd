"""The two tools the multi-agent tests give their agents (a math expert and a researcher)."""

from __future__ import annotations

from langchain_core.tools import tool


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def web_search(query: str) -> str:
    """Search the web."""
    return f"results for {query}"
