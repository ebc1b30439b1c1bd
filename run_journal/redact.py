"""Redaction: secrets never reach a store.

The journal runs one pass over the normalized content and metadata of every event it writes
(:func:`redacted_text`), so no producer can skip it. The default redactor (:func:`redact_secrets`):

- replaces the value of any key that names a credential, matched case-insensitively on word parts
  (camelCase included), so ``api_key``, ``apiKey``, ``X-Api-Key``, ``Authorization``, ``db_password``,
  ``clientSecret`` and ``access_token`` are hidden while ``max_tokens`` or ``input_tokens`` (counts,
  not secrets) are kept, at any depth;
- reads a string that is JSON text (an object or an array: a tool that returned a dict, an error
  carrying one) as the value it encodes and redacts that; the text is kept as written unless
  something in it was hidden, then it is re-encoded (compact JSON);
- in free text where programs write credentials out (what a tool returned, error messages and
  tracebacks: string values under ``error``, ``message``, ``traceback``, ``result`` and similar keys,
  and the content of a tool message or of a subagent's tool step) hides the value of every
  ``key=value`` / ``key: value`` whose key names a credential (``password=hunter2``, ``'api_key':
  'sk-...'``, ``Authorization: Bearer ...``, the scheme kept) and the token after ``Bearer``;
- tool arguments that travel as JSON text (``args`` of a streamed tool-call chunk, ``arguments`` of an
  OpenAI function call, ``partial_json`` of an Anthropic delta) are parsed and redacted the same way;
  such text that is not JSON is replaced by its length.

What people and models write in messages is otherwise kept as written: free-text patterns are not
applied to prose, where ``token: a piece of text`` is not a credential.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from run_journal.normalization import encode, loads

REDACTED: Final = "[redacted]"

Redactor = Callable[[Any], Any]
"""Takes a JSON-like value (mapping, list, scalar) and returns the value to persist."""

_SECRET_KEY: Final = re.compile(
    r"(^|_)(api_?key|apikey|authorization|auth|password|passwd|pwd|secret|"
    r"private_?key|access_?key|secret_?key|credentials?|cookie|session_?id)($|_)"
    r"|(^|_)token$"  # a token is the last word: time_to_first_token_ms or token_usage are not secrets
)
_CAMEL_BOUNDARY: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def is_secret_key(key: object) -> bool:
    """Does this mapping key name a credential? (camelCase, ``-``, spaces and case are ignored)."""
    return isinstance(key, str) and _is_secret_name(key)


@functools.lru_cache(maxsize=4096)
def _is_secret_name(key: str) -> bool:
    words = _CAMEL_BOUNDARY.sub("_", key.strip())  # clientSecret -> client_Secret
    normalized = re.sub(r"[-\s.]+", "_", words.lower())
    return bool(_SECRET_KEY.search(normalized))


JSON_TEXT_KEYS: Final = frozenset({"args", "arguments", "partial_json"})
"""Keys whose string values are tool arguments encoded as JSON."""
FREE_TEXT_KEYS: Final = frozenset({
    "error", "errors", "exception", "message", "result", "stderr", "stdout", "traceback",
})
"""Keys whose values (at any depth) are free text a program wrote: searched for ``key=value``."""
TOOL_KIND: Final = "tool"
"""A mapping whose ``type`` (a LangChain tool message) or ``kind`` (a subagent step) is this holds
what a tool returned: all its text is searched for ``key=value``."""

_KEY_CHARACTERS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.-")
"""What a key written out in free text is made of (lower-cased)."""
_KEY_RUN: Final = re.compile(r"[a-z0-9_.\-]*+")
_ASSIGNED_VALUE: Final = re.compile(
    r"[\"']?[ \t]?[:=][ \t]*+"
    r"(?:(?P<quoted>\"[^\"\n]*+\"?|'[^'\n]*+'?)"
    r"|(?:(?P<scheme>bearer|basic|token|digest|negotiate)[ \t]++)?"
    r"(?P<bare>\[redacted\]|[^\s,;&\"'<>(){}\[\]]++))",
    re.IGNORECASE,
)
"""What follows a key in ``key = value`` / ``key: value`` / ``"key": "value"``: the value is a quoted
string (its closing quote may have been cut off) or, after an optional authorization scheme, a run of
characters up to a space or punctuation."""
_BEARER: Final = re.compile(r"bearer[ \t]++(?P<bare>[\w\-.~+/]{8,}+=*+)", re.IGNORECASE)
"""A bearer token written out anywhere in free text (``curl -H "Authorization: Bearer ..."``)."""
_ASCII_LOWER: Final = {code: code + 32 for code in range(ord("A"), ord("Z") + 1)}


def redact_secrets(value: Any) -> Any:
    """A copy of ``value`` with its secrets hidden (the rules are in the module docstring)."""
    return _redacted(value, False)


def _redacted(value: Any, free_text: bool) -> Any:
    """``free_text``: inside what a tool returned, an error or a traceback."""
    kind = type(value)
    if kind is str:
        return _redacted_string(value, free_text) if free_text or value.startswith(_MAY_OPEN_JSON) else value
    if kind is dict or isinstance(value, Mapping):
        if not free_text and (value.get("type") == TOOL_KIND or value.get("kind") == TOOL_KIND):
            free_text = True
        copy: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(key, str) and _is_secret_name(key):
                copy[key] = REDACTED
            elif type(item) is str:
                if key in JSON_TEXT_KEYS and item:
                    copy[key] = redact_json_text(item, redact_secrets)
                elif free_text or key in FREE_TEXT_KEYS or item.startswith(_MAY_OPEN_JSON):
                    copy[key] = _redacted_string(item, free_text or key in FREE_TEXT_KEYS)
                else:
                    copy[key] = item
            elif type(item) is int or item is None:
                copy[key] = item
            else:
                copy[key] = _redacted(item, free_text or key in FREE_TEXT_KEYS)
        return copy
    if kind is list or isinstance(value, list | tuple):
        return [_redacted(item, free_text) for item in value]
    return value


_MAY_OPEN_JSON: Final = ("{", "[", " ", "\n", "\r", "\t")
"""What a string that is JSON text (an object or an array) starts with."""


def _opens_json(text: str) -> bool:
    """Could ``text`` be a JSON object or array? (its first character that is not a space)"""
    if text.startswith(("{", "[")):
        return True
    return text[:1].isspace() and text.lstrip()[:1] in ("{", "[")


def _redacted_string(text: str, free_text: bool) -> str:
    """A string leaf: JSON text redacted as the value it encodes; in free text, assignments hidden."""
    if _opens_json(text):
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):  # not JSON after all (or cut short): read as free text
            pass
        else:
            if isinstance(parsed, dict | list):
                try:
                    redacted = _redacted(parsed, free_text)
                except RecursionError:  # what cannot be walked cannot be shown
                    return f"<{len(text)} characters of JSON nested too deeply to redact>"
                return text if redacted == parsed else encode(redacted)
    return redact_free_text(text) if free_text else text


def redact_free_text(text: str) -> str:
    """``text`` with the values of credential-named ``key=value`` / ``key: value`` pairs and the
    tokens after ``Bearer`` replaced by ``[redacted]``."""
    lowered = text.lower()
    if len(lowered) != len(text):  # a character whose lower case is longer: lower ASCII only
        lowered = text.translate(_ASCII_LOWER)
    return _hide_assignments(text, lowered)


def _hide_assignments(text: str, lowered: str) -> str:
    """Keys and bearer tokens are looked for where a hint occurs (substring search), not by a regular
    expression tried at every position: a tool result of ordinary text costs a few searches."""
    found: list[tuple[int, int, re.Match[str] | None]] = []  # (start, end of the key, bearer token)
    for hint in _KEY_HINTS:
        at = lowered.find(hint)
        while at != -1:
            start, end = at, at + len(hint)
            while start and lowered[start - 1] in _KEY_CHARACTERS:
                start -= 1
            end = _KEY_RUN.match(lowered, end).end()  # type: ignore[union-attr]  # * always matches
            found.append((start, end, None))
            at = lowered.find(hint, end)
    at = lowered.find("bearer")
    while at != -1:
        if not (at and lowered[at - 1] in _KEY_CHARACTERS):
            token = _BEARER.match(text, at)
            if token is not None:
                found.append((at, at, token))
        at = lowered.find("bearer", at + 6)
    if not found:
        return text
    pieces: list[str] = []
    done = 0
    for start, end, token in sorted(found, key=lambda item: item[:2]):
        if start < done:
            continue
        if token is None:
            token = _ASSIGNED_VALUE.match(text, end)
            if token is None or not _is_secret_name(text[start:end]):
                continue
        pieces += [text[done:start], text[start:end], _hidden_value(token)]
        done = token.end()
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def _hidden_value(match: re.Match[str]) -> str:
    """The match with its value (a quoted string's content, or the bare token) replaced."""
    quoted = match.groupdict().get("quoted")
    if quoted:
        quote = quoted[0]
        closed = quote if len(quoted) > 1 and quoted.endswith(quote) else ""
        return f"{match[0][: match.start('quoted') - match.start()]}{quote}{REDACTED}{closed}"
    if match["bare"] == REDACTED:
        return match[0]
    return f"{match[0][: match.start('bare') - match.start()]}{REDACTED}"


def redact_json_text(text: str, redact: Redactor) -> str:
    """JSON arguments given as text, redacted; text that is not JSON is kept only as its length."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return f"<{len(text)} characters of non-JSON arguments>"
    return encode(redact(parsed))


_KEY_HINTS: Final = (
    "key", "auth", "passw", "pwd", "secret", "credential", "cookie", "session", "token",
)
"""Every key :func:`is_secret_key` matches contains one of these (lower-cased)."""


def _may_hold_secrets(text: str) -> bool:
    """Whether the default redactor could change the canonical JSON ``text``: it shows a secret-named
    key (quoted, in JSON text at any depth, or written out in free text), a bearer token or JSON-text
    arguments (a superset: ``monkey`` matches too). A text without any needs no walk.

    A chain of substring tests, not a regular expression (an alternation with case folding measured
    65 us on a 250-character message, these under 1 us)."""
    t = text.lower()
    return (
        "key" in t or "auth" in t or "passw" in t or "pwd" in t or "secret" in t or "credential" in t
        or "cookie" in t or "session" in t or "bearer" in t
        or '"args":"' in t or '"arguments":"' in t or '"partial_json":"' in t  # JSON text arguments
        or ("token" in t and _may_name_a_token(t))
    )


def _may_name_a_token(t: str) -> bool:
    """A key ending in token: followed by a quote (escaped inside a string), or by ``=`` / ``:``."""
    return ('token"' in t or "token\\" in t or "token'" in t or "token=" in t or "token:" in t
            or "token =" in t or "token :" in t)


def redacted_text(text: str, redact: Redactor) -> str:
    """The one redaction pass: the canonical JSON ``text`` of a payload, with ``redact`` applied to
    its value. The default redactor only walks a text that could hold a secret."""
    if redact is no_redaction or (redact is redact_secrets and not _may_hold_secrets(text)):
        return text
    return encode(redact(loads(text)))


def redacted_string(text: str, redact: Redactor) -> str:
    """``redact`` applied to a bare text (a preview, a run row's first or last message)."""
    if redact is no_redaction or (redact is redact_secrets and not _opens_json(text)):
        return text
    redacted = redact(text)
    return redacted if isinstance(redacted, str) else encode(redacted)


def no_redaction(value: Any) -> Any:
    return value


def resolve_redactor(option: Redactor | bool | None) -> Redactor:
    """``None``/``True``: the default; ``False``: nothing is redacted; a callable: used as is."""
    if option is None or option is True:
        return redact_secrets
    if option is False:
        return no_redaction
    if callable(option):
        return option
    raise TypeError(f"redact must be a callable, True, False or None, got {type(option).__name__}")
