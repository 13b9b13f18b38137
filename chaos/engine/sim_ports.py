"""The simulated world's ports: what the REAL Dispatcher, Supervisor and remediation executor call (healer/fleet/
ports.py, healer/fleet/runtime.py), answered from the engine's virtual state (chaos/engine/sim.py, `SimEngine`).

Agents are virtual processes (`Proc`); git is main's head and each ticket's head, a worktree a plain folder; gates
answer with main's colour and the world's verdict on each proposal; the process table knows only the world's own
holder processes; the repair launcher records a run without starting one. Each port keeps its engine as `e`.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.agents.behaviours import Run
from healer import conventions as cv
from healer import procs
from healer.errors import HealerError
from healer.fleet.gates import FAIL, PASS, UNKNOWN, GateResult
from healer.fleet.ports import Found
from healer.fleet.proposals import DEFERRED, MERGED, REJECTED, WITHHELD, Verdict
from healer.fleet.runtime import EXITED, GONE, PAUSED, RUNNING, Handle, Status
from healer.fleet.snapshot import busy_map


@dataclass
class Proc:
    agent_id: str
    ticket: str
    run: Run
    started: float
    alive: bool = True
    paused: bool = False
    ended_early: bool = False  # its end came while it was stopped: it ends on SIGCONT
    gen: int = 0
    pid: int = 0
    exit_code: int | None = None
    worktree: str | None = None
    run_id: str | None = None


class SimRuntime:
    """The Runtime port over virtual processes: what the real dispatcher, snapshot and executor talk to."""

    kind = "process"

    def __init__(self, eng: Any) -> None:
        self.e = eng

    def _proc(self, handle) -> Proc | None:
        return self.e.by_pid.get(handle.pid or -1)

    def launch(self, spec):
        return Handle("process", pid=self.e.launch(spec))

    def status(self, handle):
        p = self._proc(handle)
        if p is None:
            return Status(GONE)
        if p.alive:
            return Status(PAUSED if p.paused else RUNNING)
        if p.exit_code is not None:
            return Status(EXITED, p.exit_code)
        return Status(GONE)

    def stop(self, handle, grace: float) -> None:
        p = self._proc(handle)
        if p is not None:
            self.e.kill_agent(p.agent_id)

    def wait(self, handle, timeout: float):
        return self.status(handle)


class SimGit:
    """The Git port: main's head and each ticket's head are the world's; a worktree is a plain folder."""

    def __init__(self, eng: Any) -> None:
        self.e = eng
        self.wt_base = cv.worktree_for(eng.root, "x").parent
        self._where: dict[str, tuple[bool, str | None]] = {}  # path text -> (the fleet root?, ticket of its worktree)

    def _place(self, path) -> tuple[bool, str | None]:
        # asked for the same few paths every pass (heartbeats): Path arithmetic once per path text
        key = str(path)
        got = self._where.get(key)
        if got is None:
            p = Path(key)
            got = self._where[key] = (p == self.e.root, p.name if p.parent == self.wt_base else None)
        return got

    def _ticket_of(self, path) -> str | None:
        return self._place(path)[1]

    def is_repo(self, path) -> bool:
        return True

    def rev(self, path, ref="HEAD"):
        is_root, tid = self._place(path)
        if is_root:
            main = self.e.policy.fleet.main_branch
            if ref in (main, f"refs/heads/{main}", "HEAD"):
                return self.e.main_commit
            if ref.startswith("refs/heads/" + cv.BRANCH_PREFIX):
                return self.e.heads.get(ref[len("refs/heads/" + cv.BRANCH_PREFIX):])
            return None
        return self.e.heads.get(tid) if tid and os.path.isdir(path) else None

    def ensure_excluded(self, root) -> None:
        pass

    def add_worktree(self, root, path, branch, base) -> bool:
        new = not Path(path).is_dir()
        Path(path).mkdir(parents=True, exist_ok=True)
        self.e.files.setdefault(str(path), set())
        return new

    def state(self, worktree):
        if not os.path.isdir(worktree):
            return None, None
        head = self.rev(worktree)
        return head, hashlib.sha1(f"{head}".encode()).hexdigest()[:12]

    def sweep_scratch(self, root) -> list[str]:
        return []

    def half_made(self, root, path) -> str | None:
        return None  # a simulated `worktree add` is one mkdir: it is never left half-made

    def set_aside(self, root, path, to) -> Path | None:
        return None

    def untracked(self, path) -> list[str]:
        return sorted(self.e.files.get(str(path), ()))

    def is_toplevel(self, path) -> bool:
        return self._ticket_of(path) is not None

    # a simulated checkout is a plain folder that git knows nothing of: every file in it is the worktree's own
    def dirty(self, path) -> list[str]:
        base = Path(path)
        return sorted(f.relative_to(base).as_posix() for f in base.rglob("*") if f.is_file() or f.is_symlink())

    def tracked(self, path) -> bool:
        return False

    def remove_worktree(self, path) -> None:
        p = Path(path)
        if not p.exists():
            return
        left = self.dirty(p)
        if left:  # the executor quarantined them all first; one that appeared since is never deleted
            raise HealerError(f"{p}: files appeared during removal: {left[:3]}")
        for d in sorted((d for d in p.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
            d.rmdir()
        p.rmdir()
        self.e.files.pop(str(path), None)

    def git_paths(self, path, *names) -> list[Path]:
        return [Path(path) / ".git" / n for n in names]  # a simulated checkout's git folder holds no file


class SimGates:
    """The Gates port: main's colour and each proposal's verdict are the world's (faults change them)."""

    def __init__(self, eng: Any) -> None:
        self.e = eng

    def main(self, root, policy, head, clock) -> GateResult:
        if self.e.main == "red":
            return GateResult(FAIL, "tests", "$ python -m pytest  # gate tests\nE: main is red\ngate tests: exit 1")
        if self.e.main == "unknown":  # fleet.main: unknown: the gate cannot decide (timed out, could not start)
            return GateResult(UNKNOWN, "tests", "$ python -m pytest  # gate tests\ngate tests: timed out (no verdict)")
        return GateResult(PASS, None, "gate tests: exit 0")

    def proposal(self, root, policy, p, clock, *, still_wanted=None) -> Verdict:
        tid = p.ticket_id
        self.e.meanwhile("chaos.gate", tid)  # a gate run takes minutes: the world (a human) acts meanwhile
        if tid in self.e.broken or self.e.behaviours[tid].__class__.__name__ == "BrokenProposal":
            return Verdict(REJECTED, "merge gate 'tests' failed on the merge result", self.e.main_commit)
        if getattr(self.e.behaviours[tid], "defers", False):  # merge_stalls: the merge checkout stays busy
            return Verdict(DEFERRED, "merge checkout busy: not decided this pass", self.e.main_commit)
        why = still_wanted() if still_wanted is not None else None  # the compare-and-set before main advances
        if why:
            return Verdict(WITHHELD, f"merge gates passed\nnot merged: {why}", self.e.main_commit)
        return Verdict(MERGED, "merge gates passed", self.e.main_commit, self.e.main_commit)


VIRTUAL_PIDS = (1 << 22) + 1  # above Linux's largest pid_max: the world's virtual pids (chaos/engine/sim.py)


class SimProcesses:
    """The process table: the world's real holder processes (busy_worktree) are the only ones that can hold a folder."""

    def __init__(self, eng: Any) -> None:
        self.e = eng

    def busy(self, paths):
        if not self.e.busy_procs:
            return {p: () for p in paths}
        return busy_map(list(paths))

    def alive(self, pid):
        # the world's holders are virtual pids above any pid_max (dead to the kernel, as a crashed incarnation is),
        # but the first dispatcher holds its lease under this process's own pid: both answered without a read of
        # /proc, which cost a fifth of a long game day; a real holder (busy_worktree's) is asked of the machine
        if not pid:
            return False
        if pid == os.getpid():
            return True
        return False if pid >= VIRTUAL_PIDS else procs.alive(pid)

    def find_agent(self, root, agent_id, run_id):
        p = self.e.procs.get(agent_id)  # a virtual process's environment is what its launch spec said
        if p is None or not p.alive or p.run_id != run_id:
            return None
        return Found(p.pid, p.started, None)


class SimLauncher:
    """The repair launcher port: a run is recorded as the real launcher records it; no agent process is started."""

    def __init__(self, eng: Any) -> None:
        self.e = eng

    def launch(self, root, policy, store, clock, *, reason, blockages):
        self.e.repair_n += 1
        run_id = f"sim-repair-{self.e.repair_n}"
        store.append("repair.started", run_id, {"agent": "simulated", "reason": reason, "blockages": blockages})
        store.append("repair.launched", "repair", {"reason": reason, "run": run_id})
        store.append("repair.ended", run_id, {"exit_code": 0, "timed_out": False})
        return None
