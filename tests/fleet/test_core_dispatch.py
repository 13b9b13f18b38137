"""The pure dispatch rules: order, cycles, backoff, budgets, spinning, replays, pool (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from healer.core import dispatch as core
from healer.records import Attempt, Proposal, Ticket

R = core.RetryRules()
NOW = 1_000_000.0


def T(id, state="queued", priority=2, blocked_by=(), created=0.0):
    return Ticket(id=id, title=id, state=state, priority=priority, blocked_by=tuple(blocked_by), created_at=created)


def A(i, kind="launch", at=0.0, ended=None, code=1, head="h", state="s", run="r1"):
    return Attempt(id=i, ticket_id="T", kind=kind, at=at, run_id=run, ended_at=at if ended is None else ended,
                   exit_code=code, state_hash=state, head=head)


def P(i, state):
    return Proposal(id=i, ticket_id="T", branch="b", commit="c", state=state, created_at=0.0)


def test_order_respects_dependencies_and_inherits_urgency():
    ts = [T("A", priority=3), T("B", priority=0, blocked_by=["A"]), T("C", priority=1), T("D", priority=2)]
    assert core.order(ts) == ["A", "B", "C", "D"]  # A carries B's priority 0


def test_cycles_are_named_and_others_still_served():
    ts = [T("T-1", blocked_by=["T-3"]), T("T-2", blocked_by=["T-1"]), T("T-3", blocked_by=["T-2"]), T("T-4"),
          T("T-5", blocked_by=["T-5"]), T("T-6", state="done", blocked_by=["T-7"]), T("T-7", state="done", blocked_by=["T-6"])]
    p = core.decide(core.DispatchInput(NOW, ts), R)
    assert p.cycles == (("T-1", "T-3", "T-2"), ("T-5",))
    assert [x.ticket_id for x in p.launches] == ["T-4"]
    assert "T-1 -> T-3 -> T-2 -> T-1" in p.cycle_line()


def test_waits_on_unfinished_and_unknown_dependencies():
    ts = [T("A", state="in_progress"), T("B", blocked_by=["A"]), T("C", blocked_by=["ghost"]), T("D", blocked_by=["E"]),
          T("E", state="closed")]
    p = core.decide(core.DispatchInput(NOW, ts, live={"A": 1}), R)
    assert [x.ticket_id for x in p.launches] == ["D"]
    assert p.missing == (("C", "ghost"),)


def test_backoff_schedule_and_reset_after_clean_run():
    fails = [A(i, at=100.0 * i) for i in range(1, 5)]
    assert [core.backoff_until(fails[:n], R.backoff) for n in range(1, 5)] == [100 + 300, 200 + 600, 300 + 1200, 400 + 2400]
    assert core.backoff_until([*fails, A(5, at=500)], R.backoff) == 500 + 2400  # the last step repeats
    assert core.backoff_until([*fails, A(5, at=500, code=0)], R.backoff) is None
    assert core.backoff_until([A(1, at=0, code=0), A(2, at=10)], R.backoff) == 10 + 300


def test_launch_budget_counts_resumes_and_replays():
    atts = [A(1, code=0), A(2, kind="replay", code=0), A(3, kind="replay", code=-9), A(4, kind="resume", code=1),
            A(5, code=1)]
    p = core.decide(core.DispatchInput(NOW, [T("T")], attempts={"T": atts}), R)
    assert p.stops == (core.Stop("T", "needs_human", "launch_budget", "5 launches used of 5 (resumes included)"),)


def test_spinning_counts_resumes_on_same_state_and_a_commit_resets():
    same = [A(1, code=-9), A(2, "resume", code=-9), A(3, "resume", code=-9)]
    assert core.same_state_resumes(same) == 2
    assert core.same_state_resumes([*same, A(4, "resume", code=None)]) == 3
    moved = [*same, A(4, "resume", code=-9, head="h2", state="s2"), A(5, "resume", code=-9, head="h2", state="s2")]
    assert core.same_state_resumes(moved) == 1
    p = core.decide(core.DispatchInput(NOW, [T("T")], attempts={"T": [*same, A(4, "resume", code=-9)]}), R)
    assert p.stops[0].reason == "spinning"


def test_dead_agent_resumed_within_session_window_else_relaunched():
    atts = [A(1, at=NOW - 3600, code=-9, run="run-1")]
    p = core.decide(core.DispatchInput(NOW, [T("T")], attempts={"T": atts}), R)
    assert p.launches == (core.Launch("T", "resume", run_id="run-1"),)
    old = [A(1, at=NOW - 90000, ended=NOW - 3600, code=None, run="run-1")]
    p = core.decide(core.DispatchInput(NOW, [T("T")], attempts={"T": old}), R)
    assert p.launches == (core.Launch("T", "launch"),)


def test_replays_then_blocked():
    t = T("T", state="review")
    one = core.decide(core.DispatchInput(NOW, [t], attempts={"T": [A(1, code=0)]}, proposals={"T": [P(1, "rejected")]}), R)
    assert one.launches == (core.Launch("T", "replay", proposal_id=1),)
    three = core.decide(core.DispatchInput(NOW, [t], proposals={"T": [P(1, "rejected"), P(2, "rejected"), P(3, "rejected")]}), R)
    assert three.stops[0].to == "blocked" and three.launches == ()
    open_ = core.decide(core.DispatchInput(NOW, [t], proposals={"T": [P(1, "open")]}), R)
    assert open_.launches == () and open_.waiting[0].reason == core.REVIEW


def test_red_main_or_pause_holds_launches():
    for kw in ({"main_status": "red"}, {"paused": True}):
        p = core.decide(core.DispatchInput(NOW, [T("A")], **kw), R)
        assert p.launches == () and p.waiting[0].reason == core.PAUSED
    assert core.decide(core.DispatchInput(NOW, [T("A")], main_status="unknown"), R).launches  # fail-open


# -- properties ------------------------------------------------------------------

STATES = ["queued", "queued", "queued", "review", "in_progress", "done", "blocked", "needs_human"]


@st.composite
def fleets(draw):
    n = draw(st.integers(1, 12))
    ids = [f"T-{i}" for i in range(n)]
    tickets, attempts, proposals, live = [], {}, {}, {}
    for i, tid in enumerate(ids):
        deps = draw(st.lists(st.sampled_from(ids), max_size=2, unique=True))  # cycles allowed
        state = draw(st.sampled_from(STATES))
        tickets.append(T(tid, state=state, priority=draw(st.integers(0, 3)), blocked_by=deps, created=float(i)))
        k = draw(st.integers(0, 6))
        attempts[tid] = [A(j, kind=draw(st.sampled_from(["launch", "resume", "replay"])), at=NOW - draw(st.integers(0, 5000)),
                           code=draw(st.sampled_from([0, 1, 2, -9, None])), head=draw(st.sampled_from("ab")))
                         for j in range(k)]
        proposals[tid] = [P(j, draw(st.sampled_from(["rejected", "open", "merged"]))) for j in range(draw(st.integers(0, 4)))]
        if state == "in_progress" or draw(st.integers(0, 5)) == 0:
            live[tid] = draw(st.integers(1, 2))
    return core.DispatchInput(NOW, tickets, attempts, proposals, live, pool_size=draw(st.integers(1, 6)),
                              main_status=draw(st.sampled_from(["green", "red", "unknown"])), paused=draw(st.booleans()))


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@settings(max_examples=150, deadline=None)
@given(fleets())
def test_plan_never_overfills_the_pool_nor_doubles_an_agent(inp):
    p = core.decide(inp, R)
    ids = [x.ticket_id for x in p.launches]
    assert len(ids) == len(set(ids))
    assert len(ids) <= max(0, inp.pool_size - sum(inp.live.values()))
    assert not any(inp.live.get(t, 0) for t in ids)
    if inp.main_status == "red" or inp.paused:
        assert not ids
    by = {t.id: t for t in inp.tickets}
    for x in p.launches:
        t = by[x.ticket_id]
        assert t.state in ("queued", "review")
        assert len(inp.attempts.get(t.id, ())) < R.max_launches
        assert all(d in by and by[d].state in ("done", "closed") for d in t.blocked_by) or t.state == "review"
    assert not set(ids) & {s.ticket_id for s in p.stops}
    assert core.decide(inp, R) == p  # pure: same input, same plan


def test_stopped_loop_is_resumed_not_relaunched():
    p = core.decide(core.DispatchInput(NOW, [T("T")], attempts={"T": [A(1, at=NOW - 600, code=4, run="run-1")]}), R)
    assert p.launches == (core.Launch("T", "resume", run_id="run-1"),)
