"""Facts derived from a JSONL thread's committed lines, kept per process and caught up incrementally.

Deduplication by ``event_id``, ``put_if_absent`` and ``count_messages`` need facts about every line
of a thread. Rereading the thread for each call would make writes O(thread size), so each process
remembers what it derived up to the committed count it last saw and reads only the lines committed
since (by any process). A new generation (a delete rewrote the thread) or a new index file (a repair
rebuilt it: lines hidden before may be readable now) discards the facts. Nothing
here decides a seq: that always comes from the file, under the lock.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Final

from run_journal.catalog import Category
from run_journal.stores.jsonl.log import Snapshot

MAX_THREADS: Final = 256
"""Threads whose facts a process keeps; the least recently used are rebuilt on demand."""
_STEP: Final = 4096


@dataclasses.dataclass
class Facts:
    generation: str = ""
    index_id: tuple[int, int] = (0, 0)
    count: int = 0
    live: int = 0
    messages: int = 0
    event_ids: dict[str, int] = dataclasses.field(default_factory=dict)
    first_of_type: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    messages_by_user: Counter[str] = dataclasses.field(default_factory=Counter)
    users: Counter[str] = dataclasses.field(default_factory=Counter)


class ThreadFacts:
    """An LRU of ``Facts`` per thread directory, safe to share between worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._facts: OrderedDict[Path, Facts] = OrderedDict()

    def refresh(self, directory: Path, view: Snapshot | None) -> Facts:
        """The facts of ``view``'s committed lines (reads only lines this process has not seen)."""
        with self._lock:
            if view is None:
                self._facts.pop(directory, None)
                return Facts()
            facts = self._facts.pop(directory, None)
            if facts is None or facts.generation != view.generation or facts.index_id != view.index_id \
                    or facts.count > view.count:
                facts = Facts(generation=view.generation, index_id=view.index_id)
            self._facts[directory] = facts
            while len(self._facts) > MAX_THREADS:
                self._facts.popitem(last=False)
            for first in range(facts.count + 1, view.count + 1, _STEP):
                for record in view.records(first, min(view.count, first + _STEP - 1)):
                    _learn(facts, record["seq"], record)
            facts.count = view.count
            return facts


def _learn(facts: Facts, seq: int, record: dict[str, object]) -> None:
    event_id, run_id, event_type = str(record["event_id"]), str(record["run_id"]), str(record["event_type"])
    user_id = record.get("user_id")
    facts.live += 1
    facts.event_ids[event_id] = seq
    facts.first_of_type.setdefault((run_id, event_type), seq)
    if isinstance(user_id, str):
        facts.users[user_id] += 1
    if record["category"] == Category.MESSAGE.value:
        facts.messages += 1
        if isinstance(user_id, str):
            facts.messages_by_user[user_id] += 1

