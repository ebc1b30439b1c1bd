"""The origin of a resumed run, looked up in the store by the writer.

A ``Command(resume=...)`` run whose ``resumed_from`` was not given resumes the thread's latest
interrupted run. Finding it is a store read, so it cannot happen in a callback: the journal queues
the run's ``run.start`` as a :class:`ResumeStart`, which the writer resolves in queue order (before
any later event of the run is written), and the run rows it writes after that carry the origin too.
"""

from __future__ import annotations

import dataclasses
import logging

from run_journal.envelope import NewEvent
from run_journal.runs import RowSnapshot, RunRow, RunStatus
from run_journal.stores.base import RunEventStore

logger = logging.getLogger("run_journal")


class ResumeStart:
    """``run.start`` of a resumed run whose origin the writer looks up (a writer ``Deferred``)."""

    def __init__(self, template: NewEvent) -> None:
        self.template = template
        self.resumed_from: str | None = None
        self._event: NewEvent | None = None

    @property
    def known_event(self) -> NewEvent:
        """The event as it stands (without its origin until it is resolved)."""
        return self._event or self.template

    async def resolve(self, store: RunEventStore) -> NewEvent:
        if self._event is None:
            t = self.template
            try:
                runs = await store.list_runs(t.thread_id, statuses=[RunStatus.INTERRUPTED.value])
                earlier = [run.run_id for run in runs if run.run_id != t.run_id]
                self.resumed_from = earlier[-1] if earlier else None
            except Exception:  # an unknown origin must not hold the run's events back
                logger.warning("run-journal: could not look up the interrupted run", exc_info=True)
            content = t.content
            assert isinstance(content, dict)  # run.start's content is a dict
            self._event = NewEvent(
                thread_id=t.thread_id, run_id=t.run_id, event_type=t.event_type, category=t.category,
                content={**content, "resumed_from": self.resumed_from},
                metadata={**t.metadata, "resumed_from": self.resumed_from},
                created_at=t.created_at, event_id=t.event_id, user_id=t.user_id,
            )
        return self._event

    def patched(self, snapshot: RowSnapshot) -> RunRow:
        """A row snapshot with the origin, once it is known."""
        row = snapshot()
        if row.resumed_from is None and self.resumed_from is not None:
            return dataclasses.replace(row, resumed_from=self.resumed_from)
        return row
