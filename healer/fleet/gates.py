"""Run a list of gates (argv + timeout) in a folder, cheapest first, stop at the first failure.

Exit codes decide. A gate that cannot decide (timed out, cannot start) makes the
result `unknown`; the caller chooses whether unknown blocks (a merge) or lets pass
(main's status, fail-open).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from healer import procs
from healer.clock import Clock, system

PASS = "pass"
FAIL = "fail"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class GateResult:
    outcome: str  # pass | fail | unknown
    failed: str | None  # name of the gate that failed or could not decide
    log: str

    def tail(self, n: int) -> str:
        return "\n".join(self.log.splitlines()[-n:])


def run_gates(gates, cwd: str | Path, *, grace: float = 5.0, clock: Clock | None = None) -> GateResult:
    clock = clock or system()
    parts: list[str] = []
    for g in gates:
        parts.append(f"$ {' '.join(g.run)}  # gate {g.name}")
        with tempfile.TemporaryFile(mode="w+b") as out:
            try:
                done = procs.run(g.run, cwd=cwd, timeout=g.timeout, grace=grace, clock=clock, stdout=out, stderr=out)
            except OSError as e:
                parts.append(f"gate {g.name}: cannot start: {e}")
                return GateResult(UNKNOWN, g.name, "\n".join(parts))
            out.seek(0)
            text = out.read().decode(errors="replace").rstrip()
        if text:
            parts.append(text)
        if done.timed_out or done.exit_code is None:
            parts.append(f"gate {g.name}: no verdict within {g.timeout:.0f}s (killed)")
            return GateResult(UNKNOWN, g.name, "\n".join(parts))
        parts.append(f"gate {g.name}: exit {done.exit_code}")
        if done.exit_code != 0:
            return GateResult(FAIL, g.name, "\n".join(parts))
    return GateResult(PASS, None, "\n".join(parts))
