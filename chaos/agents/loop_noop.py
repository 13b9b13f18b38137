"""Scripted loop agent: changes nothing. `--say TEXT` prints TEXT (the same every time)."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if len(argv) > 2 and argv[1] == "--say":
        print(argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
