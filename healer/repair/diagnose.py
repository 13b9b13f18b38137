"""Findings for the repair agent's `list_findings` tool.

The truth is the supervisor's: gather a snapshot (healer/fleet/snapshot.py) and run
the pure core's detectors (healer/core). When gathering raises, the same detectors
run on a snapshot built from the store alone (no process table, no git: liveness is
"cannot tell", which never reads as dead), so the repair agent is never blind and
there is one definition of every finding; the answer says which source it came from.
"""

from __future__ import annotations

import os
from pathlib import Path

from healer.core import detect
from healer.core.model import AgentView, Finding, Snapshot, WorktreeView
from healer.fleet.snapshot import gather


def findings(root: Path, store, policy, clock, runtime=None) -> tuple[list[Finding], str]:
    try:
        snap = gather(root, store, policy, clock, runtime)
        return list(detect(snap, policy)), "core"  # findings need no memory; only planning does
    except Exception as e:  # fail-open: fall back, and say so
        return _fallback(store, policy, clock.now()), f"fallback (core failed: {type(e).__name__}: {e})"[:300]


def _fallback(store, policy, now: float) -> list[Finding]:
    tickets = store.tickets()
    snap = Snapshot(
        now=now, tickets=tuple(tickets),
        agents=tuple(AgentView(a, None) for a in store.agents(states=["running"])),
        worktrees=tuple(WorktreeView(w, os.path.exists(w.path)) for w in store.worktrees()),
        merged_tickets=frozenset(t.id for t in tickets if (t.data or {}).get("merged_commit")),
        main_status="unknown",
        failed_sources=frozenset({"dispatch", "main", "supervisor", "proposals", "attempts"}),
    )
    return list(detect(snap, policy))
