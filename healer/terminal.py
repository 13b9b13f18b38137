"""The terminal output every command and every game-day report prints through (rich), set up one way."""

from __future__ import annotations

import os
import sys

from rich.console import Console


def make_console(stderr: bool = False) -> Console:
    """A terminal gets rich's width; a pipe or a CI log gets 200 columns (unless COLUMNS says otherwise),
    plain lines are never wrapped, and tables fold long cells instead of cutting them with "…", so
    scenario names, broken expectations and run ids survive `| tee`."""
    stream = sys.stderr if stderr else sys.stdout
    tty = hasattr(stream, "isatty") and stream.isatty()
    wide = None if tty or os.environ.get("COLUMNS") else 200
    return Console(stderr=stderr, width=wide, soft_wrap=not tty)
