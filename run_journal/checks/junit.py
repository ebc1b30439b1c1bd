"""A suite's results as JUnit XML, the report format CI systems read (Jenkins, GitLab, GitHub
Actions' test reporters, Azure Pipelines, CircleCI).

One ``<testsuite>`` per case, one ``<testcase>`` per check on each run it selected (``classname`` is
``suite.case``, ``name`` the check and the run), a ``<failure>`` with the one-line reason as its
message and the thread, run and event seqs as its text. A case that selected no run is one failing
test case.
"""

from __future__ import annotations

import socket
from xml.etree import ElementTree

from run_journal.checks.running import CaseResult, SuiteResult, TimedResult


def junit_xml(result: SuiteResult) -> str:
    """The XML document (UTF-8 text with its declaration)."""
    root = ElementTree.Element("testsuites", {
        "name": result.suite.name, "tests": str(result.tests), "failures": str(result.failures),
        "errors": "0", "time": _seconds(result.seconds),
    })
    stamp = result.started_at.replace(microsecond=0, tzinfo=None).isoformat()
    host = socket.gethostname()
    for case in result.cases:
        root.append(_suite(result, case, stamp, host))
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _suite(result: SuiteResult, case: CaseResult, stamp: str, host: str) -> ElementTree.Element:
    spent = sum(timed.seconds for timed in case.results)
    element = ElementTree.Element("testsuite", {
        "name": case.case.name, "tests": str(case.tests), "failures": str(case.failures), "errors": "0",
        "skipped": "0", "time": _seconds(spent), "timestamp": stamp, "hostname": host,
        "file": result.suite.source,
    })
    properties = ElementTree.SubElement(element, "properties")
    ElementTree.SubElement(properties, "property", {"name": "selection",
                                                   "value": case.case.selection.describe()})
    ElementTree.SubElement(properties, "property", {"name": "line", "value": str(case.case.line)})
    classname = f"{result.suite.name}.{case.case.name}"
    if case.problem is not None:
        test = ElementTree.SubElement(element, "testcase", {"name": "selects runs", "classname": classname,
                                                           "time": "0.000"})
        failure = ElementTree.SubElement(test, "failure", {"type": "selection", "message": case.problem})
        failure.text = case.problem
    for timed in case.results:
        element.append(_case(timed, classname))
    return element


def _case(timed: TimedResult, classname: str) -> ElementTree.Element:
    result = timed.result
    test = ElementTree.Element("testcase", {"name": f"{result.label} [run {result.run_id}]",
                                            "classname": classname, "time": _seconds(timed.seconds)})
    if not result.passed:
        failure = ElementTree.SubElement(test, "failure", {"type": result.check, "message": result.reason})
        seqs = ", ".join(map(str, result.seqs)) or "none"
        failure.text = (f"{result.reason}\nthread {result.thread_id}, run {result.run_id}\n"
                        f"events relied on (seq): {seqs}")
    return test


def _seconds(value: float) -> str:
    """Seconds with at most three decimals (the schema's time pattern)."""
    return f"{max(value, 0.0):.3f}"
