"""pytest plugin of bench/mutants.py (loaded with `-p mutants_plugin`, bench/ on the path).

HEALER_MUT_COVER=FILE: measure which lines of the decision code each test runs (coverage.py, one context per
test id) and write {test id: {file: [lines]}} plus each test's outcome and seconds to FILE (per xdist worker:
FILE.<worker>). HEALER_MUT_SELECT=FILE: run only the test ids listed in FILE (one per line), in that order.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

_cov = None
_out: dict = {"lines": {}, "outcome": {}, "seconds": {}}
_t0: dict[str, float] = {}


def pytest_configure(config) -> None:
    global _cov
    if os.environ.get("HEALER_MUT_COVER"):
        import coverage

        include = json.loads(os.environ["HEALER_MUT_INCLUDE"])
        _cov = coverage.Coverage(data_file=None, include=include, branch=False)
        _cov.start()


def pytest_collection_modifyitems(session, config, items) -> None:
    sel = os.environ.get("HEALER_MUT_SELECT")
    if not sel:
        return
    wanted = [ln.strip() for ln in Path(sel).read_text().splitlines() if ln.strip()]
    rank = {t: i for i, t in enumerate(wanted)}
    keep = [it for it in items if it.nodeid in rank]
    keep.sort(key=lambda it: rank[it.nodeid])
    config.hook.pytest_deselected(items=[it for it in items if it.nodeid not in rank])
    items[:] = keep


def pytest_runtest_setup(item) -> None:
    if _cov is not None:
        _cov.switch_context(item.nodeid)
    _t0[item.nodeid] = time.perf_counter()


def pytest_runtest_logreport(report) -> None:
    if _cov is None:
        return
    if report.when == "call" or report.outcome != "passed":
        prev = _out["outcome"].get(report.nodeid)
        if prev in (None, "passed"):
            _out["outcome"][report.nodeid] = report.outcome
    if report.when == "teardown" and report.nodeid in _t0:
        _out["seconds"][report.nodeid] = round(time.perf_counter() - _t0.pop(report.nodeid), 3)


def pytest_unconfigure(config) -> None:
    if _cov is None:
        return
    _cov.stop()
    data = _cov.get_data()
    root = os.getcwd()
    for f in data.measured_files():
        rel = os.path.relpath(f, root)
        by_ctx: dict[str, set[int]] = {}
        for line, ctxs in data.contexts_by_lineno(f).items():
            for c in ctxs:
                if c:
                    by_ctx.setdefault(c, set()).add(line)
        for c, lines in by_ctx.items():
            _out["lines"].setdefault(c, {})[rel] = sorted(lines)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(f"{os.environ['HEALER_MUT_COVER']}.{worker}").write_text(json.dumps(_out))
