"""Acceptance 6 and the CLI contract: `healer dispatch --once`, `healer status [--json]`, `healer watch`."""

from __future__ import annotations

import json
import sys

import psutil
import pytest
import yaml

from healer.store import open_store
from tests.conftest import healer, make_repo, wait_until
from tests.fleet.conftest import scripted_policy


def cli_fleet(tmp_path, **kw):
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir()
    pol = scripted_policy(**kw)
    (root / "healer.yaml").write_text(yaml.safe_dump(pol.model_dump(mode="json", by_alias=True), sort_keys=False))
    return root


def stop_all(root):
    s = open_store(root)
    for a in s.agents(states=["running"]):
        try:
            psutil.Process(a.pid).kill()
        except psutil.Error:
            pass
    s.close()


def test_dispatch_once_reports_cycle_in_one_line_and_serves_the_rest(tmp_path):
    root = cli_fleet(tmp_path)
    s = open_store(root)
    s.add_ticket("a", id="T-1", blocked_by=["T-2"])
    s.add_ticket("b", id="T-2", blocked_by=["T-1"])
    s.add_ticket("c", id="T-3", body="behaviour: hang\n")
    s.close()
    try:
        r = healer("dispatch", "--once", "-C", str(root), timeout=60)
        assert r.returncode == 65, r.stderr
        err = [x for x in r.stderr.splitlines() if x.strip()]
        assert len(err) == 1 and "T-1 -> T-2 -> T-1" in err[0] and "Traceback" not in r.stderr
        assert "launched T-3" in r.stdout
        s = open_store(root)
        assert s.ticket("T-3").state == "in_progress" and s.ticket("T-1").state == "queued"
        assert len(s.events(kinds=["dispatch.cycle"])) == 1
        s.close()

        st = healer("status", "--json", "-C", str(root))
        assert st.returncode == 0, st.stderr
        data = json.loads(st.stdout)
        assert data["tickets"]["in_progress"] == 1 and data["tickets"]["queued"] == 2
        assert data["pool"] == {"used": 1, "size": 4}
        assert [a["ticket"] for a in data["agents"]] == ["T-3"] and data["agents"][0]["alive"] is True
        assert {q["ticket"]: q["reason"] for q in data["queue"]} == {"T-1": "blocked_by_cycle", "T-2": "blocked_by_cycle"}
        assert data["main"]["status"] == "green" and data["dispatch"]["paused"] is False
        assert data["cycles"] == [["T-1", "T-2"]]

        table = healer("status", "-C", str(root))
        assert table.returncode == 0, table.stderr
        for word in ("Tickets", "Live agents", "Queue", "in_progress", "T-3", "blocked_by_cycle", "pool 1/4", "main"):
            assert word in table.stdout
        assert "dispatch: last pass" in table.stdout  # not "running": no dispatcher daemon is up here
    finally:
        stop_all(root)


def test_status_outside_a_fleet_is_a_usage_error(tmp_path):
    r = healer("status", "-C", str(tmp_path))
    assert r.returncode == 64 and "not a healer fleet" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_status_shows_backoff_eligibility(tmp_path):
    root = cli_fleet(tmp_path)
    s = open_store(root)
    s.add_ticket("a", id="T-1", body="behaviour: fail\n")
    s.close()
    assert healer("dispatch", "--once", "-C", str(root)).returncode == 0
    s = open_store(root)
    wait_until(lambda: not s.agents(states=["running"]) or
             not psutil.pid_exists(s.agents(states=["running"])[0].pid) or
             psutil.Process(s.agents(states=["running"])[0].pid).status() == psutil.STATUS_ZOMBIE, what="agent exit")
    s.close()
    r = healer("dispatch", "--once", "--json", "-C", str(root))
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["reaped"] and rep["waiting"][0]["reason"] == "backoff"
    data = json.loads(healer("status", "--json", "-C", str(root)).stdout)
    q = data["queue"][0]
    assert q["ticket"] == "T-1" and q["reason"] == "backoff" and q["eligible_at"] > data["now"] + 200


def test_watch_records_agent_and_returns_command_exit_code(tmp_path):
    root = cli_fleet(tmp_path)
    s = open_store(root)
    s.add_ticket("a", id="T-1")
    s.close()
    r = healer("watch", "--ticket", "T-1", "-C", str(root), "--", sys.executable, "-c", "import sys; print('hi'); sys.exit(3)")
    assert r.returncode == 3, r.stderr
    assert "hi" in r.stdout
    s = open_store(root)
    (a,) = s.agents()
    assert a.ticket_id == "T-1" and a.state == "exited" and a.exit_code == 3 and a.data["launched_by"] == "watch"
    assert [e.kind for e in s.events(subject=a.id)] == ["agent.registered", "watch.started", "agent.ended", "watch.ended"]
    s.close()


@pytest.mark.long  # 5 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_watch_deadline_kills_the_whole_tree(tmp_path):
    root = cli_fleet(tmp_path)
    code = ("import subprocess, sys, threading; "
            "p = subprocess.Popen([sys.executable, '-c', 'import os, threading; os.setsid(); "
            "open(\"child.pid\", \"w\").write(str(os.getpid())); threading.Event().wait(60)']); "
            "threading.Event().wait(60)")
    r = healer("watch", "--timeout", "3s", "-C", str(root), "--", sys.executable, "-c", code, timeout=60, cwd=root)
    assert r.returncode == 2, r.stderr
    pid = int((root / "child.pid").read_text())
    wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 60,
             "escaped child killed")
    s = open_store(root)
    (a,) = s.agents()
    assert a.state == "stopped" and s.events(kinds=["watch.ended"])[0].payload["reason"] == "deadline"
    s.close()


@pytest.mark.long  # 12 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_watch_bad_usage(tmp_path):
    root = cli_fleet(tmp_path)
    r = healer("watch", "-C", str(root))
    assert r.returncode == 64 and "give the command" in r.stderr
    r = healer("watch", "--ticket", "NOPE", "-C", str(root), "--", "true")
    assert r.returncode == 64 and "NOPE" in r.stderr
    r = healer("watch", "--timeout", "soon", "-C", str(root), "--", "true")
    assert r.returncode == 64 and "--timeout" in r.stderr
    r = healer("watch", "-C", str(root), "--", "/no/such/program")
    assert r.returncode == 64 and "cannot run" in r.stderr


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_dispatch_needs_a_git_root_with_the_main_branch(tmp_path):
    plain = tmp_path / "plain"
    (plain / ".healer").mkdir(parents=True)
    r = healer("dispatch", "--once", "-C", str(plain))
    assert r.returncode == 64 and "git repository" in r.stderr and "Traceback" not in r.stderr
    root = cli_fleet(tmp_path)
    (root / "healer.yaml").write_text((root / "healer.yaml").read_text().replace("main_branch: main", "main_branch: trunk"))
    r = healer("dispatch", "--once", "-C", str(root))
    assert r.returncode == 64 and "'trunk'" in r.stderr


def test_dispatch_refuses_a_policy_whose_loops_cannot_start(tmp_path):
    from tests.conftest import make_repo

    root = make_repo(tmp_path / "fleet")
    assert healer("init", cwd=root).returncode == 0
    assert healer("board", "add", "x", cwd=root).returncode == 0
    r = healer("dispatch", "--once", cwd=root)  # the embedded default names no agent and no gate
    assert r.returncode == 65 and "Traceback" not in r.stderr
    assert "loop.agent.command" in r.stderr and "loop.gates" in r.stderr
    assert healer("board", "list", "--json", cwd=root).stdout.count('"queued"') == 1  # nothing launched
