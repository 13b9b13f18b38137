"""Which processes are inside a worktree: the real process table's answer (`Ports.processes.busy`). Below both the
ports and the snapshot gatherer, so neither imports the other for it."""

from __future__ import annotations

from pathlib import Path

import psutil

from healer import procs, switches


def busy_map(paths: list[Path]) -> dict[Path, tuple[int, ...]]:
    """Pids with a cwd or an open file inside each path: one pass over the process table for all of them."""
    if not paths or not switches.enabled("busy_check"):  # a game day proving busy-worktree can fail
        return {}
    prefixes = [(p, str(p).rstrip("/") + "/") for p in paths]
    found: dict[Path, set[int]] = {p: set() for p in paths}

    def hit(f: str, pid: int) -> None:
        for p, pre in prefixes:
            if f == str(p) or f.startswith(pre):
                found[p].add(pid)

    for proc in procs.processes():
        try:
            hit(proc.cwd(), proc.pid)
            for of in proc.open_files():
                hit(of.path, proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return {p: tuple(sorted(s)) for p, s in found.items()}
