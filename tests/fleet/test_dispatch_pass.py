"""The dispatcher's pass as one pure program (healer/core/dispatch_pass.py `decide`), run against scripted worlds:
no store, no git, no process. Hypothesis draws the world (the board, this host's agents, main's gates, each
proposal's gates, the disk) and checks the invariants every pass keeps, whatever the world answers."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from healer import conventions as cv
from healer import lifecycle
from healer.core import disk
from healer.core import dispatch as core
from healer.core import dispatch_pass as P
from healer.core import dispatch_steps as steps
from healer.core.fleet import GREEN, RED, UNKNOWN
from healer.policy.schema import Policy
from healer.records import Agent, Attempt, Proposal, Ticket

NOW = 1_000_000.0
HOST = "h1"
POLICY = Policy.model_validate({"fleet": {"main_gates": [{"name": "tests", "run": ["true"]}]}})


def ticket(tid: str, state: str = lifecycle.QUEUED, **kw: Any) -> Ticket:
    return Ticket(id=tid, title=tid, state=state, **kw)


def agent(aid: str, tid: str, **kw: Any) -> Agent:
    return Agent(id=aid, ticket_id=tid, state="running", host=HOST, worktree=f"/w/{tid}",
                 data={"launched_by": cv.DISPATCH_ACTOR, "attempt": 1, **kw.pop("data", {})}, **kw)


@dataclass
class World:
    """A scripted answer to every step; what it was asked is kept in `steps`."""

    board: core.DispatchInput
    running: tuple[P.Seen, ...] = ()
    main: P.MainSeen = P.MainSeen(steps.MainView(GREEN, "m1", "m0", True), NOW, False, None, None)
    main_gates: str = "pass"
    reviewing: tuple[Ticket, ...] = ()
    reviews: dict[str, P.ReviewSeen] = field(default_factory=dict)
    proposal_gates: dict[str, str] = field(default_factory=dict)  # ticket -> merged | rejected | deferred | withheld
    settings: dict[str, Any] = field(default_factory=dict)
    launch_ok: bool = True

    def answer(self, s: Any) -> Any:
        if isinstance(s, P.ReadSetting):
            return self.settings.get(s.key)
        if isinstance(s, P.ReadRunning):
            return self.running
        if isinstance(s, P.ReadEnds):
            return tuple(P.EndSeen(None, "c1", "s1", "") for _ in s.agents)
        if isinstance(s, (P.ReadToReap, P.ReadOrphans)):
            return ()
        if isinstance(s, P.ReadMain):
            return self.main
        if isinstance(s, P.RunMainGates):
            return P.GateOutcome(self.main_gates, "gate log", NOW)
        if isinstance(s, P.ReadReviewing):
            return self.reviewing
        if isinstance(s, P.ReadReview):
            return self.reviews[s.ticket]
        if isinstance(s, P.GateProposal):
            return P.GateOutcome(self.proposal_gates[s.ticket.id], f"log of {s.proposal.id}", NOW, main_after="m2")
        if isinstance(s, P.Propose):  # opened from the branch's head
            return Proposal(id=100, ticket_id=s.ticket, branch=f"b/{s.ticket}", commit=s.head, state="open", created_at=NOW)
        if isinstance(s, P.Verdict):
            return s.outcome
        if isinstance(s, P.ReadBoard):
            return P.BoardView(self.board)
        if isinstance(s, P.LaunchAgent):
            return P.LAUNCHED if self.launch_ok else P.NOT_LAUNCHED
        return None


def snapshot(**kw: Any) -> P.PassSnapshot:
    return P.PassSnapshot(**{"now": NOW, "host": HOST, "machine": None, "board": True, "shared": False, **kw})


def run(world: World, snap: P.PassSnapshot | None = None, rules: core.RetryRules = core.RetryRules(),
        memory: P.PassMemory = P.PassMemory()) -> tuple[list[Any], P.PassResult]:
    return P.plan_pass(snap or snapshot(), POLICY, rules, memory, world.answer)


def of(kind: type, seen: list[Any]) -> list[Any]:
    return [s for s in seen if isinstance(s, kind)]


# -- worlds ---------------------------------------------------------------------------------------------------------

STATES = [lifecycle.QUEUED, lifecycle.QUEUED, lifecycle.REVIEW, lifecycle.IN_PROGRESS, lifecycle.DONE]


@st.composite
def worlds(draw: st.DrawFn) -> tuple[World, P.PassSnapshot, core.RetryRules]:
    n = draw(st.integers(1, 7))
    tickets, attempts, proposals, live = [], {}, {}, {}
    reviews, gates = {}, {}
    for i in range(n):
        tid = f"T-{i}"
        state = draw(st.sampled_from(STATES))
        tickets.append(ticket(tid, state, priority=draw(st.integers(0, 3)), created_at=float(i)))
        atts = [Attempt(id=10 * i + k, ticket_id=tid, kind="launch", at=NOW - 5000 + k, run_id=f"{tid}-{k}",
                        ended_at=NOW - 4000 + k, exit_code=draw(st.sampled_from([0, 1, 1, -9])))
                for k in range(draw(st.integers(0, 6)))]
        attempts[tid] = atts
        if state == lifecycle.REVIEW:
            pstate = draw(st.sampled_from([None, "open", "open", "rejected", "merged"]))
            last = None if pstate is None else Proposal(id=i + 1, ticket_id=tid, branch=f"b/{tid}", commit=f"c{i}",
                                                         state=pstate, created_at=NOW - 10)
            proposals[tid] = [] if last is None else [last]
            reviews[tid] = P.ReviewSeen(last, draw(st.sampled_from([None, f"h{i}"])) if last is None else None)
            gates[tid] = draw(st.sampled_from(["merged", "rejected", "deferred", "withheld"]))
        if state == lifecycle.IN_PROGRESS or draw(st.booleans()) and state == lifecycle.QUEUED and i % 3 == 0:
            live[tid] = 1
    pool = draw(st.integers(1, 4))
    main_prev = draw(st.sampled_from([GREEN, RED, UNKNOWN]))
    board = core.DispatchInput(now=NOW, tickets=tickets, attempts=attempts, proposals=proposals, live=live,
                               pool_size=pool, main_status=main_prev, paused=draw(st.booleans()))
    running = tuple(P.Seen(agent(f"a-{t}", t), draw(st.sampled_from(["running", "exited", "gone", "unknown"])),
                           draw(st.sampled_from([0, 1, None])), "h") for t in live)
    world = World(board, running=running,
                  main=P.MainSeen(steps.MainView(main_prev, draw(st.sampled_from(["m1", None])), "m0", True), NOW,
                                  board.paused, None, None),
                  main_gates=draw(st.sampled_from(["pass", "fail", "unknown"])),
                  reviewing=tuple(t for t in tickets if t.state == lifecycle.REVIEW), reviews=reviews,
                  proposal_gates=gates, launch_ok=draw(st.booleans()))
    free = draw(st.sampled_from([None, 10, 10_000]))
    board_holder = draw(st.booleans())
    snap = snapshot(board=board_holder, shared=not board_holder or draw(st.booleans()), readings=() if free is None else (disk.Reading("/", free),),
                    min_free=0 if free is None else 1000)
    rules = core.RetryRules(max_launches=draw(st.integers(1, 5)), backoff=(0.0,), infra_backoff=(0.0,),
                            pause_on_red_main=True)
    return world, snap, rules


# -- invariants -----------------------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(w=worlds())
def test_never_a_launch_on_a_red_main_nor_while_paused_or_the_disk_is_low(w):
    world, snap, rules = w
    seen, res = run(world, snap, rules)
    launches = of(P.LaunchAgent, seen)
    low = bool(snap.readings) and snap.readings[0].free < snap.min_free
    judged_elsewhere = not snap.board or low  # main as the store says it (the board holder judged it)
    if res.main == RED or world.board.paused or low or (judged_elsewhere and world.board.main_status == RED):
        assert launches == [], (res.main, world.board.paused, low)
    if of(P.RunMainGates, seen) and world.main_gates == "fail":
        assert res.main == RED and launches == []
        assert not of(P.GateProposal, seen)  # a red main holds the merges too


@settings(max_examples=150, deadline=None)
@given(w=worlds())
def test_never_two_agents_on_one_ticket_nor_past_the_pool_or_the_budget(w):
    world, snap, rules = w
    seen, res = run(world, snap, rules)
    launched = [s.launch.ticket_id for s in of(P.LaunchAgent, seen)]
    assert len(launched) == len(set(launched)), launched
    assert not set(launched) & {t for t, n in world.board.live.items() if n > 0}  # a live agent already works on it
    assert len(launched) <= max(0, world.board.pool_size - sum(world.board.live.values()))
    for tid in launched:
        assert len(core.counted(world.board.attempts.get(tid, ()))) < rules.max_launches
    assert Counter(t for t, _ in res.launched) == Counter(launched if world.launch_ok else [])


@settings(max_examples=150, deadline=None)
@given(w=worlds())
def test_every_merge_rests_on_its_gates_and_their_verdict_is_recorded(w):
    world, snap, rules = w
    seen, res = run(world, snap, rules)
    gated = {s.ticket.id: i for i, s in enumerate(seen) if isinstance(s, P.GateProposal)}
    for i, s in enumerate(seen):
        if isinstance(s, P.Verdict):
            assert s.ticket.id in gated and gated[s.ticket.id] < i  # gated first, in this pass
            assert s.outcome == world.proposal_gates[s.ticket.id] and s.log == f"log of {s.proposal.id}"
        if isinstance(s, P.Withheld):
            assert world.proposal_gates[s.proposal.ticket_id] == "withheld"
    for tid in gated:  # every gate run ends in exactly one record: a verdict, withheld, or the deferral's event
        recorded = [s for s in seen if isinstance(s, (P.Verdict, P.Withheld)) and
                    (s.ticket.id if isinstance(s, P.Verdict) else s.proposal.ticket_id) == tid]
        assert len(recorded) == (0 if world.proposal_gates[tid] == "deferred" else 1)
    assert set(res.merged) == {t for t in gated if world.proposal_gates[t] == "merged"}
    assert set(res.rejected) == {t for t in gated if world.proposal_gates[t] == "rejected"}


@settings(max_examples=200, deadline=None)
@given(w=worlds())
def test_each_ended_agent_is_closed_once_and_a_running_one_never(w):
    world, snap, rules = w
    seen, res = run(world, snap, rules)
    closed = [s.agent.id for s in of(P.CloseAttempt, seen)]
    ended = [s.agent.id for s in world.running if s.state in ("exited", "gone")]
    assert sorted(closed) == sorted(ended) == sorted(res.reaped)
    beats = [a.id for s in of(P.Heartbeat, seen) for a, _, _ in s.beats]
    assert sorted(beats) == sorted(s.agent.id for s in world.running if s.state == "running")


@settings(max_examples=100, deadline=None)
@given(w=worlds())
def test_same_world_same_pass(w):
    world, snap, rules = w
    assert run(world, snap, rules)[0] == run(world, snap, rules)[0]


# -- examples -------------------------------------------------------------------------------------------------------


def test_a_low_disk_pauses_pages_reclaims_and_holds_main_and_the_merges():
    world = World(core.DispatchInput(NOW, [ticket("T-1")]), reviewing=(ticket("T-2", lifecycle.REVIEW),))
    seen, res = run(world, snapshot(readings=(disk.Reading("/", 10),), min_free=1000))
    applied = [e for s in of(P.Apply, seen) for e in s.effects]
    assert ("event", "dispatch.disk_low") in [(e.op, e.key) for e in applied]
    assert ("set", cv.DISPATCH_PAUSED, True) in [(e.op, e.key, e.value) for e in applied]
    assert of(P.Reclaim, seen) and not of(P.RunMainGates, seen) and not of(P.ReadReviewing, seen)
    assert not of(P.LaunchAgent, seen) and res.memory.disk_low is True
    assert of(P.Remember, seen)[0].memory.disk_low is True  # remembered before anything later can fail


def test_only_the_board_holder_judges_main_merges_and_stops():
    t = ticket("T-1")
    spent = [Attempt(id=k, ticket_id="T-1", kind="launch", at=0.0, ended_at=1.0, exit_code=1) for k in range(5)]
    world = World(core.DispatchInput(NOW, [t], attempts={"T-1": spent}))
    seen, _ = run(world, snapshot(board=False, shared=True))
    assert not of(P.ReadMain, seen) and not of(P.StopTicket, seen) and not of(P.ReadReviewing, seen)
    seen, _ = run(world)
    assert [s.stop.reason for s in of(P.StopTicket, seen)] == ["launch_budget"]


def test_a_stop_asked_while_launching_launches_nothing_more():
    world = World(core.DispatchInput(NOW, [ticket("T-1"), ticket("T-2")], pool_size=4))
    prog = P.decide(snapshot(), POLICY, core.RetryRules(), P.PassMemory())
    answers = {P.LaunchAgent: P.STOPPING}
    seen, res = [], None
    reply = None
    try:
        while True:
            step = prog.send(reply)
            seen.append(step)
            reply = answers.get(type(step), world.answer(step))
    except StopIteration as done:
        res = done.value
    assert len(of(P.LaunchAgent, seen)) == 1 and res.launched == ()
    assert of(P.TickRecord, seen)[0].payload["launched"] == 0


def test_a_rejected_proposal_is_replayed_in_the_pass_that_rejected_it():
    """Why the pass is a program and not one snapshot: the launch plan reads the board its own merges left."""
    p = Proposal(id=1, ticket_id="T-1", branch="b", commit="c", state="open", created_at=NOW)
    t = ticket("T-1", lifecycle.REVIEW)

    class After(World):
        def answer(self, s: Any) -> Any:
            if isinstance(s, P.ReadBoard):  # the board as the verdict left it
                rejected = Proposal(id=1, ticket_id="T-1", branch="b", commit="c", state="rejected", created_at=NOW)
                return P.BoardView(core.DispatchInput(NOW, [t], proposals={"T-1": [rejected]}))
            return super().answer(s)

    world = After(core.DispatchInput(NOW, [t]), reviewing=(t,), reviews={"T-1": P.ReviewSeen(p, None)},
                  proposal_gates={"T-1": "rejected"})
    seen, res = run(world)
    assert res.rejected == ("T-1",) and [s.launch.kind for s in of(P.LaunchAgent, seen)] == [core.REPLAY]
