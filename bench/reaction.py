"""Benchmark: how fast the dispatcher learns that an agent ended (issue 15).

A real git fleet, real child processes, the default 30 s dispatch tick. 50 agents wait for
a start signal, then each sleeps a random 0-15 s and exits 0, writing the wall time just
before it exits; the latency is `attempt.ended` minus that time (p50/p99, target p99 <= 1 s).
Then 20 more agents are SIGKILLed at random moments; the latency is the kill to the attempt
closed with `killed: SIGKILL` (the dispatcher's finding). Without the exit watch both would
wait for the next tick: up to 30 s.

Prints JSON lines (README "Benchmarks").
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from healer.clock import system  # noqa: E402
from healer.policy.schema import Policy  # noqa: E402
from tests.fleet.conftest import make_fleet  # noqa: E402

CLOCK = system()
AGENT = """
import os, random, sys, time
go, out = sys.argv[1], sys.argv[2]
while not os.path.exists(go):
    time.sleep(0.02)
time.sleep(random.Random(out).uniform(0, float(sys.argv[3])))
with open(out + ".tmp", "w") as f:
    f.write(repr(time.time()))
os.replace(out + ".tmp", out)
sys.exit(0)
"""


def emit(metric: str, value: float, unit: str, target: float, better: str = "lower") -> None:
    print(json.dumps({"bench": "reaction", "metric": metric, "value": round(value, 3), "unit": unit, "target": target,
                      "better": better}), flush=True)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def fleet(d: Path, n: int, spread: float):
    agent = d / "agent.py"
    agent.write_text(AGENT)
    go = d / "go"
    cmd = [sys.executable, str(agent), str(go), str(d / "ends" / "{run_id}"), str(spread)]
    pol = Policy.model_validate({"fleet": {"pool_size": n, "loop_command": cmd, "dispatch_tick": "30s"},
                                 "notify": {"notifiers": [{"kind": "jsonl", "path": ".healer/notifications.jsonl"}]}})
    (d / "ends").mkdir()
    f = make_fleet(d, pol, CLOCK)
    for i in range(n):
        f.add(f"T-{i}", "success")
    return f, go


def run(f, until, timeout: float = 240.0):
    t = threading.Thread(target=f.d.run_forever, daemon=True)
    t.start()
    end = CLOCK.monotonic() + timeout
    while not until() and CLOCK.monotonic() < end:
        CLOCK.sleep(0.1)
    return t


def finished(n: int = 50) -> list[float]:
    with tempfile.TemporaryDirectory() as d:
        f, go = fleet(Path(d), n, 15.0)
        t = run(f, lambda: len(f.running()) == n)
        assert len(f.running()) == n, "agents did not all start"
        go.touch()
        run_until = CLOCK.monotonic() + 120
        while len(f.store.events(kinds=["attempt.ended"])) < n and CLOCK.monotonic() < run_until:
            CLOCK.sleep(0.2)
        f.d.stop()
        t.join(60)
        lat = []
        for e in f.store.events(kinds=["attempt.ended"]):
            run_id = f.store.ticket(e.subject).data.get("run_id")
            end = Path(d) / "ends" / run_id
            if end.exists():
                lat.append(e.at - float(end.read_text()))
        f.d.stop_agents(1.0)
        f.store.close()
    return lat


def killed(n: int = 20) -> list[float]:
    with tempfile.TemporaryDirectory() as d:
        f, go = fleet(Path(d), n, 3600.0)
        t = run(f, lambda: len(f.running()) == n)
        agents = f.running()
        rnd = random.Random(5)
        at: dict[str, float] = {}
        for a in agents:
            CLOCK.sleep(rnd.uniform(0.05, 0.4))
            at[a.ticket_id] = CLOCK.now()
            os.killpg(a.pid, signal.SIGKILL)
        run_until = CLOCK.monotonic() + 120
        while len(f.store.events(kinds=["attempt.ended"])) < n and CLOCK.monotonic() < run_until:
            CLOCK.sleep(0.2)
        f.d.stop()
        t.join(60)
        lat = [e.at - at[e.subject] for e in f.store.events(kinds=["attempt.ended"])
               if "SIGKILL" in str(e.payload.get("failure_signature")) and e.subject in at]
        f.d.stop_agents(1.0)
        f.store.close()
    return lat


if __name__ == "__main__":
    lat = finished()
    emit("finished_to_attempt_closed_p50_s", statistics.median(lat), "s", 1.0)
    emit("finished_to_attempt_closed_p99_s", pct(lat, 99), "s", 1.0)
    emit("finished_agents_measured", len(lat), "count", 50, "higher")
    lat = killed()
    emit("sigkill_to_finding_p50_s", statistics.median(lat), "s", 1.0)
    emit("sigkill_to_finding_p99_s", pct(lat, 99), "s", 1.0)
    emit("killed_agents_measured", len(lat), "count", 20, "higher")
