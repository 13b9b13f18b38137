"""Folder walks that an agent cannot brick: iterative (no recursion, so no RecursionError however deep),
bounded in depth and in entries, never following a link.

Python 3.11's `os.walk` and `Path.rglob` recurse once per folder level: 1,200 nested folders an agent made
under its own ref folder raised RecursionError in the git guard, and every later run of the fleet exited 70.
Every walk of the loop (the git guard, protected paths on disk) goes through `walk`; what lies past a bound
is not read, and the caller is told where the walk stopped (`Walk.over`), so it can treat that as a change
of its own (set aside, rolled back) instead of trusting a partial view.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

DEPTH = 48  # folder levels below the top: git's own layouts and any real test tree are far shallower
ENTRIES = 50_000


@dataclass
class Walk:
    entries: list = field(default_factory=list)  # (path relative to the top, lstat), folders before what they hold
    over: list = field(default_factory=list)  # relative folders not read (too deep), or "" when the entry cap was hit


def walk(top: str, depth: int = DEPTH, entries: int = ENTRIES, prune=None) -> Walk:
    """Every entry under `top` (not `top` itself), links not followed. `prune(rel, name)`: True leaves a folder
    out (not listed, not entered). Folders deeper than `depth` are named in `over`, not entered; past `entries`
    the walk stops (`over` ends with "")."""
    out = Walk()
    stack: list[tuple[str, int]] = [("", 0)]
    while stack:
        rel, level = stack.pop()
        try:
            it = os.scandir(os.path.join(top, rel) if rel else top)
        except OSError:
            continue
        with it:
            for e in it:
                if len(out.entries) >= entries:
                    out.over.append("")
                    return out
                r = f"{rel}/{e.name}" if rel else e.name
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if prune is not None and prune(rel, e.name):
                        continue
                    out.entries.append((r, st))
                    if level + 1 > depth:
                        out.over.append(r)
                    else:
                        stack.append((r, level + 1))
                else:
                    out.entries.append((r, st))
    return out
