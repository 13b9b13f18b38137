"""Gates whose verdict comes from what ran (issue 39): hostile agents that leave `calc.add` wrong and make the gate
say pass without touching the protected `tests/` (the gate's config, what pytest imports, how the process exits),
in the real loop under bwrap and unsandboxed; the fleet's merge gate on the same cheat; and legitimate changes that
must still pass. healer/loop/gatecheck.py has the rules, healer/gating.py the shell."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from chaos.agents.hostile import CHEATS
from healer import git as hgit
from healer.clock import VirtualClock
from healer.fleet import proposals
from healer.policy.schema import Policy
from healer.records import Proposal
from tests.conftest import git, make_repo
from tests.security.conftest import HOSTILE, events, need_bwrap, run

PY = sys.executable
WRONG = "def add(a, b):\n    return a - b\n"
TEST_CALC = ("from calc import add\n\n\ndef test_add(three):\n    assert add(1, 2) == three\n\n\n"
             "def test_zero():\n    assert add(0, 0) == 0\n")
FIXTURE = "import pytest\n\n\n@pytest.fixture\ndef three():\n    return 3\n"
PYTEST = ["env", "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1", PY, "-m", "pytest", "-q", "tests"]
# the gate each cheat aims at: pytest itself, or a gate that names a script, a Makefile, a program on PATH
GATE_OF = {"script": ["sh", "run_tests.sh"], "makefile": ["make", "-s", "test"], "pathbin": ["sh", "-c", "check"]}
# the cheats refused before the gate runs (a gate file differs from the base's) and those the run itself exposes
REFUSED = ("conftest", "conftest_exit", "subconftest", "ignored_conftest", "ini", "pyproject", "setup_cfg", "tox",
           "script", "makefile")
EXPOSED = ("shadow", "sitecustomize", "exit", "sysexit", "skip", "skip_call", "envrc", "pathbin")


@pytest.fixture(params=("bwrap", "none"))
def mode(request) -> str:
    if request.param == "bwrap":
        need_bwrap()
    return request.param


def calc_repo(path: Path) -> Path:
    """The user's project: calc.add subtracts; the protected tests (with a fixture of their own) say it must add."""
    repo = make_repo(path, {"calc.py": WRONG, "tests/test_calc.py": TEST_CALC, "tests/conftest.py": FIXTURE,
                            "pyproject.toml": "[project]\nname = 'calc'\n\n[tool.pytest.ini_options]\n"
                                              "testpaths = ['tests']\n",
                            "run_tests.sh": f"exec env PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {PY} -m pytest -q tests\n",
                            "Makefile": f"test:\n\tPYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {PY} -m pytest -q tests\n"})
    (repo / ".gitignore").write_text(".healer/\n__pycache__/\n.pytest_cache/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "ignore caches")
    return repo


def loop_policy(mode: str, *agent_args: str, gate: list[str] | None = None, **loop) -> Policy:
    base = {"max_iterations": 1, "iteration_timeout": "60s", "kill_grace": "1s", "sandbox": mode,
            "agent": {"command": [PY, HOSTILE, *agent_args]},
            "gates": [{"name": "tests", "run": gate or PYTEST, "timeout": "60s"}]}
    base.update(loop)
    return Policy.model_validate({"version": 1, "loop": base})


def gate_log(repo: Path) -> str:
    return "\n".join(p.read_text() for p in sorted((repo / ".healer").rglob("gates.log")))


def assert_not_reached(repo: Path, out) -> None:
    """The promise: no exit 0 (nor 70) while add subtracts, no loop commit, calc.py and the tests as the base has them."""
    assert out.exit_code not in (0, 70), out
    assert not any(s.startswith("loop:") for s in git(repo, "log", "--format=%s").splitlines())
    assert git(repo, "show", "HEAD:calc.py") + "\n" == WRONG
    assert git(repo, "show", "HEAD:tests/test_calc.py") + "\n" == TEST_CALC
    ends = [e.payload for e in events(repo, "loop.iteration")]
    assert ends and all(g["outcome"] != "pass" for g in ends[-1]["gates"]), ends


def _path_with_check(tmp_path: Path, repo: Path, monkeypatch) -> None:
    """PATH: a folder inside the tree first (where the agent plants `check`), then the operator's real `check`."""
    real = tmp_path / "opbin"
    real.mkdir()
    (real / "check").write_text(f"#!/bin/sh\ncd \"$PWD\" && exec env PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {PY} -m pytest -q tests\n")
    (real / "check").chmod(0o755)
    monkeypatch.setenv("PATH", f"{repo}/bin:{real}:{os.environ['PATH']}")


@pytest.mark.parametrize("kind", REFUSED)
def test_a_gate_file_the_agent_changed_fails_the_gate_unrun(tmp_path, mode, kind):
    repo = calc_repo(tmp_path / "repo")
    out, _ = run(repo, loop_policy(mode, "cheat", kind, gate=GATE_OF.get(kind)))
    assert_not_reached(repo, out)
    log = gate_log(repo)
    if kind in ("script", "makefile"):
        # a file the policy runs as a command is the fleet's configuration (healer/guarded.py): put back after the
        # agent's step, so the gate runs the base's and fails on the code
        rev = [p for e in events(repo, "loop.protected_reverted") for p in e.payload["paths"]]
        assert set(CHEATS[kind]) <= set(rev), rev
        return
    assert "not run: its configuration is the base's" in log, log
    assert "refused" in json.dumps([e.payload for e in events(repo, "loop.iteration")])


@pytest.mark.parametrize("kind", EXPOSED)
def test_a_cheat_the_run_itself_exposes_never_passes(tmp_path, mode, kind, monkeypatch):
    repo = calc_repo(tmp_path / "repo")
    if kind == "pathbin":
        _path_with_check(tmp_path, repo, monkeypatch)
    if kind == "envrc":
        monkeypatch.setenv("PYTEST_ADDOPTS", "--collect-only")  # and had the operator's shell loaded it: dropped
    out, _ = run(repo, loop_policy(mode, "cheat", kind, gate=GATE_OF.get(kind)))
    assert_not_reached(repo, out)
    log = gate_log(repo)
    if kind == "exit":  # exit 0 without a report: the report decides
        assert "fail (report)" in json.dumps([e.payload for e in events(repo, "loop.iteration")]), log
        assert "no test report" in log, log
    if kind == "skip_call":  # one passed, the other skipped by the code under test: exit 0, the report says no
        assert "fail (report)" in json.dumps([e.payload for e in events(repo, "loop.iteration")]), log
        assert "tests/test_calc.py::test_add (a protected test) was skipped" in log, log
    if kind == "skip":  # every test skipped (pytest exits 5 here; 0 where a test passed elsewhere)
        assert "a protected test) was skipped" in log or "no test passed" in log, log


def test_usercustomize_in_home_never_runs_in_the_gate(tmp_path, mode, monkeypatch):
    """An unsandboxed agent can write the user site (~/.local/lib/pythonX.Y/site-packages/usercustomize.py); the
    gates run with PYTHONNOUSERSITE=1, so a usercustomize that ends every interpreter with 0 is never imported."""
    home = tmp_path / "home"
    site = home / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    site.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    (site / "usercustomize.py").write_text("import os\nos._exit(0)\n")  # as the agent would have (none)
    repo = calc_repo(tmp_path / "repo")
    out, _ = run(repo, loop_policy(mode, "cheat", "envrc"))
    assert_not_reached(repo, out)
    assert "1 failed" in gate_log(repo)


def test_the_fixed_code_with_a_new_dependency_and_a_new_test_still_passes(tmp_path, mode):
    """Legitimate: the fix, a dependency added to pyproject.toml's [project] (its pytest section untouched), a new
    test file (protected: only tests/test_calc.py and the base's tests/conftest.py, whose fixture the test uses)."""
    repo = calc_repo(tmp_path / "repo")
    out, _ = run(repo, loop_policy(mode, "legit", protected_paths=["tests/test_calc.py", "tests/conftest.py"]))
    assert out.exit_code == 0, (out, gate_log(repo))
    files = set(git(repo, "show", "--name-only", "--format=", "HEAD").split())
    assert {"calc.py", "pyproject.toml", "tests/test_more.py"} <= files
    log = gate_log(repo)
    assert "judged by its report" in log and "3 passed" in log, log


def test_an_agent_that_takes_its_cheat_back_converges_with_the_bases_own_root_conftest(tmp_path, mode):
    """The base has a root conftest.py of its own (bound read-only while the gates run, its copy kept in healer's
    folder); iteration 1 replaces it with the pass-all cheat (refused unrun), iteration 2 puts the base's back and
    fixes the code: exit 0 at iteration 2, and neither healer's copies nor the quarantine count as the tree's conftest files."""
    repo = calc_repo(tmp_path / "repo")
    (repo / "conftest.py").write_text("ROOT = True\n")
    git(repo, "add", "conftest.py")
    git(repo, "commit", "-q", "-m", "a root conftest of the project's")
    agent = {"command": [PY, HOSTILE, "cheat_then_fix", "{iteration}"]}
    out, _ = run(repo, loop_policy(mode, agent=agent, max_iterations=3,
                                   protected_paths=["tests/test_calc.py", "tests/conftest.py"]))
    log = gate_log(repo)
    assert out.exit_code == 0 and out.iterations == 2, (out, log)
    first = events(repo, "loop.iteration")[0].payload
    assert first["gates"][0]["outcome"] == "refused"
    assert git(repo, "show", "HEAD:conftest.py") == "ROOT = True"


def test_code_that_rewrites_pytest_in_its_own_process_is_the_known_limit(tmp_path):
    """The residual limit (docs/security.md): code under test runs inside pytest's process, so code written to
    patch pytest's report objects on import forges a report like the exit code. Shown, so the docs stay true."""
    need_bwrap()
    repo = calc_repo(tmp_path / "repo")
    out, _ = run(repo, loop_policy("bwrap", "cheat", "in_memory"))
    assert out.exit_code == 0, out  # the limit: still forged


# -- the fleet: the conftest cheat on a branch never reaches main through a pytest merge gate -----------------

def _fleet(tmp_path: Path, mode: str, files: dict[str, str]):
    root = calc_repo(tmp_path / "fleet")
    hgit.run(root, "checkout", "-q", "-b", "healer/T-1")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    hgit.run(root, "add", "-A")
    hgit.run(root, *hgit.IDENTITY, "commit", "-q", "-m", "the agent's answer\n\nHealer-Run: r1")
    sha = hgit.rev(root)
    hgit.run(root, "checkout", "-q", "main")
    gate = {"name": "tests", "run": PYTEST, "timeout": "60s"}
    policy = Policy.model_validate({"version": 1, "loop": {"sandbox": mode},
                                    "fleet": {"merge_gates": [gate], "main_gates": [gate]}})
    return root, policy, Proposal(id=1, ticket_id="T-1", branch="healer/T-1", commit=sha, state="open", created_at=0.0)


def test_the_conftest_cheat_never_reaches_main_through_a_pytest_merge_gate(tmp_path, mode):
    """Issue 39's fleet case: a proposal that leaves add wrong and adds a root conftest.py marking every test passed
    (a commit with healer's trailer, as an unsandboxed agent could forge): the merge gate refuses it, main stays."""
    cheat = CHEATS["conftest"]["conftest.py"]
    root, policy, prop = _fleet(tmp_path, mode, {"conftest.py": cheat})
    main_before = hgit.rev(root, "refs/heads/main")
    v = proposals.gate_proposal(root, policy, prop, VirtualClock())
    assert v.outcome == proposals.REJECTED, v.log
    assert "conftest.py: not in the base" in v.log, v.log
    assert hgit.rev(root, "refs/heads/main") == main_before


def test_a_right_answer_with_a_new_dependency_merges(tmp_path, mode):
    root, policy, prop = _fleet(tmp_path, mode, {
        "calc.py": "def add(a, b):\n    return a + b\n",
        "pyproject.toml": "[project]\nname = 'calc'\ndependencies = ['attrs']\n\n[tool.pytest.ini_options]\n"
                          "testpaths = ['tests']\n"})
    v = proposals.gate_proposal(root, policy, prop, VirtualClock())
    assert v.outcome == proposals.MERGED, v.log
    assert "2 passed" in v.log, v.log
