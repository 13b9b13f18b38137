"""Benchmark: the spine (issue 2).

- an unset failpoint hit: nanoseconds per call (docs/spine.md "Failpoints": inert and near-free; target 1000 ns);
- validating the shipped default policy in process (target 50 ms, median of 5);
- two real processes appending 2,000 events each to one store: events per second and
  "database is locked" errors reaching the caller (target 0).

Prints JSON lines (README "Benchmarks").
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from healer import failpoints  # noqa: E402
from healer.clock import system  # noqa: E402
from healer.policy import load_policy  # noqa: E402
from healer.policy.load import default_policy_path  # noqa: E402
from healer.store import open_store  # noqa: E402

CLOCK = system()


def emit(metric: str, value: float, unit: str, target: float, better: str = "lower") -> None:
    print(json.dumps({"bench": "spine", "metric": metric, "value": round(value, 3), "unit": unit, "target": target,
                      "better": better}), flush=True)


def failpoint_hit_ns(n: int = 200_000) -> float:
    os.environ.pop(failpoints.ENV, None)
    runs = []
    for _ in range(5):
        t0 = CLOCK.monotonic()
        for _ in range(n):
            failpoints.hit("store.before_commit")
        runs.append((CLOCK.monotonic() - t0) / n * 1e9)
    return statistics.median(runs)


def validate_ms() -> float:
    runs = []
    for _ in range(5):
        t0 = CLOCK.monotonic()
        load_policy(default_policy_path())
        runs.append((CLOCK.monotonic() - t0) * 1000)
    return statistics.median(runs)


WRITER = textwrap.dedent("""
    import sys
    from healer.store import open_store
    s = open_store(sys.argv[1])
    errors = 0
    for i in range(int(sys.argv[2])):
        try:
            s.append("bench.append", sys.argv[3], {"i": i})
        except Exception as e:
            errors += "locked" in str(e)
    print(errors)
""")


def concurrent_appends(n: int = 2000) -> tuple[float, int, int]:
    with tempfile.TemporaryDirectory() as d:
        open_store(d).close()
        t0 = CLOCK.monotonic()
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, d, str(n), w], cwd=ROOT, stdout=subprocess.PIPE, text=True)
                 for w in ("a", "b")]
        locked = sum(int(p.communicate(timeout=300)[0].strip() or 0) for p in procs)
        elapsed = CLOCK.monotonic() - t0
        s = open_store(d)
        count = s.count_events("bench.append")
        s.close()
    return count / elapsed, locked, count


def main() -> None:
    emit("failpoint_hit_unset_ns", failpoint_hit_ns(), "ns", 1000)
    emit("validate_default_policy_ms", validate_ms(), "ms", 50)
    rate, locked, count = concurrent_appends()
    emit("two_process_append_events_per_s", rate, "events/s", 1000, "higher")
    emit("two_process_append_locked_errors", locked, "errors", 0)
    emit("two_process_append_events_present", count, "events", 4000, "higher")


if __name__ == "__main__":
    main()
