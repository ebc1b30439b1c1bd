"""``run-journal URL check SUITE.yaml``: run a suite of checks over recorded runs, for CI.

Exit status: 0 when every check passed, 1 when one failed (or a case selected no run), 2 for a bad
suite (the message names the file, the line and the case).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from run_journal.cli import render
from run_journal.cli.common import CliError, add_command, emit, emit_json
from run_journal.stores.base import RunEventStore

REASON_WIDTH = 90


def add_check_command(sub: Any) -> None:
    """Register ``check`` on the ``run-journal`` subcommands."""
    text = "run a YAML suite of checks over recorded runs (exit 0: all passed, 1: one failed, 2: bad suite)"
    check = add_command(sub, "check", cmd_check, text)
    check.add_argument("suite", metavar="SUITE.yaml", type=Path, help="the suite file (see docs/checks.md)")
    check.add_argument("--junit-xml", metavar="FILE", type=Path, help="also write the results as JUnit XML")
    check.add_argument("--record", action="store_true",
                       help="record each result on its run as a score (a run.score event)")
    check.add_argument("--json", action="store_true", help="the results as one JSON object")
    check.add_argument("--full-ids", action="store_true", help="whole run ids in the table")


async def cmd_check(store: RunEventStore, args: argparse.Namespace, out: TextIO) -> int:
    from run_journal.checks import SuiteError, junit_xml, load_suite, record_results, run_suite

    try:
        suite = load_suite(args.suite)
    except OSError as error:
        raise CliError(f"cannot read the suite {args.suite}: {error.strerror or error}", code=2) from None
    except SuiteError as error:
        raise CliError(str(error), code=2) from None
    try:
        result = await run_suite(store, suite)
    except SuiteError as error:  # a run the suite names is not in the store
        raise CliError(str(error), code=2) from None
    if args.junit_xml is not None:
        try:
            args.junit_xml.write_text(junit_xml(result), encoding="utf-8")
        except OSError as error:
            raise CliError(f"cannot write {args.junit_xml}: {error.strerror or error}", code=2) from None
    recorded = len(await record_results(store, result)) if args.record else 0
    if args.json:
        emit_json(out, result.to_dict())
        return 0 if result.passed else 1
    short = render.ShortIds((run for case in result.cases for run in case.run_ids), full=args.full_ids)
    rows: list[list[Any]] = []
    for case in result.cases:
        if case.problem is not None:
            rows.append([case.case.name, "-", "selects runs", "FAIL", case.problem])
        for timed in case.results:
            check = timed.result
            rows.append([case.case.name, short(check.run_id), check.label, "pass" if check.passed else "FAIL",
                         render.one_line(check.reason, REASON_WIDTH)])
    for line in render.table(("case", "run", "check", "result", "reason"), rows):
        emit(out, line)
    passed = result.tests - result.failures
    emit(out, f"{result.tests} check(s) on {result.runs} run(s): {passed} passed, {result.failures} failed")
    if args.junit_xml is not None:
        emit(out, f"JUnit XML written to {args.junit_xml}")
    if args.record:
        emit(out, f"recorded {recorded} score(s)")
    return 0 if result.passed else 1
