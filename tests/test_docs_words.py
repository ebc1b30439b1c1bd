"""The user documentation speaks to users: no work diary (sessions, issue numbers, commit hashes,
"this round"), only what the library does, how fast, and how to reproduce it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", ROOT / "examples" / "README.md", *(ROOT / "docs").glob("*.md")])

RULES: dict[str, re.Pattern[str]] = {
    # "session storage" (the browser's) is a feature the HTTP viewer uses, not a work session.
    "session": re.compile(r"\bsessions?\b(?! storage)", re.IGNORECASE),
    "issue number": re.compile(r"\bissues?\s*(?:#\s*\d+|\d+)", re.IGNORECASE),
    # 7-40 hex digits with a letter and a digit, standing alone. Not: an OpenTelemetry span id (16) or
    # trace id / run id (32), a hex suffix of an id (`dice-3b2f16fc`), a sha256 shown cut short
    # (`sha256 d78a437d97c1...`).
    "commit hash": re.compile(
        r"(?<![\w./-])(?<!sha256 )(?<!sha256: )(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])"
        r"(?!(?:[0-9a-f]{16}|[0-9a-f]{32})(?![\w]))[0-9a-f]{7,40}(?![\w-])(?!\.\.\.|…)"
    ),
    "work diary": re.compile(r"\b(?:this round|previous design|redesign(?:ed)?|we tried)\b", re.IGNORECASE),
}


def findings(text: str) -> list[tuple[int, str, str]]:
    """(line number, rule, matched text) for every match of a rule."""
    return [
        (number, rule, match[0])
        for number, line in enumerate(text.splitlines(), 1)
        for rule, pattern in RULES.items()
        for match in pattern.finditer(line)
    ]


@pytest.mark.parametrize("path", DOCS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_docs_are_written_for_users(path: Path) -> None:
    found = findings(path.read_text(encoding="utf-8"))
    assert not found, "\n".join(f"{path.relative_to(ROOT)}:{n}: {rule}: {text!r}" for n, rule, text in found)


@pytest.mark.parametrize(("line", "rules"), [
    ("Measured in the third session, after the fix.", ["session"]),
    ("Sessions and threads", ["session"]),
    ("the token is kept in the tab's session storage", []),
    ("see issue #12 and issues 3", ["issue number", "issue number"]),
    ("an issue with the store", []),
    ("the baseline is commit 69a61df", ["commit hash"]),
    ("fixed in 1135655e (2026)", ["commit hash"]),
    ("full hash f561abbd3c0e9a1b2c3d4e5f60718293a4b5c6d7", ["commit hash"]),
    ("trace aca7527cbb3d40f307af19b63475d6cb", []),
    ("invoke_agent LangGraph 456929e341023261 {...}", []),
    ("thread dice-3b2f16fc: 48 events", []),
    (".env: 23 bytes, sha256 d78a437d97c1..., content not recorded", []),
    ("ttl_seconds=2592000 and 1234567 events", []),
    ("an effaced decade", []),
    ("In this round we tried a redesign of the previous design.",
     ["work diary", "work diary", "work diary", "work diary"]),
])
def test_the_rules_catch_diary_words_and_spare_legitimate_ones(line: str, rules: list[str]) -> None:
    assert sorted(rule for _, rule, _ in findings(line)) == sorted(rules)
