"""Findings for the repair agent's `list_findings` tool.

The truth is the supervisor's: gather a snapshot (healer/fleet/snapshot.py) and run
the pure core (healer/core). When that path is unavailable or raises, a narrow
store-only diagnosis covers the findings the safe tools can act on (frozen
in-progress tickets, stale labels, orphan worktrees), so the repair agent is never
blind; the answer says which source it came from.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from healer import lifecycle
from healer.core.model import Finding


def findings(root: Path, store, policy, clock, runtime=None) -> tuple[list[Finding], str]:
    try:
        found = _from_core(root, store, policy, clock, runtime)
        if found is not None:
            return found, "core"
    except Exception as e:  # fail-open: fall back, and say so
        return _fallback(root, store, policy, clock.now()), f"fallback (core failed: {type(e).__name__}: {e})"[:300]
    return _fallback(root, store, policy, clock.now()), "fallback (core not installed)"


def _call(fn, available: dict[str, Any]):
    """Call `fn` with the keyword arguments it names, from `available` (signatures still settling)."""
    sig = inspect.signature(fn)
    kwargs, args = {}, []
    for name, p in sig.parameters.items():
        if name in available:
            if p.kind is p.POSITIONAL_ONLY:
                args.append(available[name])
            else:
                kwargs[name] = available[name]
        elif p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"{fn.__module__}.{fn.__name__}: cannot supply argument {name!r}")
    return fn(*args, **kwargs)


def _from_core(root: Path, store, policy, clock, runtime) -> list[Finding] | None:
    try:
        from healer.core import detect
        from healer.fleet import snapshot as snap_mod
    except ImportError:
        return None
    gather = getattr(snap_mod, "gather", None)
    if gather is None:
        return None
    snap = _call(gather, {"root": root, "store": store, "policy": policy, "clock": clock, "runtime": runtime,
                          "now": clock.now()})
    return list(detect(snap, policy))  # findings need no memory; only planning does


def _fallback(root: Path, store, policy, now: float) -> list[Finding]:
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
