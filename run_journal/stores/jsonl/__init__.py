"""The JSONL store: a directory of append-only JSON Lines files, safe for several processes on one
machine. ``store`` is the store; ``layout`` where its files are; ``log`` one thread's files and how
a batch is committed; ``facts`` what a process remembers about them; ``runs`` the run rows."""

from run_journal.stores.jsonl.store import JsonlRunEventStore

__all__ = ["JsonlRunEventStore"]
