"""The incremental decision equals the full one after any sequence of fleet changes and clock steps (property).

Unchanged tickets, agents and worktrees keep their very objects from one snapshot to the next, as the
shell's Gatherer hands them out, so the incremental path really skips them; a changed one is a new object.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healer import lifecycle
from healer.core import decide, incremental
from healer.core.model import AgentView, Memory, WorktreeView
from healer.policy.schema import Policy
from healer.records import Proposal
from tests.supervisor.test_core_props import IDS, policies, snapshots
from tests.synth import T0, agent, attempt, fleet, ticket

STEP = st.tuples(st.sampled_from(["ticket", "drop", "agent", "alive", "worktree", "attempt", "merged", "reopened",
                                  "proposal", "time", "creep", "creep", "deadline", "nothing"]),
                 st.integers(0, 7), st.sampled_from(lifecycle.STATES),
                 st.floats(min_value=0, max_value=4 * 3600, allow_nan=False))


def _mutate(s, op, i, state, dt, carry):
    """One change to the fleet; everything else keeps its object."""
    tid = IDS[i]
    if op == "ticket":  # a new version of ticket i (or a new ticket)
        t = ticket(tid, state, at=s.now - dt, labels={"to-review": s.now - dt} if i % 2 else {},
                   blocked_by=(IDS[(i + 1) % 8],) if i % 3 == 0 else (), data={"reviews": "T-1"} if i == 5 else {},
                   created_at=T0 - 3600 * i)
        rest = tuple(x for x in s.tickets if x.id != tid)
        return replace(s, tickets=rest[:i] + (t,) + rest[i:])
    if op == "drop":
        return replace(s, tickets=tuple(x for x in s.tickets if x.id != tid))
    if op == "agent":
        v = agent(f"A-{i}", tid, at=s.now - dt, alive=bool(i % 2), state="running" if i % 4 else "exited",
                  worktree=f"w/{i % 3}", heartbeat_at=s.now - dt)
        return replace(s, agents=tuple(x for x in s.agents if x.agent.id != f"A-{i}") + (v,))
    if op == "alive" and s.agents:
        k = i % len(s.agents)
        v = s.agents[k]
        nv = AgentView(v.agent, not v.alive, v.paused, v.last_commit_at, v.exit_code)
        return replace(s, agents=s.agents[:k] + (nv,) + s.agents[k + 1:])
    if op == "worktree" and s.worktrees:
        k = i % len(s.worktrees)
        w = s.worktrees[k]
        nw = WorktreeView(w.worktree, not w.exists, w.busy_pids, w.unknown_files)
        return replace(s, worktrees=s.worktrees[:k] + (nw,) + s.worktrees[k + 1:])
    if op == "attempt":
        atts = dict(s.attempts)
        have = atts.get(tid, ())
        atts[tid] = have + (attempt(len(have) + 1, tid, at=s.now, head="h1", state_hash="s"),)
        return replace(s, attempts=atts)
    if op == "merged":
        return replace(s, merged_tickets=s.merged_tickets ^ {tid})
    if op == "reopened":
        return replace(s, reopened=s.reopened ^ {tid})
    if op == "proposal":
        return replace(s, proposals=s.proposals + (Proposal(len(s.proposals) + 100, tid, "b", "c",
                                                            "open" if i % 2 else "merged", s.now),))
    if op == "time":
        return replace(s, now=s.now + dt)
    if op == "creep":  # small steps: a tick lands between a threshold and a late re-check, if one is late
        return replace(s, now=s.now + dt % 97)
    if op == "deadline" and carry.later:  # the clock around the next re-check the carry plans (a late one shows)
        return replace(s, now=max(s.now, min(carry.later.values()) + (-60.0, -1.0, 0.0, 1e-3, 0.5, 2.0)[i % 6]))
    return replace(s)


def _same(s, policy, memory, carry):
    want = decide(s, policy, memory)
    got, carry = incremental.decide(s, policy, memory, carry)
    assert got == want
    return want, carry


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(snapshots(), policies(), st.lists(STEP, min_size=1, max_size=16))
def test_incremental_equals_full(snap, policy, steps):
    snap = replace(snap, tickets=tuple({t.id: t for t in snap.tickets}.values()))  # one ticket per id, as the store has
    memory = Memory()
    want, carry = _same(snap, policy, memory, None)
    s = snap
    for op, i, state, dt in steps:
        s = _mutate(s, op, i, state, dt, carry)
        want, carry = _same(s, policy, want.memory, carry)


def test_big_fleet_incremental_equals_full_and_skips_the_unchanged():
    """A 2,000-ticket fleet (every finding kind), then a few changes: the same decision, and only the
    changed tickets (plus passed deadlines) are judged again."""
    policy = Policy()
    s = fleet(2000, 200, 200)
    want, carry = _same(s, policy, Memory(), None)
    assert carry.mode == "full"
    t = s.tickets[5]
    s2 = replace(s, tickets=s.tickets[:5] + (replace(t, state=lifecycle.QUEUED, updated_at=s.now),) + s.tickets[6:],
                 now=s.now + 30)
    want, carry = _same(s2, policy, want.memory, carry)
    assert carry.mode.startswith("incremental") and int(carry.mode.split("(")[1].split()[0]) < 50
    # a cycle broken and one made: the two tickets of the first cycle unblocked, a new pair blocking each other
    a, b = s2.tickets[3], s2.tickets[4]
    x, y = s2.tickets[30], s2.tickets[31]
    new = list(s2.tickets)
    new[3], new[4] = replace(a, blocked_by=()), replace(b, blocked_by=())
    new[30], new[31] = replace(x, state="queued", blocked_by=(y.id,)), replace(y, state="queued", blocked_by=(x.id,))
    s3 = replace(s2, tickets=tuple(new), now=s2.now + 30)
    _same(s3, policy, want.memory, carry)
