"""Acceptance 4: the pool size is never exceeded and no ticket ever has two live agents.

Random ticket sets (priorities, blocked_by, scripted behaviours) driven through real
ticks with real child processes; agents are killed at random; the clock jumps.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healer import procs
from tests.fleet.conftest import NO_FILE, gate, make_fleet, scripted_policy

BEHAVIOURS = ["success", "fail", "die", "noop", "broken", "hang", "hang+commit", "stall", "fail,success", "die,success"]


@st.composite
def specs(draw):
    n = draw(st.integers(1, 6))
    tickets = []
    for i in range(n):
        earlier = [f"T-{j}" for j in range(i)]
        deps = draw(st.lists(st.sampled_from(earlier), max_size=2, unique=True)) if earlier else []
        tickets.append((f"T-{i}", draw(st.sampled_from(BEHAVIOURS)), draw(st.integers(0, 3)), deps))
    steps = draw(st.lists(st.sampled_from(["tick", "tick", "advance", "wait", "kill"]), min_size=4, max_size=14))
    return draw(st.integers(1, 3)), tickets, steps, draw(st.randoms(use_true_random=False))


def check(f, pool: int) -> None:
    rows = [a for a in f.store.agents(states=["running"]) if a.data.get("launched_by") == "dispatch"]
    assert len(rows) <= pool, f"{len(rows)} running agents in the store, pool {pool}"
    per = Counter(a.ticket_id for a in rows)
    assert all(n == 1 for n in per.values()), f"two agents on one ticket: {per}"
    alive = [a for a in rows if procs.alive(a.pid)]
    assert len(alive) <= pool
    # the world, not just the records: every child process the dispatcher started that still lives
    live_children = [h for h in f.d.runtime.children() if f.d.runtime.status(h).state in ("running", "paused")]
    assert len(live_children) <= pool, f"{len(live_children)} live agent processes, pool {pool}"
    by_pid = {a.pid: a.ticket_id for a in f.store.agents()}
    assert all(n == 1 for n in Counter(by_pid.get(h.pid) for h in live_children).values())


@pytest.mark.long  # 15 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=specs())
def test_pool_and_single_agent_invariants(tmp_path_factory, spec):
    pool, tickets, steps, rnd = spec
    policy = scripted_policy(pool_size=pool, merge_gates=[gate("no-broken", NO_FILE.format("BROKEN"))],
                             agent_args=["--hang-max", "20"])
    f = make_fleet(tmp_path_factory.mktemp("pool"), policy)
    try:
        for tid, behaviour, prio, deps in tickets:
            f.add(tid, behaviour, priority=prio, blocked_by=deps)
        for step in [*steps, "tick"]:
            if step == "tick":
                f.d.tick()
            elif step == "advance":
                f.clock.advance(rnd.choice([30, 300, 1200, 2400]))
            elif step == "wait":
                f.d.wait_idle(0.3)
            elif step == "kill":
                live = f.running()
                if live:
                    try:
                        os.kill(rnd.choice(live).pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            check(f, pool)
        # every ticket ends somewhere legal; nothing is ever in progress without a live agent of ours after a tick
        f.d.stop_agents(grace=0.5)
        f.d.tick()
        check(f, pool)
        for t in f.store.tickets():
            assert t.state in ("queued", "review", "done", "blocked", "needs_human", "in_progress")
            if t.state == "in_progress":
                assert f.running(t.id)
    finally:
        f.d.stop_agents(grace=0.5)
        f.store.close()
