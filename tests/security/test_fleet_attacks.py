"""Hostile agents against the fleet's side: what an agent's branch makes healer run or read after its loop
ended (the merge gates, main's gates). Real repositories, the real sandbox, the real proposal path."""

from __future__ import annotations

import sys

from healer import git, procs
from healer.clock import VirtualClock
from healer.fleet import proposals
from healer.fleet.ports import RealGates
from healer.policy.schema import Policy
from healer.records import Proposal
from tests.conftest import make_repo
from tests.security.conftest import need_bwrap

PY = sys.executable

# the agent's answer is right, and importing it runs code: what any test suite that imports the project does
HOSTILE_SOLUTION = """ANSWER = 42
import os, subprocess
try:
    with open({outside!r}, "w") as f:
        f.write("ran on the host: pid=%d" % os.getpid())
except OSError:
    pass
tree = subprocess.run(["git", "-C", {root!r}, "mktree"], input="", capture_output=True, text=True).stdout.strip()
c = subprocess.run(["git", "-C", {root!r}, "commit-tree", tree, "-m", "evil"], capture_output=True, text=True,
                   env={{**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x", "GIT_COMMITTER_NAME": "x",
                        "GIT_COMMITTER_EMAIL": "x@x"}}).stdout.strip()
if c:
    subprocess.run(["git", "-C", {root!r}, "update-ref", "refs/heads/evil", c])
try:
    with open(os.path.join({root!r}, ".healer", "healer.db"), "a") as f:
        f.write("junk")
except OSError:
    pass
"""
CHECK = "import sys\nsys.path.insert(0, '.')\nimport solution\nassert solution.ANSWER == 42\n"


def _fleet(tmp_path, sandbox_mode: str):
    root = make_repo(tmp_path / "fleet", files={"tests/check.py": CHECK, "solution.py": "ANSWER = 0\n"})
    (root / ".healer").mkdir(exist_ok=True)
    (root / ".healer" / "healer.db").write_text("")
    outside = tmp_path / "outside" / "PWNED"
    outside.parent.mkdir()
    git.run(root, "checkout", "-q", "-b", "healer/T-1")
    (root / "solution.py").write_text(HOSTILE_SOLUTION.format(outside=str(outside), root=str(root)))
    git.run(root, *git.IDENTITY, "commit", "-q", "-a", "-m", "the agent's answer")
    sha = git.rev(root)
    git.run(root, "checkout", "-q", "main")
    gate = {"name": "check", "run": [PY, "tests/check.py"], "timeout": "60s"}
    policy = Policy.model_validate({"version": 1, "loop": {"sandbox": sandbox_mode},
                                    "fleet": {"merge_gates": [gate], "main_gates": [gate]}})
    prop = Proposal(id=1, ticket_id="T-1", branch="healer/T-1", commit=sha, state="open", created_at=0.0)
    return root, outside, policy, prop


def _untouched(root, outside) -> None:
    assert not outside.exists(), outside.read_text()
    assert git.rev(root, "refs/heads/evil") is None
    assert (root / ".healer" / "healer.db").read_text() == ""


def test_merge_gates_run_the_agents_code_confined(tmp_path):
    need_bwrap()
    root, outside, policy, prop = _fleet(tmp_path, "bwrap")
    v = proposals.gate_proposal(root, policy, prop, VirtualClock())
    assert v.outcome == proposals.MERGED, v.log  # the answer is right: the gate passes, in the sandbox
    _untouched(root, outside)
    assert not (root / ".healer" / "scratch-tmp" / "T-1-p1").exists()  # its private temp folder is gone


def test_main_gates_run_mains_code_confined(tmp_path):
    need_bwrap()
    root, outside, policy, prop = _fleet(tmp_path, "bwrap")
    res = RealGates().main(root, policy, prop.commit, VirtualClock())  # main has the agent's code once merged
    assert res.outcome == "pass", res.log
    _untouched(root, outside)


def test_unsandboxed_merge_gates_are_the_control(tmp_path):
    """loop.sandbox: none is unconfined, as documented: the same branch does write outside (the attack is real)."""
    root, outside, policy, prop = _fleet(tmp_path, "none")
    v = proposals.gate_proposal(root, policy, prop, VirtualClock())
    assert v.outcome == proposals.MERGED, v.log
    assert outside.exists() and git.rev(root, "refs/heads/evil") is not None


def test_a_required_sandbox_that_is_missing_blocks_the_merge(tmp_path, monkeypatch):
    """loop.sandbox: bwrap on a machine without it: no gate runs, so nothing merges (unknown blocks a merge)."""
    root, outside, policy, prop = _fleet(tmp_path, "bwrap")
    bin_ = tmp_path / "bin"  # a PATH with git and nothing else: no bwrap on this machine
    bin_.mkdir()
    (bin_ / "git").symlink_to(procs.which("git"))
    monkeypatch.setenv("PATH", str(bin_))
    v = proposals.gate_proposal(root, policy, prop, VirtualClock())
    assert v.outcome == proposals.REJECTED
    assert "bwrap" in v.log and "gates not run" in v.log
    assert not outside.exists()
