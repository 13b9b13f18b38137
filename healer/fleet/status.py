"""What `healer status` shows: tickets by state, live agents, the pool, the queue, main's status, the spend, and
the loops adopted on any host (docs/adopt.md).

Read-only: it gathers the same input as the dispatcher and asks the pure core what it
would do, so the queue's reasons and eligibility times are the dispatcher's own.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from healer import lifecycle, spend
from healer.core import dispatch as core
from healer.core.disk import SETTING as DISK_LOW
from healer.fleet.dispatcher import gather
from healer.fleet.snapshot import ended_with, liveness
from healer.store import keys
from healer.store.migrations import SCHEMA, V5

ADOPTED_SINCE = SCHEMA.index(V5) + 1  # the schema version that made the `adopted` table


def fleet_status(store, policy, now: float) -> dict[str, Any]:
    inp = gather(store, policy, now)
    plan = core.decide(inp, core.RetryRules.of(policy))
    by_state = Counter(t.state for t in inp.tickets)
    agents, ended = [], []
    for a in store.agents(states=["running"]):
        alive, _ = liveness(a)
        row = {
            "id": a.id, "ticket": a.ticket_id, "pid": a.pid, "kind": a.kind, "host": a.host, "run_id": a.run_id,
            "launched_by": a.data.get("launched_by", "?"), "age": now - a.started_at,
            "heartbeat_age": now - a.heartbeat_at, "alive": alive,
        }
        if alive is False:  # its process is gone; the dispatcher has not recorded its end yet
            ended.append({**row, "exit_code": ended_with(a)})
        else:
            agents.append(row)
    queue: list[dict[str, object]] = [{"ticket": w.ticket_id, "reason": w.reason, "kind": w.kind, "eligible_at": w.eligible_at, "detail": w.detail}
             for w in plan.waiting if w.reason != core.RUNNING]
    queue = [{"ticket": x.ticket_id, "reason": "ready", "kind": x.kind, "eligible_at": now, "detail": ""} for x in plan.launches] + queue
    return {
        "now": now,
        "tickets": {s: by_state.get(s, 0) for s in lifecycle.STATES},
        "agents": agents,
        "ended_agents": ended,
        "pool": {"used": sum(1 for a in agents if a["launched_by"] == "dispatch"), "size": policy.fleet.pool_size},
        "queue": queue,
        "stops": [{"ticket": s.ticket_id, "to": s.to, "reason": s.reason, "detail": s.detail} for s in plan.stops],
        "cycles": [list(c) for c in plan.cycles],
        "main": {"branch": policy.fleet.main_branch, "status": store.get_setting(keys.MAIN_STATUS, "unknown"),
                 "red_since": store.get_setting(keys.MAIN_RED_SINCE)},
        "dispatch": {"paused": bool(store.get_setting(keys.DISPATCH_PAUSED, False)), "last_tick_at": store.get_setting(keys.DISPATCH_LAST_TICK),
                     "last_launch_at": store.get_setting(keys.DISPATCH_LAST_LAUNCH),
                     "paused_reason": store.get_setting(keys.DISPATCH_PAUSED_REASON),
                     "disk_low": store.get_setting(DISK_LOW)},  # {since, min_free, low: {path: free}} (healer/core/disk.py)
        # what the loops spent: total, the last 7 UTC days, per agent CLI, the 10 tickets that spent most
        "spend": spend.summary(spend.ledger_of(store)),
        "adopted": adopted_rows(store, now),
    }


ENDED_SHOWN = 3600.0  # a loop that ended (gone, stopped) stays in the list this long: what just happened to it


def adopted_rows(store, now: float) -> list[dict[str, Any]]:
    """The adopted loops as the store last recorded them (docs/adopt.md): the live ones, then those that ended in the
    last hour. What the store says, not a fresh scan: `healer adopt` and the supervisor's tick write it."""
    if store.version() < ADOPTED_SINCE:  # a store not migrated yet (a read-only open never migrates): none adopted
        return []
    rows = []
    for a in store.adopted(states=None):
        if a.state != "adopted" and (a.ended_at is None or now - a.ended_at > ENDED_SHOWN):
            continue
        rows.append({"id": a.id, "rule": a.rule, "host": a.host, "pid": a.pid, "pgid": a.pgid, "cli": a.cli,
                     "worktree": a.worktree, "session_id": a.session_id, "state": a.state, "age": now - a.started_at,
                     "adopted_at": a.adopted_at, "ended_at": a.ended_at})
    return sorted(rows, key=lambda r: (r["state"] != "adopted", r["adopted_at"], r["id"]))
