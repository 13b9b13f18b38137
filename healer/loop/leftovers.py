"""What a killed run left behind, ended by whichever healer starts next (issue 40: before, only a resume of the
same run id did it, and a run that was never resumed left its programs running, or frozen, for good).

Two kinds of leftovers, each ended only on evidence that it is healer's own and that its runner is gone:

- run cgroups (healer/cgroups.py `sweep`): named healer-run-*, beside our own group, with nobody holding their
  run lock (the kernel let it go when the runner died): thawed, emptied, removed;
- agent trees of runs whose runner is gone: a run whose state is not `ended` and whose runner (pid and start
  mark in its state.json) no longer runs; its agent's record (pid, start mark, tree marker, written as the agent
  started) names the tree, and procs.ProcessTree.adopt keeps the root only while it is still that process (a
  reused pid is a stranger) and finds the rest by the marker in their environment, which only healer sets.

`loop run` ends those of its own working tree once it holds the tree's loop lock; `dispatch`, `up` and
`supervise` end those of every ticket's worktree of the fleet (a tree whose loop lock is held has a live runner:
left alone).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from healer import cgroups, procs
from healer.clock import Clock, system
from healer.conventions import WORKTREES_DIR
from healer.loop.state import RunPaths, load, run_ids


@dataclass
class Ended:
    groups: list[cgroups.Swept] = field(default_factory=list)
    trees: list[dict] = field(default_factory=list)  # {"workdir", "run_id", "killed": [pids]}

    def line(self) -> str | None:
        """One line to say, or None when there was nothing to end."""
        if not self.groups and not any(t["killed"] for t in self.trees):
            return None
        parts = []
        if self.groups:
            n = sum(len(g.killed) for g in self.groups)
            thawed = sum(1 for g in self.groups if g.thawed)
            parts.append(f"{len(self.groups)} stale run cgroup(s) removed ({n} process(es) killed, {thawed} thawed)")
        trees = [t for t in self.trees if t["killed"]]
        if trees:
            parts.append(f"{len(trees)} agent tree(s) of killed runs ended ({sum(len(t['killed']) for t in trees)} "
                         f"process(es): {', '.join(t['run_id'] for t in trees)})")
        return "healer: note: leftovers of killed runs: " + "; ".join(parts)


def dead_runs(workdir: Path, skip: str | None = None) -> list[tuple[str, dict]]:
    """(run id, its agent record) of each run in `workdir` that did not end and whose runner is gone."""
    out = []
    for rid in run_ids(workdir):
        if rid == skip:
            continue
        paths = RunPaths(workdir, rid)
        try:
            st = load(paths)
        except Exception:  # noqa: BLE001 - an unreadable run is `loop status`'s to report, not ours
            continue
        if st.status == "ended" or procs.same(st.pid, st.pid_started):
            continue
        inf = st.inflight
        try:
            inf = json.loads(paths.agent.read_text()) or inf
        except (OSError, ValueError):
            pass
        if inf and inf.get("marker"):
            out.append((rid, inf))
    return out


def end_trees(workdir: Path, grace: float, clock: Clock | None = None, skip: str | None = None) -> list[dict]:
    clock = clock or system()
    out = []
    for rid, inf in dead_runs(workdir, skip):
        tree = procs.ProcessTree.adopt(inf["marker"], inf.get("pid"), inf.get("pid_start", inf.get("create_time")))
        out.append({"workdir": str(workdir), "run_id": rid, "killed": tree.kill(grace, clock)})
    return out


def _flocked() -> set[str] | None:
    """The files someone holds a flock on now ("MAJ:MIN:INODE" as /proc/locks writes them), or None when that
    cannot be read. Read, never taken: asking for a tree's loop lock ourselves, even for a moment, could turn
    away a runner starting there."""
    try:
        with open("/proc/locks") as f:
            return {parts[5] for line in f if len(parts := line.split()) > 5 and parts[1] == "FLOCK"}
    except OSError:
        return None


def _loop_locked(workdir: Path, held: set[str] | None) -> bool:
    """Whether a runner holds this tree's loop lock."""
    if held is None:
        return True  # cannot tell: leave it to the runs' own resume
    try:
        st = os.stat(workdir / ".healer" / "loop.lock")
    except OSError:
        return False
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}" in held


def fleet_workdirs(root: Path) -> list[Path]:
    d = Path(root) / WORKTREES_DIR
    try:
        return sorted(p for p in d.iterdir() if p.is_dir())
    except OSError:
        return []


def at_start(workdirs: Iterable[Path] = (), grace: float = 2.0, clock: Clock | None = None) -> Ended:
    """What every healer start does first: the stale run cgroups of this machine, then the agent trees of killed
    runs in `workdirs` (those with a live runner skipped). Never raises: a start goes on whatever it finds."""
    clock = clock or system()
    ended = Ended()
    try:
        ended.groups = cgroups.sweep(clock)
    except Exception:  # noqa: BLE001 - best effort; a run's own resume still ends its leftovers
        pass
    workdirs = list(workdirs)
    held = _flocked() if workdirs else set()
    for wd in workdirs:
        if _loop_locked(wd, held):
            continue
        try:
            ended.trees += end_trees(wd, grace, clock)
        except Exception:  # noqa: BLE001
            continue
    return ended
