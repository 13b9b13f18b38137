"""Signals that arrive before a command is ready for them (`healer loop run` in its first milliseconds).

Importing the CLI takes a few hundred milliseconds; a SIGTERM in that window used to kill
the loop with the default action (exit 143, no message). `arm()` runs first thing in the
process (healer/launch.py's entry, healer/cli:entry) and only records the signal; the loop runner
reads `received` when it installs its own handlers and stops cleanly (exit 4) at once.
Deliberately free of imports beyond `signal` and `sys`: it must be cheap enough to be first.
"""

import signal
import sys

received: str | None = None


def _note(signum, _frame) -> None:
    global received
    received = received or signal.Signals(signum).name


def wants(argv: list[str]) -> bool:
    """Only the governed loop turns an early signal into a clean stop; other commands keep the default."""
    words = [a for a in argv if not a.startswith("-")]
    return len(words) >= 2 and words[0] == "loop" and words[1] == "run"


def arm(argv: list[str] | None = None) -> None:
    if wants(list(sys.argv[1:] if argv is None else argv)):
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, _note)

