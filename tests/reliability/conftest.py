"""The long part of the reliability suite and the helpers its modules share.

Every module here is marked ``reliability``. Two other marks, with two meanings:

- ``soak``: the long runs (20 kills per backend, 300 hypothesis examples per backend, 8 writer processes
  x 300 puts). Skipped unless ``--run-soak`` (old name ``--run-slow``, still accepted) is given or
  ``RUN_JOURNAL_SLOW=1`` is set; both work from any directory (``tests/conftest.py`` registers the
  marker and the option and does the skipping). ``bench/reliability_long.py`` runs them.
- ``slow``: left out of the quick tier ``pytest -m "not slow"`` (worker processes, the verify CLI, waits
  for reconnects and deadlines); plain ``pytest`` runs them. ``tests/conftest.py`` lists which (its
  ``SLOW_MODULES`` and ``SLOW_TESTS``); every ``soak`` test is ``slow`` too.
"""

from __future__ import annotations

import pytest
from conftest import soak_enabled


@pytest.fixture
def long_part(request: pytest.FixtureRequest) -> bool:
    """True when the soak runs are on (tests can scale their repetitions with it)."""
    return soak_enabled(request.config)
