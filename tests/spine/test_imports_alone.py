"""Every healer and chaos module imports first, on its own, in a fresh interpreter.

The import-cycle ratchet (test_import_cycles.py) reads the graph module by module; a package's `__init__` that
imports a module which imports the package's own submodule (chaos.storm -> chaos.engine.base runs chaos/engine's
`__init__`, which imported chaos.storm's engine; healer.actions.spec -> healer.core.model runs healer/core's
`__init__`, which reaches the action registry through the policy) is a circle only at run time, and only in the order a user's first
import happens to take. Each module here is imported first in a child forked from a bare interpreter."""

from __future__ import annotations

import subprocess
import sys

from tests.spine.conftest import REPO

PROBE = r"""
import os, pkgutil, sys, traceback
sys.path.insert(0, sys.argv[1])
# the third-party libraries load once, in the parent: the circles looked for are between our own modules
for lib in ("pydantic", "networkx", "yaml", "rich.console", "typer", "loguru", "psutil", "docker", "mcp.server",
            "prometheus_client", "psycopg", "chaoslib", "hypothesis"):
    try:
        __import__(lib)
    except ImportError:
        pass
names = []
for pkg in ("healer", "chaos"):
    root = os.path.join(sys.argv[1], pkg)
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "__")) and d != "scenarios"]
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, f), sys.argv[1])[:-3].replace(os.sep, ".")
                names.append(rel[: -len(".__init__")] if rel.endswith(".__init__") else rel)
bad = []
for name in sorted(names):
    pid = os.fork()
    if pid == 0:
        try:
            __import__(name)
        except BaseException as e:  # noqa: BLE001
            sys.stderr.write(f"{name}: {type(e).__name__}: {e}\n")
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status:
        bad.append(name)
print(len(names), " ".join(bad))
"""


def test_every_module_imports_first_on_its_own():
    r = subprocess.run([sys.executable, "-c", PROBE, str(REPO)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    count, *bad = r.stdout.split()
    assert int(count) > 200 and not bad, r.stderr
