"""``open_store(url)``: pick a backend from the URL scheme, like SQLAlchemy and encode/databases."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:  # the backends import the contract; this module only names it
    from run_journal.stores.base import RunEventStore

BACKENDS: Final = {
    "memory": ("run_journal.stores.memory", "MemoryRunEventStore"),
    "jsonl": ("run_journal.stores.jsonl", "JsonlRunEventStore"),
    "sqlite": ("run_journal.stores.sql", "SqlRunEventStore"),
    "postgresql": ("run_journal.stores.sql", "SqlRunEventStore"),
    "postgres": ("run_journal.stores.sql", "SqlRunEventStore"),
    "redis": ("run_journal.stores.redis", "RedisRunEventStore"),
    "rediss": ("run_journal.stores.redis", "RedisRunEventStore"),
}
"""Scheme -> (module, class); the class's ``from_url`` builds the store."""
SCHEMES: Final = tuple(BACKENDS)
_EXTRAS: Final = {"redis": "redis", "rediss": "redis"}


def file_path_of(url: str) -> Path:
    """SQLAlchemy's convention: ``scheme:///relative/path``, ``scheme:////absolute/path``."""
    scheme, sep, rest = url.partition("://")
    if not sep or not rest.startswith("/") or rest == "/":
        raise ValueError(
            f"{display_url(url)!r}: a file URL needs three slashes and a path, e.g. {scheme}:///journal "
            f"(relative) or {scheme}:////var/lib/journal (absolute)"
        )
    return Path(rest[1:])


def open_store(url: str, **options: object) -> RunEventStore:
    """Build the store a URL names; ``async with open_store(url) as store:`` also runs ``setup()``.

    ``memory://``, ``jsonl:///dir``, ``sqlite:///file.db``, ``postgresql://user@host/db``,
    ``redis://host:6379/0``. Options are passed to the backend's ``from_url``.
    """
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"not a store URL: {display_url(url)!r} (expected one of {', '.join(SCHEMES)}://...)")
    scheme = urlsplit(url).scheme.lower().split("+", 1)[0]
    if scheme not in BACKENDS:
        raise ValueError(f"unknown store URL scheme {scheme!r} in {display_url(url)!r}; "
                         f"known: {', '.join(SCHEMES)}")
    module_name, class_name = BACKENDS[scheme]
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        if scheme not in _EXTRAS:
            raise
        raise ImportError(
            f"{scheme}:// stores need the {_EXTRAS[scheme]} client: "
            f"pip install 'run-journal[{_EXTRAS[scheme]}]'"
        ) from error
    store: RunEventStore = getattr(module, class_name).from_url(url, **options)
    return store


def display_url(url: str) -> str:
    """The URL as it may be printed or logged: its password replaced by ``***``."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        port = f":{parts.port}" if parts.port is not None else ""
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
    except ValueError:  # not parseable (a bad port): hide everything between '://' and '@'
        scheme, sep, rest = url.partition("://")
        _, at, host = rest.rpartition("@")
        return f"{scheme}{sep}***@{host}" if at else url
