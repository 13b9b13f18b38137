"""Benchmark: what containment costs (issue 11; JSON lines, README "Benchmarks").

Measured in the same run, so the ratios hold on a noisy machine:

  iteration_ms_none / iteration_ms_bwrap   per iteration of a 12-iteration loop (agent `true`, gate
                                           `false`), unsandboxed (git dir + outside-write checks) and
                                           in bubblewrap (agent and gate each in a sandbox)
  bwrap_added_ms_per_iteration             the difference (two sandboxed processes per iteration)
  container_added_ms_per_iteration         the same for `loop.sandbox: container` (a container per agent run
                                           and per gate), when a Docker engine answers; informational
  git_runner_overhead_ratio                healer.git.run (neutralised: -c overrides, driver scan
                                           cached on config stat) against a plain `git rev-parse`

Targets: bubblewrap adds at most 50 ms per iteration; the neutralised git runner costs at most
1.5x a plain git call.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.loop_overhead import _marks, _repo  # noqa: E402
from healer import git, sandbox  # noqa: E402
from healer.clock import system  # noqa: E402
from healer.policy.schema import Policy  # noqa: E402

CLOCK = system()


def _policy(mode: str, n: int = 12) -> Policy:
    return Policy.model_validate({"version": 1, "loop": {
        "max_iterations": n, "absolute_max": 25, "iteration_timeout": "30s", "kill_grace": "1s",
        "stall": {"same_state": 25, "same_failure": 25}, "sandbox": mode,
        "agent": {"preset": "command", "command": ["true"]},
        "gates": [{"name": "g", "run": ["false"], "timeout": "30s"}]}})


def _per_iteration(tmp: Path, mode: str, runs: int, n: int = 12) -> list[float]:
    out: list[float] = []
    for i in range(runs):
        repo = _repo(tmp / f"{mode}{i}")
        m = _marks(repo, _policy(mode, n), f"{mode}{i}")
        its = m[1:-1]
        out += [(b - a) * 1000 for a, b in zip(its, its[1:], strict=False)]
    return out


def _git_ratio(repo: Path, n: int = 40) -> float:
    ours, plain = [], []
    git.run(repo, "rev-parse", "HEAD")
    for _ in range(n):
        t = CLOCK.monotonic()
        git.run(repo, "rev-parse", "HEAD")
        ours.append(CLOCK.monotonic() - t)
        t = CLOCK.monotonic()
        subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True)
        plain.append(CLOCK.monotonic() - t)
    return statistics.median(ours) / statistics.median(plain)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        none = _per_iteration(t, "none", 3)
        rows = [("iteration_ms_none", statistics.median(none), "ms", None)]
        if sandbox.unavailable() is None:
            bw = _per_iteration(t, "bwrap", 3)
            added = statistics.median(bw) - statistics.median(none)
            rows += [("iteration_ms_bwrap", statistics.median(bw), "ms", None),
                     ("bwrap_added_ms_per_iteration", added, "ms", 50)]
        try:
            sandbox.container_ready("healer-python", "bench")
            ct = _per_iteration(t, "container", 1, 5)
            rows.append(("container_added_ms_per_iteration", statistics.median(ct) - statistics.median(none), "ms", None))
        except Exception as e:  # noqa: BLE001 - no engine here: the row is left out, said on stderr
            print(f"bench sandbox: container row skipped: {e}", file=sys.stderr)
        rows.append(("git_runner_overhead_ratio", _git_ratio(_repo(t / "g")), "x", 1.5))
    for metric, value, unit, target in rows:
        print(json.dumps({"bench": "sandbox", "metric": metric, "value": round(value, 2), "unit": unit,
                          "target": target, "better": "lower"}))


if __name__ == "__main__":
    main()
