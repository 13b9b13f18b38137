"""The server's gate and actions in-process (no MCP transport): HALT, budget, dead tickets, screening, CLI errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from healer.policy import load_policy
from healer.repair.builtin import plan
from healer.repair.server import RepairTools
from healer.store import open_store
from tests.conftest import healer
from tests.repair.conftest import child_env, past_store, seed_frozen


def _tools(root: Path, run_id: str = "R-t", **kw) -> RepairTools:
    return RepairTools(root, open_store(root), load_policy(None), run_id=run_id, **kw)


def test_halt_refuses_every_action_but_reads_still_work(fleet: Path):
    store, _ = past_store(fleet)
    seed_frozen(store, 2)
    store.close()
    (fleet / ".healer" / "HALT").write_text("")
    t = _tools(fleet)
    try:
        status, err = t.call("fleet_status", {})
        assert not err and status["halted"] is True
        out, err = t.call("requeue_ticket", {"ticket_ids": ["F-1", "F-2"]})
        assert err and [r["status"] for r in out["results"]] == ["refused", "refused"]
        assert all("HALT" in r["reason"] for r in out["results"])
        assert t.store.ticket("F-1").state == "in_progress"
    finally:
        t.store.close()


def test_budget_is_per_run_and_survives_a_server_restart(fleet: Path):
    a = _tools(fleet, "R-b", max_calls=3)
    for _ in range(2):
        assert not a.call("fleet_status", {})[1]
    a.store.close()
    b = _tools(fleet, "R-b", max_calls=3)  # a new server process for the same run
    try:
        assert not b.call("journal_tail", {"limit": 5})[1]
        out, err = b.call("fleet_status", {})
        assert err and "budget spent" in out["reason"] and "call 4" in out["reason"]
        other = _tools(fleet, "R-other", max_calls=3)
        assert not other.call("fleet_status", {})[1]  # another run has its own budget
        other.store.close()
    finally:
        b.store.close()


def test_close_dead_ticket_only_closes_zombies(fleet: Path):
    store, _ = past_store(fleet)
    store.add_ticket("merged already", id="Z-1", state="queued", data={"merged_commit": "abc123"})
    store.add_ticket("live work", id="L-1", state="queued")
    store.close()
    t = _tools(fleet)
    try:
        out, err = t.call("close_dead_ticket", {"ticket_ids": ["Z-1", "L-1"]})
        assert not err
        st = {r["subject"]: r for r in out["results"]}
        assert st["Z-1"]["status"] == "done"
        assert st["L-1"]["status"] == "refused" and "not a dead ticket" in st["L-1"]["reason"]
        assert t.store.ticket("Z-1").state == "closed" and t.store.ticket("L-1").state == "queued"
    finally:
        t.store.close()


def test_screening_refuses_unexpected_arguments_and_bad_ids(fleet: Path):
    t = _tools(fleet)
    try:
        out, err = t.call("fleet_status", {"shell": "ls"})
        assert err and "unexpected argument" in out["reason"]
        out, err = t.call("drop_label", {"ticket_ids": ["T-1"], "label": "x`id`"})
        assert err and "expected a label" in out["reason"]
        (fleet / "healer.yaml").write_text("version: 1\n")
        (fleet / ".healer" / "STOP").write_text("")
        out, err = t.call("quarantine_file", {"paths": ["a|b", ".healer/healer.db", ".git/config", "healer.yaml", ".healer/STOP"]})
        reasons = [r["reason"] for r in out["results"]]
        assert "shell metacharacters" in reasons[0]
        assert all(r["status"] == "refused" for r in out["results"])
        assert "off limits" in reasons[3] and "off limits" in reasons[4]
        assert all((fleet / p).exists() for p in (".healer/healer.db", ".git/config", "healer.yaml", ".healer/STOP"))
        refused = t.store.events(kinds=["repair.refused"])
        assert len(refused) == 2 + 5
    finally:
        t.store.close()


def test_plan_batches_findings_into_few_calls():
    findings = [{"kind": "frozen_in_progress", "subject": f"F-{i}"} for i in range(250)]
    findings += [{"kind": "stale_label", "subject": "S-1", "evidence": {"labels": {"to-review": 1.0, "blocked-on": 2.0}}}]
    findings += [{"kind": "zombie_ticket", "subject": "Z-1"}, {"kind": "frozen_in_progress", "subject": "Z-1"},
                 {"kind": "agent_stuck", "subject": "A-1"},
                 {"kind": "orphan_worktree", "subject": "/w/x", "evidence": {"busy_pids": [12]}}]
    calls, left = plan(findings)
    assert [c[0] for c in calls] == ["close_dead_ticket", "requeue_ticket", "requeue_ticket", "drop_label", "drop_label"]
    assert calls[0][1] == {"ticket_ids": ["Z-1"]}
    assert len(calls[1][1]["ticket_ids"]) == 200 and len(calls[2][1]["ticket_ids"]) == 50
    assert left == ["agent_stuck:A-1", "orphan_worktree:/w/x (busy)"]


@pytest.mark.long  # 18 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_cli_errors_are_one_line(tmp_path: Path, fleet: Path):
    r = healer("mcp", "serve", "--root", str(tmp_path / "nowhere"), env=child_env())
    assert r.returncode == 64 and len(r.stderr.strip().splitlines()) == 1 and "not a healer fleet" in r.stderr
    r = healer("mcp", "serve", "--root", str(fleet), "--run-id", "x;rm", env=child_env())
    assert r.returncode == 64 and "--run-id" in r.stderr
    r = healer("repair", "run", "--root", str(fleet), "--agent", "gpt", env=child_env())
    assert r.returncode == 64 and "--agent" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.long  # 28 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_repair_run_cli_and_daily_cap(fleet: Path):
    store, _ = past_store(fleet)
    seed_frozen(store, 2)
    store.close()
    r = healer("repair", "run", "--root", str(fleet), "--json", env=child_env())
    assert r.returncode == 0, r.stderr
    import json

    res = json.loads(r.stdout)
    assert res["done"] == 2 and res["agent"] == "builtin"
    s = open_store(fleet)
    s.append("repair.started", "R-earlier", {"agent": "claude", "reason": "an earlier run today"})
    s.close()
    r = healer("repair", "run", "--root", str(fleet), env=child_env())
    assert r.returncode == 64 and "daily cap" in r.stderr
    r = healer("repair", "list", "--root", str(fleet), "--json", env=child_env())
    assert len(json.loads(r.stdout)) == 2
    (fleet / ".healer" / "HALT").write_text("")
    r = healer("repair", "run", "--root", str(fleet), env=child_env())  # HALT is checked first
    assert r.returncode == 4 and "HALT" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.long  # 38 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_repair_agent_that_cannot_start_does_not_spend_the_daily_cap(fleet: Path):
    import json
    import os

    env = {**child_env(), "PATH": os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                                  if not (Path(p) / "claude").exists())}
    for _ in range(3):  # the cap is 2 a day: three refusals spend none of it
        r = healer("repair", "run", "--root", str(fleet), "--agent", "claude", env=env)
        assert r.returncode == 64 and r.stderr == "healer: repair agent 'claude': cannot run 'claude': not found on PATH\n"
    r = healer("repair", "run", "--root", str(fleet), "--json", env=child_env())
    assert r.returncode == 0, r.stderr
    r = healer("repair", "run", "--root", str(fleet), "--json", env=child_env())
    assert r.returncode == 0, r.stderr  # the second of the day's two runs
    r = healer("repair", "list", "--root", str(fleet), "--json", env=child_env())
    assert [row["agent"] for row in json.loads(r.stdout)] == ["builtin", "builtin"]
    s = open_store(fleet)
    try:
        assert [e.payload["program"] for e in s.events(kinds=["repair.not_started"])] == ["claude"] * 3
    finally:
        s.close()
