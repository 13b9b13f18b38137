"""Scripted loop agent: drifts out of scope, writing a huge new file and rewriting a big
chunk of an existing one, so the iteration's diff exceeds the policy cap."""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    lines = int(argv[1]) if len(argv) > 1 else 1000
    Path("generated.txt").write_text("".join(f"generated line {i}\n" for i in range(lines)))
    readme = Path("README.md")
    if readme.exists():
        readme.write_text(readme.read_text() + "rewritten by an over-eager agent\n")
    print(f"wrote {lines} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
