"""pytest plugin of bench/mutants.py (loaded with `-p mutants_plugin`, bench/ on the path).

HEALER_MUT_COVER=DIR: measure which lines of the decision code each test *file* runs (coverage.py, one context
per file: per test was the map's cost, thousands of contexts) in this process and in every child it starts that
inherits the environment (COVERAGE_PROCESS_START, the context passed down in HEALER_MUT_CTX: a `healer` CLI child
counts for the file that started it), and write each test's outcome and each file's seconds to DIR/outcome.<worker>.
HEALER_MUT_DESELECT=FILE: skip the test ids listed in FILE (red without any mutation: never a kill).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

_cov = None
_out: dict = {"outcome": {}, "seconds": {}}
_t0: dict[str, float] = {}


def _file(nodeid: str) -> str:
    return nodeid.split("::")[0]


def pytest_configure(config) -> None:
    global _cov
    d = os.environ.get("HEALER_MUT_COVER")
    if d:
        import coverage

        include = json.loads(os.environ["HEALER_MUT_INCLUDE"])
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _cov = coverage.Coverage(data_file=str(Path(d) / f"inproc.{worker}"), include=include, branch=False)
        _cov.start()


def pytest_collection_modifyitems(session, config, items) -> None:
    sel = os.environ.get("HEALER_MUT_DESELECT")
    if not sel:
        return
    red = {ln.strip() for ln in Path(sel).read_text().splitlines() if ln.strip()}
    config.hook.pytest_deselected(items=[it for it in items if it.nodeid in red])
    items[:] = [it for it in items if it.nodeid not in red]


def pytest_runtest_setup(item) -> None:
    if _cov is not None:
        f = _file(item.nodeid)
        _cov.switch_context(f)
        # children started from here on record under this file (bench/mutants.py wrote the rc file); set only now,
        # never before the xdist workers start (they would start a coverage of their own)
        os.environ["HEALER_MUT_CTX"] = f
        os.environ["COVERAGE_PROCESS_START"] = os.environ["HEALER_MUT_RC"]
    _t0[item.nodeid] = time.perf_counter()


def pytest_runtest_logreport(report) -> None:
    if _cov is None:
        return
    if report.when == "call" or report.outcome != "passed":
        prev = _out["outcome"].get(report.nodeid)
        if prev in (None, "passed"):
            _out["outcome"][report.nodeid] = report.outcome
    if report.when == "teardown" and report.nodeid in _t0:
        f = _file(report.nodeid)
        _out["seconds"][f] = round(_out["seconds"].get(f, 0) + time.perf_counter() - _t0.pop(report.nodeid), 3)


def pytest_unconfigure(config) -> None:
    if _cov is None:
        return
    _cov.stop()
    _cov.save()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (Path(os.environ["HEALER_MUT_COVER"]) / f"outcome.{worker}").write_text(json.dumps(_out))
