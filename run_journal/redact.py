"""Default redaction: secrets in metadata and tool arguments never reach a store.

The journal passes user-supplied metadata (LangGraph config metadata, tags are left alone) and every
tool call's arguments through a ``redact`` hook before it builds an event. The default replaces the
value of any key that names a credential, matched case-insensitively on word parts (camelCase
included), so ``api_key``, ``apiKey``, ``X-Api-Key``, ``Authorization``, ``db_password``,
``clientSecret`` and ``access_token`` are hidden while ``max_tokens`` or ``input_tokens`` (counts, not
secrets) are kept.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

REDACTED: Final = "[redacted]"

Redactor = Callable[[Any], Any]
"""Takes a JSON-like value (mapping, list, scalar) and returns the value to persist."""

_SECRET_KEY: Final = re.compile(
    r"(^|_)(api_?key|apikey|authorization|auth|password|passwd|pwd|secret|token|"
    r"access_?token|refresh_?token|private_?key|access_?key|secret_?key|credentials?|cookie|"
    r"session_?id)($|_)"
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


def redact_secrets(value: Any, _depth: int = 0) -> Any:
    """A copy of ``value`` with the values of secret-named keys replaced by ``"[redacted]"``."""
    if _depth > 32:
        return value
    kind = type(value)
    if kind is str or kind is int or value is None:  # the common leaves, without the ABC check
        return value
    if kind is dict or isinstance(value, Mapping):
        return {
            key: REDACTED if is_secret_key(key) else redact_secrets(item, _depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_secrets(item, _depth + 1) for item in value]
    return value


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
