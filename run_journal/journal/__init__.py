"""The journal: callbacks in (``handler``), events and row snapshots out (``recorder``).

``payloads`` turns callback arguments into event payloads; ``state`` is the recorder's bookkeeping.
"""

from run_journal.journal.handler import AsyncRunJournal, RunJournal, UnwrittenEvents
from run_journal.journal.recorder import RunRecorder

__all__ = ["AsyncRunJournal", "RunJournal", "RunRecorder", "UnwrittenEvents"]
