"""Invariants of decide() over random fleets, policies and memories (hypothesis)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healer import lifecycle
from healer.core import decide
from healer.core import memory as memmod
from healer.core.model import Memory, Snapshot
from healer.core.rules import NON_REMEDIATING, TICKET_LEASE
from healer.policy.schema import ACTIONS, Policy
from healer.records import Proposal
from tests.synth import T0, agent, attempt, ticket, worktree

IDS = [f"T-{i}" for i in range(8)]
HOURS = st.floats(min_value=-30 * 3600, max_value=0, allow_nan=False).map(lambda d: T0 + d)


@st.composite
def tickets(draw):
    out = []
    for tid in draw(st.lists(st.sampled_from(IDS), unique=True, max_size=8)):
        labels = draw(st.dictionaries(st.sampled_from(["to-review", "bug", "needs-human"]), HOURS, max_size=2))
        out.append(ticket(tid, draw(st.sampled_from(lifecycle.STATES)), at=draw(HOURS), labels=labels,
                          blocked_by=tuple(draw(st.lists(st.sampled_from(IDS), max_size=2))),
                          data=draw(st.sampled_from([{}, {"merged_commit": "abc"}, {"reviews": "T-1"}, {"waits_for": ["T-2"]}])),
                          created_at=draw(HOURS)))
    return out


@st.composite
def snapshots(draw):
    ts = draw(tickets())
    agents = []
    for i in range(draw(st.integers(0, 6))):
        tid = draw(st.sampled_from(IDS + [None]))
        agents.append(agent(f"A-{i}", tid, at=draw(HOURS), alive=draw(st.sampled_from([True, False, None])),
                            paused=draw(st.booleans()), state=draw(st.sampled_from(["running", "running", "exited", "lost"])),
                            worktree=draw(st.sampled_from([None, "w/0", "w/1", "w/2"])), heartbeat_at=draw(HOURS),
                            progress_at=draw(HOURS)))
    wts = [worktree(f"w/{i}", draw(st.sampled_from(IDS + [None])), at=draw(HOURS), exists=draw(st.booleans()),
                    busy=tuple(draw(st.lists(st.integers(1, 9), max_size=1))),
                    unknown=tuple(draw(st.lists(st.sampled_from(["a.txt", "b.log"]), unique=True, max_size=2))))
           for i in range(draw(st.integers(0, 3)))]
    attempts = {tid: tuple(attempt(j, tid, at=draw(HOURS), kind=draw(st.sampled_from(["launch", "resume"])),
                                   head=draw(st.sampled_from([None, "h1", "h2"])), state_hash="s")
                           for j in range(draw(st.integers(0, 6))))
                for tid in draw(st.lists(st.sampled_from(IDS), unique=True, max_size=4))}
    props = tuple(Proposal(i, draw(st.sampled_from(IDS)), "b", "c", draw(st.sampled_from(["open", "merged"])), draw(HOURS))
                  for i in range(draw(st.integers(0, 2))))
    return Snapshot(
        now=T0, tickets=tuple(ts), agents=tuple(agents), worktrees=tuple(wts), attempts=attempts, proposals=props,
        merged_tickets=frozenset(draw(st.lists(st.sampled_from(IDS), max_size=2))),
        main_status=draw(st.sampled_from(["green", "red", "unknown"])), main_red_since=draw(st.none() | HOURS),
        dispatch_paused=draw(st.booleans()), dispatch_paused_by=draw(st.sampled_from([None, "healer", "human"])),
        pool_size=draw(st.integers(1, 4)), last_launch_at=draw(st.none() | HOURS), last_open_at=draw(st.none() | HOURS),
        last_close_at=draw(st.none() | HOURS), last_supervisor_tick=draw(st.none() | HOURS),
        unknown_files=tuple(draw(st.lists(st.sampled_from(["worktrees/x", "worktrees/y"]), unique=True, max_size=2))),
        halted=draw(st.booleans()),
        failed_sources=frozenset(draw(st.lists(st.sampled_from(["tickets", "agents", "dispatch", "proposals", "main",
                                                                "supervisor"]), max_size=3))),
    )


@st.composite
def policies(draw):
    return Policy.model_validate({
        "remediation": {
            "allowed": draw(st.lists(st.sampled_from(ACTIONS), unique=True)),
            "max_actions_per_tick": draw(st.integers(1, 6)),
            "quiet_period": draw(st.sampled_from(["0s", "10m", "4h"])),
            "observe_only": draw(st.booleans()),
            "rate_limits": {"requeue_ticket": {"count": draw(st.integers(1, 3)), "per": "1h"}},
        },
        "health": {"agent_idle": "30m", "agent_stuck": "90m", "frozen_in_progress": draw(st.sampled_from(["0s", "10m"]))},
    })


@st.composite
def memories(draw):
    times = st.lists(HOURS, max_size=3)
    return Memory(attempts=draw(st.dictionaries(st.sampled_from(IDS + ["w/0", "w/1"]), times, max_size=5)),
                  action_times=draw(st.dictionaries(st.sampled_from(ACTIONS), times, max_size=3)),
                  cooldowns=draw(st.dictionaries(st.sampled_from(["main_red:main", "escalate:T-1"]), HOURS, max_size=2)),
                  first_seen=draw(st.dictionaries(st.sampled_from([f"frozen_in_progress:{t}" for t in IDS]), HOURS, max_size=3)))


CASES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@CASES
@given(snapshots(), policies(), memories())
def test_invariants(s, p, m):
    d = decide(s, p, m)
    allowed = set(p.remediation.allowed)
    # only whitelisted, allowed actions
    assert all(a.action in ACTIONS and a.action in allowed for a in d.actions)
    # blast radius
    assert len(d.actions) <= p.remediation.max_actions_per_tick
    # nothing when halted or observe-only, and no repair agent either
    if s.halted or p.remediation.observe_only:
        assert d.actions == () and not d.repair
        assert all(why == "halt" for _a, why in d.deferred if _a.action != "notify" and not why.startswith(("not ", "cooldown")))
    # no remediation on a subject inside its quiet period
    q = p.remediation.quiet_period
    for a in d.actions:
        if a.action in NON_REMEDIATING:
            continue
        key = a.reason.partition(":")[2]
        assert not any(s.now - t < q for t in m.attempts.get(key, ())), (a, m.attempts.get(key))
        if a.action in TICKET_LEASE:  # the lease is the ticket's: the shell keys its journal the same way
            assert a.params["ticket"] == key or (a.params["ticket"] is None and a.params.get("agent") == key)
    # at most one remediating sequence per subject per tick
    subjects = [a.reason for a in d.actions if a.action not in NON_REMEDIATING]
    assert len({r.partition(":")[2] for r in subjects}) == len(set(subjects))
    # a sentinel whose source failed says unknown and blocks nothing
    unknown = {f.key for f in d.findings if f.status == "unknown"}
    assert not any(a.reason in unknown for a in d.actions)
    assert not any(al.key in unknown for al in d.alerts)
    if "main" in s.failed_sources:
        assert not any(a.action in ("pause_dispatch", "resume_dispatch") for a in d.actions)
    # findings are never early: a threshold kind is reported only at or past its `since`
    assert all(f.since <= s.now for f in d.findings)
    # memory stays JSON
    assert memmod.load(json.loads(json.dumps(memmod.dump(d.memory)))) == d.memory


@CASES
@given(snapshots(), policies(), memories())
def test_deterministic_and_does_not_mutate_inputs(s, p, m):
    before = memmod.dump(m)
    assert decide(s, p, m) == decide(s, p, m)
    assert memmod.dump(m) == before


@settings(max_examples=60, deadline=None)
@given(snapshots(), memories())
def test_next_tick_respects_what_this_tick_did(s, m):
    """Feeding the memory back: a subject remediated now is not remediated again within the quiet period."""
    p = Policy()
    d1 = decide(s, p, m)
    nxt = Snapshot(**{**s.__dict__, "now": s.now + 30})
    d2 = decide(nxt, p, d1.memory)
    done = {a.reason.partition(":")[2] for a in d1.actions if a.action not in NON_REMEDIATING}
    again = {a.reason.partition(":")[2] for a in d2.actions if a.action not in NON_REMEDIATING}
    assert not (done & again)
