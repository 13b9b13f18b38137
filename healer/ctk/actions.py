"""Chaos Toolkit actions (python provider, module `healer.ctk.actions`): healer's faults on a real fleet.

Each fault writes its undo to healer's undo journal BEFORE it acts; `healer gameday run` undoes the
journal at the end (and `healer gameday clean` after a killed `chaos run`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from chaos.faults import roles
from chaos.faults.command import inject
from healer.ctk import fleet_root, undo_journal

__all__ = ["kill_supervisor", "kill_dispatcher", "freeze_dispatch", "thaw_dispatch", "supervise_once", "run_command"]


def kill_supervisor(root: str | None = None, configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """SIGKILL the process holding the supervisor lease (a `healer supervise` or `healer up`)."""
    return roles.kill(fleet_root(root, configuration), "supervisor")


def kill_dispatcher(root: str | None = None, configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """SIGKILL the process holding the dispatcher lease."""
    return roles.kill(fleet_root(root, configuration), "dispatcher")


def freeze_dispatch(root: str | None = None, configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """SIGSTOP the dispatcher (dispatch silently frozen, README "Why"); its SIGCONT is journaled first."""
    return roles.freeze_dispatch(fleet_root(root, configuration), undo_journal())


def thaw_dispatch(root: str | None = None, configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """SIGCONT the dispatcher (the rollback of freeze_dispatch)."""
    return roles.thaw_dispatch(fleet_root(root, configuration))


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
