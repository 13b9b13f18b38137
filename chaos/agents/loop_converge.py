"""Scripted loop agent: converges in K steps.

Iteration n writes `work/step_n.txt` (idempotent: a redone iteration rewrites the same
file). The matching gate (`loop_gate.py steps K`) passes once step_1 … step_K exist, so
a loop driving this agent reaches green at iteration K exactly.

    python loop_converge.py {iteration} [--k K]
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    n = int(argv[1])
    work = Path("work")
    work.mkdir(exist_ok=True)
    (work / f"step_{n}.txt").write_text(f"step {n} done\n")
    print(f"wrote work/step_{n}.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
