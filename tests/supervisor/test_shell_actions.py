"""The remediation executor against a real store, real git worktrees and real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from healer import quarantine as q
from healer.core.model import PlannedAction
from healer.records import Agent, Worktree
from healer.remedy.actions import execute, recover
from tests.conftest import git

PY = sys.executable


def _states(store):
    return [(i.action, i.state) for i in store.intents()]


def _in_progress(f, tid="T-1"):
    f.store.add_ticket("work", id=tid)
    f.store.move_ticket(tid, "in_progress", actor="dispatcher")


def _dead_pid() -> int:
    p = subprocess.Popen([PY, "-c", "pass"])
    p.wait()
    return p.pid


def test_requeue_frozen_ticket_journals_and_verifies(shell_fleet):
    f = shell_fleet
    _in_progress(f)
    out = execute(f.ctx(), PlannedAction("requeue_ticket", "T-1", reason="frozen_in_progress:T-1"))
    assert out.status == "done", out
    assert f.store.ticket("T-1").state == "queued"
    assert _states(f.store) == [("requeue_ticket", "done")]
    kinds = [e.kind for e in f.store.events(prefix="intent.")]
    assert kinds == ["intent.planned", "intent.begun", "intent.done"]
    assert f.store.count_events("remedy.done") == 1


def test_unknown_and_disallowed_actions_are_refused(shell_fleet):
    f = shell_fleet
    _in_progress(f)
    out = execute(f.ctx(), PlannedAction("rm_rf", "T-1"))
    assert out.status == "refused" and "whitelist" in out.reason
    pol = f.policy.model_copy(update={"remediation": f.policy.remediation.model_copy(update={"allowed": ["notify"]})})
    out = execute(f.ctx(policy=pol), PlannedAction("requeue_ticket", "T-1"))
    assert out.status == "refused" and "allowed" in out.reason
    assert f.store.intents() == []
    assert f.store.ticket("T-1").state == "in_progress"
    assert f.store.count_events("remedy.refused") == 2


def test_halt_file_makes_everything_observe_only(shell_fleet):
    f = shell_fleet
    _in_progress(f)
    (f.root / ".healer" / "HALT").write_text("")
    out = execute(f.ctx(), PlannedAction("requeue_ticket", "T-1"))
    assert out.status == "refused" and "HALT" in out.reason
    assert f.store.ticket("T-1").state == "in_progress"


def test_requeue_aborts_on_fresh_state_when_an_agent_is_alive(shell_fleet):
    f = shell_fleet
    _in_progress(f)
    p = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
    try:
        f.store.upsert_agent(Agent("A-1", "T-1", "running", pid=p.pid, started_at=f.clock.now()))
        out = execute(f.ctx(), PlannedAction("requeue_ticket", "T-1"))
        assert out.status == "aborted" and "live agent" in out.reason
        assert _states(f.store) == [("requeue_ticket", "aborted")]
        assert f.store.ticket("T-1").state == "in_progress"
    finally:
        p.kill()
        p.wait()


def test_quiet_period_is_shared_with_humans_and_other_actors(shell_fleet):
    f = shell_fleet
    _in_progress(f, "T-1")
    _in_progress(f, "T-2")
    f.store.label("T-1", "to-review", actor="human")  # a human touched T-1: that is an attempt
    out = execute(f.ctx(), PlannedAction("requeue_ticket", "T-1"))
    assert out.status == "refused" and "quiet period" in out.reason
    # the repair agent acts on T-2; the supervisor may not try again inside the window
    assert execute(f.ctx(actor="repair-agent"), PlannedAction("requeue_ticket", "T-2")).status == "done"
    f.store.move_ticket("T-2", "in_progress", actor="dispatcher")
    out = execute(f.ctx(), PlannedAction("requeue_ticket", "T-2"))
    assert out.status == "refused" and "repair-agent" in out.reason
    f.clock.advance(f.policy.remediation.quiet_period + 1)
    assert execute(f.ctx(), PlannedAction("requeue_ticket", "T-2")).status == "done"


def test_one_batch_is_one_attempt(shell_fleet):
    f = shell_fleet
    _in_progress(f)
    f.store.label("T-1", "to-review", actor="dispatcher")
    ctx = f.ctx(batch="tick-1")
    assert execute(ctx, PlannedAction("drop_label", "T-1", {"label": "to-review"})).status == "done"
    assert execute(ctx, PlannedAction("requeue_ticket", "T-1")).status == "done"


def test_rate_limit_counts_begun_intents(shell_fleet):
    f = shell_fleet
    pol = Policy_with_rate(f.policy, "drop_label", 2)
    for i in range(3):
        f.store.add_ticket("x", id=f"T-{i}", labels=["stale"])
    outs = [execute(f.ctx(policy=pol), PlannedAction("drop_label", f"T-{i}", {"label": "stale"})) for i in range(3)]
    assert [o.status for o in outs] == ["done", "done", "refused"]
    assert "rate limit" in outs[2].reason


def Policy_with_rate(policy, action, count):
    from healer.policy.schema import RateLimit

    rates = dict(policy.remediation.rate_limits)
    rates[action] = RateLimit(count=count, per="1h")
    return policy.model_copy(update={"remediation": policy.remediation.model_copy(update={"rate_limits": rates})})


def test_drop_label_only_if_still_there(shell_fleet):
    f = shell_fleet
    f.store.add_ticket("x", id="T-1", labels=["to-review"])
    added = f.store.ticket("T-1").labels["to-review"]
    f.store.unlabel("T-1", "to-review", actor="dispatcher")
    out = execute(f.ctx(), PlannedAction("drop_label", "T-1", {"label": "to-review", "added_at": added}))
    assert out.status == "aborted" and "no longer" in out.reason


@pytest.mark.parametrize("bad", ["../outside.txt", "/etc/passwd", "link/passwd", "escape", ".healer/healer.db", ".git/config"])
def test_paths_are_confined_to_the_fleet_root(shell_fleet, bad, tmp_path):
    f = shell_fleet
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd").write_text("secret")
    (tmp_path / "outside.txt").write_text("x")
    os.symlink(outside, f.root / "link")
    os.symlink(outside / "passwd", f.root / "escape")
    out = execute(f.ctx(), PlannedAction("quarantine_file", bad))
    assert out.status == "refused", out
    out = execute(f.ctx(), PlannedAction("remove_worktree", bad))
    assert out.status == "refused", out
    assert (outside / "passwd").read_text() == "secret"
    assert (tmp_path / "outside.txt").exists()


def test_quarantine_file_and_restore_byte_for_byte(shell_fleet):
    f = shell_fleet
    blob = os.urandom(70_000)
    junk = f.root / ".healer" / "worktrees" / "junk"
    junk.mkdir(parents=True)
    (junk / "data.bin").write_bytes(blob)
    sha = q.sha256_of(junk / "data.bin")
    out = execute(f.ctx(), PlannedAction("quarantine_file", ".healer/worktrees/junk/data.bin"))
    assert out.status == "done", out
    assert not (junk / "data.bin").exists()
    [e] = q.entries(f.root)
    assert e.path == ".healer/worktrees/junk/data.bin" and e.sha256 == sha and e.size == len(blob)
    assert (f.root / ".healer" / "quarantine" / e.batch / ".healer" / "worktrees" / "junk" / "data.bin").exists()
    [ev] = f.store.events(kinds=["quarantine.added"])
    assert ev.subject == e.path and ev.payload["sha256"] == sha
    q.restore(f.root, ".healer/worktrees/junk/data.bin", f.clock)
    assert q.sha256_of(junk / "data.bin") == sha
    assert (junk / "data.bin").read_bytes() == blob


def test_tracked_files_and_the_main_checkout_are_never_touched(shell_fleet):
    f = shell_fleet
    (f.root / "notes.txt").write_text("the user's own untracked file")
    for target in ("README.md", "notes.txt"):
        out = execute(f.ctx(), PlannedAction("quarantine_file", target))
        assert out.status == "refused" and "managed area" in out.reason
    (f.root / "src").mkdir()
    (f.root / "src" / "app.py").write_text("print()")
    git(f.root, "add", "src/app.py")
    out = execute(f.ctx(), PlannedAction("remove_worktree", "src"))
    assert out.status == "refused" and "registered worktree" in out.reason
    wt = _worktree(f)
    out = execute(f.ctx(), PlannedAction("quarantine_file", str(wt), {"root": str(wt), "files": ["README.md"]}))
    assert out.status == "aborted" and "tracked" in out.reason
    assert (wt / "README.md").exists() and (f.root / "notes.txt").exists() and (f.root / "src" / "app.py").exists()


def _worktree(f, name="wt-1", ticket="T-1") -> Path:
    path = f.root / ".healer" / "worktrees" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    git(f.root, "worktree", "add", "-q", "-b", f"healer/{name}", str(path), "main")
    f.store.add_worktree(Worktree(str(path), ticket, f"healer/{name}", f.clock.now()))
    return path


def test_remove_worktree_quarantines_unknown_files_first(shell_fleet):
    f = shell_fleet
    f.store.add_ticket("x", id="T-1", state="closed")
    wt = _worktree(f)
    (wt / "notes.txt").write_text("precious")
    (wt / "README.md").write_text("edited but never committed")
    out = execute(f.ctx(), PlannedAction("remove_worktree", str(wt)))
    assert out.status == "done", out
    assert not wt.exists()
    assert f.store.worktrees() == []
    paths = sorted(e.path for e in q.entries(f.root))
    rel = wt.relative_to(f.root).as_posix()
    assert paths == [f"{rel}/README.md", f"{rel}/notes.txt"]
    assert "healer/wt-1" in git(f.root, "branch", "--list", "healer/wt-1")  # the branch and its commits stay


def test_busy_worktree_is_never_removed(shell_fleet):
    f = shell_fleet
    f.store.add_ticket("x", id="T-1", state="closed")
    wt = _worktree(f)
    p = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"], cwd=wt)
    try:
        out = execute(f.ctx(), PlannedAction("remove_worktree", str(wt)))
        assert out.status == "aborted" and str(p.pid) in out.reason
        assert wt.exists()
    finally:
        p.kill()
        p.wait()
    assert execute(f.ctx(), PlannedAction("remove_worktree", str(wt))).status == "done"


def test_stop_agent_kills_the_tree_and_marks_for_resume(shell_fleet):
    from healer import procs

    f = shell_fleet
    _in_progress(f)
    proc, tree = procs.spawn([PY, "-c", "import subprocess,sys,time; subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)']); time.sleep(60)"],
                             cwd=f.root)
    try:
        f.store.upsert_agent(Agent("A-1", "T-1", "running", pid=proc.pid, started_at=f.clock.now(), data={"marker": tree.marker}))
        out = execute(f.ctx(), PlannedAction("stop_agent", "A-1", reason="agent_stuck:A-1"))
        assert out.status == "done", out
        proc.wait(timeout=10)
        tree.refresh()
        assert tree.living() == []
        t = f.store.ticket("T-1")
        assert t.state == "queued" and t.data["resume"] is True
        assert f.store.agent("A-1").state == "stopped"
    finally:
        tree.kill(0.1)


def test_resume_dead_agent_requeues_with_resume(shell_fleet):
    f = shell_fleet
    _in_progress(f)
    f.store.upsert_agent(Agent("A-1", "T-1", "running", pid=_dead_pid(), worktree="/x", run_id="r1", started_at=f.clock.now(),
                               heartbeat_at=f.clock.now()))
    out = execute(f.ctx(), PlannedAction("resume_agent", "A-1"))
    assert out.status == "aborted" and "reap" in out.reason  # just died: the dispatcher's turn first
    f.clock.advance(2 * f.policy.fleet.dispatch_tick + 1)
    out = execute(f.ctx(), PlannedAction("resume_agent", "A-1"))
    assert out.status == "done", out
    t = f.store.ticket("T-1")
    assert t.state == "queued" and t.data["resume"] and t.data["resume_run"] == "r1"
    assert f.store.agent("A-1").state == "lost"


def test_escalate_labels_comments_and_notifies_once(shell_fleet):
    f = shell_fleet
    _in_progress(f)
    out = execute(f.ctx(), PlannedAction("escalate", "T-1", {"text": "T-1 relaunched 176 times", "evidence": {"launches": 176}}))
    assert out.status == "done", out
    t = f.store.ticket("T-1")
    assert "needs-human" in t.labels and t.state == "needs_human"
    assert out.detail["moved"] is True  # what the journal says it did: the ticket went to needs_human
    [c] = f.store.comments("T-1")
    assert "176" in c.body
    assert f.store.count_events("notify.sent") == 1


def test_pause_and_resume_dispatch(shell_fleet):
    f = shell_fleet
    assert execute(f.ctx(), PlannedAction("pause_dispatch", "dispatch", {"why": "main red"})).status == "done"
    assert f.store.get_setting("dispatch.paused") is True
    assert f.store.get_setting("dispatch.paused_by")["why"] == "main red"
    assert execute(f.ctx(), PlannedAction("pause_dispatch", "dispatch")).status == "aborted"
    f.store.set_setting("main.status", "red")
    assert execute(f.ctx(), PlannedAction("resume_dispatch", "dispatch")).status == "aborted"
    f.store.set_setting("main.status", "green")
    assert execute(f.ctx(), PlannedAction("resume_dispatch", "dispatch")).status == "done"
    assert f.store.get_setting("dispatch.paused") is False
    # who paused it, and why, is not left behind for a pause no longer in force (docs/supervisor.md, the actions)
    assert f.store.get_setting("dispatch.paused_by") is None and f.store.get_setting("dispatch.paused_reason") is None


def test_recover_rolls_back_planned_and_finishes_begun(shell_fleet):
    f = shell_fleet
    _in_progress(f, "T-1")
    _in_progress(f, "T-2")
    dead = {"pid": _dead_pid(), "ctime": 1.0, "_host": f.ctx().host}
    a = f.store.plan_intent("requeue_ticket", "T-1", {"subject": "T-1", "params": {}, "ticket": "T-1", **dead}, actor="supervisor")
    b = f.store.plan_intent("requeue_ticket", "T-2", {"subject": "T-2", "params": {}, "ticket": "T-2", **dead}, actor="supervisor")
    f.store.set_intent(b.id, "begun")
    outs = recover(f.ctx())
    assert sorted(o.status for o in outs) == ["aborted", "done"]
    assert {i.id: i.state for i in f.store.intents()} == {a.id: "aborted", b.id: "done"}
    assert f.store.ticket("T-1").state == "in_progress"  # planned never acted: rolled back
    assert f.store.ticket("T-2").state == "queued"  # begun: finished exactly once
    assert f.store.count_events("ticket.moved", subject="T-2") == 2
    # the journal tells a recovery from a first run: each outcome and its remedy.* event say `recovered`
    assert [o.detail.get("recovered") for o in outs] == [True, True]
    evs = f.store.events(kinds=["remedy.aborted", "remedy.done"])
    assert sorted((e.subject, e.payload["detail"].get("recovered")) for e in evs) == [("T-1", True), ("T-2", True)]
    assert recover(f.ctx()) == []


def test_recover_leaves_intents_of_a_live_process_alone(shell_fleet):
    import psutil

    f = shell_fleet
    _in_progress(f)
    p = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
    try:
        from healer import procs

        # who owns it, as this healer writes it, and as an older one did (a wall-clock create time)
        for owner in ({"pid_start": procs.mark(p.pid)}, {"ctime": psutil.Process(p.pid).create_time()}):
            mine = {"pid": p.pid, **owner, "_host": f.ctx().host}
            f.store.plan_intent("requeue_ticket", "T-1", {"subject": "T-1", "params": {}, "ticket": "T-1", **mine},
                                actor="repair-agent")
            assert recover(f.ctx()) == []
            assert all(i.state == "planned" for i in f.store.intents())
    finally:
        p.kill()
        p.wait()


def test_recover_waits_for_another_hosts_intent_until_it_is_stale(shell_fleet):
    f = shell_fleet
    _in_progress(f)
    f.store.plan_intent("requeue_ticket", "T-1", {"subject": "T-1", "params": {}, "ticket": "T-1", "pid": 1, "ctime": 1.0,
                                                  "_host": "elsewhere"}, actor="supervisor")
    assert recover(f.ctx()) == []
    f.clock.advance(f.policy.supervisor.lease_ttl + 1)
    assert [o.status for o in recover(f.ctx())] == ["aborted"]


def test_close_dead_ticket_never_closes_a_ticket_its_merge_finished_meanwhile(shell_fleet, monkeypatch):
    """A review ticket whose work is on main looks like a zombie while its dispatcher is between the merge's two steps
    (proposal merged, then review -> done): a store restart there (pg-restarts-real) let the supervisor plan
    close_dead_ticket, the dispatcher then moved it to done, and the close moved done -> closed. The close
    compare-and-sets on the state it was planned for: it aborts and the ticket stays done."""
    from healer.remedy import actions

    f = shell_fleet
    f.store.add_ticket("work", id="T-1")
    for to in ("in_progress", "review"):
        f.store.move_ticket("T-1", to, actor="dispatcher")
    real = actions.HANDLERS["close_dead_ticket"]

    def check_then_the_dispatcher_finishes(ctx, t):
        real.check(ctx, t)
        f.store.move_ticket("T-1", "done", actor="dispatch", reason="proposal 1 merged", expect="review")

    monkeypatch.setitem(actions.HANDLERS, "close_dead_ticket",
                        actions.Handler(real.resolve, check_then_the_dispatcher_finishes, real.apply, real.verify))
    out = execute(f.ctx(), PlannedAction("close_dead_ticket", "T-1", params={"expect": "review", "why": "zombie_ticket:T-1"}))
    assert out.status == "aborted" and "not review" in out.reason, out
    assert f.store.ticket("T-1").state == "done"
    assert _states(f.store) == [("close_dead_ticket", "aborted")]
