"""Exploration: generated fault schedules against the simulated engine, held to the standard invariants.

Each schedule is a pure function of its seed (`scenario_for_seed`), so any failure found is
reproduced with `healer gameday replay --seed N`. (First version: seeded generation without
hypothesis shrinking; tests/chaos can drive the same generator through hypothesis.)
"""

from __future__ import annotations

import random

from chaos import engine
from chaos.checkers import STANDARD
from chaos.scenario import Scenario

FAULTS = ["kill_agent", "stop_agent", "continue_agent", "hung_agent", "red_main", "green_main", "frozen_dispatch",
          "thaw_dispatch", "stale_labels", "kill_supervisor", "clock_jump", "alert_flood", "same_commit_repush"]


def scenario_for_seed(seed: int) -> Scenario:
    rng = random.Random(seed)
    faults = []
    for _ in range(rng.randint(1, 6)):
        k = rng.choice(FAULTS)
        f = {"fault": k, "at": f"{rng.randint(1, 300)}m"}
        if k == "alert_flood":
            f["count"] = rng.randint(10, 200)
        if k == "clock_jump":
            f["seconds"] = f"{rng.randint(1, 120)}m"
        faults.append(f)
    return Scenario.model_validate({
        "name": f"explore-{seed}", "mode": "simulated", "seed": seed, "duration": "6h",
        "fleet": {"pool_size": rng.randint(1, 4), "random_tickets": rng.randint(3, 15)},
        "overrides": {"fleet": {"main_gates": [{"name": "tests", "run": ["python", "-m", "pytest"]}]}},
        "faults": faults, "expect": [{"invariant": name} for name in STANDARD],
    })


def explore(examples: int, seed: int = 0) -> int | None:
    """Run `examples` schedules; the seed of the first that breaks an invariant, or None."""
    for s in range(seed, seed + examples):
        r = engine.run(scenario_for_seed(s))
        if not r.ok:
            return s
    return None
