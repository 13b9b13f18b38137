"""Findings: what is wrong with the fleet at `snapshot.now` (docs/supervisor-core.md "Findings").

Theory of operation: every detector is a pure function of the snapshot (through
`Index`, built once, so the whole pass is O(tickets + agents + worktrees + attempts))
and the policy. Each finding carries `since`, the moment its condition began as far
as the snapshot can tell, and is reported only when `now - since >= threshold`
(the `health` keys; kinds without a key have threshold 0). Never one tick early.

Subjects are ticket ids wherever a ticket is concerned (agent findings included),
so that the per-ticket quiet period, memory.attempts and the repair trigger all
speak of the same thing; a worktree path or a file path otherwise.

Evidence keys the planner reads: ticket, agent, agent_live, pid, worktree,
worktree_exists, labels, files, root, busy_pids, budget_spent, merged_commit,
expect (the ticket state the action expects to find).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from healer import lifecycle
from healer.core import adopt
from healer.core.dispatch import (
    counted,
    died,
    infra,
    same_state_resumes,  # one definition of spinning, the dispatcher's
)
from healer.core.model import AgentView, Finding, Snapshot, WorktreeView
from healer.records import Ticket

KIND_ORDER = {k: i for i, k in enumerate((
    "main_red", "same_commit_repush", "zombie_ticket", "wait_cycle", "agent_dead", "agent_stuck",
    "frozen_in_progress", "stale_label", "stale_block", "orphan_worktree", "unknown_file", "agent_idle",
    "dispatch_frozen", "pool_saturated", "no_closes", "supervisor_silent", "spend_rate", *adopt.KINDS,
))}
SEVERITY = {
    "main_red": "critical", "same_commit_repush": "critical", "zombie_ticket": "critical",
    "dispatch_frozen": "critical", "supervisor_silent": "critical", "wait_cycle": "warning",
    "agent_dead": "warning", "agent_stuck": "warning", "frozen_in_progress": "warning",
    "stale_label": "warning", "stale_block": "warning", "orphan_worktree": "warning", "pool_saturated": "warning",
    "no_closes": "warning", "agent_idle": "info", "unknown_file": "info", "spend_rate": "critical", **adopt.SEVERITY,
}
_SEV_RANK = {"critical": 0, "warning": 1, "info": 2}


def order_key(f: Finding) -> tuple:
    return (_SEV_RANK.get(f.severity, 3), KIND_ORDER.get(f.kind, 99), f.subject)


def dispatcher_up(s: Snapshot, policy) -> bool:
    """The dispatcher is running: its lease holder's pid is alive here, or (another host, no lease) it passed recently."""
    if s.dispatcher_alive:
        return True
    last = s.last_dispatch_tick
    return last is not None and s.now - last < policy.sentinels.dispatcher_silent


def reaped_by_dispatcher(v: AgentView, s: Snapshot, policy) -> bool:
    """Reap before you judge: an agent that ended with an exit status or a result, or one a running dispatcher
    launched, is the dispatcher's to record (and to resume); nobody may call it lost first."""
    if v.exit_code is not None:
        return True
    return (v.agent.data or {}).get("launched_by") == "dispatch" and dispatcher_up(s, policy)


def is_live(v: AgentView) -> bool:
    """Running in the store and not known dead (alive None: cannot tell, fail-open)."""
    return v.agent.state == "running" and v.alive is not False


def activity_at(v: AgentView) -> float:
    a = v.agent
    return max(a.progress_at or 0.0, a.started_at or 0.0, v.last_commit_at or 0.0)


@dataclass
class Index:
    tickets: dict[str, Ticket]
    agents_by_ticket: dict[str, list[AgentView]] = field(default_factory=lambda: defaultdict(list))
    live_by_ticket: dict[str, list[AgentView]] = field(default_factory=lambda: defaultdict(list))
    live_worktrees: set[str] = field(default_factory=set)
    worktree_by_path: dict[str, WorktreeView] = field(default_factory=dict)
    existing_wt_tickets: set[str] = field(default_factory=set)  # tickets with a worktree present on disk
    open_proposal_tickets: set[str] = field(default_factory=set)
    merged_at: dict[str, float] = field(default_factory=dict)  # ticket -> when its last merged proposal was decided
    reviewers: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # ticket -> tickets reviewing it


def index(s: Snapshot) -> Index:
    ix = Index(tickets={t.id: t for t in s.tickets})
    fill(ix, s)
    for t in s.tickets:
        rv = reviewed(t)
        if rv is not None:
            ix.reviewers[rv].append(t.id)
    for ids in ix.reviewers.values():
        ids.sort()  # by id, not board order: the same graph however the tickets come
    return ix


def reviewed(t: Ticket) -> str | None:
    """The ticket `t` reviews (data.reviews), while `t` is not done or closed."""
    rv = t.data.get("reviews") if t.data else None
    return rv if isinstance(rv, str) and t.state not in lifecycle.TERMINAL else None


def fill(ix: Index, s: Snapshot) -> None:
    """The agent, worktree and proposal parts of the index (one pass over each)."""
    for v in s.agents:
        tid = v.agent.ticket_id
        if tid is not None:
            ix.agents_by_ticket[tid].append(v)
        if is_live(v):
            if tid is not None:
                ix.live_by_ticket[tid].append(v)
            if v.agent.worktree:
                ix.live_worktrees.add(v.agent.worktree)
    for w in s.worktrees:
        ix.worktree_by_path[w.worktree.path] = w
        if w.exists and w.worktree.state == "active" and w.worktree.ticket_id:
            ix.existing_wt_tickets.add(w.worktree.ticket_id)
    for p in s.proposals:
        if p.state == "open":
            ix.open_proposal_tickets.add(p.ticket_id)
        elif p.state == "merged" and p.decided_at is not None:
            ix.merged_at[p.ticket_id] = max(p.decided_at, ix.merged_at.get(p.ticket_id, p.decided_at))


def _due(now: float, since: float, threshold: float) -> bool:
    return now - since >= threshold


# -- agents --------------------------------------------------------------------------
def agents(s: Snapshot, policy, ix: Index) -> list[Finding]:
    h = policy.health
    now = s.now
    dead: dict[str, tuple[AgentView, float]] = {}
    out: list[Finding] = []
    for v in s.agents:
        a = v.agent
        subject = a.ticket_id or a.id
        if a.state == "running" and v.alive is False and a.exit_code is None and a.ended_at is None:
            t = ix.tickets.get(a.ticket_id) if a.ticket_id else None
            if t is None or t.state != lifecycle.IN_PROGRESS:
                continue  # nothing to resume: frozen/escalated tickets are other findings' business
            if reaped_by_dispatcher(v, s, policy):
                continue
            since = max(a.heartbeat_at or 0.0, a.started_at or 0.0)
            prev = dead.get(subject)
            if prev is None or (a.started_at, a.id) > (prev[0].agent.started_at, prev[0].agent.id):
                dead[subject] = (v, since)
            continue
        if not is_live(v):
            continue
        act = activity_at(v)
        base = {"ticket": a.ticket_id, "agent": a.id, "agent_live": True, "pid": a.pid, "worktree": a.worktree,
                "progress_at": act, "heartbeat_at": a.heartbeat_at}
        stuck_after = h.agent_idle if v.paused else h.agent_stuck
        if _due(now, act, stuck_after):
            out.append(Finding("agent_stuck", subject, act, {**base, "paused": v.paused, "expect": "in_progress"},
                               SEVERITY["agent_stuck"]))
            continue
        idle_since = min(a.heartbeat_at or a.started_at or 0.0, act)
        if _due(now, idle_since, h.agent_idle):
            out.append(Finding("agent_idle", subject, idle_since, base, SEVERITY["agent_idle"]))
    for subject, (v, since) in dead.items():
        a = v.agent
        wt = ix.worktree_by_path.get(a.worktree) if a.worktree else None
        attempts = counted(s.attempts.get(a.ticket_id, ())) if a.ticket_id else ()
        budget = _budget_spent(attempts, policy)
        t = ix.tickets.get(a.ticket_id) if a.ticket_id else None
        out.append(Finding("agent_dead", subject, since, {
            "ticket": a.ticket_id, "agent": a.id, "agent_live": False, "pid": a.pid, "host": a.host,
            "worktree": a.worktree, "worktree_exists": bool(wt and wt.exists), "heartbeat_at": a.heartbeat_at,
            "launches": len(attempts), "max_launches": policy.retry.max_launches, "budget_spent": budget,
            "expect": t.state if t else None,
        }, SEVERITY["agent_dead"]))
    return out


def _budget_spent(attempts, policy) -> str | None:
    """Why the launch budget is spent, or None (docs/fleet.md, the rules: launches incl. resumes; resumes on the same state)."""
    if len(attempts) >= policy.retry.max_launches:
        return f"{len(attempts)} launches >= retry.max_launches {policy.retry.max_launches}"

    same = same_state_resumes(attempts)
    if same >= policy.retry.resume_same_state_limit:
        return f"{same} resumes on the same commit >= retry.resume_same_state_limit {policy.retry.resume_same_state_limit}"
    return None


# -- tickets -------------------------------------------------------------------------
_NO_REPUSH_CHECK = frozenset({lifecycle.DONE, lifecycle.CLOSED, lifecycle.NEEDS_HUMAN, lifecycle.BLOCKED})


def tickets(s: Snapshot, policy, ix: Index) -> list[Finding]:
    out: list[Finding] = []
    for t in s.tickets:
        if t.state not in lifecycle.TERMINAL:
            out.extend(_ticket(t, s, policy, ix)[0])
    for tid, atts in s.attempts.items():
        ticket = ix.tickets.get(tid)
        f = _repush(ticket, atts, ix) if ticket is not None else None
        if f is not None:
            out.append(f)
    return out


def stale_blocks(s: Snapshot, policy, ix: Index) -> list[Finding]:
    """`stale_block`: a ticket in state blocked that nothing blocks any more, for `health.stale_block`: every ticket
    of its blocked_by done or closed (an unknown one still blocks), no label of fleet.wait_labels or
    health.stale_labels, no live agent, and no rejected proposal (the dispatcher blocks a ticket whose replays ran
    out: that one waits for a human). `since`: the last of its own change and its blockers' endings. Judged in full
    every tick (blocked tickets are few, and a blocker's ending changes them without touching them)."""
    age = policy.health.stale_block
    wait = frozenset(policy.fleet.wait_labels) | frozenset(policy.health.stale_labels)
    out: list[Finding] = []
    rejected = None
    for t in s.tickets:
        if t.state != lifecycle.BLOCKED or (t.labels and not wait.isdisjoint(t.labels)) or ix.live_by_ticket.get(t.id):
            continue
        ends = []
        for b in t.blocked_by:
            bt = ix.tickets.get(b)
            if bt is None or bt.state not in lifecycle.TERMINAL:
                break
            ends.append(bt.updated_at)
        else:
            if rejected is None:
                rejected = {p.ticket_id for p in s.proposals if p.state == "rejected"}
            if t.id in rejected:
                continue
            since = max([t.updated_at, *ends])
            if _due(s.now, since, age):
                out.append(Finding("stale_block", t.id, since, {
                    "ticket": t.id, "expect": lifecycle.BLOCKED, "blocked_by": list(t.blocked_by),
                    "labels": sorted(t.labels),
                }, SEVERITY["stale_block"]))
    return out


def ticket_findings(t: Ticket, s: Snapshot, policy, ix: Index) -> tuple[list[Finding], float]:
    """The findings of one ticket that is not done or closed (`tickets` for one ticket), and the earliest `now`
    at which they could change although nothing about the ticket did (a threshold crossed; inf: never).
    The incremental decision (healer/core/incremental.py) keeps both and asks again only for changed
    tickets and passed deadlines."""
    out, later = _ticket(t, s, policy, ix)
    f = _repush(t, s.attempts.get(t.id, ()), ix)
    if f is not None:
        out.append(f)
    return out, later


def _ticket(t: Ticket, s: Snapshot, policy, ix: Index) -> tuple[list[Finding], float]:
    h = policy.health
    now = s.now
    stale = h.stale_labels
    out: list[Finding] = []
    later = _INF
    live = ix.live_by_ticket.get(t.id, ())
    if t.state == lifecycle.IN_PROGRESS and not live and t.id not in ix.existing_wt_tickets:
        mine = ix.agents_by_ticket.get(t.id, ())
        since = max([t.updated_at] + [max(v.agent.ended_at or 0.0, v.agent.heartbeat_at or 0.0) for v in mine])
        if _due(now, since, h.frozen_in_progress):
            out.append(Finding("frozen_in_progress", t.id, since, {
                "ticket": t.id, "expect": t.state, "updated_at": t.updated_at,
                "stale_agents": sorted(v.agent.id for v in mine if v.agent.state == "running"),
            }, SEVERITY["frozen_in_progress"]))
        else:
            later = min(later, _when(since, h.frozen_in_progress))
    if stale and t.labels:
        act = max([t.updated_at] + [activity_at(v) for v in live])
        due = {}
        starts: list[float] = []  # since when each due label is due
        for label, added in t.labels.items():
            age = stale.get(label)
            if age is None:
                continue
            since = max(added, act)
            if _due(now, since, age):
                due[label] = added
                starts.append(since)
            else:
                later = min(later, _when(since, age))
        if due:
            out.append(Finding("stale_label", t.id, min(starts), {
                "ticket": t.id, "labels": dict(sorted(due.items())), "last_activity": act,
            }, SEVERITY["stale_label"]))
    merged = t.id in s.merged_tickets or (t.data.get("merged_commit") if t.data else None)
    pending = review_pending(t, ix, now, h.review_grace) if merged else None
    if pending is not None:
        later = min(later, pending)
    elif merged and t.id not in s.reopened and not (t.state == lifecycle.REVIEW and t.id in ix.open_proposal_tickets):
        lv = sorted(live, key=lambda v: v.agent.id)
        out.append(Finding("zombie_ticket", t.id, t.updated_at, {
            "ticket": t.id, "expect": t.state, "merged_commit": (t.data or {}).get("merged_commit"),
            "agent": lv[0].agent.id if lv else None, "agent_live": bool(lv), "pid": lv[0].agent.pid if lv else None,
        }, SEVERITY["zombie_ticket"]))
    return out, later


_INF = float("inf")
LAUNCH_FAILED = "launch_failed"  # the signature of an attempt whose agent never started (healer/fleet/dispatch_launch.py)


def review_pending(t: Ticket, ix: Index, now: float, grace: float) -> float | None:
    """A merged ticket still in review is a merge whose recording is unfinished (the proposal's verdict written, the
    move to done not yet: a store lost between them, a dispatcher stopped there): the dispatcher finishes it on its
    next pass. It is no zombie for `grace` after its last change or its proposal's merge; returns when it may
    become one (None: not pending, judge it now)."""
    if t.state != lifecycle.REVIEW:
        return None
    since = max(t.updated_at, ix.merged_at.get(t.id, t.updated_at))
    return None if _due(now, since, grace) else _when(since, grace)


def _when(since: float, threshold: float) -> float:
    """A moment no later than the first `now` at which `_due(now, since, threshold)` holds (a little early:
    float rounding must never make a cached answer outlive its deadline)."""
    return since + threshold - 1e-3


def _repush(t: Ticket, atts, ix: Index) -> Finding | None:
    tid = t.id
    if t.state in _NO_REPUSH_CHECK or len(atts) < 2:
        return None
    if t.state == lifecycle.REVIEW and tid in ix.open_proposal_tickets:
        return None  # its proposal is being gated: judging it now races the merge
    groups: dict[tuple, list] = {}
    hit = None
    for at in atts:
        if not at.head or died(at) or infra(at) or (at.failure_signature or "").startswith(LAUNCH_FAILED):
            # a killed, lost or interrupted run pushed nothing, nor did a launch that never started an agent (its
            # head is only the worktree's at launch); the infrastructure's endings are not the agent's
            continue
        g = groups.setdefault((at.head, at.state_hash), [])
        g.append(at)
        if len(g) == 2 and hit is None:
            hit = g
    if hit is None:
        return None
    head, state_hash = hit[0].head, hit[0].state_hash
    g = groups[(head, state_hash)]
    lv = sorted(ix.live_by_ticket.get(tid, ()), key=lambda v: v.agent.id)
    return Finding("same_commit_repush", tid, hit[1].at, {
        "ticket": tid, "expect": t.state, "head": head, "state_hash": state_hash, "count": len(g),
        "attempts": [a.id for a in g][-10:], "failure_signature": g[-1].failure_signature,
        "agent": lv[0].agent.id if lv else None, "agent_live": bool(lv), "pid": lv[0].agent.pid if lv else None,
    }, SEVERITY["same_commit_repush"])


# -- worktrees and files -------------------------------------------------------------
def worktrees(s: Snapshot, policy, ix: Index) -> list[Finding]:
    now = s.now
    out: list[Finding] = []
    for w in s.worktrees:
        wt = w.worktree
        if wt.state != "active" or wt.path in ix.live_worktrees:
            continue
        t = ix.tickets.get(wt.ticket_id) if wt.ticket_id else None
        if t is not None and t.state not in lifecycle.TERMINAL:
            continue
        ended = [v.agent.ended_at or v.agent.heartbeat_at or 0.0 for v in ix.agents_by_ticket.get(wt.ticket_id or "", ())
                 if v.agent.worktree == wt.path]
        since = max([wt.created_at, t.updated_at if t else 0.0] + ended)
        if _due(now, since, policy.health.orphan_worktree):
            out.append(Finding("orphan_worktree", wt.path, since, {
                "worktree": wt.path, "ticket": wt.ticket_id, "ticket_state": t.state if t else "missing",
                "worktree_exists": w.exists, "busy_pids": list(w.busy_pids), "files": list(w.unknown_files),
                "root": wt.path, "branch": wt.branch,
            }, SEVERITY["orphan_worktree"]))
    for path in s.unknown_files:
        out.append(Finding("unknown_file", path, s.now, {"files": [path], "root": ""}, SEVERITY["unknown_file"]))
    return out
