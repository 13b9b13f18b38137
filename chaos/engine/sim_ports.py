"""The simulated world's ports: what the REAL Dispatcher, Supervisor and remediation executor call (healer/fleet/
ports.py, healer/fleet/runtime.py), answered from the engine's virtual state (chaos/engine/sim.py, `SimEngine`).

Agents are virtual processes (`Proc`); git is the world's repository model (chaos/engine/simgit.py, its own port);
gates answer with main's colour and the world's verdict on each proposal, merging onto main in that repository; the process table knows only the world's own
holder processes; the repair launcher records a run without starting one. Each port keeps its engine as `e`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from chaos.agents.behaviours import Run
from healer import procs
from healer.fleet.gates import FAIL, PASS, UNKNOWN, GateResult
from healer.fleet.ports import Found
from healer.fleet.proposals import DEFERRED, MERGED, REJECTED, WITHHELD, Verdict, conflict_text, merge_message
from healer.fleet.runtime import EXITED, GONE, PAUSED, RUNNING, Handle, Status
from healer.fleet.snapshot import busy_map
from healer.git import GitError


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
        """As healer/fleet/proposals.py gate_proposal decides on a real repository: the proposal merged onto main
        (a merge commit, refused on a conflict), main advanced by compare-and-set under its index.lock; the merge
        gates' verdict is the world's."""
        tid, repo, main = p.ticket_id, self.e.repo, policy.fleet.main_branch
        self.e.meanwhile("chaos.gate", tid)  # a gate run takes minutes: the world (a human) acts meanwhile
        old = self.e.main_commit
        if p.commit is None or repo.resolve(p.commit) is None:
            return Verdict(REJECTED, f"commit {p.commit} is not in the repository", old)
        if repo.is_ancestor(p.commit, old):
            return Verdict(MERGED, f"{p.commit[:12]} is already on {main}", old, old)
        new, conflicts = repo.merge(old, p.commit, merge_message(p))
        if new is None:
            c = {"files": conflicts, "with": [], "main": main}
            return Verdict(REJECTED, f"$ git merge {p.branch}\nCONFLICT\n{conflict_text(c)}", old, conflict=c)
        if tid in self.e.broken or self.e.behaviours[tid].__class__.__name__ == "BrokenProposal":
            return Verdict(REJECTED, "merge gate 'tests' failed on the merge result", old)
        if getattr(self.e.behaviours[tid], "defers", False):  # merge_stalls: the merge checkout stays busy
            return Verdict(DEFERRED, "merge checkout busy: not decided this pass", old)
        why = still_wanted() if still_wanted is not None else None  # the compare-and-set before main advances
        if why:
            return Verdict(WITHHELD, f"merge gates passed\nnot merged: {why}", old)
        try:
            repo.advance(main, old, new)
        except GitError as e:  # main's index.lock, main moved: decided again next pass
            return Verdict(DEFERRED, f"merge gates passed\n{e}", old)
        return Verdict(MERGED, "merge gates passed", old, new)


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
        if pid == os.getpid():  # the dispatcher's: dead while a kill_dispatcher keeps it down, as its process would be
            return bool(self.e.dispatcher_up)
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


class SimDisk:
    """The disk-free port (healer/fleet/ports.py `disk_free`: a folder's (file system id, bytes free), None when it is
    not there): the world's one file system, with plenty free until the disk_full fault says otherwise. The folders
    are real; only the number is the world's."""

    PLENTY = 1 << 40

    def __init__(self) -> None:
        self.free_bytes = self.PLENTY

    def __call__(self, path) -> tuple[int, int] | None:
        try:
            return os.stat(path).st_dev, self.free_bytes
        except OSError:
            return None
