"""The fleet shell's ports besides the store and the runtime: git, the gates, the process table,
the repair launcher. The dispatcher, the supervisor and the snapshot gatherer talk to these
only, so the simulated game-day world (chaos/engine/sim.py) runs the very same shell over
simulated ports (FoundationDB-style: swap the world, never the logic).

`REAL` is the machine: healer/git.py, the gates as child processes, psutil, the real
repair launcher.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psutil

from healer import conventions as cv
from healer import git, procs
from healer.clock import Clock
from healer.fleet.busy import busy_map
from healer.fleet.gates import GateResult, gate_checkout
from healer.fleet.proposals import Verdict, gate_proposal, sweep_scratch
from healer.records import Proposal


class Git(Protocol):
    def is_repo(self, path: str | Path) -> bool: ...
    def rev(self, path: str | Path, ref: str = "HEAD") -> str | None: ...
    def ensure_excluded(self, root: str | Path) -> None: ...
    def add_worktree(self, root: str | Path, path: str | Path, branch: str, base: str) -> bool: ...
    def state(self, worktree: str | Path) -> tuple[str | None, str | None]:
        """(HEAD, state hash) of a worktree; (None, None) when it is gone."""
    def contains(self, root: str | Path, ref: str, commit: str) -> bool:
        """Is `commit` in `ref`'s history already (an agent's HEAD that main holds is no new work)?"""
    def sweep_scratch(self, root: Path) -> list[str]: ...
    def half_made(self, root: str | Path, path: str | Path) -> str | None:
        """Why the worktree at `path` is a killed `git worktree add`'s leftover (None: it is not)."""
    def set_aside(self, root: str | Path, path: str | Path, to: str | Path) -> Path | None:
        """Unlock git's entry, move the folder to `to` (kept), prune the entry."""
    def untracked(self, path: str | Path) -> list[str]: ...
    def is_toplevel(self, path: str | Path) -> bool: ...
    # what the remediation executor asks (healer/remedy/actions.py)
    def dirty(self, path: str | Path) -> list[str]:
        """Every file whose content exists only in the worktree at `path`, so removing the worktree would destroy
        it: untracked, modified, added, ignored, in a nested repository, hidden by an index flag."""
    def tracked(self, path: str | Path) -> bool:
        """Is this file under git's control (False outside any repository)?"""
    def remove_worktree(self, path: str | Path) -> None:
        """Remove a worktree whose every dirty file was quarantined first."""
    def git_paths(self, path: str | Path, *names: str) -> list[Path]:
        """Where git keeps each of `names` (`index.lock`, `refs/heads/main.lock`) for the checkout at `path`,
        absolute (`git rev-parse --git-path`); raises healer.git.GitError when git cannot tell."""


class Gates(Protocol):
    def main(self, root: Path, policy: Any, head: str, clock: Clock) -> GateResult:
        """Run the main gates on `head` (in a scratch checkout)."""
    def proposal(self, root: Path, policy: Any, p: Proposal, clock: Clock, *, still_wanted: Any = None) -> Verdict:
        """Gate a proposal on its merge result; merge it (fast-forward) when they pass."""


@dataclass(frozen=True)
class Found:
    """A live agent process found by its environment (HEALER_AGENT_ID, HEALER_ROOT, HEALER_RUN_ID)."""

    pid: int
    started: float  # the process's start time
    marker: str | None  # its HEALER_TREE marker (the runtime's handle on its tree)


class Processes(Protocol):
    def busy(self, paths: Sequence[Path]) -> dict[Path, tuple[int, ...]]:
        """Pids with a cwd or an open file inside each path."""
    def find_agent(self, root: Path, agent_id: str, run_id: str | None) -> Found | None:
        """The live process that runs `agent_id` for this fleet and run, if any (one a crashed dispatcher started
        but never registered)."""
    def alive(self, pid: int | None) -> bool:
        """Is process `pid` of this host alive (a zombie is not)? Asked every tick for the leases' holders."""


class Launcher(Protocol):
    def launch(self, root: Path, policy: Any, store: Any, clock: Clock, *, reason: str, blockages: list[str]) -> Any: ...


# -- the machine ----------------------------------------------------------------------

class RealGit:
    def is_repo(self, path):
        return git.is_repo(path)

    def rev(self, path, ref="HEAD"):
        return git.rev(path, ref)

    def ensure_excluded(self, root):
        git.ensure_excluded(root)

    def add_worktree(self, root, path, branch, base):
        return git.add_worktree(root, path, branch, base)

    def state(self, worktree):
        from healer.loop import gitops  # lazy: healer.loop.gitops: 73 ms of the daemons' start

        return gitops.state(worktree)

    def contains(self, root, ref, commit):
        return git.rev(root, ref) is not None and git.is_ancestor(root, commit, ref)

    def sweep_scratch(self, root):
        return sweep_scratch(root)

    def half_made(self, root, path):
        return git.half_made(root, path)

    def set_aside(self, root, path, to):
        return git.set_aside(root, path, to)

    def untracked(self, path):
        return git.untracked(path)

    def is_toplevel(self, path):
        return git.is_toplevel(path)

    def dirty(self, path):
        return git.unsaved(path)  # ignored files, nested repositories and flag-hidden edits too

    def tracked(self, path):
        return git.tracked(path)

    def remove_worktree(self, path):
        git.remove_worktree(path)

    def git_paths(self, path, *names):
        args = [a for n in names for a in ("--git-path", n)]
        out = git.run(path, "rev-parse", *args).stdout.splitlines()
        return [Path(x) if Path(x).is_absolute() else Path(path) / x for x in out]


class RealGates:
    def main(self, root, policy, head, clock):
        scratch = cv.scratch_dir(root, "main")
        git.remove_worktree(scratch, root, check=False)
        scratch.parent.mkdir(parents=True, exist_ok=True)
        git.run(root, "worktree", "add", "--detach", str(scratch), head)
        try:
            return gate_checkout(root, scratch, policy.fleet.main_gates, policy.loop, clock, base=head)
        finally:
            git.remove_worktree(scratch, root, check=False)

    def proposal(self, root, policy, p, clock, *, still_wanted=None):
        return gate_proposal(root, policy, p, clock, still_wanted=still_wanted)


class RealProcesses:
    def busy(self, paths):
        return busy_map(list(paths))

    def alive(self, pid):
        return procs.alive(pid)

    def find_agent(self, root, agent_id, run_id):
        for p in procs.processes():
            try:
                env = p.environ()
                started = p.create_time()
            except (psutil.Error, OSError):
                continue
            if env.get("HEALER_AGENT_ID") != agent_id or env.get("HEALER_ROOT") != str(root):
                continue
            if env.get("HEALER_RUN_ID") != run_id or env.get("HEALER_TREE") is None:
                continue
            return Found(p.pid, started, env.get("HEALER_TREE"))
        return None


class Ports:
    """The shell's ports, bundled (the store and the runtime are passed on their own)."""

    def __init__(self, git: Git | None = None, gates: Gates | None = None, processes: Processes | None = None,
                 launcher: Launcher | None = None, disk_free: Any = None) -> None:
        self.git: Git = git or RealGit()
        self.gates: Gates = gates or RealGates()
        self.processes: Processes = processes or RealProcesses()
        # the repair agent's: the supervisor's ports have one (healer/supervisor.py REAL_PORTS, the game days' world
        # its own); the fleet below never launches a repair
        self.launcher: Launcher | None = launcher
        # (file system id, bytes free) of a folder, None when it is not there (healer/fleet/disk.py; fleet.min_free)
        self.disk_free = disk_free or real_disk_free


def real_disk_free(path: Path) -> tuple[int, int] | None:
    try:
        v = os.statvfs(path)
        return os.stat(path).st_dev, v.f_bavail * v.f_frsize
    except OSError:
        return None


REAL = Ports()  # the machine's, for the dispatcher and the snapshot; the supervisor adds its repair launcher to them
