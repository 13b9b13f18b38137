"""Findings for the repair agent's `list_findings` tool.

The truth is the supervisor's: gather a snapshot (healer/fleet/snapshot.py) and run
the pure core (healer/core). When that path raises, a narrow
store-only diagnosis covers the findings the safe tools can act on (frozen
in-progress tickets, stale labels, orphan worktrees), so the repair agent is never
blind; the answer says which source it came from.
"""

from __future__ import annotations

from pathlib import Path

from healer import lifecycle
from healer.core import detect
from healer.core.model import Finding
from healer.fleet.snapshot import gather


def findings(root: Path, store, policy, clock, runtime=None) -> tuple[list[Finding], str]:
    try:
        snap = gather(root, store, policy, clock, runtime)
        return list(detect(snap, policy)), "core"  # findings need no memory; only planning does
    except Exception as e:  # fail-open: fall back, and say so
        return _fallback(store, policy, clock.now()), f"fallback (core failed: {type(e).__name__}: {e})"[:300]


def _fallback(store, policy, now: float) -> list[Finding]:
    out: list[Finding] = []
    running = {a.ticket_id for a in store.agents(states=["running"]) if a.ticket_id}
    worktrees = store.worktrees()
    live_wt = {w.ticket_id for w in worktrees if w.ticket_id and Path(w.path).exists()}
    tickets = {t.id: t for t in store.tickets()}
    for t in tickets.values():
        if t.state == lifecycle.IN_PROGRESS and t.id not in running and t.id not in live_wt:
            if now - t.updated_at >= policy.health.frozen_in_progress:
                out.append(Finding("frozen_in_progress", t.id, t.updated_at, {"ticket": t.id, "expect": t.state}))
        if (t.data or {}).get("merged_commit") and t.state != lifecycle.CLOSED:
            out.append(Finding("zombie_ticket", t.id, t.updated_at, {"ticket": t.id, "expect": t.state,
                                                                     "merged_commit": t.data["merged_commit"]}))
        due = {label: added for label, added in t.labels.items()
               if (th := policy.health.stale_labels.get(label)) is not None and now - max(added, t.updated_at) >= th}
        if due and t.state not in lifecycle.TERMINAL:
            out.append(Finding("stale_label", t.id, min(due.values()), {"ticket": t.id, "labels": due}))
    for w in worktrees:
        t = tickets.get(w.ticket_id or "")
        if (t is None or t.state in lifecycle.TERMINAL) and now - w.created_at >= policy.health.orphan_worktree:
            out.append(Finding("orphan_worktree", w.path, w.created_at,
                               {"ticket": w.ticket_id, "ticket_state": t.state if t else "missing"}))
    return out
