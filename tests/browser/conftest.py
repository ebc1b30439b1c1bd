"""A real headless Chromium for the viewer tests: one browser and one served store per test session.

The browser is Debian's ``chromium`` (``/usr/bin/chromium``, or ``$RUN_JOURNAL_CHROMIUM``) driven by
Playwright's Python API; Playwright's own browser download is never used. Without Chromium or
Playwright these tests skip on a laptop and fail under ``RUN_JOURNAL_REQUIRE_SERVERS=1`` (CI, whose
``.ci/run`` installs both). Set ``RUN_JOURNAL_SCREENSHOTS=docs/images`` to refresh the README's
screenshots; otherwise they go to a temporary directory.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from .recorded import record_all

CHROMIUM = os.environ.get("RUN_JOURNAL_CHROMIUM", "/usr/bin/chromium")
REQUIRE = os.environ.get("RUN_JOURNAL_REQUIRE_SERVERS") == "1"
RUN_JOURNAL = str(Path(sys.executable).with_name("run-journal"))
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run"]


def _unavailable(message: str) -> None:
    if REQUIRE:
        pytest.fail(message + " (RUN_JOURNAL_REQUIRE_SERVERS=1 makes the browser tests mandatory)")
    pytest.skip(message)


class Served:
    """``run-journal URL serve`` in its own process; ``url`` is where it listens."""

    def __init__(self, store_url: str, *args: str) -> None:
        self.store_url = store_url
        self.process = subprocess.Popen([RUN_JOURNAL, store_url, "serve", "--port", "0", *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        banner = self.process.stdout.readline()
        match = re.search(r"at (http://\S+/)", banner)
        if not match:
            self.stop()
            raise AssertionError(f"serve did not start: {banner!r}")
        self.url = match[1]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(15)


@pytest.fixture(scope="session")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A SQLite store holding the recorded runs (see ``recorded.py``), and their ids."""
    root = tmp_path_factory.mktemp("viewer")
    url = f"sqlite:///{root}/journal.db"
    runs = asyncio.run(record_all(url, root / "workspace"))
    return {"url": url, "root": root, **runs}


@pytest.fixture(scope="session")
def server(recorded: dict[str, Any]) -> Iterator[Served]:
    served = Served(recorded["url"])
    yield served
    served.stop()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = os.environ.get("RUN_JOURNAL_SCREENSHOTS")
    if not target:
        return tmp_path_factory.mktemp("screenshots")
    path = Path(target)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser() -> AsyncIterator[Any]:
    try:
        from playwright.async_api import async_playwright
    except ImportError as error:
        _unavailable(f"playwright is not installed (pip install -e '.[dev]'): {error}")
    if not await asyncio.to_thread(Path(CHROMIUM).is_file):
        _unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set RUN_JOURNAL_CHROMIUM)")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield launched
        await launched.close()


@pytest_asyncio.fixture(loop_scope="session")
async def page(browser: Any) -> AsyncIterator[Any]:
    """A fresh page (its own context) that fails the test on any JavaScript error or console error
    (but the browser's own note of a 401 answer: asking for the token starts with one)."""
    context = await browser.new_context(viewport={"width": 1400, "height": 900})
    opened = await context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    opened.on("console", lambda message: problems.append(f"console: {message.text}")
              if message.type == "error" and "status of 401" not in message.text else None)
    yield opened
    await context.close()
    assert problems == []
