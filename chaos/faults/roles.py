"""Faults on a real fleet's daemons, found by the lease each holds in the fleet's store: kill the supervisor or the
dispatcher, freeze the dispatcher (SIGSTOP, its SIGCONT journaled first) and thaw it. The game days' fleet engine
(chaos/engine/fleet.py) and the Chaos Toolkit actions (healer/ctk/actions.py) both inject them through here."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import psutil

from chaos.faults.undo import UndoJournal
from healer import procs
from healer.clock import system
from healer.store import open_store


def holder_pid(root: Path, name: str) -> int:
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


def kill(root: Path, role: str) -> dict[str, Any]:
    """SIGKILL the process holding the `role` lease (supervisor: a `healer supervise` or `healer up`; dispatcher)."""
    pid = holder_pid(root, role)
    os.kill(pid, signal.SIGKILL)
    return {"killed": pid, "role": role, "root": str(root)}


def freeze_dispatch(root: Path, journal: UndoJournal) -> dict[str, Any]:
    """SIGSTOP the dispatcher (dispatch silently frozen, README "Why"); its SIGCONT is journaled first."""
    pid = holder_pid(root, "dispatcher")
    journal.register("sigcont", pid=pid, pid_start=procs.mark(pid), role="dispatcher")
    os.kill(pid, signal.SIGSTOP)
    _wait_status(pid, psutil.STATUS_STOPPED)
    return {"stopped": pid, "undo": str(journal.path)}


def thaw_dispatch(root: Path) -> dict[str, Any]:
    """SIGCONT the dispatcher (the rollback of freeze_dispatch)."""
    pid = holder_pid(root, "dispatcher")
    os.kill(pid, signal.SIGCONT)
    return {"continued": pid}
