"""`loop.sandbox: container` and the loop's deadline: a hung agent (ignores SIGTERM, double-forks)
is killed with its container at the iteration deadline; a runner SIGKILLed mid-iteration leaves a
container that the resumed run removes before anything else."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from healer import sandbox
from healer.loop import LoopRequest, run_loop
from healer.policy.schema import Policy
from tests.conftest import healer, make_repo, wait_until
from tests.docker.conftest import require_engine

pytestmark = pytest.mark.docker
require_engine()
PY = sys.executable
HANG = str(Path(__file__).resolve().parents[2] / "chaos" / "agents" / "loop_hang.py")


def _policy(timeout: str = "4s") -> dict:
    return {"version": 1, "loop": {
        "max_iterations": 1, "iteration_timeout": timeout, "kill_grace": "1s", "sandbox": "container",
        "agent": {"command": [PY, HANG, "hang.pids"]},
        "gates": [{"name": "never", "run": [PY, "-c", "raise SystemExit(1)"], "timeout": "30s"}]}}


def _containers(dclient, repo: Path) -> list:
    return dclient.containers.list(all=True, filters={"label": f"{sandbox.WORKDIR_LABEL}={repo.resolve()}"})


@pytest.mark.long  # 6 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_deadline_kills_the_hung_agent_and_its_container(dclient, tmp_path):
    repo = make_repo(tmp_path / "repo")
    lines: list[str] = []
    out = run_loop(LoopRequest(workdir=repo, policy=Policy.model_validate(_policy()), task="t", run_id="hang",
                               handle_signals=False, echo=lines.append))
    assert out.exit_code == 2 and out.iterations == 1, (out, lines)
    assert len((repo / "hang.pids").read_text().split()) >= 2  # it ran, forked, and wrote in its worktree
    state = json.loads((repo / ".healer" / "runs" / "hang" / "state.json").read_text())
    rec = state["history"][0]
    assert rec["timed_out"] is True and rec["duration"] < 25, rec
    assert _containers(dclient, repo) == []


@pytest.mark.long  # 8 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_resume_removes_the_container_of_a_sigkilled_runner(dclient, tmp_path):
    repo = make_repo(tmp_path / "repo")
    pol = tmp_path / "policy.yaml"
    pol.write_text(yaml.safe_dump(_policy("60s")))
    task = tmp_path / "task.md"
    task.write_text("t\n")
    args = ["loop", "run", "--workdir", str(repo), "--policy", str(pol), "--task", str(task), "--run-id", "crash"]
    runner = subprocess.Popen([PY, "-m", "healer", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        wait_until(lambda: (repo / "hang.pids").exists() and len((repo / "hang.pids").read_text().split()) >= 2,
                   timeout=60, what="the agent running in its container")
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait(10)
        [c] = _containers(dclient, repo)
        c.reload()
        assert c.status == "running"  # the crash left it behind
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait(10)
    pol.write_text(yaml.safe_dump(_policy("3s")))
    r = healer(*args[:-2], "--resume", "crash", timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert _containers(dclient, repo) == []
    from healer.store import open_store

    s = open_store(repo)
    try:
        left = [e for e in s.events(prefix="loop.") if e.kind == "loop.leftovers_killed"]
    finally:
        s.close()
    assert left and left[0].payload["containers"], left
