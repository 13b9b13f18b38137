"""The layers issue 42 asked for are import-linter contracts (pyproject.toml [tool.importlinter], run by `make lint`)
and hold in this checkout, function-local imports and chains (a -> b -> c counts as a -> c) included:

- chaos imports neither healer.cli (what a game day needs of the CLI's helpers lives in healer/console.py and
  healer/policy_in_force.py) nor healer.ctk (the Chaos Toolkit extension sits above chaos; the faults it shares
  with the game days are chaos/faults/roles.py, a journal's verdict chaos/ctk_journal.py);
- healer.fleet launches no repair agent (the supervisor's REAL_PORTS carry its launcher);
- healer.loop applies no remediation (the quarantine it shares with the supervisor is healer/quarantine.py);
- healer.sandbox imports nothing of the loop that runs in it.

The check reads the same graph import-linter does (grimp's) and needs no `make lint` to fail.
"""

from __future__ import annotations

import tomllib

import grimp
import pytest

from tests.spine.conftest import REPO

REQUIRED = [  # (source, forbidden): each must be a forbidden contract of pyproject.toml, and hold
    ("chaos", "healer.cli"),
    ("chaos", "healer.ctk"),
    ("healer.fleet", "healer.repair"),
    ("healer.loop", "healer.remedy"),
    ("healer.sandbox", "healer.loop"),
]


def declared() -> set[tuple[str, str]]:
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {(s, f) for c in cfg["contracts"] if c["type"] == "forbidden" and not c.get("ignore_imports")
            for s in c["source_modules"] for f in c["forbidden_modules"]}


def chains(graph, source: str, forbidden: str) -> list[str]:
    """Each import chain from `source` (or a module under it) to `forbidden` (or under it), as `a -> b -> c`."""
    found = graph.find_shortest_chains(importer=source, imported=forbidden, as_packages=True)
    return [" -> ".join(c) for c in sorted(found)]


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("healer", "chaos", cache_dir=None)  # no cache folder left behind


def test_every_layer_of_issue_42_is_a_contract_make_lint_runs():
    missing = [f"{s} -> {f}" for s, f in REQUIRED if (s, f) not in declared()]
    assert not missing, f"not a forbidden contract (without ignores) in pyproject.toml: {missing}"


@pytest.mark.parametrize(("source", "forbidden"), REQUIRED, ids=[f"{s}-not-{f}" for s, f in REQUIRED])
def test_the_layer_holds(graph, source, forbidden):
    found = chains(graph, source, forbidden)
    assert not found, f"{source} must not import {forbidden}:\n" + "\n".join(found)


def test_a_chain_through_a_function_local_import_is_found(tmp_path, monkeypatch):
    pkg = tmp_path / "toy42"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    from toy42 import mid  # lazy\n")
    (pkg / "mid.py").write_text("import toy42.high\n")
    (pkg / "high.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    g = grimp.build_graph("toy42", cache_dir=None)
    assert chains(g, "toy42.low", "toy42.high") == ["toy42.low.a -> toy42.mid -> toy42.high"]
    assert chains(g, "toy42.high", "toy42.low") == []
