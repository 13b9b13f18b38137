"""Each finding appears at its threshold, never one second before (VirtualClock drives `now`)."""

from __future__ import annotations

import dataclasses

import pytest

from healer.clock import VirtualClock
from healer.core import decide, detect
from healer.core.model import Memory, Snapshot
from healer.policy.schema import Policy
from tests.synth import T0, agent, attempt, ticket, worktree

P = Policy.model_validate({"sentinels": {"main_red": "10m"}})
H, S = P.health, P.sentinels


def _idle(now):
    return Snapshot(now=now, tickets=(ticket("T-1", "in_progress"),), agents=(agent("A-1", "T-1", worktree="w/T-1"),),
                    worktrees=(worktree("w/T-1", "T-1"),))


def _paused(now):
    return Snapshot(now=now, tickets=(ticket("T-1", "in_progress"),),
                    agents=(agent("A-1", "T-1", worktree="w/T-1", paused=True),), worktrees=(worktree("w/T-1", "T-1"),))


def _frozen(now):
    return Snapshot(now=now, tickets=(ticket("T-1", "in_progress"),))


def _stale(now):
    return Snapshot(now=now, tickets=(ticket("T-1", "queued", labels={"to-review": T0}),))


def _orphan(now):
    return Snapshot(now=now, tickets=(ticket("T-1", "done"),), worktrees=(worktree("w/T-1", "T-1", at=T0 - 99_999),))


def _dispatch_frozen(now):
    return Snapshot(now=now, tickets=(ticket("T-1", "queued", at=T0 - 50_000),), last_launch_at=T0, pool_size=2)


def _pool(now):
    return Snapshot(now=now, tickets=(ticket("T-2", "queued", at=T0 - 50_000), ticket("T-1", "in_progress")),
                    agents=(agent("A-1", "T-1", progress_at=now, heartbeat_at=now),), pool_size=1, last_launch_at=T0)


def _no_closes(now):
    from healer.records import Proposal

    return Snapshot(now=now, proposals=(Proposal(1, "T-1", "b", "c", "open", T0),), last_open_at=T0, last_close_at=T0 - 10)


def _main_red(now):
    return Snapshot(now=now, main_status="red", main_red_since=T0)


def _silent(now):
    return Snapshot(now=now, last_supervisor_tick=T0)


TIMED = [
    ("agent_idle", _idle, H.agent_idle),
    ("agent_stuck", _idle, H.agent_stuck),
    ("agent_stuck", _paused, H.agent_idle),
    ("frozen_in_progress", _frozen, H.frozen_in_progress),
    ("stale_label", _stale, H.stale_labels["to-review"]),
    ("orphan_worktree", _orphan, H.orphan_worktree),
    ("dispatch_frozen", _dispatch_frozen, S.dispatch_frozen),
    ("pool_saturated", _pool, S.pool_saturated),
    ("no_closes", _no_closes, S.no_closes),
    ("main_red", _main_red, S.main_red),
    ("supervisor_silent", _silent, S.supervisor_silent),
]


def kinds(s: Snapshot, policy=P) -> set[str]:
    return {f.kind for f in detect(s, policy)}


@pytest.mark.parametrize("kind,build,threshold", TIMED, ids=[f"{k}-{b.__name__}" for k, b, _ in TIMED])
def test_appears_at_threshold_not_before(kind, build, threshold):
    clock = VirtualClock(T0)
    assert kind not in kinds(build(clock.now()))
    clock.advance(threshold - 1)
    assert kind not in kinds(build(clock.now())), f"{kind} one second before {threshold}s"
    clock.advance(1)
    assert kind in kinds(build(clock.now())), f"{kind} missing at its threshold {threshold}s"
    clock.advance(P.supervisor.tick)
    assert kind in kinds(build(clock.now())), f"{kind} gone one tick after its threshold"


def test_idle_gives_way_to_stuck():
    s = _idle(T0 + H.agent_stuck)
    assert {"agent_stuck"} == kinds(s) & {"agent_idle", "agent_stuck"}


def test_agent_dead_needs_a_dead_process_without_exit():
    alive = Snapshot(now=T0, tickets=(ticket("T-1", "in_progress"),), agents=(agent("A-1", "T-1", worktree="w/T-1"),),
                     worktrees=(worktree("w/T-1", "T-1"),))
    assert "agent_dead" not in kinds(alive)
    unsure = Snapshot(now=T0, tickets=alive.tickets, agents=(agent("A-1", "T-1", alive=None, worktree="w/T-1"),),
                      worktrees=alive.worktrees)
    assert "agent_dead" not in kinds(unsure)  # cannot tell: fail-open, not dead
    dead = Snapshot(now=T0, tickets=alive.tickets, agents=(agent("A-1", "T-1", alive=False, worktree="w/T-1"),),
                    worktrees=alive.worktrees)
    assert "agent_dead" in kinds(dead)
    d = decide(dead, P, Memory())
    assert [(a.action, a.params["worktree"]) for a in d.actions] == [("resume_agent", "w/T-1")]


def test_agent_dead_with_budget_spent_escalates():
    atts = tuple(attempt(i, "T-1", at=T0 - 100 + i) for i in range(P.retry.max_launches))
    s = Snapshot(now=T0, tickets=(ticket("T-1", "in_progress"),), agents=(agent("A-1", "T-1", alive=False, worktree="w/T-1"),),
                 worktrees=(worktree("w/T-1", "T-1"),), attempts={"T-1": atts})
    d = decide(s, P, Memory())
    assert [a.action for a in d.actions] == ["escalate"]
    assert "launch budget" in d.actions[0].params["why"]
    assert any(al.key == "escalate:T-1" for al in d.alerts)


def test_agent_dead_after_resumes_on_the_same_state_has_its_budget_spent_before_the_launch_budget():
    """The other half of the budget (docs/fleet.md): resume_same_state_limit resumes in a row on the same commit and
    state spend it, with launches to spare; one fewer, or a new commit between them, does not."""
    limit = P.retry.resume_same_state_limit
    assert limit + 1 < P.retry.max_launches  # the launch budget is not what is spent

    def spent(atts):
        s = Snapshot(now=T0, tickets=(ticket("T-1", "in_progress"),),
                     agents=(agent("A-1", "T-1", alive=False, worktree="w/T-1"),),
                     worktrees=(worktree("w/T-1", "T-1"),), attempts={"T-1": tuple(atts)})
        [dead] = [f for f in detect(s, P) if f.kind == "agent_dead"]
        return dead.evidence["budget_spent"]

    first = attempt(1, "T-1", at=T0 - 100, head="h1", state_hash="s1")
    same = [attempt(i + 2, "T-1", at=T0 - 99 + i, kind="resume", head="h1", state_hash="s1") for i in range(limit)]
    assert spent([first, *same]) == (f"{limit} resumes on the same commit >= retry.resume_same_state_limit {limit}")
    assert spent([first, *same[:-1]]) is None
    assert spent([first, *same[:-1], dataclasses.replace(same[-1], head="h2")]) is None


def test_dead_agent_whose_worktree_is_gone_is_requeued():
    s = Snapshot(now=T0, tickets=(ticket("T-1", "in_progress"),), agents=(agent("A-1", "T-1", alive=False, worktree="w/T-1"),))
    d = decide(s, P, Memory())
    assert ("requeue_ticket", "T-1") in [(a.action, a.subject) for a in d.actions]


def test_unknown_file_and_zombie_are_immediate():
    s = Snapshot(now=T0, unknown_files=("worktrees/stray.txt",),
                 tickets=(ticket("T-1", "queued", data={"merged_commit": "abc"}), ticket("T-2", "in_progress")),
                 merged_tickets=frozenset({"T-2"}), agents=(agent("A-2", "T-2", worktree="w/T-2"),),
                 worktrees=(worktree("w/T-2", "T-2"),))
    fs = {f.key for f in detect(s, P)}
    assert {"unknown_file:worktrees/stray.txt", "zombie_ticket:T-1", "zombie_ticket:T-2"} <= fs
    d = decide(s, P, Memory())
    t2 = [(a.action, a.subject) for a in d.actions if a.reason == "zombie_ticket:T-2"]
    assert t2 == [("stop_agent", "A-2"), ("close_dead_ticket", "T-2")]  # stop the live agent first


def test_zombie_not_while_its_proposal_is_merging():
    from healer.records import Proposal

    s = Snapshot(now=T0, tickets=(ticket("T-1", "review"),), merged_tickets=frozenset({"T-1"}),
                 proposals=(Proposal(1, "T-1", "b", "c", "open", T0),))
    assert "zombie_ticket" not in kinds(s)


def test_same_commit_repush_at_the_second_attempt():
    one = Snapshot(now=T0, tickets=(ticket("T-1", "in_progress"),),
                   attempts={"T-1": (attempt(1, "T-1", head="abc", state_hash="s1"), attempt(2, "T-1", head="def", state_hash="s2"))})
    assert "same_commit_repush" not in kinds(one)
    two = Snapshot(now=T0, tickets=one.tickets, agents=(agent("A-1", "T-1", worktree="w"),), worktrees=(worktree("w", "T-1"),),
                   attempts={"T-1": (*one.attempts["T-1"], attempt(3, "T-1", head="abc", state_hash="s1"))})
    f = [f for f in detect(two, P) if f.kind == "same_commit_repush"][0]
    assert f.evidence["head"] == "abc" and f.evidence["count"] == 2
    d = decide(two, P, Memory())
    assert [a.action for a in d.actions if a.reason == f.key] == ["stop_agent", "escalate"]


def test_launches_that_never_started_an_agent_are_no_repush():
    """A launch that failed (the loop's command missing) records the worktree's head at launch, the same each time:
    no agent ran, nothing was pushed; the launch budget, not a repush, stops it."""
    atts = tuple(dataclasses.replace(attempt(i, "T-1", head="abc"), ended_at=T0, exit_code=70,
                                     failure_signature="launch_failed: FileNotFoundError") for i in (1, 2, 3))
    s = Snapshot(now=T0, tickets=(ticket("T-1", "queued"),), attempts={"T-1": atts})
    assert "same_commit_repush" not in kinds(s)


def test_same_commit_repush_evidence_names_the_last_ten_attempts_and_the_last_signature():
    """The escalation's evidence: every repush on the commit counted, the ten latest attempt ids listed (a human reads
    them), the latest failure's signature, and the live agent."""
    atts = tuple(dataclasses.replace(attempt(i, "T-1", at=T0 - 100 + i, head="abc", state_hash="s1"),
                                     failure_signature=f"exit {i}") for i in range(1, 13))
    s = Snapshot(now=T0, tickets=(ticket("T-1", "in_progress"),), agents=(agent("A-1", "T-1", worktree="w"),),
                 worktrees=(worktree("w", "T-1"),), attempts={"T-1": atts})
    [f] = [f for f in detect(s, P) if f.kind == "same_commit_repush"]
    assert f.evidence["count"] == 12 and f.evidence["attempts"] == list(range(3, 13))
    assert f.evidence["failure_signature"] == "exit 12" and f.evidence["state_hash"] == "s1"
    assert (f.evidence["agent"], f.evidence["agent_live"], f.evidence["pid"]) == ("A-1", True, 4242)
    assert f.since == T0 - 100 + 2  # from the second attempt on the commit: the first repush


def test_orphan_worktree_quarantines_then_removes_and_waits_while_busy():
    s = Snapshot(now=T0 + H.orphan_worktree, tickets=(ticket("T-1", "done"),),
                 worktrees=(worktree("w/T-1", "T-1", at=T0 - 5, unknown=("notes.txt",)),))
    d = decide(s, P, Memory())
    assert [(a.action, a.subject) for a in d.actions] == [("quarantine_file", "w/T-1"), ("remove_worktree", "w/T-1")]
    assert d.actions[0].params["files"] == ["notes.txt"] and d.actions[0].params["root"] == "w/T-1"
    busy = Snapshot(now=s.now, tickets=s.tickets, worktrees=(worktree("w/T-1", "T-1", at=T0 - 5, busy=(123,)),))
    d = decide(busy, P, Memory())
    assert not d.actions
    assert [(a.action, why.split(":")[0]) for a, why in d.deferred] == [("remove_worktree", "busy")]


def test_worktree_with_a_live_agent_is_no_orphan():
    s = Snapshot(now=T0 + 99_999, tickets=(ticket("T-1", "done"),), agents=(agent("A-1", "T-9", worktree="w/T-1"),),
                 worktrees=(worktree("w/T-1", "T-1"),))
    assert "orphan_worktree" not in kinds(s)


def test_stale_label_resets_on_activity():
    s = Snapshot(now=T0 + H.stale_labels["to-review"], tickets=(ticket("T-1", "queued", at=T0 + 60, labels={"to-review": T0}),))
    assert "stale_label" not in kinds(s)


def test_main_red_pauses_then_resumes_when_green():
    red = Snapshot(now=T0 + S.main_red, main_status="red", main_red_since=T0)
    d = decide(red, P, Memory())
    assert [a.action for a in d.actions] == ["pause_dispatch"]
    assert [al.key for al in d.alerts] == ["main_red:main"]
    paused = Snapshot(now=red.now + 30, main_status="red", main_red_since=T0, dispatch_paused=True, dispatch_paused_by="healer")
    d2 = decide(paused, P, d.memory)
    assert not d2.actions and not d2.alerts  # already paused; alert in cooldown
    green = Snapshot(now=red.now + 60, main_status="green", dispatch_paused=True, dispatch_paused_by="healer")
    assert [a.action for a in decide(green, P, d2.memory).actions] == ["resume_dispatch"]
    human = Snapshot(now=red.now + 60, main_status="green", dispatch_paused=True, dispatch_paused_by="human")
    assert not decide(human, P, d2.memory).actions  # only healer lifts its own pause


def test_dead_agent_on_a_ticket_no_longer_in_progress_is_not_resumed():
    for state in ("needs_human", "queued", "done"):
        s = Snapshot(now=T0, tickets=(ticket("T-1", state),), agents=(agent("A-1", "T-1", alive=False, worktree="w/T-1"),),
                     worktrees=(worktree("w/T-1", "T-1"),))
        assert "agent_dead" not in kinds(s), state


def _merged_in_review(now, decided=T0):
    from healer.records import Proposal

    return Snapshot(now=now, tickets=(ticket("T-1", "review"),), merged_tickets=frozenset({"T-1"}),
                    proposals=(Proposal(1, "T-1", "b", "c", "merged", T0 - 600, decided),))


def test_a_review_ticket_whose_merge_is_recorded_but_not_finished_is_no_zombie_within_the_grace():
    """The proposal's verdict written, the move to done not yet (a store lost between them): the dispatcher
    finishes it on its next pass, so for health.review_grace after the merge (and the ticket's last change) it is
    left alone, then judged (and closed) as any zombie; a ticket in another state is judged at once as before."""
    grace = H.review_grace
    assert grace == 300
    assert "zombie_ticket" not in kinds(_merged_in_review(T0))
    assert "zombie_ticket" not in kinds(_merged_in_review(T0 + grace - 1))
    assert "zombie_ticket" in kinds(_merged_in_review(T0 + grace))
    # the grace runs from the merge, when it is later than the ticket's last change
    assert "zombie_ticket" not in kinds(_merged_in_review(T0 + grace, decided=T0 + 10))
    d = decide(_merged_in_review(T0 + grace), P, Memory())
    assert ("close_dead_ticket", "T-1") in [(a.action, a.subject) for a in d.actions]
    zero = Policy.model_validate({"health": {"review_grace": "0s"}})
    assert "zombie_ticket" in {f.kind for f in detect(_merged_in_review(T0), zero)}


def test_the_review_grace_wakes_the_incremental_core_at_its_end():
    from healer.core import incremental

    first = _merged_in_review(T0)  # the same tickets and proposals: only time moves, nothing marks T-1 dirty
    c = None
    seen = []
    for now in (T0, T0 + H.review_grace - 1, T0 + H.review_grace):
        fs, _, c = incremental.detect(first.model_copy(update={"now": now}) if hasattr(first, "model_copy")
                                      else dataclasses.replace(first, now=now), P, c)
        seen.append("zombie_ticket:T-1" in {f.key for f in fs})
    assert seen == [False, False, True]


def test_a_zombie_whose_agent_is_not_live_is_closed_without_a_stop():
    """stop_agent is planned only for a live agent: a zombie ticket whose agent is dead is closed directly, and
    no stop is journaled against a process that is not there (an agent whose liveness is unknown, on another
    host, is still stopped first: its handler checks on fresh state)."""
    for alive in (False,):
        s = Snapshot(now=T0, tickets=(ticket("T-2", "in_progress"),), merged_tickets=frozenset({"T-2"}),
                     agents=(agent("A-2", "T-2", worktree="w/T-2", alive=alive),), worktrees=(worktree("w/T-2", "T-2"),))
        d = decide(s, P, Memory())
        t2 = [(a.action, a.subject) for a in d.actions if a.reason == "zombie_ticket:T-2"]
        assert ("close_dead_ticket", "T-2") in t2 and not [x for x in t2 if x[0] == "stop_agent"], (alive, t2)
        assert all(a.action != "stop_agent" for a in d.actions), (alive, d.actions)
