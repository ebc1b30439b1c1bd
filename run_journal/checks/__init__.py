"""Checks over recorded runs: a small vocabulary, YAML suites for CI, JUnit XML, test assertions, scores.

- ``Check.of(name, ...)`` / ``run_checks(trajectory, checks)``: the vocabulary over one run
  (``VOCABULARY`` lists every check); each ``CheckResult`` has pass/fail, a one-line reason and the
  seqs of the events it relied on.
- ``load_suite(path)`` / ``parse_suite(text)`` and ``await run_suite(store, suite)``; ``junit_xml``.
- ``await assert_run(store, thread_id, run_id)``: chained assertions for pytest.
- ``await record_score(store, thread_id, run_id, name, value, ...)``; ``await record_results(store,
  suite_result)`` records every check result of a suite as a score.
"""

from __future__ import annotations

from run_journal.checks.assertions import RunAssertions, RunCheckFailed, assert_run, outline
from run_journal.checks.junit import junit_xml
from run_journal.checks.params import CheckDefinitionError
from run_journal.checks.running import CaseResult, SuiteResult, TimedResult, run_case, run_checks, run_suite
from run_journal.checks.scores import SCORE_EVENT, ScoreValue, record_score, run_owner, score_event
from run_journal.checks.suite import Case, Selection, Suite, SuiteError, load_suite, parse_suite
from run_journal.checks.vocabulary import VOCABULARY, Check, CheckKind, CheckResult
from run_journal.envelope import NewEvent, RunEvent
from run_journal.stores.base import RunEventStore

__all__ = [
    "SCORE_EVENT",
    "VOCABULARY",
    "Case",
    "CaseResult",
    "Check",
    "CheckDefinitionError",
    "CheckKind",
    "CheckResult",
    "RunAssertions",
    "RunCheckFailed",
    "ScoreValue",
    "Selection",
    "Suite",
    "SuiteError",
    "SuiteResult",
    "TimedResult",
    "assert_run",
    "junit_xml",
    "load_suite",
    "outline",
    "parse_suite",
    "record_results",
    "record_score",
    "run_case",
    "run_checks",
    "run_suite",
    "score_event",
]


async def record_results(
    store: RunEventStore, result: SuiteResult, *, source: str = "check"
) -> list[RunEvent]:
    """Record each check result of a suite on its run as a score: named by the check's label, the
    value true (passed) or false, the reason as the comment, the events it relied on as its seqs,
    and the suite and case in its metadata. One write per run."""
    by_run: dict[tuple[str, str], list[NewEvent]] = {}
    owners: dict[tuple[str, str], str | None] = {}
    for case in result.cases:
        for timed in case.results:
            check = timed.result
            key = (check.thread_id, check.run_id)
            if key not in owners:
                owners[key] = await run_owner(store, *key)
            by_run.setdefault(key, []).append(score_event(
                check.thread_id, check.run_id, check.label, check.passed, comment=check.reason,
                source=source, seqs=check.seqs, user_id=owners[key],
                metadata={"suite": result.suite.source, "case": case.case.name, "check": check.check},
            ))
    recorded: list[RunEvent] = []
    for events in by_run.values():
        recorded += await store.put_batch(events)
    return recorded
