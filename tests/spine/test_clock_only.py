"""Only healer/clock.py reads time (README "Architecture"): an AST scan of healer/ and chaos/."""

from __future__ import annotations

import ast

from tests.spine.conftest import REPO

TIME_FUNCS = {"time", "monotonic", "sleep", "perf_counter", "time_ns", "monotonic_ns", "process_time",
              "perf_counter_ns", "process_time_ns", "thread_time", "thread_time_ns"}
DATE_FUNCS = {"now", "utcnow", "today"}
ALLOWED = {REPO / "healer" / "clock.py"}


def violations(source: str, filename: str) -> list[str]:
    tree = ast.parse(source, filename)
    time_names: set[str] = set()  # names bound to the time module
    dt_classes: set[str] = {"datetime", "date"}  # names bound to datetime.datetime / datetime.date
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "time":
                    time_names.add(a.asname or "time")
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            for a in node.names:
                if a.name in TIME_FUNCS or a.name == "*":
                    out.append(f"{filename}:{node.lineno}: from time import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module == "datetime":
            for a in node.names:
                if a.name in ("datetime", "date"):
                    dt_classes.add(a.asname or a.name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        if node.attr in TIME_FUNCS and isinstance(base, ast.Name) and base.id in time_names:
            out.append(f"{filename}:{node.lineno}: {base.id}.{node.attr}")
        if node.attr in DATE_FUNCS:
            name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
            if name in dt_classes:
                out.append(f"{filename}:{node.lineno}: {name}.{node.attr}")
    return out


def test_no_module_but_clock_reads_time():
    found = []
    for pkg in ("healer", "chaos"):
        for f in sorted((REPO / pkg).rglob("*.py")):
            if f in ALLOWED:
                continue
            found += violations(f.read_text(), str(f.relative_to(REPO)))
    assert not found, "time read outside healer/clock.py (take a Clock instead):\n" + "\n".join(found)


def test_the_scan_catches_every_form():
    bad = """
import time
import time as t
import datetime
import datetime as _dt
from datetime import datetime as DT, date
from time import monotonic
time.time(); t.sleep(1); f = time.perf_counter
datetime.datetime.now(); _dt.datetime.utcnow(); DT.now(); date.today(); _dt.date.today()
"""
    found = violations(bad, "x.py")
    kinds = sorted(x.split(": ", 1)[1] for x in found)
    assert kinds == sorted(["from time import monotonic", "time.time", "t.sleep", "time.perf_counter", "datetime.now",
                            "datetime.utcnow", "DT.now", "date.today", "date.today"])
    ok = "import time\ntime.strftime('%Y')\nimport datetime\ndatetime.datetime.fromtimestamp(0)\nproc.wait(timeout=1)\n"
    assert violations(ok, "ok.py") == []
