"""24 hours of ticks on a VirtualClock, memory fed back each tick: the core knows when to stop."""

from __future__ import annotations

from collections import Counter

from healer.clock import VirtualClock
from healer.core import decide
from healer.core.model import Memory, Snapshot
from healer.policy.schema import Policy
from tests.synth import T0, ticket

DAY = 86_400


def run(build, policy: Policy, hours: float = 24):
    """Tick every supervisor.tick; the world never changes (every remediation 'fails'). Returns counters."""
    clock = VirtualClock(T0)
    mem = Memory()
    acts: Counter = Counter()
    alerts: Counter = Counter()
    while clock.now() < T0 + hours * 3600:
        d = decide(build(clock.now()), policy, mem)
        acts.update((a.action, a.subject) for a in d.actions)
        alerts.update(a.key for a in d.alerts)
        mem = d.memory
        clock.advance(policy.supervisor.tick)
    return acts, alerts


def test_unfixable_frozen_ticket_is_retried_three_times_then_escalated_not_stormed():
    p = Policy()
    acts, alerts = run(lambda now: Snapshot(now=now, tickets=(ticket("T-1", "in_progress", at=T0),)), p)
    assert acts[("requeue_ticket", "T-1")] == 3  # at 10 min, then once per 4 h quiet period
    esc = acts[("escalate", "T-1")]
    assert 1 <= esc <= DAY / p.sentinels.cooldown  # then escalated, at most once per cooldown window
    assert alerts["escalate:T-1"] == esc


def test_a_condition_that_never_clears_alerts_once_per_cooldown():
    """The 99-identical-notifications incident: one alert per key per window, however often it fires."""
    p = Policy()
    acts, alerts = run(lambda now: Snapshot(now=now, main_status="red", main_red_since=T0, dispatch_paused=True,
                                            dispatch_paused_by="healer"), p)
    assert alerts["main_red:main"] == DAY / p.sentinels.cooldown
    assert not acts  # already paused: nothing to do


def test_relaunch_storm_is_stopped_after_the_second_identical_launch():
    from tests.synth import agent, attempt, worktree

    def world(now):
        n = 1 + int((now - T0) // 600)  # the dispatcher relaunches every 10 min on the same head
        return Snapshot(now=now, tickets=(ticket("T-1", "in_progress", at=T0),),
                        agents=(agent(f"A-{n}", "T-1", at=now - 1, worktree="w"),), worktrees=(worktree("w", "T-1"),),
                        attempts={"T-1": tuple(attempt(i, "T-1", at=T0 + 600 * i, head="same", state_hash="s") for i in range(n))})

    acts, _alerts = run(world, Policy(), hours=2)
    firsts = sorted(k for k in acts if k[0] == "escalate")
    assert firsts == [("escalate", "T-1")] and acts[("escalate", "T-1")] == 1
