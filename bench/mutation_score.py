"""Benchmark: how many product mutations the simulated game days catch, scenarios alone (no unit test).

Each mutation breaks the product on purpose, in this process (pytest's MonkeyPatch on the real code path, or a
SPEC §10 number changed by a factor of two as the default policy would carry it); then every simulated scenario
of the standard suite (chaos/scenarios/, mode: simulated) runs, and a mutation is caught when at least one
scenario goes red (failed or error). Prints SPEC §11 JSON lines: one per mutation (how many scenarios caught it,
and which), then the totals against the issue 34 targets (>= 10 of the behaviour mutations; every seed number).

    bench/mutation_score.py [--only NAME-SUBSTRING] [--scenarios a,b] [--list]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def behaviour_mutations() -> dict[str, object]:
    """The features switched off in the product: tests/chaos/test_mutations.py's list, each by the same patch."""
    from tests.chaos.test_mutations import MUTANTS

    return {name: how for name, (_scenario, how, _exp) in MUTANTS.items()}


# SPEC §10's seed numbers: each doubled (and halved where doubling cannot change a pass into a failure)
NUMBERS: dict[str, dict] = {
    "health.agent_stuck x2 (90m -> 3h)": {"health": {"agent_stuck": "3h"}},
    "health.agent_idle x2 (30m -> 1h)": {"health": {"agent_idle": "1h"}},
    "health.frozen_in_progress x2 (10m -> 20m)": {"health": {"frozen_in_progress": "20m"}},
    "health.stale_labels to-review x2 (2h -> 4h)": {"health": {"stale_labels": {"to-review": "4h"}}},
    "sentinels.dispatch_frozen x2 (1h -> 2h)": {"sentinels": {"dispatch_frozen": "2h"}},
    "sentinels.pool_saturated x2 (45m -> 1h30m)": {"sentinels": {"pool_saturated": "1h30m"}},
    "sentinels.no_closes x2 (1h30m -> 3h)": {"sentinels": {"no_closes": "3h"}},
    "sentinels.cooldown /2 (4h -> 2h)": {"sentinels": {"cooldown": "2h"}},
    "retry.max_launches x2 (5 -> 10)": {"retry": {"max_launches": 10}},
    "retry.backoff x2": {"retry": {"backoff": ["10m", "20m", "40m", "80m"]}},
    "remediation.quiet_period x2 (4h -> 8h)": {"remediation": {"quiet_period": "8h"}},
    "remediation.max_actions_per_tick x2 (20 -> 40)": {"remediation": {"max_actions_per_tick": 40}},
    "repair_agent.blocked_for x2 (3h -> 6h)": {"repair_agent": {"blocked_for": "6h"}},
    "repair_agent.min_signals x2 (3 -> 6)": {"repair_agent": {"min_signals": 6}},
    "fleet.pool_size x2 (4 -> 8)": {"fleet": {"pool_size": 8}},
}


def scenarios(names: list[str] | None):
    from chaos.scenario import discover, load

    out = [load(p) for p in discover(None)]
    out = [s for s in out if s.mode == "simulated"]
    return [s for s in out if not names or s.name in names]


def run_suite(scs, overrides: dict | None = None) -> list[str]:
    """The scenarios that went red."""
    from chaos import engine

    red = []
    for sc in scs:
        with tempfile.TemporaryDirectory(prefix="mutation-") as d:
            r = engine.run(sc, Path(d) / sc.name, overrides=overrides, keep=False)
        if r.status != "passed":
            red.append(sc.name)
    return red


def main(argv: list[str] | None = None) -> int:
    from _pytest.monkeypatch import MonkeyPatch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="only mutations whose name contains this")
    ap.add_argument("--scenarios", default="", help="comma-separated scenario names (default: every simulated one)")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    a = ap.parse_args(argv)
    behaviours, numbers = behaviour_mutations(), NUMBERS
    if a.list:
        for n in [*behaviours, *numbers]:
            print(n)
        return 0
    scs = scenarios([s for s in a.scenarios.split(",") if s] or None)
    baseline = run_suite(scs)
    if baseline:  # a red suite catches everything: the score would mean nothing
        print(json.dumps({"bench": "mutation_score", "metric": "baseline_red", "value": len(baseline), "unit": "scenarios",
                          "target": 0, "better": "lower", "detail": baseline}))
        return 1
    caught = {"behaviour": [0, 0], "number": [0, 0]}
    for group, items in (("behaviour", behaviours), ("number", numbers)):
        for name, how in items.items():
            if a.only and a.only not in name:
                continue
            t0 = time.monotonic()
            if group == "behaviour":
                mp = MonkeyPatch()
                try:
                    how(mp)
                    red = run_suite(scs)
                finally:
                    mp.undo()
            else:
                red = run_suite(scs, overrides=how)
            caught[group][1] += 1
            caught[group][0] += bool(red)
            print(json.dumps({"bench": "mutation_score", "metric": f"{group}: {name}", "value": len(red),
                              "unit": "scenarios", "target": 1, "better": "higher", "caught_by": red,
                              "seconds": round(time.monotonic() - t0, 1)}), flush=True)
    b, n = caught["behaviour"], caught["number"]
    print(json.dumps({"bench": "mutation_score", "metric": "behaviour_mutations_caught", "value": b[0], "unit": "mutations",
                      "target": min(10, b[1]), "better": "higher", "of": b[1]}))
    print(json.dumps({"bench": "mutation_score", "metric": "seed_numbers_caught", "value": n[0], "unit": "mutations",
                      "target": n[1], "better": "higher", "of": n[1]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
