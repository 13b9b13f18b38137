"""`healer dispatch` refuses to start a fleet whose loops would all exit 65 (docs/fleet.md: "the default has neither
[agent nor gates], and dispatch refuses with 65 until it does"), and starts one that has both."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from healer.errors import InvalidInput
from healer.fleet.dispatcher import preflight
from healer.policy.schema import Policy
from healer.store import open_store
from tests.conftest import REPO, make_repo

AGENT_AND_GATES = {"loop": {"agent": {"preset": "command", "command": [sys.executable, "-c", "pass"]},
                            "gates": [{"name": "tests", "run": [sys.executable, "-c", "pass"], "timeout": "10s"}]}}
NO_AGENT = "dispatch: loop.agent.command: expected the agent's argv (or preset: claude | codex), got nothing"
NO_GATES = "dispatch: loop.gates: expected at least one gate (the loop's stop criterion), got none"


def test_the_default_policy_is_refused_with_both_reasons_and_a_complete_one_passes():
    with pytest.raises(InvalidInput) as e:
        preflight(Policy())
    assert [ln.split(";")[0] for ln in e.value.lines] == [NO_AGENT, NO_GATES]
    assert preflight(Policy.model_validate(AGENT_AND_GATES)) is None
    no_gates = Policy.model_validate({"loop": {"agent": AGENT_AND_GATES["loop"]["agent"]}})
    with pytest.raises(InvalidInput) as e:
        preflight(no_gates)
    assert [ln.split(";")[0] for ln in e.value.lines] == [NO_GATES]
    # a custom loop command is its own business: nothing to refuse
    assert preflight(Policy.model_validate({"fleet": {"loop_command": [sys.executable, "my_loop.py", "{task_file}"]}})) is None


def _fleet(tmp_path, policy: dict | None, ticket: bool = True):
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir()
    if policy is not None:
        (root / "healer.yaml").write_text(yaml.safe_dump(policy))
    s = open_store(root)
    if ticket:
        s.add_ticket("the work", id="T-1")
    s.close()
    return root


def _dispatch_once(root):
    return subprocess.run([sys.executable, "-m", "healer", "dispatch", "--once", "-C", str(root)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_dispatch_without_agent_or_gates_exits_65_with_one_line_each_and_launches_nothing(tmp_path):
    root = _fleet(tmp_path, None)
    r = _dispatch_once(root)
    assert r.returncode == 65, r.stderr
    lines = r.stderr.strip().splitlines()
    assert [ln.split(";")[0] for ln in lines] == [NO_AGENT, NO_GATES] and "Traceback" not in r.stderr
    s = open_store(root)
    try:
        assert s.ticket("T-1").state == "queued" and s.agents() == []
    finally:
        s.close()


def test_dispatch_with_an_agent_and_gates_starts(tmp_path):
    root = _fleet(tmp_path, AGENT_AND_GATES, ticket=False)  # an empty board: the pass runs, launches nothing
    r = _dispatch_once(root)
    assert r.returncode == 0, r.stderr
    s = open_store(root)
    try:
        assert s.events(kinds=["dispatch.tick"])
    finally:
        s.close()
