"""Imports live at module level unless a measured start-up cost says otherwise (issue 35).

A function-local import (an `import` inside a def, a lambda or a method) is kept for the start-up of a command that
never needs it: `healer --help` (every CLI module loads), `healer loop run` (healer/launch.py's fast path; the bench,
bench/loop_vs_sh.py, holds its wall ratio), the dispatcher's and the supervisor's start. The figure is what the
import itself costs in a process that already loaded that command's modules (`python -X importtime -c 'import
healer.cli; from healer.supervisor import Supervisor'` shows it; CPU time, the least noisy on a shared machine).
Such an import says so on its line, with the figure:

    from healer.supervisor import Supervisor  # lazy: pulls pydantic, docker…: 360 ms of `healer --help`

(Rarely another reason: an import that would close a circle through a package's `__init__` at run time.)

Every other function-local import is counted against its package's number below: a ratchet that only goes down. A
new unannotated one fails the test with its file:line; moving one to module level (or annotating it) fails it too,
asking you to lower the number, so the count never grows back. There is no import cycle
(test_import_cycles.py), so any of them can move to module level without a circular import at run time.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.spine.conftest import REPO

# unannotated function-local imports per package: none left; a new one fails with its file:line (never raise it)
RATCHET = {"healer": 0, "chaos": 0}

LAZY = re.compile(r"#\s*lazy:\s*(?P<why>.*)")
FIGURE = re.compile(r"\d")  # the why carries its measurement: "38 ms of `healer --help`"


def local_imports(source: str) -> list[tuple[int, str | None]]:
    """(line, the `# lazy:` reason or None) of every import statement inside a function body."""
    lines = source.splitlines()
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom) and in_function:
                text = "\n".join(lines[child.lineno - 1: child.end_lineno])
                m = LAZY.search(text)
                found.append((child.lineno, m.group("why").strip() if m else None))
            visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))

    visit(ast.parse(source), False)
    return found


def survey(package: str) -> tuple[list[str], list[str]]:
    """(unannotated, annotated without a figure): file:line of each, under `package`/."""
    bare, vague = [], []
    for path in sorted((REPO / package).rglob("*.py")):
        rel = path.relative_to(REPO)
        for line, why in local_imports(path.read_text()):
            if why is None:
                bare.append(f"{rel}:{line}")
            elif not FIGURE.search(why):
                vague.append(f"{rel}:{line}")
    return bare, vague


def check(package: str, bare: list[str], limit: int) -> list[str]:
    if len(bare) > limit:
        return [f"{package}: {len(bare)} function-local imports without `# lazy: <why, with the figure>` (at most "
                f"{limit}): move them to module level, or measure and annotate them: " + ", ".join(bare)]
    if len(bare) < limit:
        return [f"{package}: {len(bare)} unannotated function-local imports, fewer than {limit}: lower RATCHET"
                f"[{package!r}] in tests/spine/test_local_imports.py to {len(bare)}"]
    return []


def test_function_local_imports_are_lazy_on_purpose_or_counted():
    problems = []
    for package, limit in RATCHET.items():
        bare, vague = survey(package)
        problems += check(package, bare, limit)
        problems += [f"{where}: `# lazy:` without its figure (how many ms of which start-up)" for where in vague]
    assert not problems, "\n".join(problems)


def test_the_survey_sees_function_bodies_only():
    source = (
        "import os\n"
        "if os.name:\n"
        "    import sys\n"
        "try:\n"
        "    import json\n"
        "except ImportError:\n"
        "    json = None\n"
        "class C:\n"
        "    import re\n"
        "    def m(self):\n"
        "        import csv\n"
        "def f():\n"
        "    from a import (b,\n"
        "                   c)  # lazy: a is heavy, 12 ms of `healer --help`\n"
        "    def g():\n"
        "        import zlib  # lazy: nothing measured\n"
        "    return lambda: __import__('x')\n"
        "async def h():\n"
        "    import hashlib\n"
    )
    assert local_imports(source) == [(11, None), (13, "a is heavy, 12 ms of `healer --help`"), (16, "nothing measured"),
                                     (19, None)]


def test_the_ratchet_names_the_new_ones_and_asks_to_lower_the_number():
    assert check("healer", ["healer/a.py:3"], 1) == []
    grew = check("healer", ["healer/a.py:3", "healer/b.py:9"], 1)
    assert len(grew) == 1 and grew[0].endswith("healer/a.py:3, healer/b.py:9")
    assert check("chaos", [], 2) == ["chaos: 0 unannotated function-local imports, fewer than 2: lower "
                                     "RATCHET['chaos'] in tests/spine/test_local_imports.py to 0"]


def test_the_repo_is_this_checkout():
    assert (REPO / "healer" / "cli" / "__init__.py").is_file() and Path(__file__).is_relative_to(REPO)
