"""The HTTP API (reads, and feedback on runs) and run viewer: ``router(store)`` for a FastAPI app,
``create_app(store_or_url)`` for any ASGI server or framework, ``run-journal URL serve`` from a
terminal; ``deerflow_router(store)`` and ``create_deerflow_app`` serve DeerFlow's gateway read API
(``serve --compat``).

Needs the ``serve`` extra (``pip install 'run-journal[serve]'``: FastAPI, uvicorn, sse-starlette);
``import run_journal`` never loads it. See docs/http.md.
"""

from __future__ import annotations

try:
    import fastapi  # noqa: F401 - only checks the extra is installed
    import sse_starlette  # noqa: F401 - same
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "run_journal.http needs the serve extra: pip install 'run-journal[serve]'"
    ) from error

from run_journal.http.api import UserResolver, create_app, router
from run_journal.http.compat import create_deerflow_app, deerflow_router

__all__ = ["UserResolver", "create_app", "create_deerflow_app", "deerflow_router", "router"]
