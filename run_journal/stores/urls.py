"""``open_store(url)``: pick a backend from the URL scheme, like SQLAlchemy and encode/databases."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from run_journal.stores.base import RunEventStore

SCHEMES = ("memory", "jsonl", "sqlite", "postgresql", "postgres", "redis", "rediss")


def file_path_of(url: str) -> Path:
    """SQLAlchemy's convention: ``scheme:///relative/path``, ``scheme:////absolute/path``."""
    scheme, sep, rest = url.partition("://")
    if not sep or not rest.startswith("/") or rest == "/":
        raise ValueError(
            f"{url!r}: a file URL needs three slashes and a path, e.g. {scheme}:///journal "
            f"(relative) or {scheme}:////var/lib/journal (absolute)"
        )
    return Path(rest[1:])


def open_store(url: str, **options: object) -> RunEventStore:
    """Build the store a URL names; ``async with open_store(url) as store:`` also runs ``setup()``.

    ``memory://``, ``jsonl:///dir``, ``sqlite:///file.db``, ``postgresql://user@host/db``,
    ``redis://host:6379/0``. Options are passed to the backend's constructor.
    """
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"not a store URL: {url!r} (expected one of {', '.join(SCHEMES)}://...)")
    scheme = urlsplit(url).scheme.lower().split("+", 1)[0]
    if scheme == "memory":
        from run_journal.stores.memory import MemoryRunEventStore

        return MemoryRunEventStore(**options)
    if scheme == "jsonl":
        from run_journal.stores.jsonl import JsonlRunEventStore

        return JsonlRunEventStore(file_path_of(url), **options)  # type: ignore[arg-type]  # backend-specific options
    if scheme in {"sqlite", "postgresql", "postgres"}:
        from run_journal.stores.sql import SqlRunEventStore

        return SqlRunEventStore.from_url(url, **options)
    if scheme in {"redis", "rediss"}:
        try:
            from run_journal.stores.redis import RedisRunEventStore
        except ImportError as error:
            raise ImportError(
                "redis:// stores need the redis client: pip install 'run-journal[redis]'"
            ) from error
        return RedisRunEventStore.from_url(url, **options)
    raise ValueError(f"unknown store URL scheme {scheme!r} in {url!r}; known: {', '.join(SCHEMES)}")
