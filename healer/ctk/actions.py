"""Chaos Toolkit actions (python provider, module `healer.ctk.actions`): healer's faults on a real fleet.

Each fault writes its undo to healer's undo journal BEFORE it acts; `healer gameday run` undoes the
journal at the end (and `healer gameday clean` after a killed `chaos run`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import psutil

from chaos.faults.command import inject
from healer import procs
from healer.clock import system
from healer.ctk import fleet_root, undo_journal
from healer.store import open_store

__all__ = ["kill_supervisor", "kill_dispatcher", "freeze_dispatch", "thaw_dispatch", "supervise_once", "run_command"]


def _holder_pid(root, name: str) -> int:
    s = open_store(root)
    try:
        lease = s.lease(name)
    finally:
        s.close()
    if lease is None or not lease.pid or not psutil.pid_exists(lease.pid):
        raise RuntimeError(f"{root}: no live {name} holds the {name} lease")
    return int(lease.pid)


def _wait_status(pid: int, status: str, within: float = 10.0) -> None:
    """The kernel stops a process asynchronously: return once it is seen `status` (or `within` seconds passed)."""
    clock = system()
    end = clock.monotonic() + within
    while clock.monotonic() < end:
        try:
            if psutil.Process(pid).status() == status:
                return
        except psutil.NoSuchProcess:
            return
        clock.sleep(0.02)


def kill_supervisor(root: str | None = None, configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """SIGKILL the process holding the supervisor lease (a `healer supervise` or `healer up`)."""
    r = fleet_root(root, configuration)
    pid = _holder_pid(r, "supervisor")
    os.kill(pid, signal.SIGKILL)
    return {"killed": pid, "role": "supervisor", "root": str(r)}


def kill_dispatcher(root: str | None = None, configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """SIGKILL the process holding the dispatcher lease."""
    r = fleet_root(root, configuration)
    pid = _holder_pid(r, "dispatcher")
    os.kill(pid, signal.SIGKILL)
    return {"killed": pid, "role": "dispatcher", "root": str(r)}


def freeze_dispatch(root: str | None = None, configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """SIGSTOP the dispatcher (dispatch silently frozen, README "Why"); its SIGCONT is journaled first."""
    r = fleet_root(root, configuration)
    pid = _holder_pid(r, "dispatcher")
    j = undo_journal()
    j.register("sigcont", pid=pid, pid_start=procs.mark(pid), role="dispatcher")
    os.kill(pid, signal.SIGSTOP)
    _wait_status(pid, psutil.STATUS_STOPPED)
    return {"stopped": pid, "undo": str(j.path)}


def thaw_dispatch(root: str | None = None, configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """SIGCONT the dispatcher (the rollback of freeze_dispatch)."""
    r = fleet_root(root, configuration)
    pid = _holder_pid(r, "dispatcher")
    os.kill(pid, signal.SIGCONT)
    return {"continued": pid}


def supervise_once(root: str | None = None, configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """One real supervisor tick (`healer supervise --once --json`) on the fleet: healer's answer to the fault."""
    r = fleet_root(root, configuration)
    p = subprocess.run([sys.executable, "-m", "healer", "supervise", "--once", "--json", "--root", str(r)],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"healer supervise --once exited {p.returncode}: {p.stderr.strip()[-500:]}")
    out = json.loads(p.stdout)
    if out.get("skipped"):  # a tick that did not run is no answer to the fault: the activity fails, the game day errs
        raise RuntimeError(f"healer supervise --once skipped its tick: {out['skipped']}")
    return out


def run_command(command: list[str], undo: list[str] | None = None, cwd: str | None = None, timeout: float = 60,
                configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """A `command` fault: run argv (no shell); `undo`, an argv, is journaled first and run at the end."""
    return inject(command, undo=undo, cwd=cwd, timeout=timeout, journal=undo_journal())
