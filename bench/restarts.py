"""Benchmark: a restart storm (issue 13), small enough for `make bench`.

A real fleet of 8 tickets; `healer up` SIGKILLed 6 times at seeded moments (half of the kills with the
loop runners), restarted each time, then left to finish. The numbers that must not move: tickets done
(target all), tickets merged twice, escalations, processes left (target 0 each); and the wall time of
the whole storm. The full campaign (30 tickets x 20 kills x 3 seeds) is `make campaigns`.

Prints JSON lines (README "Benchmarks").
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chaos.storm import StormConfig, StormRun  # noqa: E402
from healer.clock import system  # noqa: E402


def line(metric: str, value: float, unit: str, target: float, better: str) -> None:
    print(json.dumps({"bench": "restarts", "metric": metric, "value": value, "unit": unit, "target": target,
                      "better": better}), flush=True)


def main() -> None:
    clock = system()
    d = Path(tempfile.mkdtemp(prefix="bench-restarts-"))
    try:
        t0 = clock.monotonic()
        f = StormRun(StormConfig(seed=13, tickets=8, kills=6, with_runners=0.5, pool_size=4, agent_delay=1.0), d).run()
        wall = clock.monotonic() - t0
    finally:
        shutil.rmtree(d, ignore_errors=True)
    line("tickets_done_after_6_kills", f["done"], "tickets", f["total"], "higher")
    line("tickets_merged_twice", len(f["merged_twice"]), "tickets", 0, "lower")
    line("escalations", len(f["escalations"]), "count", 0, "lower")
    line("processes_left", len(f["left"]), "count", 0, "lower")
    line("storm_wall_s", round(wall, 1), "s", 180, "lower")


if __name__ == "__main__":
    main()
