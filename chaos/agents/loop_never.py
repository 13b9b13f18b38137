"""Scripted loop agent: never converges, but changes the tree every time.

Writes a fresh random word (letters g-z only, so normalisation keeps it) to
`attempt.txt`; the `solved` gate fails with a different message each time. Optional
`--cost USD` prints a Claude-style JSON result line reporting that cost.

    python loop_never.py [--cost USD] [--file attempt.txt]
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    cost = None
    target = "attempt.txt"
    args = argv[1:]
    while args:
        a = args.pop(0)
        if a == "--cost":
            cost = float(args.pop(0))
        elif a == "--file":
            target = args.pop(0)
    word = "".join(random.choice("ghijklmnopqrstuvwxyz") for _ in range(10))
    Path(target).write_text(word + "\n")
    if cost is not None:
        print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": f"tried {word}",
                          "total_cost_usd": cost, "session_id": "0b9c1c44-5e0e-4c5e-9a55-1f0e8d1d2a3b", "num_turns": 3}))
    else:
        print(f"tried {word}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
