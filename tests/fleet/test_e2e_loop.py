"""End to end through the real governed loop (`healer loop run`), launched by the dispatcher."""

from __future__ import annotations

import json
import sys

from healer.policy.schema import Policy
from tests.conftest import git
from tests.fleet.conftest import make_fleet

AGENT = """
import pathlib, sys
mode = sys.argv[1]
wd = pathlib.Path(sys.argv[2])
if mode == "good":
    (wd / "feature.txt").write_text("done\\n")
else:
    (wd / "notes.txt").write_text("tried\\n")
"""
CHECK = "import pathlib, sys; sys.exit(0 if pathlib.Path('feature.txt').exists() else 1)"


def loop_policy(tmp_path, mode: str) -> Policy:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    gate = {"name": "feature", "run": [sys.executable, "-c", CHECK], "timeout": "30s"}
    return Policy.model_validate({
        "loop": {"max_iterations": 2, "iteration_timeout": "60s", "kill_grace": "2s", "protected_paths": [],
                 "agent": {"preset": "command", "command": [sys.executable, str(agent), mode, "{workdir}"]},
                 "gates": [gate]},
        "fleet": {"merge_gates": [gate]},
        "notify": {"notifiers": []},
    })


def test_real_loop_success_is_proposed_and_merged(tmp_path):
    f = make_fleet(tmp_path, loop_policy(tmp_path, "good"))
    try:
        f.store.add_ticket("add the feature", id="T-1", body="Create feature.txt")
        assert f.d.tick().launched == [("T-1", "launch")]
        assert f.d.wait_idle(90)
        rep = f.d.tick()
        assert rep.merged == ["T-1"], f.store.tail(20)
        assert f.store.ticket("T-1").state == "done"
        assert (f.root / "feature.txt").read_text() == "done\n"
        assert git(f.root, "log", "-1", "--format=%s", "main")
        (att,) = f.store.attempts("T-1")
        assert att.exit_code == 0 and att.head
        res = json.loads((f.root / ".healer" / "worktrees" / "T-1" / ".healer" / "runs" / att.run_id / "result.json").read_text())
        assert res["exit_code"] == 0 and res["run_id"] == att.run_id
    finally:
        f.d.stop_agents()
        f.store.close()


def test_real_loop_failure_is_recorded_with_its_signature(tmp_path):
    f = make_fleet(tmp_path, loop_policy(tmp_path, "bad"))
    try:
        f.store.add_ticket("add the feature", id="T-1", body="Create feature.txt")
        f.d.tick()
        assert f.d.wait_idle(90)
        f.d.tick()
        t = f.store.ticket("T-1")
        assert t.state == "queued"
        (att,) = f.store.attempts("T-1")
        assert att.exit_code in (2, 3), att
        assert att.failure_signature and att.gate_log_tail
        assert f.store.events(kinds=["dispatch.tick"])[-1].payload["waiting"] == 1
    finally:
        f.d.stop_agents()
        f.store.close()


def test_loop_command_default_is_the_real_loop():
    argv = Policy().fleet.loop_command
    assert argv[:5] == ["{python}", "-m", "healer", "loop", "run"]
    assert Policy().fleet.resume_args == ["--resume", "{run_id}"]
