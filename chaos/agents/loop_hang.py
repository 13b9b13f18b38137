"""Scripted loop agent: hangs, ignores SIGTERM, and leaves a setsid grandchild behind.

The agent forks a child; the child calls setsid() and forks again (double fork), so
the grandchild leaves the agent's process group and session and is reparented away
from the agent. Every process ignores SIGTERM and waits forever. Each writes its pid
to PIDFILE (one per line) so a test can check afterwards that none is alive.

    python loop_hang.py PIDFILE [--write FILE]    (--write: change the tree first)
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def _note(pidfile: str) -> None:
    with open(pidfile, "a") as f:
        f.write(f"{os.getpid()}\n")
        f.flush()
        os.fsync(f.fileno())


def _forever() -> None:
    while True:
        signal.pause()


def main(argv: list[str]) -> int:
    pidfile = argv[1]
    if len(argv) > 3 and argv[2] == "--write":
        Path(argv[3]).write_text(f"touched by {os.getpid()}\n")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _note(pidfile)
    child = os.fork()
    if child == 0:
        os.setsid()
        grandchild = os.fork()
        if grandchild == 0:
            _note(pidfile)
            _forever()
        _note(pidfile)
        _forever()
    print("working on it...", flush=True)
    _forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
