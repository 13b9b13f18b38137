"""Gates for the scripted loop agents (real commands with real exit codes).

    python loop_gate.py steps K        pass when work/step_1.txt … work/step_K.txt exist
    python loop_gate.py solved FILE    pass when FILE says SOLVED
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    kind = argv[1]
    if kind == "steps":
        k = int(argv[2])
        for i in range(1, k + 1):
            if not Path(f"work/step_{i}.txt").exists():
                print(f"error: missing work/step_{i}.txt")
                return 1
        print(f"all {k} steps present")
        return 0
    if kind == "solved":
        p = Path(argv[2])
        text = p.read_text().strip() if p.exists() else "<no file>"
        if text == "SOLVED":
            return 0
        print(f"error: expected SOLVED in {p}, got {text!r}")
        return 1
    print(f"error: unknown gate kind {kind!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
