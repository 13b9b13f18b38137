"""Every healer and chaos module imports first, on its own, in a fresh interpreter.

The import-cycle ratchet (test_import_cycles.py) reads the graph module by module; a package's `__init__` that
imports a module which imports the package's own submodule (chaos.storm -> chaos.engine.base runs chaos/engine's
`__init__`, which imported chaos.storm's engine; healer.actions.spec -> healer.core.model runs healer/core's
`__init__`, which reaches the action registry through the policy) is a circle only at run time, and only in the order a user's first
import happens to take. Each module here is imported first in a child forked from a bare interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.spine.conftest import REPO

PROBE = r"""
import os, pkgutil, sys, traceback
sys.path.insert(0, sys.argv[1])
names = []
for pkg in (sys.argv[2],):
    root = os.path.join(sys.argv[1], pkg)
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "__")) and d != "scenarios"]
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, f), sys.argv[1])[:-3].replace(os.sep, ".")
                names.append(rel[: -len(".__init__")] if rel.endswith(".__init__") else rel)
# the third-party packages are imported once, before the forks: they cannot take part in a circle of ours, and
# each child then pays only for healer's and chaos's own modules
import importlib.util
for dep in ("pydantic", "yaml", "typer", "rich.console", "networkx", "hypothesis", "psycopg", "chaoslib", "mcp",
            "prometheus_client", "docker", "psutil", "httpx", "jinja2", "jsonschema"):
    try:
        if importlib.util.find_spec(dep.split(".")[0]) is not None:
            __import__(dep)
    except Exception:  # noqa: BLE001 - a dependency that does not import here is the child's to report
        pass
assert not any(m in ("healer", "chaos") or m.startswith(("healer.", "chaos.")) for m in sys.modules), "preloaded one of ours"
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


@pytest.mark.long  # 123 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.parametrize("package", ["healer", "chaos"])
def test_every_module_imports_first_on_its_own(package):
    r = subprocess.run([sys.executable, "-c", PROBE, str(REPO), package], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    count, *bad = r.stdout.split()
    assert int(count) > 40 and not bad, r.stderr
