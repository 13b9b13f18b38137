"""Sentinels: alarms on silence (docs/supervisor-core.md). Silence is a symptom.

Each sentinel reads named data sources; the shell lists in `snapshot.failed_sources`
every source that raised while it gathered the snapshot. A sentinel whose source
failed reports `status="unknown"` and blocks nothing (fail-open): no alert, no
action, no memory. Sources (what the shell must name when a read fails):

    tickets    the board                    agents      agent rows and liveness
    dispatch   last launch / pause flag     proposals   proposal rows, last open/close
    main       the main branch gate status  supervisor  the last supervisor tick
    spend      the loops' spend events (loop.iteration, loop.spend_counted) within sentinels.spend_window

Subjects are fixed words, so each sentinel has exactly one cooldown key
(`dispatch_frozen:dispatch`, `main_red:main`, ...).
"""

from __future__ import annotations

from healer import conventions as cv
from healer import lifecycle
from healer.core.findings import SEVERITY, Index, dispatcher_up, is_live
from healer.core.fleet import supervisor_silent
from healer.core.model import UNKNOWN, Finding, Snapshot

SOURCES: dict[str, tuple[str, ...]] = {
    "dispatch_frozen": ("tickets", "agents", "dispatch"),
    "pool_saturated": ("tickets", "agents"),
    "no_closes": ("proposals",),
    "main_red": ("main",),
    "supervisor_silent": ("supervisor",),
    "spend_rate": ("spend",),
}
SUBJECT = cv.SENTINEL_SUBJECT
key = cv.sentinel_key  # the one alert key of a sentinel (`main_red:main`)


_DISPATCHED = frozenset({lifecycle.QUEUED, lifecycle.IN_PROGRESS, lifecycle.REVIEW})  # work a dispatcher moves on


def _ready(s: Snapshot, ix: Index, wait: frozenset[str] = frozenset(), queued=None) -> list:
    """Queued tickets the dispatcher could take now (every blocker done or closed, no label meaning wait);
    `queued`: the queued tickets, when the caller keeps them (the incremental decision), else all are looked at."""
    out = []
    for t in s.tickets if queued is None else queued:
        if t.state != lifecycle.QUEUED or (wait and not wait.isdisjoint(t.labels)):
            continue  # a ticket waiting for a review is not ready: its label is the stale_label finding's business
        if all((b in ix.tickets and ix.tickets[b].state in lifecycle.TERMINAL) for b in t.blocked_by):
            out.append(t)
    return out


def sentinels(s: Snapshot, policy, ix: Index, queued=None, dispatched: bool | None = None) -> list[Finding]:
    """`queued` (the queued tickets) and `dispatched` (is any ticket queued, in progress or in review) spare a pass
    over the whole board when the caller keeps them (healer/core/incremental.py); the same answer either way."""
    cfg = policy.sentinels
    now = s.now
    out: list[Finding] = []
    unknown = {k for k, srcs in SOURCES.items() if any(x in s.failed_sources for x in srcs)}
    for k in sorted(unknown):
        out.append(Finding(k, SUBJECT[k], now, {"failed_sources": sorted(x for x in SOURCES[k] if x in s.failed_sources)},
                           "info", status=UNKNOWN))

    need_fleet = not ({"dispatch_frozen", "pool_saturated"} <= unknown)
    if need_fleet:
        ready = _ready(s, ix, frozenset(policy.fleet.wait_labels), queued)
        live = [v for v in s.agents if is_live(v)]
        waiting_since = min((t.updated_at for t in ready), default=0.0)  # read only when a ticket is ready
        # a dead dispatcher freezes the fleet whatever the pause says: nobody re-checks main, reaps or merges
        dead = ("dispatch_frozen" not in unknown and s.last_dispatch_tick is not None and not dispatcher_up(s, policy)
                and (any(t.state in _DISPATCHED for t in s.tickets) if dispatched is None else dispatched))
        if dead and s.last_dispatch_tick is not None:  # (dead says it is not None)
            out.append(Finding("dispatch_frozen", "dispatch", s.last_dispatch_tick, {
                "dispatcher": "silent", "last_pass_at": s.last_dispatch_tick, "dispatch_paused": s.dispatch_paused,
                "main_status": s.main_status, "ready": len(ready), "live_agents": len(live), "pool_size": s.pool_size,
                "oldest_ready": sorted(t.id for t in ready)[:10],
            }, SEVERITY["dispatch_frozen"]))
        # a red main is its own alarm and pauses dispatch on purpose: no second alarm for the same silence
        elif (ready and "dispatch_frozen" not in unknown and not s.dispatch_paused and s.main_status != "red"
                and len(live) < s.pool_size):
            since = max(waiting_since, s.last_launch_at) if s.last_launch_at is not None else waiting_since
            if now - since >= cfg.dispatch_frozen:
                out.append(Finding("dispatch_frozen", "dispatch", since, {
                    "ready": len(ready), "live_agents": len(live), "pool_size": s.pool_size,
                    "last_launch_at": s.last_launch_at, "oldest_ready": sorted(t.id for t in ready)[:10],
                }, SEVERITY["dispatch_frozen"]))
        if ready and "pool_saturated" not in unknown and len(live) >= s.pool_size:
            since = max(waiting_since, max(v.agent.started_at for v in live))
            if now - since >= cfg.pool_saturated:
                out.append(Finding("pool_saturated", "pool", since, {
                    "ready": len(ready), "live_agents": len(live), "pool_size": s.pool_size,
                    "agents": sorted(v.agent.id for v in live)[:20],
                }, SEVERITY["pool_saturated"]))

    if "no_closes" not in unknown:
        opened = [p.created_at for p in s.proposals if p.state == "open"]
        since = None
        if opened:
            since = min(opened)
        elif s.last_open_at is not None and (s.last_close_at is None or s.last_open_at > s.last_close_at):
            since = s.last_open_at
        if since is not None and s.last_close_at is not None:
            since = max(since, s.last_close_at)
        if since is not None and now - since >= cfg.no_closes:
            out.append(Finding("no_closes", "proposals", since, {
                "open": len(opened), "last_open_at": s.last_open_at, "last_close_at": s.last_close_at,
            }, SEVERITY["no_closes"]))

    if "main_red" not in unknown and s.main_status == "red":
        since = s.main_red_since if s.main_red_since is not None else now
        if now - since >= cfg.main_red:
            out.append(Finding("main_red", "main", since, {
                "dispatch_paused": s.dispatch_paused, "paused_by": s.dispatch_paused_by,
            }, SEVERITY["main_red"]))

    if "supervisor_silent" not in unknown and s.last_supervisor_tick is not None:
        if supervisor_silent(s.last_supervisor_tick, now, cfg.supervisor_silent) is not None:
            out.append(Finding("supervisor_silent", "supervisor", s.last_supervisor_tick, {
                "last_tick": s.last_supervisor_tick,
            }, SEVERITY["supervisor_silent"]))

    if "spend_rate" not in unknown and cfg.spend_rate is not None:
        f = spend_rate(s.spend, now, cfg.spend_rate, cfg.spend_window)
        if f is not None:
            out.append(f)
    return out


def spend_rate(spend, now: float, threshold: float, window: float) -> Finding | None:
    """The loops spent more than `threshold` USD within `window` (a runaway: $372 in 3 h with no alert).
    `since` is the moment the window's sum first went over: the finding fires at once (no debounce needed)."""
    recent = sorted((at, run, usd) for at, run, usd in spend if now - window <= at <= now and usd > 0)
    total, since = 0.0, None
    by_run: dict[str, float] = {}
    for at, run, usd in recent:
        total += usd
        by_run[run] = by_run.get(run, 0.0) + usd
        if since is None and total > threshold:
            since = at
    if since is None:
        return None
    top = max(by_run, key=lambda run: by_run[run])
    return Finding("spend_rate", "spend", since, {
        "spent_usd": round(total, 4), "threshold_usd": threshold, "window": window, "runs": len(by_run),
        "top_run": top, "top_run_usd": round(by_run[top], 4),
    }, SEVERITY["spend_rate"])
