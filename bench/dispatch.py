"""Benchmark: the dispatcher (issue 4).

- the pure plan over 1,000 tickets with blocked_by chains, attempts and proposals
  (target 100 ms, median of 5);
- one real dispatch tick that launches 4 scripted agents in a real git repo
  (target 2 s, median of 3; wall time, so it includes git worktree creation);
- backoff accuracy on a virtual clock: the always-failing ticket's 5 launch times
  against the policy's schedule (target 0 s of error).

Prints JSON lines (README "Benchmarks").
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from healer.clock import VirtualClock, system  # noqa: E402
from healer.core import dispatch as core  # noqa: E402
from healer.records import Attempt, Proposal, Ticket  # noqa: E402
from tests.fleet.conftest import make_fleet, scripted_policy  # noqa: E402

CLOCK = system()


def emit(metric: str, value: float, unit: str, target: float, better: str = "lower") -> None:
    print(json.dumps({"bench": "dispatch", "metric": metric, "value": round(value, 3), "unit": unit, "target": target,
                      "better": better}), flush=True)


def plan_input(n: int, seed: int = 7) -> core.DispatchInput:
    rnd = random.Random(seed)
    now = 1_000_000.0
    tickets, atts, props = [], {}, {}
    for i in range(n):
        deps = [f"T-{j}" for j in rnd.sample(range(i), min(i, rnd.randint(0, 2)))]
        state = rnd.choice(["queued"] * 6 + ["review", "in_progress", "done", "done", "blocked"])
        tickets.append(Ticket(id=f"T-{i}", title="t", state=state, priority=rnd.randint(0, 3), blocked_by=tuple(deps),
                              created_at=float(i)))
        atts[f"T-{i}"] = [Attempt(k, f"T-{i}", "launch", now - 1000 * k, "r", now - 900 * k, rnd.choice([0, 1, -9]),
                                  None, "s", "h") for k in range(rnd.randint(0, 4))]
        props[f"T-{i}"] = [Proposal(k, f"T-{i}", "b", "c", rnd.choice(["rejected", "open"]), 0.0) for k in range(rnd.randint(0, 2))]
    live = {t.id: 1 for t in tickets if t.state == "in_progress"}
    return core.DispatchInput(now, tickets, atts, props, live, pool_size=len(live) + 8)


def bench_plan() -> None:
    inp = plan_input(1000)
    runs = []
    for _ in range(5):
        t0 = CLOCK.monotonic()
        core.decide(inp, core.RetryRules())
        runs.append((CLOCK.monotonic() - t0) * 1000)
    emit("plan_ms_1k_tickets", statistics.median(runs), "ms", 100)


def bench_tick() -> None:
    runs = []
    for _ in range(3):
        with tempfile.TemporaryDirectory() as d:
            f = make_fleet(Path(d), scripted_policy(pool_size=4))
            for i in range(6):
                f.add(f"T-{i}", "success")
            t0 = CLOCK.monotonic()
            rep = f.d.tick()
            runs.append(CLOCK.monotonic() - t0)
            assert len(rep.launched) == 4
            f.d.wait_idle(60)
            f.store.close()
    emit("tick_launch_4_agents_s", statistics.median(runs), "s", 2)


def bench_backoff() -> None:
    with tempfile.TemporaryDirectory() as d:
        f = make_fleet(Path(d), scripted_policy(), VirtualClock())
        f.add("T-1", "fail")
        t0 = f.clock.now()
        while f.store.ticket("T-1").state != "needs_human":
            if f.d.tick().launched:
                f.d.wait_idle(60)  # the next tick reaps it at the same virtual second
            else:
                f.clock.advance(1)
        got = [e.at - t0 for e in f.store.events(kinds=["dispatch.launched"], subject="T-1")]
        f.store.close()
    want = [0, 300, 900, 2100, 4500]
    emit("backoff_error_s", max(abs(a - b) for a, b in zip(got, want, strict=True)), "s", 0)
    emit("launches_before_needs_human", len(got), "count", 5, "lower")


if __name__ == "__main__":
    bench_plan()
    bench_tick()
    bench_backoff()
