"""Every module of the package imports on its own, in an interpreter that has imported none of the
package: no import cycle can hide behind an import order that happens to work, and no module needs
another to be imported first.

One fresh interpreter imports the third-party libraries first (they cannot hide a cycle between our
modules, and importing LangChain again for each of a hundred modules would take minutes), then forks
one child per module; each child imports its module and nothing else of the package.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "run_journal"
THIRD_PARTY = ("langchain_core.callbacks", "langchain_core.language_models", "langchain_core.messages",
               "langchain_core.tools", "langgraph.graph", "pydantic", "sqlalchemy.ext.asyncio", "aiosqlite",
               "jsonschema", "genai_prices", "yaml", "fastapi", "asyncpg", "redis.asyncio")
FORK_SERVER = """
import importlib, json, os, sys
for dependency in json.loads(sys.argv[1]):
    try:
        importlib.import_module(dependency)
    except ImportError:  # an optional extra that is not installed
        pass
assert not [name for name in sys.modules if name.split(".")[0] == "run_journal"]
failures = []
for name in json.loads(sys.argv[2]):
    child = os.fork()
    if child == 0:
        try:
            importlib.import_module(name)
        except BaseException as error:
            sys.stderr.write(f"{name}: {type(error).__name__}: {error}\\n")
            os._exit(1)
        os._exit(0)
    if os.waitpid(child, 0)[1] != 0:
        failures.append(name)
print(json.dumps(failures))
"""


def modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] != "__main__":  # a program, run by ``python -m``, not imported
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_module_imports_alone_in_a_fresh_interpreter() -> None:
    names = modules()
    assert len(names) > 50
    done = subprocess.run([sys.executable, "-c", FORK_SERVER, json.dumps(THIRD_PARTY), json.dumps(names)],
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [], done.stderr


def test_a_module_that_needs_another_imported_first_is_caught(tmp_path: Path) -> None:
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from cyclic.b import B\nA = 1\n")
    (package / "b.py").write_text("from cyclic.a import A\nB = 2\n")
    names = ["cyclic", "cyclic.a", "cyclic.b"]
    done = subprocess.run([sys.executable, "-c", FORK_SERVER, "[]", json.dumps(names)], cwd=tmp_path,
                          capture_output=True, text=True, check=False, timeout=60)
    assert json.loads(done.stdout) == ["cyclic.a", "cyclic.b"], done.stderr
