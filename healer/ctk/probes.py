"""Chaos Toolkit probes (python provider, module `healer.ctk.probes`): what healer sees in a real fleet.

Steady-state tolerances compare their return values: `fleet_healthy` is a bool (tolerance `true`),
`fleet_health` a mapping for jsonpath tolerances, `count_tickets` / `count_findings` integers
(tolerance `{type: range, range: [0, 0]}`).
"""

from __future__ import annotations

from typing import Any

import psutil

from chaos.faults.command import probe
from healer.clock import system
from healer.ctk import fleet_root
from healer.policy_in_force import policy_for
from healer.store import open_store
from healer.supervisor import Supervisor

__all__ = ["fleet_health", "fleet_healthy", "count_findings", "count_tickets", "ticket_state", "holder", "run_command"]


def _plan(root):
    store = open_store(root)
    try:
        return Supervisor(root, policy_for(root, None), store, system(), dry_run=True).plan()
    finally:
        store.close()


def fleet_health(root: str | None = None, configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """Tickets by state, live agents, dispatch paused, and the supervisor's findings by kind (as `healer plan`)."""
    r = fleet_root(root, configuration)
    rep = _plan(r)
    s, d = rep.snapshot, rep.decision
    by_state: dict[str, int] = {}
    for t in s.tickets:
        by_state[t.state] = by_state.get(t.state, 0) + 1
    kinds: dict[str, int] = {}
    for f in d.findings:
        kinds[f.kind] = kinds.get(f.kind, 0) + 1
    return {"root": str(r), "tickets": by_state, "live_agents": sum(1 for a in s.agents if a.alive),
            "findings": len(d.findings), "findings_by_kind": kinds, "planned_actions": len(d.actions),
            "halted": bool(s.halted)}


def fleet_healthy(root: str | None = None, max_findings: int = 0, configuration: dict[str, Any] | None = None) -> bool:
    """True when the supervisor sees at most `max_findings` findings."""
    return fleet_health(root, configuration)["findings"] <= max_findings


def count_findings(kind: str | None = None, root: str | None = None, configuration: dict[str, Any] | None = None) -> int:
    h = fleet_health(root, configuration)
    return h["findings"] if kind is None else h["findings_by_kind"].get(kind, 0)


def count_tickets(state: str, root: str | None = None, configuration: dict[str, Any] | None = None) -> int:
    return fleet_health(root, configuration)["tickets"].get(state, 0)


def ticket_state(ticket: str, root: str | None = None, configuration: dict[str, Any] | None = None) -> str:
    s = open_store(fleet_root(root, configuration))
    try:
        return s.ticket(ticket).state
    finally:
        s.close()


def run_command(command: list[str], cwd: str | None = None, timeout: float = 60,
                configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """A `command` probe: run argv; returns status, stdout, stderr (tolerance on `status`, as a process probe)."""
    return probe(command, cwd=cwd, timeout=timeout)


def holder(role: str = "supervisor", root: str | None = None, configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    """The process holding the `role` lease (supervisor, dispatcher): pid, alive, status (`stopped` when frozen)."""
    s = open_store(fleet_root(root, configuration))
    try:
        lease = s.lease(role)
    finally:
        s.close()
    if lease is None:
        return {"pid": None, "alive": False, "status": "none"}
    try:
        st = psutil.Process(lease.pid).status()
    except psutil.NoSuchProcess:
        return {"pid": lease.pid, "alive": False, "status": "dead"}
    return {"pid": lease.pid, "alive": st != psutil.STATUS_ZOMBIE, "status": st}
