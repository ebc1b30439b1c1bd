"""Running checks: over one trajectory, or a whole suite over the runs each case selects."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Sequence
from datetime import datetime

from run_journal.checks.suite import Case, Selection, Suite, SuiteError
from run_journal.checks.vocabulary import Check, CheckResult
from run_journal.envelope import JsonObject
from run_journal.projections import iter_events
from run_journal.runs import RunRow
from run_journal.stores.base import RunEventStore
from run_journal.trajectory import Trajectory, read_trajectory


def run_checks(trajectory: Trajectory, checks: Iterable[Check]) -> list[CheckResult]:
    """Evaluate each check over one run."""
    return [check.evaluate(trajectory) for check in checks]


@dataclasses.dataclass(frozen=True, slots=True)
class TimedResult:
    """One check's result and how long it took to evaluate (seconds)."""

    result: CheckResult
    seconds: float


@dataclasses.dataclass(frozen=True, slots=True)
class CaseResult:
    """A case's results: every check on every run it selected. ``problem`` says why a case that
    selected no run fails (it counts as one failure)."""

    case: Case
    results: tuple[TimedResult, ...]
    problem: str | None = None

    @property
    def passed(self) -> bool:
        return self.problem is None and all(timed.result.passed for timed in self.results)

    @property
    def failures(self) -> int:
        return sum(not timed.result.passed for timed in self.results) + (self.problem is not None)

    @property
    def tests(self) -> int:
        return len(self.results) + (self.problem is not None)

    @property
    def run_ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(timed.result.run_id for timed in self.results))

    def to_dict(self) -> JsonObject:
        return {"case": self.case.name, "line": self.case.line, "selection": self.case.selection.describe(),
                "passed": self.passed, "problem": self.problem,
                "results": [timed.result.to_dict() for timed in self.results]}


@dataclasses.dataclass(frozen=True, slots=True)
class SuiteResult:
    suite: Suite
    cases: tuple[CaseResult, ...]
    seconds: float
    started_at: datetime

    @property
    def passed(self) -> bool:
        return all(case.passed for case in self.cases)

    @property
    def tests(self) -> int:
        return sum(case.tests for case in self.cases)

    @property
    def failures(self) -> int:
        return sum(case.failures for case in self.cases)

    @property
    def runs(self) -> int:
        return len({(t.result.thread_id, t.result.run_id) for case in self.cases for t in case.results})

    def to_dict(self) -> JsonObject:
        return {"suite": self.suite.source, "passed": self.passed, "tests": self.tests,
                "failures": self.failures, "runs": self.runs,
                "cases": [case.to_dict() for case in self.cases]}


async def run_suite(store: RunEventStore, suite: Suite) -> SuiteResult:
    """Check every case's runs. A run id that is not in the store is a ``SuiteError`` (the suite
    names something that is not there); a thread or ``last`` that selects no run fails the case."""
    from run_journal.envelope import utc_now

    started, clock = utc_now(), time.perf_counter()
    results = [await run_case(store, case, source=suite.source) for case in suite.cases]
    return SuiteResult(suite, tuple(results), time.perf_counter() - clock, started)


async def run_case(store: RunEventStore, case: Case, *, source: str = "<suite>") -> CaseResult:
    runs = await select_runs(store, case.selection, case=case, source=source)
    if not runs:
        return CaseResult(case, (), f"selected no run ({case.selection.describe()})")
    timed = []
    for thread_id, run_id in runs:
        trajectory = await read_trajectory(store, thread_id, run_id)
        for check in case.checks:
            clock = time.perf_counter()
            result = check.evaluate(trajectory)
            timed.append(TimedResult(result, time.perf_counter() - clock))
    return CaseResult(case, tuple(timed))


async def select_runs(store: RunEventStore, selection: Selection, *, case: Case | None = None,
                      source: str = "<suite>") -> list[tuple[str, str]]:
    """(thread, run) pairs a selection names, oldest first."""
    if selection.run_ids:
        found = []
        for run_id in selection.run_ids:
            thread = await _thread_of(store, run_id, selection.thread_id)
            if thread is None:
                within = f" in thread {selection.thread_id!r}" if selection.thread_id else ""
                hint = "" if selection.thread_id else " (a run with no run row is found by naming its thread)"
                raise SuiteError(f"no run {run_id!r}{within} in the store{hint}", source=source,
                                 line=selection.line or None, case=case.name if case else None)
            found.append((thread, run_id))
        return found
    if selection.thread_id is not None:
        runs = await _runs_of_thread(store, selection.thread_id)
    else:
        runs = [(row.thread_id, row.run_id) for row in _by_start(await store.list_runs())]
    return runs[-selection.last:] if selection.last else runs


async def _thread_of(store: RunEventStore, run_id: str, thread_id: str | None) -> str | None:
    row = await store.get_run(run_id)
    if row is not None and thread_id in {None, row.thread_id}:
        return row.thread_id
    if thread_id is not None and await store.list_events(thread_id, run_id, limit=1):
        return thread_id
    return None


async def _runs_of_thread(store: RunEventStore, thread_id: str) -> list[tuple[str, str]]:
    """Every run of the thread in the order they started (by their ``run.start``), then runs that
    have a row but no ``run.start``."""
    started: dict[str, int] = {}
    async for start in iter_events(store, thread_id, event_types=["run.start"]):
        started.setdefault(start.run_id, start.seq)
    rows = await store.list_runs(thread_id)
    ordered = dict.fromkeys([*sorted(started, key=started.__getitem__), *(row.run_id for row in rows)])
    return [(thread_id, run_id) for run_id in ordered]


def _by_start(rows: Sequence[RunRow]) -> list[RunRow]:
    return sorted(rows, key=lambda row: (row.started_at is None,
                                         row.started_at.timestamp() if row.started_at else 0.0))
