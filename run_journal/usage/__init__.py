"""Token usage: read from whatever shape a provider reports, priced, and added up per run.

- :mod:`run_journal.usage.tokens`: ``TokenUsage``, one call's tokens by kind (shared).
- :mod:`run_journal.usage.tally`: pricing a call (``quote``, ``cost_of``) and ``RunTally``, what a
  run row adds up, with the rule for the usage subagent tasks report (shared).
- :mod:`run_journal.usage.reading`: usage read from LangChain results and provider shapes (the
  journal's side; ``extract_usage``).
- :mod:`run_journal.usage.repricing`: stored runs priced again (the reader's side; ``reprice_row``).

Every name is importable from here; the reading and repricing names load on first use, so a reader
that imports a shared or repricing module never loads the journal's side.
"""

import importlib
from typing import TYPE_CHECKING, Any

from run_journal.usage.tally import (
    NOTE_REASONS,
    TEXT_CAP,
    Pricing,
    PricingOption,
    RunTally,
    cap_text,
    cost_of,
    priced,
    quote,
)
from run_journal.usage.tokens import TokenUsage

if TYPE_CHECKING:
    from run_journal.usage.reading import (
        extract_usage,
        from_provider,
        from_usage_metadata,
        model_name_of,
        provider_of,
        usage_from_mapping,
    )
    from run_journal.usage.repricing import RELEVANT_EVENTS, replay, reprice_row

_LAZY = {
    **dict.fromkeys(("extract_usage", "from_provider", "from_usage_metadata", "model_name_of", "provider_of",
                     "usage_from_mapping"), "run_journal.usage.reading"),
    **dict.fromkeys(("RELEVANT_EVENTS", "replay", "reprice_row"), "run_journal.usage.repricing"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'run_journal.usage' has no attribute {name!r}")


__all__ = [
    "NOTE_REASONS",
    "RELEVANT_EVENTS",
    "TEXT_CAP",
    "Pricing",
    "PricingOption",
    "RunTally",
    "TokenUsage",
    "cap_text",
    "cost_of",
    "extract_usage",
    "from_provider",
    "from_usage_metadata",
    "model_name_of",
    "priced",
    "provider_of",
    "quote",
    "replay",
    "reprice_row",
    "usage_from_mapping",
]
