"""Benchmark: 24 simulated hours of a fleet of 100 tickets and 10 agents, with faults, on the simulated engine.

Prints SPEC §11 JSON lines. Target: at most 10 s of wall time (median of 3 runs).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chaos import engine  # noqa: E402
from chaos.scenario import Scenario  # noqa: E402
from healer.clock import system  # noqa: E402

SPEC = {
    "name": "bench-24h-100-tickets",
    "mode": "simulated",
    "seed": 42,
    "duration": "24h",
    "fleet": {"pool_size": 10, "random_tickets": 100},
    "faults": [
        {"at": "1h", "fault": "kill_agent", "target": "R-1*"},
        {"at": "3h", "fault": "red_main"},
        {"at": "4h", "fault": "green_main"},
        {"at": "6h", "fault": "hung_agent", "target": "R-2*"},
        {"at": "8h", "fault": "stale_labels", "target": "R-3*"},
        {"at": "10h", "fault": "frozen_dispatch"},
        {"at": "13h", "fault": "thaw_dispatch"},
        {"at": "15h", "fault": "alert_flood", "count": 500},
        {"at": "18h", "fault": "clock_jump", "seconds": "10m"},
    ],
    "overrides": {"fleet": {"main_gates": [{"name": "tests", "run": ["python", "-m", "pytest"]}]}},
    "expect": [{"invariant": "one_live_agent_per_ticket"}, {"invariant": "intents_settled"}],
}


def main() -> None:
    clock = system()
    sc = Scenario.model_validate(SPEC)
    walls = []
    last = None
    for _ in range(3):
        with tempfile.TemporaryDirectory() as d:
            t0 = clock.monotonic()
            last = engine.run(sc, Path(d))
            walls.append(clock.monotonic() - t0)
    assert last is not None
    med = statistics.median(walls)
    print(json.dumps({"bench": "simulation_speed", "metric": "wall_s_24h_100_tickets_10_agents", "value": round(med, 3),
                      "unit": "s", "target": 10, "better": "lower"}))
    print(json.dumps({"bench": "simulation_speed", "metric": "virtual_to_wall_ratio", "value": round(86400 / med, 1),
                      "unit": "x", "target": 8640, "better": "higher"}))
    print(json.dumps({"bench": "simulation_speed", "metric": "events_24h", "value": last.stats.get("events"),
                      "unit": "events", "target": None, "better": "higher"}))
    print(json.dumps({"bench": "simulation_speed", "metric": "invariants_held", "value": int(last.ok), "unit": "bool",
                      "target": 1, "better": "higher"}))


if __name__ == "__main__":
    main()
