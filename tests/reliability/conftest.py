"""Fast/slow switch of the reliability suite and the helpers its modules share.

Every module here is marked ``reliability``. Tests marked ``slow`` as well (20 kills per backend,
bigger property runs) are skipped unless ``--run-slow`` is given (when ``tests/reliability`` is on
the command line) or ``RUN_JOURNAL_SLOW=1`` is set (works from any directory).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow", action="store_true", default=False,
        help="run the long part of the reliability suite (also: RUN_JOURNAL_SLOW=1)",
    )


def slow_enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("--run-slow", default=False)) or os.environ.get("RUN_JOURNAL_SLOW") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if slow_enabled(config):
        return
    skip = pytest.mark.skip(reason="long reliability run: pass --run-slow or set RUN_JOURNAL_SLOW=1")
    for item in items:
        if "slow" in item.keywords and Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(skip)


@pytest.fixture
def long_part(request: pytest.FixtureRequest) -> bool:
    """True when the long part runs (tests scale their repetitions with it)."""
    return slow_enabled(request.config)
