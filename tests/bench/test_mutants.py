"""bench/mutants.py: a mutant reaches every process of a test (the copy's own venv), the budgets, the fallback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import mutants  # noqa: E402
import mutate  # noqa: E402


def test_the_cheapest_runners_that_fit_the_budget_are_run_and_always_one():
    ranked = [(10.0, "a"), (20.0, "b"), (40.0, "c"), (500.0, "d")]
    assert mutants._within(ranked, 30) == ["a", "b"]
    assert mutants._within(ranked, 5) == ["a"]  # the cheapest, even over the budget
    assert mutants._within(ranked, 0) == ["a", "b", "c", "d"]  # 0: all
    assert mutants._within([], 30) == []


def test_a_line_no_test_file_runs_falls_back_to_the_files_that_import_its_module():
    m = mutate.Mutant("healer/quarantine.py", 10, "number", 10, 0, 1, "1", "2")
    cmap = {"sim": {"s1": {"status": "passed", "seconds": 3, "lines": {"healer/quarantine.py": [10]}},
                    "red": {"status": "failed", "seconds": 1, "lines": {"healer/quarantine.py": [10]}}},
            "unit": {"tests/supervisor/test_core_props.py": {"lines": {}, "seconds": 2, "red": []},
                     "tests/security/test_quarantine_manifest.py": {"lines": {}, "seconds": 9, "red": []},
                     "tests/fleet/test_budgets.py": {"lines": {"healer/quarantine.py": [9]}, "seconds": 1,
                                                     "red": []}}}
    sims, files, fallback, covering = mutants.runners(cmap, m)
    assert sims == ["s1"] and covering[0] == 1  # a scenario red unmutated never runs
    # no file ran line 10: the one that imports the module (`from healer import quarantine as q`) runs
    assert (files, fallback) == (["tests/security/test_quarantine_manifest.py"], True)
    cmap["unit"]["tests/fleet/test_budgets.py"]["lines"] = {"healer/quarantine.py": [10]}
    assert mutants.runners(cmap, m)[1:3] == (["tests/fleet/test_budgets.py"], False)


def test_a_statement_run_at_import_is_run_by_whatever_ran_its_module():
    """The default rules' table runs when healer/core/rules.py is imported, before a map records anything: every
    scenario that ran any line of the module runs it; a line inside a function still needs its own record."""
    table = next(i + 1 for i, ln in enumerate((ROOT / "healer/core/rules.py").read_text().splitlines())
                 if ln.startswith("DEFAULT_RULES"))
    assert table in mutants.import_time("healer/core/rules.py")
    m = mutate.Mutant("healer/core/rules.py", table + 4, "number", table, 0, 1, "3", "4")
    cmap = {"sim": {"s1": {"status": "passed", "seconds": 3, "lines": {"healer/core/rules.py": [20]}},
                    "s2": {"status": "passed", "seconds": 3, "lines": {"healer/core/plan.py": [20]}}},
            "unit": {}}
    assert mutants.runners(cmap, m)[0] == ["s1"]
    inside = mutate.Mutant("healer/core/rules.py", table + 4, "number", table + 1000, 0, 1, "3", "4")
    assert mutants.runners(cmap, inside)[0] == []


def test_a_child_with_an_empty_environment_imports_the_mutated_copy_not_the_worktree(tmp_path):
    copy = tmp_path / "repo"
    mutants._copy_tree(copy)
    (copy / "healer" / "mutant_probe.py").write_text("WHERE = 'the copy'\n")
    py = mutants._venv(copy)
    code = ("import subprocess, sys; print(subprocess.run([sys.executable, '-c', "
            "'import healer.mutant_probe as p, healer; print(p.WHERE, healer.__file__)'], env={}, "
            "capture_output=True, text=True).stdout)")
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd="/", check=True).stdout
    assert out.split()[:2] == ["the", "copy"] and out.split()[-1] == str(copy / "healer" / "__init__.py"), out
    cli = subprocess.run([str(py.parent / "healer"), "--version"], capture_output=True, text=True, env={}, cwd="/")
    assert cli.returncode == 0 and cli.stdout.startswith("healer "), cli
