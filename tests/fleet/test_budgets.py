"""Acceptance 1-3: launch budget with backoff, rejected-proposal replays, dead-agent resumes."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from healer.clock import iso
from tests.conftest import wait_until
from tests.fleet.conftest import NO_FILE, gate, scripted_policy


def launch_times(f, tid):
    return [e.at for e in f.store.events(kinds=["dispatch.launched", "dispatch.resumed", "dispatch.replayed"], subject=tid)]


def test_always_failing_agent_five_launches_on_backoff_then_needs_human(fleet_factory):
    f = fleet_factory(scripted_policy())
    f.add("T-1", "fail")
    t0 = f.clock.now()
    rep = f.d.tick()
    assert rep.launched == [("T-1", "launch")]
    f.settle()
    for wait in (300, 600, 1200, 2400):
        rep = f.d.tick()  # reaps: the attempt ends now
        assert rep.launched == [] and f.state("T-1") == "queued"
        f.clock.advance(wait - 1)
        assert f.d.tick().launched == [], f"launched one second before the {wait}s backoff ended"
        f.clock.advance(1)
        assert f.d.tick().launched == [("T-1", "launch")]
        f.settle()
    rep = f.d.tick()
    assert rep.stopped == [("T-1", "needs_human")]
    assert launch_times(f, "T-1") == [t0, t0 + 300, t0 + 900, t0 + 2100, t0 + 4500]
    t = f.store.ticket("T-1")
    assert t.state == "needs_human" and "needs-human" in t.labels
    body = f.store.comments("T-1")[-1].body
    atts = f.store.attempts("T-1")
    assert len(atts) == 5 and all(a.exit_code == 1 for a in atts)
    for i, a in enumerate(atts, 1):
        assert f"{i}. {iso(a.at)} launch run={a.run_id} exit=1 signature=tests:AssertionError:expected-42" in body
    assert "6." not in body
    assert "AssertionError: expected 42, got 41" in body  # the gate-log tail
    # nothing more happens, however long we wait
    f.clock.advance(86400)
    assert f.d.tick().launched == []
    assert len(f.events("dispatch.budget_exhausted", "T-1")) == 1


def test_rejected_proposal_replayed_twice_then_blocked_main_untouched(fleet_factory):
    f = fleet_factory(scripted_policy(merge_gates=[gate("no-broken", NO_FILE.format("BROKEN"))]))
    f.add("T-1", "broken")
    main = f.main_head()
    for _ in range(10):
        f.d.tick()
        f.settle()
        assert f.main_head() == main
        if f.state("T-1") == "blocked":
            break
    assert f.state("T-1") == "blocked"
    assert len(f.events("dispatch.launched", "T-1")) == 1
    assert len(f.events("dispatch.replayed", "T-1")) == 2
    props = f.store.proposals("T-1")
    assert [p.state for p in props] == ["rejected"] * 3
    assert "gate no-broken: exit 1" in props[-1].gate_log
    # the rejection was fed back to the replays
    tasks = sorted((f.root / ".healer" / "tasks").glob("T-1-*.md"))
    assert len(tasks) == 3 and "rejected" in tasks[-1].read_text() and "no-broken" in tasks[-1].read_text()
    assert "rejected proposal replays exhausted" in f.store.comments("T-1")[-1].body
    assert f.main_head() == main
    assert not list((f.root / ".healer" / "scratch").glob("*"))


def test_passing_proposal_merges_and_marks_done(fleet_factory):
    f = fleet_factory(scripted_policy(merge_gates=[gate("no-broken", NO_FILE.format("BROKEN"))]))
    f.add("T-1", "success")
    main = f.main_head()
    f.d.tick()
    f.settle()
    rep = f.d.tick()
    assert rep.merged == ["T-1"] and f.state("T-1") == "done"
    t = f.store.ticket("T-1")
    new = f.main_head()
    assert new != main
    from tests.conftest import git

    assert git(f.root, "merge-base", "--is-ancestor", main, new) == ""  # main only moved forward
    assert git(f.root, "merge-base", "--is-ancestor", t.data["merged_commit"], "main") == ""
    assert (f.root / "work").is_dir()  # the checkout of main followed (fast-forward)


def _kill_live(f, tid):
    a = wait_until(lambda: f.running(tid), what="a live agent")[0]
    ready = Path(a.worktree) / ".healer" / "runs" / a.run_id / f"ready.{a.pid}"
    wait_until(ready.exists, what="agent ready")
    os.kill(a.pid, signal.SIGKILL)
    f.settle()
    return a


def test_killed_agent_resumed_in_its_worktree_then_stopped_when_spinning(fleet_factory):
    f = fleet_factory(scripted_policy())
    f.add("T-1", "hang")
    assert f.d.tick().launched == [("T-1", "launch")]
    first = _kill_live(f, "T-1")
    runs = [first]
    for _ in range(3):
        f.d.tick()  # reap: died
        assert f.state("T-1") == "queued"
        f.clock.advance(2400)
        rep = f.d.tick()
        assert rep.launched == [("T-1", "resume")]
        runs.append(_kill_live(f, "T-1"))
    assert {a.worktree for a in runs} == {first.worktree}
    assert {a.run_id for a in runs} == {first.run_id}
    assert all("--resume" in a.data["argv"] for a in runs[1:])
    f.clock.advance(2400)
    rep = f.d.tick()
    assert rep.stopped == [("T-1", "needs_human")] and rep.launched == []
    ev = f.events("dispatch.budget_exhausted", "T-1")
    assert len(ev) == 1 and ev[0].payload["reason"] == "spinning"
    assert "killed(SIGKILL)" in f.store.comments("T-1")[-1].body
    assert len(f.store.attempts("T-1")) == 4


def test_killed_agent_that_commits_each_time_is_never_stopped_for_spinning(fleet_factory):
    f = fleet_factory(scripted_policy())
    f.add("T-1", "hang+commit")
    heads = []
    f.d.tick()
    for _ in range(5):
        _kill_live(f, "T-1")
        f.d.tick()
        heads.append(f.store.attempts("T-1")[-1].head)
        f.clock.advance(2400)
        f.d.tick()
    assert len(set(heads)) == 5  # every resume added a commit on the same branch, none lost
    from tests.conftest import git

    assert git(f.root, "rev-list", "--count", "main..healer/T-1") == "5"
    ev = f.events("dispatch.budget_exhausted", "T-1")
    assert len(ev) == 1 and ev[0].payload["reason"] == "launch_budget"
    assert f.state("T-1") == "needs_human"
    assert len(f.events("dispatch.resumed", "T-1")) == 4


def test_agent_marked_lost_by_someone_else_still_gets_its_attempt_closed_and_resumed(fleet_factory):
    f = fleet_factory(scripted_policy())
    f.add("T-1", "hang")
    f.d.tick()
    a = _kill_live(f, "T-1")
    # the supervisor's bookkeeping got there first: agent lost, ticket requeued for resume
    f.store.update_agent(a.id, state="lost", ended_at=f.clock.now())
    f.store.move_ticket("T-1", "queued", actor="healer", reason="agent dead", expect="in_progress")
    rep = f.d.tick()
    (att,) = f.store.attempts("T-1")
    assert att.ended_at is not None and att.failure_signature.startswith("lost")
    # the pass reports it reaped, as it does an exit it saw itself (docs/fleet.md step 1)
    assert rep.reaped == [a.id] and f.events("dispatch.tick")[-1].payload["reaped"] == 1
    f.clock.advance(300)
    assert f.d.tick().launched == [("T-1", "resume")]


def test_a_loop_cut_short_by_a_full_disk_is_resumed_and_not_counted(fleet_factory):
    """`healer loop run` exits 74 when the disk takes no more writes (tests/loop/test_full_disk.py), its state
    kept: the dispatcher resumes that run, as it does a killed one. The disk is the infrastructure's
    (healer/core/endings.py): no budget counts it and the retry waits `retry.infra_backoff`. An agent that fills
    the disk on every run is held by `fleet.min_free` (no launch while the disk is low, a disk_low page),
    not relaunched for ever."""
    f = fleet_factory(scripted_policy(max_launches=3))
    f.add("T-1", "diskfull,success")
    assert f.d.tick().launched == [("T-1", "launch")]
    f.settle()
    f.d.tick()  # reaps the 74
    first = f.store.attempts("T-1")[0]
    assert first.exit_code == 74 and first.failure_signature.startswith("infra: disk_full")
    assert [e.payload["cause"] for e in f.events("attempt.infra", "T-1")] == ["disk_full"]
    f.clock.advance(30)
    f.d.tick()
    assert [(a.kind, a.run_id) for a in f.store.attempts("T-1")] == [("launch", first.run_id), ("resume", first.run_id)]
    f.settle()
    f.d.tick()
    assert f.state("T-1") in ("review", "done"), f.state("T-1")


def test_runs_the_disk_cut_short_every_time_are_retried_on_backoff_never_escalated(fleet_factory):
    """Exit 74 is the disk's, not the agent's (healer/core/endings.py): no budget counts it however often.
    What holds an agent that fills the disk each run is `fleet.min_free` (tests/fleet/test_disk.py)."""
    f = fleet_factory(scripted_policy(max_launches=3))
    f.add("T-1", "diskfull")
    for _ in range(12):
        f.d.tick()  # reaps the last run; the next waits out the infra backoff (30s, 1m, 2m, 5m)
        f.settle()
        f.clock.advance(300)
    f.d.tick()
    f.settle()
    assert f.state("T-1") in ("queued", "in_progress")
    atts = [a for a in f.store.attempts("T-1") if a.ended_at is not None]
    assert len(atts) >= 5 and all(a.exit_code == 74 and a.failure_signature.startswith("infra: disk_full") for a in atts)
    assert not f.events("dispatch.budget_exhausted", "T-1")
