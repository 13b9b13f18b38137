"""The decision core stays pure (README "Architecture"): healer/core/ and healer/loop/decide.py import
nothing that touches files, processes, the network, the store or the clock."""

from __future__ import annotations

import ast

from tests.spine.conftest import REPO

PURE = sorted((REPO / "healer" / "core").glob("*.py")) + sorted((REPO / "healer" / "actions").glob("*.py")) + [
    REPO / "healer" / "loop" / "decide.py", REPO / "healer" / "loop" / "gatecheck.py", REPO / "healer" / "digest.py",
    REPO / "healer" / "guarded.py"]
IO_MODULES = {"os", "sys", "subprocess", "socket", "sqlite3", "pathlib", "shutil", "io", "tempfile", "glob", "signal",
              "psutil", "docker", "urllib", "http", "requests", "time", "datetime", "threading", "multiprocessing"}
HEALER_OK = ("healer.core", "healer.actions", "healer.records", "healer.lifecycle", "healer.durations", "healer.errors", "healer.policy",
             "healer.conventions", "healer.digest")  # names, path arithmetic, record classes, hashes: no I/O
CLOCK_OK = {"day_of", "iso"}  # pure functions of their argument
IO_CALLS = {"open", "print", "input", "exec", "eval", "__import__"}


def violations(source: str, filename: str) -> list[str]:
    out: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                if top in IO_MODULES or (top == "healer" and not a.name.startswith(HEALER_OK)):
                    out.append(f"{where}: import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mod = node.module
            if mod.split(".")[0] in IO_MODULES:
                out.append(f"{where}: from {mod} import ...")
            elif mod == "healer.clock":
                out += [f"{where}: from healer.clock import {a.name}" for a in node.names if a.name not in CLOCK_OK]
            elif mod == "healer":
                ok = {"lifecycle", "durations", "errors", "conventions", "digest", "actions"}
                out += [f"{where}: from healer import {a.name}" for a in node.names if a.name not in ok]
            elif mod.startswith("healer") and not mod.startswith(HEALER_OK):
                out.append(f"{where}: from {mod} import ...")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IO_CALLS:
            out.append(f"{where}: {node.func.id}()")
    return out


def test_the_core_imports_no_io():
    found = []
    for f in PURE:
        found += violations(f.read_text(), str(f.relative_to(REPO)))
    assert not found, "I/O in the pure core (gather it in a snapshot, act in the shell):\n" + "\n".join(found)


def test_the_scan_catches_every_form():
    bad = """
import os.path
import subprocess as sp
from pathlib import Path
from healer.store import open_store
from healer import procs, lifecycle
from healer.clock import system, day_of
import healer.fleet.git
open("x").read()
print("hi")
"""
    found = sorted(x.split(": ", 1)[1] for x in violations(bad, "x.py"))
    assert found == sorted(["import os.path", "import subprocess", "from pathlib import ...", "from healer.store import ...",
                            "from healer import procs", "from healer.clock import system", "import healer.fleet.git", "open()",
                            "print()"])
    ok = "from healer import lifecycle\nfrom healer.clock import day_of\nfrom healer.core.model import Memory\nimport re\n"
    assert violations(ok, "ok.py") == []
