"""Scripted loop agent: changes the tree every time (a new line in notes.txt) but never
touches what the failing test checks, so the same test fails the same way each time."""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    n = argv[1] if len(argv) > 1 else "?"
    with Path("notes.txt").open("a") as f:
        f.write(f"iteration {n}: looked at the failure, changed nothing relevant\n")
    print(f"iteration {n}: edited notes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
