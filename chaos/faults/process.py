"""Process faults for the real engine: SIGKILL, SIGSTOP and SIGCONT a process tree, a process
that holds a folder busy, and the questions asked afterwards (which pids still live, which are stopped).

A fault that leaves state behind journals its undo BEFORE it acts (chaos/faults/undo.py):
a SIGSTOP first registers a SIGCONT of every pid it is about to stop (identity checked by
create time), a holder process first registers the kill of every process carrying its
tree marker. So a game day SIGKILLed between the two steps still leaves nothing stopped
or running once `healer gameday clean` (or the next run) replays the journal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import psutil

from chaos.faults.undo import UndoJournal
from healer import procs
from healer.clock import Clock, system

HOLDER = "import signal\nwhile True:\n    signal.pause()\n"  # a process that only waits (and ignores nothing)


def members(pid: int, marker: str | None = None) -> list[int]:
    """The living pids of the tree rooted at pid (descendants, plus escapees carrying its marker)."""
    if not procs.alive(pid):
        return []
    tree = procs.ProcessTree(pid, marker)
    tree.refresh()
    return [p.pid for p in tree.living()]


def stop(journal: UndoJournal, pid: int, marker: str | None = None, *, role: str = "", tree: bool = True) -> list[int]:
    """SIGSTOP a process (and its tree): the SIGCONT is journaled first."""
    pids = members(pid, marker) if tree else ([pid] if procs.alive(pid) else [])
    if not pids:
        return []
    journal.register("sigcont", pid=pid, pid_start=procs.mark(pid), also=[p for p in pids if p != pid], role=role)
    for p in pids:
        _signal(p, signal.SIGSTOP)
    return pids


def cont(pid: int, marker: str | None = None, *, tree: bool = True) -> list[int]:
    pids = members(pid, marker) if tree else ([pid] if procs.alive(pid) else [])
    for p in pids:
        _signal(p, signal.SIGCONT)
    return pids


def kill(pid: int, marker: str | None = None, *, tree: bool = True) -> list[int]:
    """SIGKILL at once, no grace: a crash, not a shutdown."""
    pids = members(pid, marker) if tree else ([pid] if procs.alive(pid) else [])
    for p in pids:
        _signal(p, signal.SIGKILL)
    return pids


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def hold(journal: UndoJournal, cwd: str | Path, *, env: dict[str, str] | None = None, role: str = "busy holder",
         clock: Clock | None = None) -> tuple[subprocess.Popen, procs.ProcessTree]:
    """A real process with its cwd inside `cwd` (so procs.busy_pids sees the folder in use).

    Its kill is journaled under its own marker before it starts; returns once it is visible."""
    clock = clock or system()
    marker = f"gameday-hold-{uuid.uuid4().hex[:10]}"
    journal.register("kill_marker", marker=marker, role=role)
    proc, tree = procs.spawn([sys.executable, "-c", HOLDER], cwd=cwd, env=env, marker=marker)
    deadline = clock.monotonic() + 10
    target = str(Path(cwd).resolve())
    while clock.monotonic() < deadline:  # poll until its cwd is observable, with a bound
        try:
            if psutil.Process(proc.pid).cwd() == target:
                break
        except psutil.Error:
            pass
        clock.sleep(0.01)
    return proc, tree


def release(proc: subprocess.Popen, tree: procs.ProcessTree, clock: Clock | None = None) -> list[int]:
    killed = tree.kill(0.5, clock)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    return killed


def carrying(marker: str) -> list[psutil.Process]:
    """Living (not zombie) processes that carry the marker, as HEALER_TREE or among their ancestors' markers."""
    out = []
    for pid in procs._marked_pids(marker):
        try:
            p = psutil.Process(pid)
            if p.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                continue
            out.append(p)
        except psutil.Error:
            continue
    return out


def describe(p: psutil.Process) -> str:
    try:
        cmd = " ".join(p.cmdline())[:160]
        state = p.status()
    except psutil.Error:
        return f"pid {p.pid} (gone)"
    return f"pid {p.pid} [{state}] {cmd}"


def pids_in(files: list[Path]) -> list[tuple[Path, int]]:
    out = []
    for f in files:
        try:
            text = f.read_text()
        except OSError:
            continue
        out += [(f, int(x)) for x in text.split() if x.strip().isdigit()]
    return out
