"""The store conformance kit: the one pytest suite every ``RunEventStore`` backend must pass.

Import it as ``from run_journal.testing.conformance import RunEventStoreConformance`` (the names are
also reachable from ``run_journal.testing``).

Every backend of this package runs it (``tests/test_store_conformance.py``), and so can a third
party's store: subclass ``RunEventStoreConformance`` in a test module, name the subclass ``Test...``
and say how to open the store, either with ``make_store`` or, when opening needs other fixtures,
by overriding the ``store_factory`` fixture::

    class TestMyStore(RunEventStoreConformance):
        def make_store(self) -> AbstractAsyncContextManager[RunEventStore]:
            return MyStore(dsn)          # an async context manager yielding a set-up, empty store

Each test opens one store through the factory (some open a second one and close it themselves, so
``aclose()`` must be idempotent). The suite needs ``pytest`` and ``pytest-asyncio`` (the ``dev``
extra); ``run_journal`` never imports this package, so library users never pay for it.

The tests live in one mixin per theme (``_writes``, ``_reads``, ``_runs``, ``_activity``, ``_search``,
``_follow``, ``_records``, ``_concurrency``, ``_limits``, ``_run_ids``, ``_prune``, ``_bodies``) on top
of ``_support`` (helpers, test data, the ``store`` fixtures).
"""

from __future__ import annotations

from typing import ClassVar

try:
    import pytest
    import pytest_asyncio  # noqa: F401 - imported only to fail early with the hint below
except ImportError as error:  # pragma: no cover - only hit when the dev extra is missing
    raise ImportError(
        "run_journal.testing.conformance is a pytest suite: pip install 'run-journal[dev]'"
    ) from error

from run_journal.testing._activity import ActivityTests
from run_journal.testing._bodies import BodyTests
from run_journal.testing._concurrency import ConcurrencyTests
from run_journal.testing._follow import FollowTests
from run_journal.testing._limits import LimitTests
from run_journal.testing._prune import PruneTests
from run_journal.testing._reads import ReadTests
from run_journal.testing._records import RecordTests
from run_journal.testing._run_ids import RunIdTests
from run_journal.testing._runs import RunTests
from run_journal.testing._search import SearchTests
from run_journal.testing._support import (
    GUARD,
    MESSAGE_TYPES,
    TRICKY_PAYLOAD,
    TRICKY_TEXT,
    StoreFactory,
    body,
    expected_page,
    interleaved_thread,
    new_event,
    read_all,
)
from run_journal.testing._writes import WriteTests

__all__ = [
    "GUARD",
    "MESSAGE_TYPES",
    "TRICKY_PAYLOAD",
    "TRICKY_TEXT",
    "RunEventStoreConformance",
    "StoreFactory",
    "body",
    "expected_page",
    "interleaved_thread",
    "new_event",
    "read_all",
]


# pytest collects inherited tests base class first (reverse MRO), so the mixins are listed last theme
# first: the tests run in the order of the themes (writes, reads, runs, activity order, search, follow,
# records, concurrency, limits, run ids, prune, bodies).
class RunEventStoreConformance(
    BodyTests, PruneTests, RunIdTests, LimitTests, ConcurrencyTests, RecordTests, FollowTests, SearchTests,
    ActivityTests, RunTests, ReadTests, WriteTests,
):
    """The store contract as tests. Subclass it (``Test...``) and implement ``make_store``."""

    pytestmark: ClassVar = [pytest.mark.asyncio]
