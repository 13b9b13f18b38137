"""Benchmark: the governed loop runner's own overhead per iteration (issue 3; JSON lines, README "Benchmarks").

The agent is `true` and the gate is `true` (or `false` for the steady-state figure),
so nearly all the time measured is the runner's: preconditions, prompt file, process
session and tree sweep, snapshots of the tree, gates, hashing, progress.md, events in
SQLite, checkpoint, atomic state write.

  iteration_overhead_ms_median  per iteration, between consecutive iterations of a 20-iteration
                                run (agent `true`, gate `false` so that the loop goes on)
  one_iteration_run_ms_median   agent `true`, gate `true`: the single green iteration, from the
                                first precondition check to the final line (commit attempt,
                                result.json and the end-of-run event included)

Target: median <= 50 ms per iteration.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from healer.clock import system  # noqa: E402
from healer.loop import LoopRequest, run_loop  # noqa: E402
from healer.policy.schema import Policy  # noqa: E402

CLOCK = system()


def _repo(path: Path) -> Path:
    path.mkdir(parents=True)
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "b@healer.invalid"], ["config", "user.name", "bench"]):
        subprocess.run(["git", *args], cwd=path, check=True)
    (path / "README.md").write_text("# bench\n")
    (path / ".gitignore").write_text(".healer/\n")
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "init"], cwd=path, check=True)
    return path


def _policy(gate: str, n: int) -> Policy:
    return Policy.model_validate({"version": 1, "loop": {
        "max_iterations": n, "absolute_max": 25, "iteration_timeout": "30s", "kill_grace": "1s",
        "stall": {"same_state": 25, "same_failure": 25},
        "agent": {"preset": "command", "command": ["true"]},
        "gates": [{"name": "g", "run": [gate], "timeout": "30s"}]}})


def _marks(workdir: Path, policy: Policy, run_id: str) -> list[float]:
    marks: list[float] = []
    req = LoopRequest(workdir=workdir, policy=policy, task="bench: do nothing", run_id=run_id,
                      handle_signals=False, subreaper=True, echo=lambda _line: marks.append(CLOCK.monotonic()))
    run_loop(req)
    return marks


def main() -> None:
    green: list[float] = []
    steady: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(15):
            repo = _repo(Path(tmp) / f"g{i}")
            m = _marks(repo, _policy("true", 1), f"g{i}")
            green.append((m[-1] - m[0]) * 1000)  # start line -> final line: one whole iteration
        for i in range(3):
            repo = _repo(Path(tmp) / f"s{i}")
            m = _marks(repo, _policy("false", 20), f"s{i}")
            its = m[1:-1]  # one mark per iteration report
            steady += [(b - a) * 1000 for a, b in zip(its, its[1:], strict=False)]
    for metric, values in (("iteration_overhead_ms_median", steady), ("one_iteration_run_ms_median", green)):
        print(json.dumps({"bench": "loop_overhead", "metric": metric, "value": round(statistics.median(values), 2),
                          "unit": "ms", "target": 50, "better": "lower"}))


if __name__ == "__main__":
    main()
