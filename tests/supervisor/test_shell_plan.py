"""Acceptance 6: `healer plan` on a fleet seeded with every finding kind lists each one with its
evidence and planned action, and changes nothing (store and files byte-identical)."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from healer.conventions import ADOPTED_FINDINGS
from healer.policy.schema import FINDINGS
from healer.records import Agent, Worktree
from healer.store import open_store
from tests.conftest import git, healer, make_repo

PY = sys.executable
OLD = 6 * 3600
HOST = socket.gethostname()


def _tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[p.relative_to(root).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([PY, "-c", "import time; time.sleep(120)"])


def _dead_pid() -> int:
    p = subprocess.Popen([PY, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture
def procs_to_reap():
    ps: list[subprocess.Popen] = []
    yield ps
    for p in ps:
        p.kill()
        p.wait()


def _fleet(tmp_path: Path, name: str, policy_yaml: str = "") -> Path:
    root = make_repo(tmp_path / name)
    assert healer("init", "--root", str(root)).returncode == 0
    if policy_yaml:
        (root / "healer.yaml").write_text(policy_yaml)
    return root


def _wt(root: Path, s, tid: str) -> Path:
    wt = root / ".healer" / "worktrees" / tid
    wt.parent.mkdir(parents=True, exist_ok=True)
    git(root, "worktree", "add", "-q", "-b", f"healer/{tid}", str(wt), "main")
    s.add_worktree(Worktree(str(wt), tid, f"healer/{tid}", s.now()))
    return wt


def _seed_everything_but_red(root: Path, reap: list) -> None:
    s = open_store(root)
    now = s.now()
    # agent_dead: registered running, process gone, no exit recorded
    s.add_ticket("dead agent", id="T-dead")
    s.move_ticket("T-dead", "in_progress", actor="dispatch")
    wt = _wt(root, s, "T-dead")
    s.upsert_agent(Agent("A-dead", "T-dead", "running", pid=_dead_pid(), host=HOST, worktree=str(wt),
                         started_at=now - OLD, heartbeat_at=now - OLD, progress_at=now - OLD))
    # agent_idle (40 min without heartbeat) and agent_stuck (no progress for 3 h): live processes
    for tid, quiet in (("T-idle", 40 * 60), ("T-stuck", 3 * 3600)):
        p = _sleeper()
        reap.append(p)
        s.add_ticket(tid, id=tid)
        s.move_ticket(tid, "in_progress", actor="dispatch")
        w = _wt(root, s, tid)
        s.upsert_agent(Agent(f"A-{tid}", tid, "running", pid=p.pid, host=HOST, worktree=str(w),
                             started_at=now - quiet, heartbeat_at=now - quiet, progress_at=now - quiet))
    # frozen_in_progress: no agent, no worktree
    s.add_ticket("frozen", id="T-frozen")
    s.move_ticket("T-frozen", "in_progress", actor="dispatch")
    # stale_label
    s.add_ticket("waiting review", id="T-label", labels=["to-review"])
    # orphan_worktree: ticket closed, worktree left with an unknown file
    s.add_ticket("finished", id="T-orphan", state="closed")
    (_wt(root, s, "T-orphan") / "notes.txt").write_text("left behind\n")
    # unknown_file in the managed worktrees folder
    (root / ".healer" / "worktrees" / "stray.log").write_text("who wrote this?\n")
    # zombie_ticket: its work is already merged, yet it is queued again
    s.add_ticket("zombie", id="T-zombie", data={"merged_commit": "0123abc"})
    # wait_cycle: two tickets blocked by each other
    s.add_ticket("a", id="T-cyc-a", blocked_by=["T-cyc-b"])
    s.add_ticket("b", id="T-cyc-b", blocked_by=["T-cyc-a"])
    # same_commit_repush: the same commit pushed by two launches
    s.add_ticket("repush", id="T-repush")
    for _ in range(2):
        a = s.add_attempt("T-repush", "launch", run_id="r", head="deadbeef")
        s.finish_attempt(a.id, exit_code=1, state_hash="s1", head="deadbeef", failure_signature="E1")
    # stale_block: blocked, and nothing blocks it any more
    s.add_ticket("blocked for nothing", id="T-blocked")
    s.move_ticket("T-blocked", "blocked", actor="dispatch")
    # no_closes: a proposal opened long ago, nothing closed since
    s.add_proposal("T-label", "healer/T-label", "cafe")
    # dispatch_frozen: ready tickets, free slots, nothing launched for hours; supervisor_silent
    s.set_setting("dispatch.last_launch_at", now - OLD)
    s.set_setting("supervisor.last_tick_at", now - OLD)
    s.set_setting("main.status", "green")
    _age(s)
    s.close()


def _seed_red_and_saturated(root: Path, reap: list) -> None:
    s = open_store(root)
    now = s.now()
    p = _sleeper()
    reap.append(p)
    s.add_ticket("busy", id="T-busy")
    s.move_ticket("T-busy", "in_progress", actor="dispatch")
    s.upsert_agent(Agent("A-busy", "T-busy", "running", pid=p.pid, host=HOST, started_at=now - OLD,
                         heartbeat_at=now, progress_at=now))
    s.add_ticket("waiting", id="T-wait")
    s.set_setting("main.status", "red")
    s.set_setting("main.red_since", now - OLD)
    s.set_setting("dispatch.last_launch_at", now - OLD)
    s.set_setting("supervisor.last_tick_at", now + OLD)
    # a runaway loop: $60 of streamed turns in the last hour (sentinels.spend_rate: 50 within 1h)
    s.append("loop.iteration", "run-runaway", {"n": 1, "cost_usd": 35.0})
    s.append("loop.spend_counted", "run-runaway", {"n": 2, "usd": 25.0})
    _age(s)
    s.close()


def _age(s) -> None:
    with s.tx() as db:
        db.execute("UPDATE tickets SET created_at = created_at - ?, updated_at = updated_at - ?", (OLD, OLD))
        db.execute("UPDATE labels SET added_at = added_at - ?", (OLD,))
        db.execute("UPDATE worktrees SET created_at = created_at - ?", (OLD,))
        db.execute("UPDATE proposals SET created_at = created_at - ?", (OLD,))
        db.execute("UPDATE attempts SET at = at - ?, ended_at = ended_at - ?", (OLD, OLD))


def _plan(root: Path) -> dict:
    before = _tree_digest(root)
    r = healer("plan", "--json", "--root", str(root))
    assert r.returncode == 0, r.stderr[-3000:]
    assert _tree_digest(root) == before, "healer plan changed a file or the store"
    human = healer("plan", "--root", str(root))
    assert human.returncode == 0, human.stderr[-3000:]
    assert _tree_digest(root) == before
    return json.loads(r.stdout) | {"_human": human.stdout}


def test_plan_lists_every_finding_with_evidence_and_action_and_changes_nothing(tmp_path, procs_to_reap):
    a = _fleet(tmp_path, "a")
    _seed_everything_but_red(a, procs_to_reap)
    b = _fleet(tmp_path, "b", "fleet:\n  pool_size: 1\n")
    _seed_red_and_saturated(b, procs_to_reap)
    pa, pb = _plan(a), _plan(b)
    found = {f["kind"] for f in pa["findings"] + pb["findings"] if f["status"] == "firing"}
    # the adopted_* kinds need loops healer did not launch: tests/adopt/ runs real ones through the same supervisor
    expected = set(FINDINGS) - set(ADOPTED_FINDINGS)
    assert expected <= found, f"missing kinds: {sorted(expected - found)}"
    for f in pa["findings"] + pb["findings"]:
        assert f["evidence"], f"{f['key']} has no evidence"
    planned = {f["kind"]: [x["action"] for x in f["planned"]] for f in pa["findings"] + pb["findings"]}
    assert planned["frozen_in_progress"] == ["requeue_ticket"]
    assert planned["stale_label"] == ["drop_label"]
    assert planned["zombie_ticket"] == ["close_dead_ticket"]
    assert planned["orphan_worktree"] == ["quarantine_file", "remove_worktree"]
    assert planned["agent_stuck"][0] == "stop_agent"
    assert "pause_dispatch" in planned["main_red"]
    for f in pa["findings"]:
        assert f["kind"] in pa["_human"] and f["subject"] in pa["_human"]
    assert "evidence:" in pa["_human"] and "plan:" in pa["_human"]
