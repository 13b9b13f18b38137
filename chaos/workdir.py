"""A kept game-day work folder (`healer gameday run|replay --workdir DIR`: DIR/<scenario>) is healer's only
once healer has claimed it.

A game day writes its fleet, scripts and logs into the folder it is given, so it takes only a folder that
does not exist yet or is empty, and claims it (`CLAIM`: the owner's pid and start time). A folder it claimed
for an earlier game day is moved aside whole, to DIR/<scenario>.earlier-N, never emptied: what the earlier
run left, and whatever a person added while looking into it, stays. Any other non-empty folder is not
healer's: it is refused (exit 64), and nothing in it is touched.
"""

from __future__ import annotations

import os
from pathlib import Path

from chaos.faults import undo
from healer.errors import HealerError, UsageError

CLAIM = ".healer-gameday.json"  # not undo.OWNER: `healer gameday clean` removes dead owners' temp folders by that name


def problem(wd: Path) -> str | None:
    """Why a game day may not work in `wd`, or None when it may (absent, empty, or claimed by an ended game day)."""
    if wd.exists() and not wd.is_dir():
        return f"{wd}: expected a folder, found a file"
    if not wd.exists():
        return None
    try:
        empty = next(wd.iterdir(), None) is None
    except OSError as e:
        return f"{wd}: cannot read it: {e.strerror or e}"
    if empty:
        return None
    if not (wd / CLAIM).is_file():
        return (f"{wd}: not empty, and no earlier game day made it (no {CLAIM}); healer never deletes a folder: "
                "name a new or empty one")
    pid = undo.live_owner(wd, CLAIM)
    if pid is not None and pid != os.getpid():  # this process's own earlier run has ended: engine.run returns at its end
        return f"{wd}: a running game day (pid {pid}) works in it"
    return None


def take(wd: Path) -> Path | None:
    """Make `wd` this game day's: refuse it (UsageError) when `problem` says so; move an earlier game day's
    folder aside first. Returns where the earlier one went, or None."""
    why = problem(wd)
    if why:
        raise UsageError(why)
    moved = None
    if wd.is_dir() and next(wd.iterdir(), None) is not None:
        moved = aside(wd)
        wd.rename(moved)
    wd.mkdir(parents=True, exist_ok=True)
    undo.claim(wd, CLAIM)
    return moved


def aside(wd: Path) -> Path:
    """The first free DIR/<name>.earlier-N beside it."""
    n = 1
    while (wd.parent / f"{wd.name}.earlier-{n}").exists():
        n += 1
    return wd.parent / f"{wd.name}.earlier-{n}"


def fresh(*paths: Path) -> None:
    """An engine builds its world only where nothing is yet: what it would overwrite is refused, never removed."""
    there = [p for p in paths if p.exists() or p.is_symlink()]
    if there:
        raise HealerError(f"{there[0]}: already exists; a game day starts in a new folder and never deletes one "
                          "(`--workdir` moves an earlier game day's folder aside)")
