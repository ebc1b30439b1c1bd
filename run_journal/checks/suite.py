"""YAML suites: cases that select recorded runs and list checks, loaded with the line of everything.

A suite is a list of cases (or a mapping with ``cases:``); each case has a ``name``, selects runs
(``run``: one id or a list; ``thread``: every run of a thread; ``last: N``: the N most recent runs, of
the thread when one is named, else of the store) and lists ``checks``, each a one-key mapping
``check_name: value`` (or the bare name of a check that needs no value). Mistakes are a
``SuiteError`` naming the file, the line and the case.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from run_journal.checks.params import CheckDefinitionError
from run_journal.checks.vocabulary import Check

CASE_KEYS: Final = ("name", "run", "thread", "last", "checks")


class SuiteError(ValueError):
    """A suite that cannot be run: bad YAML, an unknown check or key, a value of the wrong type.

    The message starts with ``FILE:LINE:`` and names the case; ``line`` and ``case`` hold them too.
    """

    def __init__(self, message: str, *, source: str, line: int | None, case: str | None = None) -> None:
        where = f"{source}:{line}" if line else source
        within = f" case {case!r}:" if case else ""
        super().__init__(f"{where}:{within} {message}")
        self.source, self.line, self.case = source, line, case


@dataclasses.dataclass(frozen=True, slots=True)
class Selection:
    """Which runs a case checks."""

    run_ids: tuple[str, ...] = ()
    thread_id: str | None = None
    last: int | None = None
    line: int = 0
    """The line of the case's ``run`` (or of the case)."""

    def describe(self) -> str:
        parts = []
        if self.run_ids:
            parts.append("run " + ", ".join(self.run_ids))
        if self.thread_id:
            parts.append(f"thread {self.thread_id}")
        if self.last:
            parts.append(f"last {self.last}")
        return ", ".join(parts)


@dataclasses.dataclass(frozen=True, slots=True)
class Case:
    name: str
    selection: Selection
    checks: tuple[Check, ...]
    line: int
    check_lines: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Suite:
    source: str
    """The file name (or ``<suite>`` for text)."""
    cases: tuple[Case, ...]

    @property
    def name(self) -> str:
        return Path(self.source).stem if self.source != "<suite>" else "suite"


def load_suite(path: str | Path) -> Suite:
    """Read and validate a suite file (``SuiteError`` for every mistake, ``OSError`` if unreadable)."""
    text = Path(path).read_text(encoding="utf-8")
    return parse_suite(text, source=str(path))


def parse_suite(text: str, *, source: str = "<suite>") -> Suite:
    """Validate a suite given as YAML text."""
    import yaml  # PyYAML: loaded only when a suite is read

    try:
        document = yaml.load(text, Loader=_line_loader())  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as error:
        raise SuiteError(str(error), source=source, line=error.line) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        problem = getattr(error, "problem", None) or str(error)
        context, opened = getattr(error, "context", None), getattr(error, "context_mark", None)
        if context and opened is not None and opened.line != getattr(mark, "line", None):
            problem += f" ({context} that starts on line {opened.line + 1})"
        raise SuiteError(f"not valid YAML: {problem}", source=source,
                         line=mark.line + 1 if mark is not None else None) from None
    return _Reader(source).suite(document)


# -- YAML with lines -----------------------------------------------------------------------------
class _Map(dict[Any, Any]):
    line: int = 0
    lines: dict[Any, int]


class _Seq(list[Any]):
    line: int = 0
    lines: list[int]


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int) -> None:
        super().__init__(f"{key!r} is given twice")
        self.line = line


@functools.cache
def _line_loader() -> type:
    """A ``SafeLoader`` whose mappings and lists remember the line of each of their items."""
    import yaml

    class LineLoader(yaml.SafeLoader):
        pass

    def mapping(loader: Any, node: Any) -> _Map:
        result = _Map()
        result.line, result.lines = node.start_mark.line + 1, {}
        loader.flatten_mapping(node)
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if key in result:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            result[key] = loader.construct_object(value_node, deep=True)
            result.lines[key] = key_node.start_mark.line + 1
        return result

    def sequence(loader: Any, node: Any) -> _Seq:
        result = _Seq(loader.construct_object(item, deep=True) for item in node.value)
        result.line = node.start_mark.line + 1
        result.lines = [item.start_mark.line + 1 for item in node.value]
        return result

    LineLoader.add_constructor("tag:yaml.org,2002:map", mapping)
    LineLoader.add_constructor("tag:yaml.org,2002:seq", sequence)
    return LineLoader


def _line_of(container: Any, key: Any) -> int | None:
    if isinstance(container, _Map):
        return container.lines.get(key, container.line)
    if isinstance(container, _Seq) and isinstance(key, int) and key < len(container.lines):
        return container.lines[key]
    return getattr(container, "line", None)


# -- validation ----------------------------------------------------------------------------------
class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, message: str, line: int | None, case: str | None = None) -> SuiteError:
        return SuiteError(message, source=self.source, line=line, case=case)

    def suite(self, document: Any) -> Suite:
        cases = document
        if isinstance(document, Mapping):
            unknown = [key for key in document if key != "cases"]
            if unknown:
                raise self.error(f"unknown key {unknown[0]!r} at the top (a suite is a list of cases, or "
                                 "a mapping with 'cases')", _line_of(document, unknown[0]))
            if "cases" not in document:
                raise self.error("a suite needs 'cases'", getattr(document, "line", None))
            cases = document["cases"]
        if document is None:
            raise self.error("the suite is empty: it needs a list of cases", None)
        if not isinstance(cases, list) or not cases:
            raise self.error("the cases are a non-empty list", getattr(cases, "line", None)
                             or _line_of(document, "cases"))
        read = tuple(self.case(item, index, _line_of(cases, index)) for index, item in enumerate(cases))
        seen: set[str] = set()
        for case in read:
            if case.name in seen:
                raise self.error("two cases have this name (each needs its own, for the reports)",
                                 case.line, case.name)
            seen.add(case.name)
        return Suite(self.source, read)

    def case(self, item: Any, index: int, line: int | None) -> Case:
        if not isinstance(item, Mapping):
            raise self.error(f"case {index + 1} is a mapping with name, checks and a run selection, got "
                             f"{type(item).__name__}", line)
        name = item.get("name", f"case {index + 1}")
        if not isinstance(name, str) or not name.strip():
            raise self.error("name is a non-empty string", _line_of(item, "name"))
        for key in item:
            if key not in CASE_KEYS:
                close = difflib.get_close_matches(str(key), CASE_KEYS, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(CASE_KEYS)})"
                raise self.error(f"unknown key {key!r}{hint}", _line_of(item, key), name)
        selection = self.selection(item, name, line)
        checks = item.get("checks")
        if not isinstance(checks, list) or not checks:
            raise self.error("checks is a non-empty list of checks", _line_of(item, "checks")
                             if "checks" in item else line, name)
        made = []
        lines = []
        for position, entry in enumerate(checks):
            at = _line_of(checks, position)
            made.append(self.check(entry, name, at))
            lines.append(at or 0)
        return Case(name, selection, tuple(made), line or 0, tuple(lines))

    def selection(self, item: Mapping[str, Any], name: str, line: int | None) -> Selection:
        runs = item.get("run")
        thread = item.get("thread")
        last = item.get("last")
        if runs is None and thread is None and last is None:
            raise self.error("say which runs to check: run (an id or a list), thread, or last", line, name)
        if runs is not None:
            ids = [runs] if isinstance(runs, str) else runs
            if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
                raise self.error(f"run is a run id or a list of run ids, got {runs!r}",
                                 _line_of(item, "run"), name)
            if last is not None:
                raise self.error("give run or last, not both", _line_of(item, "last"), name)
        if thread is not None and (not isinstance(thread, str) or not thread):
            raise self.error(f"thread is a thread id, got {thread!r}", _line_of(item, "thread"), name)
        if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 1):
            raise self.error(f"last is a number of runs (1 or more), got {last!r}", _line_of(item, "last"),
                             name)
        ids = () if runs is None else tuple([runs] if isinstance(runs, str) else runs)
        return Selection(ids, thread, last, _line_of(item, "run") or line or 0)

    def check(self, entry: Any, case: str, line: int | None) -> Check:
        if isinstance(entry, str):
            name, value = entry, None
        elif isinstance(entry, Mapping) and len(entry) == 1:
            ((name, value),) = entry.items()
        else:
            raise self.error("a check is a mapping with one key, the check's name (e.g. "
                             "'- tool_called: search'), or the bare name of a check that needs no value",
                             line, case)
        try:
            return Check.parse(name, value)
        except CheckDefinitionError as error:
            where = _line_of(value, error.path) if error.path and isinstance(value, Mapping) else line
            raise self.error(str(error), where, case) from None

