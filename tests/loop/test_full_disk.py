"""An agent that fills the disk: `healer loop run` says so in one line (exit 74), keeps the run as last
saved, and `--resume` finishes it once there is room. Nothing of the agent's is deleted."""

from __future__ import annotations

import json
import sys

from healer.core import dispatch as core
from healer.core import endings
from healer.core import fleet as rules
from healer.records import Attempt
from tests.conftest import fill_disk, git, healer, make_repo

# fills the disk on its first run (its flag file says so), then does the work
AGENT = """
import os
if not os.path.exists("filled.flag"):
    open("filled.flag", "w").close()
    fd = os.open("big.bin", os.O_WRONLY | os.O_CREAT, 0o644)
    for size in (1 << 20, 4096, 1):
        while True:
            try:
                os.write(fd, b"\\0" * size)
            except OSError:
                break
    os.close(fd)
else:
    with open("work.txt", "a") as f:
        f.write("step\\n")
"""
GATE = "import os, sys; sys.exit(0 if os.path.exists('work.txt') else 1)"


def _repo(disk):
    (disk / "agent.py").write_text(AGENT)
    policy = {"loop": {"agent": {"preset": "command", "command": [sys.executable, str(disk / "agent.py")]},
                       "gates": [{"name": "work", "run": [sys.executable, "-c", GATE]}], "max_iterations": 3}}
    return make_repo(disk / "w", {"task.md": "do the work\n", ".gitignore": ".healer/\n",
                                  "healer.yaml": json.dumps(policy)})


def test_an_agent_that_fills_the_disk_cuts_the_run_short_and_resume_finishes_it(tiny_disk):
    w = _repo(tiny_disk)
    r = healer("loop", "run", "--task", "task.md", cwd=w)
    assert r.returncode == 74, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    (run_id,) = [p.name for p in (w / ".healer" / "runs").iterdir()]
    assert "the host took no more writes" in lines[0] and f"healer loop run --resume {run_id}" in lines[0], lines[0]
    assert not [p for p in (w / ".healer" / "runs" / run_id).iterdir() if p.name.endswith(".tmp")]  # no half copy
    assert (w / "big.bin").exists()  # the agent's file is the user's to remove, never healer's
    st = healer("loop", "status", run_id, "--json", cwd=w)
    assert json.loads(st.stdout)["status"] == "interrupted", st.stdout

    (w / "big.bin").unlink()  # the operator frees space
    r = healer("loop", "run", "--resume", run_id, cwd=w)
    assert r.returncode == 0, r.stdout + r.stderr
    assert git(w, "log", "-1", "--format=%s").startswith("loop: goal reached")
    assert (w / "work.txt").read_text() == "step\n"


def test_a_run_that_cannot_start_on_a_full_disk_says_so_in_one_line(tiny_disk):
    w = _repo(tiny_disk)
    (w / "filled.flag").write_text("")
    fill_disk(tiny_disk / "ballast")
    r = healer("loop", "run", "--task", "task.md", cwd=w)
    assert r.returncode == 74, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "internal error" not in r.stderr, r.stderr
    assert str(w) in r.stderr, r.stderr  # where


def _att(code, sig=None):
    return Attempt(id=1, ticket_id="T-1", at=0.0, kind="launch", run_id="r", ended_at=1.0, exit_code=code,
                   failure_signature=sig)


def test_a_loop_cut_short_by_its_host_is_resumed_and_not_counted():
    """The disk is the infrastructure's (healer/core/endings.py): resumed, counted by no budget, retried on backoff."""
    a = _att(core.HOST_TROUBLE, endings.classify(core.HOST_TROUBLE, text=rules.signature(core.HOST_TROUBLE)).signature())
    assert core.died(a) and not core.interrupted(a) and core.infra(a) and core.counted([a]) == []
    assert core.resumable([a], now=10.0, ttl=3600.0) == "r"
    assert not core.died(_att(1, "exit 1"))


def test_a_fleet_run_cut_short_before_its_first_save_starts_when_resumed(tmp_path):
    """A full disk at a run's very start (exit 74 before state.json) is an infrastructure ending the dispatcher
    resumes; with nothing saved, `--resume` starts that run instead of failing with 'no run' (an exit 64 the
    budget would count against the agent)."""
    root = make_repo(tmp_path / "root")
    (root / ".healer").mkdir(exist_ok=True)
    wt = root / ".healer" / "worktrees" / "T-1"
    git(root, "worktree", "add", "-q", "-b", "healer/T-1", str(wt), "main")
    (wt / "agent.py").write_text("open('work.txt', 'a').write('step\\n')\n")
    git(wt, "add", "agent.py")
    git(wt, "commit", "-q", "-m", "the agent")
    task = tmp_path / "task.md"
    task.write_text("do the work\n")
    policy = {"loop": {"agent": {"preset": "command", "command": [sys.executable, str(wt / "agent.py")]},
                       "gates": [{"name": "work", "run": [sys.executable, "-c", GATE]}], "max_iterations": 2}}
    (tmp_path / "p.yaml").write_text(json.dumps(policy))
    r = healer("loop", "run", "--policy", str(tmp_path / "p.yaml"), "--task", str(task), "--workdir", str(wt),
               "--root", str(root), "--run-id", "T-1-01", "--resume", "T-1-01", cwd=wt)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((wt / ".healer" / "runs" / "T-1-01" / "result.json").read_text())["exit_code"] == 0
