"""Benchmark: the repair agent's numbers (issue 6).

- the built-in agent unblocking 43 frozen in-progress tickets and 12 stale `to-review`
  labels in one run: wall time (target 30 s, median of 3) and tool calls used
  (target: within the budget of 20);
- the pure trigger deciding over 10,000 blockages (target 100 ms, median of 5).

Prints JSON lines (README "Benchmarks").
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from healer.clock import VirtualClock, system  # noqa: E402
from healer.core.trigger import Blockage, decide  # noqa: E402
from healer.policy import load_policy  # noqa: E402
from healer.repair import launcher  # noqa: E402
from healer.store import open_store  # noqa: E402
from tests.conftest import make_repo  # noqa: E402
from tests.repair.conftest import seed_frozen, seed_stale  # noqa: E402

CLOCK = system()


def line(metric: str, value: float, unit: str, target: float, bench: str = "repair_agent") -> None:
    print(json.dumps({"bench": bench, "metric": metric, "value": round(value, 3), "unit": unit, "target": target,
                      "better": "lower"}), flush=True)


def one_run() -> tuple[float, int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        root = make_repo(Path(tmp) / "fleet")
        (root / ".healer").mkdir(exist_ok=True)
        seeder = open_store(root, VirtualClock(CLOCK.now() - 6 * 3600))
        seed_frozen(seeder, 43)
        seed_stale(seeder, 12)
        seeder.close()
        store = open_store(root)
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        t0 = CLOCK.monotonic()
        res = launcher.launch(root, load_policy(None), store, agent="builtin", reason="bench", env=env)
        elapsed = CLOCK.monotonic() - t0
        store.close()
        return elapsed, res.calls, res.done


def trigger_ms() -> float:
    policy = load_policy(None)
    now = 1_800_000_000.0
    bs = [Blockage(f"stale_label:T-{i}", now - (i % 5) * 3600, i % 5, now - (i % 7) * 3600) for i in range(10_000)]
    t0 = CLOCK.monotonic()
    decide(bs, [now - 60], {}, policy, now)
    return (CLOCK.monotonic() - t0) * 1000


def main() -> int:
    runs = [one_run() for _ in range(3)]
    line("builtin_unblock_43_frozen_12_stale_s", statistics.median(r[0] for r in runs), "s", 30)
    line("builtin_tool_calls_for_55_fixes", max(r[1] for r in runs), "calls", 20)
    if any(r[2] != 55 for r in runs):
        print(json.dumps({"bench": "repair_agent", "error": f"expected 55 fixes, got {[r[2] for r in runs]}"}))
        return 1
    line("should_launch_10k_blockages_ms", statistics.median(trigger_ms() for _ in range(5)), "ms", 100, "repair_trigger")
    return 0


if __name__ == "__main__":
    sys.exit(main())
