"""Crash safety: the dispatcher SIGKILLed at its failpoints; a restarted one finishes the job exactly once."""

from __future__ import annotations

import pytest

from healer.store import open_store
from tests.conftest import git, healer, wait_until
from tests.fleet.conftest import NO_FILE, gate
from tests.fleet.test_cli import cli_fleet, stop_all


def agents_done(root):
    s = open_store(root)
    try:
        import psutil

        return all(not psutil.pid_exists(a.pid) or psutil.Process(a.pid).status() == psutil.STATUS_ZOMBIE
                   for a in s.agents(states=["running"]))
    finally:
        s.close()


@pytest.mark.long  # 39 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.parametrize("point", ["dispatch.before_merge", "dispatch.after_merge", "dispatch.merge_recorded"])
def test_killed_around_the_merge_then_restarted(tmp_path, point):
    root = cli_fleet(tmp_path, merge_gates=[gate("no-broken", NO_FILE.format("BROKEN"))])
    s = open_store(root)
    s.add_ticket("a", id="T-1", body="behaviour: success\n")
    s.close()
    base = git(root, "rev-parse", "main")
    try:
        assert healer("dispatch", "--once", "-C", str(root)).returncode == 0
        wait_until(lambda: agents_done(root), what="agent exit")
        r = healer("dispatch", "--once", "-C", str(root), env={"HEALER_FAILPOINTS": f"{point}=kill@1"})
        assert r.returncode == -9, r.stderr
        s = open_store(root)
        # dispatch.merge_recorded: the verdict and the move to done are one transaction, so neither is recorded (a
        # review ticket whose proposal was already merged looked like a zombie to the supervisor, which closed it)
        assert s.ticket("T-1").state == "review" and s.proposals("T-1")[-1].state == "open"
        s.close()
        moved = git(root, "rev-parse", "main") != base
        assert moved == (point != "dispatch.before_merge")
        r = healer("dispatch", "--once", "-C", str(root))
        assert r.returncode == 0, r.stderr
        s = open_store(root)
        t = s.ticket("T-1")
        assert t.state == "done" and [p.state for p in s.proposals("T-1")] == ["merged"]
        s.close()
        assert git(root, "merge-base", "--is-ancestor", t.data["merged_commit"], "main") == ""
        # merged exactly once: one merge commit on main's first-parent line, one ticket trailer
        assert git(root, "rev-list", "--count", "--first-parent", f"{base}..main") == "1"
        assert git(root, "log", "--format=%(trailers:key=Healer-Ticket,valueonly)", f"{base}..main").split() == ["T-1"]
        assert not list((root / ".healer" / "scratch").glob("*"))
    finally:
        stop_all(root)


@pytest.mark.long  # 17 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_killed_right_after_launch_then_restarted_adopts_the_agent(tmp_path):
    root = cli_fleet(tmp_path)
    s = open_store(root)
    s.add_ticket("a", id="T-1", body="behaviour: success\n")
    s.close()
    try:
        r = healer("dispatch", "--once", "-C", str(root), env={"HEALER_FAILPOINTS": "dispatch.after_launch=kill@1"})
        assert r.returncode == -9
        wait_until(lambda: agents_done(root), what="agent exit")
        r = healer("dispatch", "--once", "-C", str(root))
        assert r.returncode == 0, r.stderr
        s = open_store(root)
        assert s.ticket("T-1").state == "done"
        assert len(s.attempts("T-1")) == 1 and s.attempts("T-1")[0].exit_code == 0  # from result.json: not relaunched
        s.close()
    finally:
        stop_all(root)


def test_in_progress_without_agent_after_a_crash_mid_launch_is_requeued(fleet_factory):
    from tests.fleet.conftest import scripted_policy

    f = fleet_factory(scripted_policy())
    f.add("T-1", "success")
    f.add("T-2", "success")
    # crash after the move (T-1) and after the attempt (T-2), before any agent was registered
    f.store.move_ticket("T-1", "in_progress", actor="dispatch", reason="launch")
    f.store.move_ticket("T-2", "in_progress", actor="dispatch", reason="launch")
    f.store.add_attempt("T-2", "launch", run_id="T-2-01")
    f.add("T-3", "success")
    f.store.move_ticket("T-3", "in_progress", actor="human", reason="working on it")
    rep = f.d.tick()
    # T-1: no attempt had started, a plain launch; T-2: its run never started because its dispatcher died
    # (interrupted, issue 13): resumed at once, no backoff, no budget spent
    assert rep.launched == [("T-1", "launch"), ("T-2", "resume")]
    assert f.store.attempts("T-2")[0].failure_signature.startswith("interrupted")
    assert f.state("T-3") == "in_progress" and not f.running("T-3")  # not ours to judge
