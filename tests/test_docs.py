"""The docs cannot rot: every fenced code block in the README and docs/ is run, checked as an excerpt of
an example, or explicitly marked as not runnable (and those are listed here so they stay few).

Rules, per Markdown file (blocks run in order, in one fresh directory per file):
- a ``python`` block runs as a script; an ``sh`` block runs in bash with the venv's ``bin`` first on
  PATH (so ``run-journal`` and ``python`` are this checkout's);
- a ``text`` block right after a block that ran is that block's expected output (stdout + stderr),
  compared after masking timestamps, durations and generated ids and collapsing spaces;
- ``<!-- excerpt: examples/NAME.py -->`` on the line before a block: its non-blank lines must appear,
  in order, among the example's lines (stripped), and the example is run by tests/test_examples.py;
- ``<!-- not-run: reason -->`` on the line before a block: skipped, and listed in NOT_RUN below;
- a ``diagram`` block is a picture: neither run nor compared.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", ROOT / "examples" / "README.md", *(ROOT / "docs").glob("*.md")])
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)
MARKER = re.compile(r"<!--\s*(not-run|excerpt):\s*(.*?)\s*-->\s*$")

NOT_RUN = {
    ("README.md", "python3 -m venv .venv && .venv/bin/pip install -q -e . && "
                  ".venv/bin/python examples/quickstart.py"),
    ("README.md", "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev,postgres,redis,serve]' && "
                  ".venv/bin/pytest"),
    ("examples/README.md", "pip install langchain langchain-openai"),
    ("docs/consumers.md", "run-journal sqlite:///journal.db tail demo --last 2"),
}
"""(file, first line) of every block that is not run. Keep this short: prefer a block that runs."""


@dataclass
class Block:
    path: Path
    language: str
    text: str
    marker: tuple[str, str] | None
    line: int

    @property
    def name(self) -> str:
        return self.path.relative_to(ROOT).as_posix()

    @property
    def first_line(self) -> str:
        return self.text.strip().splitlines()[0]


def blocks(path: Path) -> list[Block]:
    source = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(source):
        before = source[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        found.append(Block(path, match[1], match[2], (marker[1], marker[2]) if marker else None,
                           source.count("\n", 0, match.start()) + 1))
    return found


def mask(text: str) -> list[str]:
    """Output lines with what changes from run to run masked, and runs of spaces collapsed."""
    text = re.sub(r"\d{4}-\d\d-\d\d", "<date>", text)
    text = re.sub(r"\d\d:\d\d:\d\d(\.\d+)?(\+00:00)?", "<time>", text)
    text = re.sub(r"\b\d+\.\d\ds\b", "<secs>", text)
    text = re.sub(r"\b[0-9a-f]{8,32}\b", "<id>", text)  # ids, and the short run ids of listings
    return [re.sub(r"\s+", " ", line).strip() for line in text.strip().splitlines()]


def run(block: Block, cwd: Path) -> str:
    env = dict(os.environ)
    env.pop("RUN_JOURNAL_MODEL", None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["NO_COLOR"] = "1"
    if block.language == "python":
        script = cwd / f"block_{block.line}.py"
        script.write_text(block.text, encoding="utf-8")
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-euo", "pipefail", "-c", block.text]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, f"{block.name}:{block.line} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_every_block_is_run_checked_or_listed() -> None:
    not_run = set()
    for path in DOCS:
        previous: Block | None = None
        for block in blocks(path):
            where = f"{block.name}:{block.line}"
            if block.marker and block.marker[0] == "not-run":
                assert block.marker[1], f"{where}: say why the block cannot run"
                not_run.add((block.name, block.first_line))
            elif block.language == "diagram":
                assert block.marker is None, f"{where}: a diagram takes no marker"
            elif block.marker is None and block.language == "text":
                runs = previous is not None and previous.language in {"python", "sh"} \
                    and previous.marker is None
                assert runs, f"{where}: a text block must follow a block that runs"
            elif block.marker is None:
                assert block.language in {"python", "sh"}, f"{where}: unmarked {block.language!r} block"
            previous = block
    assert not_run == NOT_RUN


@pytest.mark.parametrize("path", DOCS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_excerpts_match_their_example(path: Path) -> None:
    for block in blocks(path):
        if not block.marker or block.marker[0] != "excerpt":
            continue
        example = ROOT / block.marker[1]
        assert example.is_file(), f"{block.name}:{block.line}: no {block.marker[1]}"
        remaining = iter(line.strip() for line in example.read_text(encoding="utf-8").splitlines())
        for line in (line.strip() for line in block.text.splitlines() if line.strip()):
            assert any(candidate == line for candidate in remaining), \
                f"{block.name}:{block.line}: {line!r} is not in {block.marker[1]} (in this order)"


@pytest.mark.parametrize("path", DOCS, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_runnable_blocks_run_and_print_what_the_docs_show(path: Path, tmp_path: Path) -> None:
    output: str | None = None
    for block in blocks(path):
        if block.marker is not None or block.language == "diagram":
            output = None
            continue
        if block.language == "text":
            assert output is not None, f"{block.name}:{block.line}: no output to compare"
            assert mask(output) == mask(block.text), f"{block.name}:{block.line}: output differs"
            output = None
            continue
        output = run(block, tmp_path)
