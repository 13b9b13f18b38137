"""The same decision as `decide`, reconsidering only what changed since the last one. Pure.

    decide(snapshot, policy, memory, carry) -> (Decision, Carry)

`carry` is the previous call's own return (None: decide from scratch, as on a restart). It holds the
previous snapshot and what was concluded from it: each ticket's findings and the moment they could
change by time alone (a threshold crossing: a deadline), the wait-for graph's edges and its cycles.
A new snapshot is compared with the previous one by object identity (the shell hands back the very
same Ticket / AgentView / WorktreeView for what did not change; an equal copy only costs a
re-check), and only these are looked at again:

    tickets     changed or gone, or whose agents, worktrees, open proposal, attempts, merged or
                reopened mark changed, or whose deadline has passed
    cycles      the strongly connected components that hold a changed edge's end, the old cyclic
                components holding one or a changed ticket (the others keep their finding; `since`
                is now, as `cycles` says)

Agents, worktrees and sentinels are judged in full every time (one pass over agents and worktrees;
the queued tickets the carry keeps). A different policy, a clock that went back or a board with a
ticket id twice decides from scratch. tests/supervisor/test_incremental_decide.py checks, with
hypothesis, that every result equals `healer.core.decide` on the same snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import compress
from operator import attrgetter, is_not
from typing import Any

import networkx as nx

from healer import lifecycle
from healer.core import adopt, plan, sentinels, waitfor
from healer.core import findings as fd
from healer.core.model import Decision, Finding, Memory, Snapshot
from healer.records import Ticket

_ID = attrgetter("id")
MAX_MOVED = 5000  # tickets out of place beyond which identity sets find the changed ones
MAX_ENDS = 2000  # changed wait-for edge ends beyond which one full cycle search is cheaper


@dataclass(frozen=True)
class Carry:
    policy: Any
    snapshot: Snapshot
    ix: fd.Index
    attempt_ids: frozenset[tuple[str, int]]  # (ticket, id() of its attempts tuple)
    found: dict[str, tuple[Finding, ...]]  # ticket id -> its ticket findings, non-empty only
    later: dict[str, float]  # ticket id -> deadline (finite only)
    reviews: dict[str, str]  # ticket id -> the ticket it reviews (fd.reviewed)
    queued: dict[str, Ticket]
    dispatched: frozenset[str]  # queued, in progress or in review
    edgy: dict[str, Ticket]  # tickets that can have ticket edges (waitfor.has_ticket_edges)
    edges: frozenset[tuple]
    comps: tuple[tuple[frozenset[str], Finding | None], ...]
    mode: str = "full"  # how this carry was made: "full" or "incremental (N tickets)"


def decide(snapshot: Snapshot, policy, memory: Memory, carry: Carry | None = None) -> tuple[Decision, Carry]:
    found, ix, carry = detect(snapshot, policy, carry)
    return plan.decide(snapshot, policy, memory, found=found, ix=ix), carry


def detect(s: Snapshot, policy, carry: Carry | None = None) -> tuple[list[Finding], fd.Index, Carry]:
    if carry is None or s.now < carry.snapshot.now or (carry.policy is not policy and carry.policy != policy):
        return _full(s, policy)
    old = carry.snapshot.tickets
    if s.tickets is old:
        new_t: list = []
        old_t: list = []
    elif len(s.tickets) == len(old):  # the board's order is stable: compare place by place (C speed)
        new_t = list(compress(s.tickets, map(is_not, s.tickets, old)))
        old_t = list(compress(old, map(is_not, s.tickets, old)))
    else:
        new_t, old_t = [], []
    if len(new_t) > MAX_MOVED or (len(s.tickets) != len(old) and s.tickets is not old):
        new_t, old_t = _changed(s.tickets, old)
    tickets = dict(carry.ix.tickets)
    for t in old_t:
        tid = t.id
        if tickets.get(tid) is t:
            del tickets[tid]
    for t in new_t:
        tickets[t.id] = t
    if len(tickets) != len(s.tickets):  # a ticket id twice (not from a store): from scratch
        return _full(s, policy)
    return _step(s, policy, tickets, new_t, {t.id for t in old_t} - tickets.keys(), carry)


def _assemble(s: Snapshot, policy, ix: fd.Index, found: dict, comps, queued: dict, dispatched) -> list[Finding]:
    out = fd.agents(s, policy, ix)
    for fs in found.values():
        out.extend(fs)
    out += fd.worktrees(s, policy, ix)
    out += fd.stale_blocks(s, policy, ix)
    out += [f for _c, f in comps if f is not None]
    out += sentinels.sentinels(s, policy, ix, queued=queued.values(), dispatched=bool(dispatched))
    out += adopt.findings(s, policy)
    return plan.ordered(out)


def _sets(tickets, gate) -> tuple[dict, dict, set, dict]:
    reviews: dict[str, str] = {}
    queued: dict[str, Ticket] = {}
    dispatched: set[str] = set()
    edgy: dict[str, Ticket] = {}
    for t in tickets:
        _place(t, gate, reviews, queued, dispatched, edgy)
    return reviews, queued, dispatched, edgy


def _place(t: Ticket, gate, reviews: dict, queued: dict, dispatched: set, edgy: dict) -> None:
    tid = t.id
    rv = fd.reviewed(t)
    if rv is None:
        reviews.pop(tid, None)
    else:
        reviews[tid] = rv
    if t.state == lifecycle.QUEUED:
        queued[tid] = t
    else:
        queued.pop(tid, None)
    if t.state in sentinels._DISPATCHED:
        dispatched.add(tid)
    else:
        dispatched.discard(tid)
    if waitfor.has_ticket_edges(t, gate):
        edgy[tid] = t
    else:
        edgy.pop(tid, None)


def _index(s: Snapshot, tickets: dict, reviews: dict) -> fd.Index:
    ix = fd.Index(tickets=tickets)
    fd.fill(ix, s)
    for tid, rv in reviews.items():
        ix.reviewers[rv].append(tid)
    for ids in ix.reviewers.values():
        ids.sort()
    return ix


def _full(s: Snapshot, policy) -> tuple[list[Finding], fd.Index, Carry]:
    tickets = dict(zip(map(_ID, s.tickets), s.tickets, strict=True))
    gate = policy.health.stale_labels
    reviews, queued, dispatched, edgy = _sets(s.tickets, gate)
    ix = _index(s, tickets, reviews)
    found: dict[str, tuple[Finding, ...]] = {}
    later: dict[str, float] = {}
    for t in tickets.values():
        if t.state not in lifecycle.TERMINAL:
            _judge(t, s, policy, ix, found, later)
    es = waitfor.edge_tuples(s, policy, ix, tickets=edgy.values())
    g = nx.DiGraph()
    g.add_edges_from(waitfor.core([(u, v, waitfor._data(k, lb)) for u, v, k, lb in es]))
    comps = tuple(waitfor.components(s, ix, g))
    carry = Carry(policy, s, ix, _attempt_ids(s), found, later, reviews, queued,
                  frozenset(dispatched), edgy, frozenset(es), comps)
    return _assemble(s, policy, ix, found, comps, queued, dispatched), ix, carry


def _judge(t: Ticket, s: Snapshot, policy, ix: fd.Index, found: dict, later: dict) -> None:
    fs, at = fd.ticket_findings(t, s, policy, ix)
    if fs:
        found[t.id] = tuple(fs)
    else:
        found.pop(t.id, None)
    if at != fd._INF:
        later[t.id] = at
    else:
        later.pop(t.id, None)


def _attempt_ids(s: Snapshot) -> frozenset[tuple[str, int]]:
    return frozenset(zip(s.attempts.keys(), map(id, s.attempts.values()), strict=True))


def _changed(new: tuple, old: tuple) -> tuple[list, list]:
    """(in new and not in old, in old and not in new), by identity; C-speed passes for big tuples."""
    if new is old:
        return [], []
    n, o = set(map(id, new)), set(map(id, old))
    return (list(compress(new, map((n - o).__contains__, map(id, new)))),
            list(compress(old, map((o - n).__contains__, map(id, old)))))


def _step(s: Snapshot, policy, tickets: dict, changed: list, removed: set, c: Carry) -> tuple[list[Finding], fd.Index, Carry]:
    old = c.snapshot
    dirty: set = {t.id for t in changed} | removed

    gate = policy.health.stale_labels
    reviews, queued, dispatched, edgy = dict(c.reviews), dict(c.queued), set(c.dispatched), dict(c.edgy)
    for tid in removed:
        reviews.pop(tid, None)
        queued.pop(tid, None)
        dispatched.discard(tid)
        edgy.pop(tid, None)
    for t in changed:
        _place(t, gate, reviews, queued, dispatched, edgy)
    ix = _index(s, tickets, reviews)

    # what else a ticket's findings read: its agents, worktrees, open proposal, attempts, merged / reopened marks
    for views in _changed(s.agents, old.agents):
        dirty.update(v.agent.ticket_id for v in views)
    for views in _changed(s.worktrees, old.worktrees):
        dirty.update(w.worktree.ticket_id for w in views)
    dirty |= ix.open_proposal_tickets ^ c.ix.open_proposal_tickets
    dirty.update(tid for tid in ix.merged_at.keys() | c.ix.merged_at.keys() if ix.merged_at.get(tid) != c.ix.merged_at.get(tid))
    if s.merged_tickets is not old.merged_tickets:
        dirty |= s.merged_tickets ^ old.merged_tickets
    if s.reopened is not old.reopened:
        dirty |= s.reopened ^ old.reopened
    attempt_ids = c.attempt_ids
    if s.attempts is not old.attempts:
        attempt_ids = _attempt_ids(s)
        dirty.update(tid for tid, _ in attempt_ids ^ c.attempt_ids)
    dirty.discard(None)

    found, later = dict(c.found), dict(c.later)
    now = s.now
    recheck = dirty | {tid for tid, at in later.items() if at <= now}
    for tid in recheck:
        t = tickets.get(tid)
        if t is None or t.state in lifecycle.TERMINAL:
            found.pop(tid, None)
            later.pop(tid, None)
        else:
            _judge(t, s, policy, ix, found, later)

    es = waitfor.edge_tuples(s, policy, ix, tickets=edgy.values())
    comps = _cycles(s, ix, es, c, dirty)
    carry = Carry(policy, s, ix, attempt_ids, found, later, reviews, queued, frozenset(dispatched), edgy,
                  frozenset(es) if comps is not None else c.edges, comps if comps is not None else (),
                  mode=f"incremental ({len(recheck)} tickets)")
    if comps is None:  # too much changed: the cycles from scratch
        g = nx.DiGraph()
        g.add_edges_from(waitfor.core([(u, v, waitfor._data(k, lb)) for u, v, k, lb in es]))
        carry = replace(carry, edges=frozenset(es), comps=tuple(waitfor.components(s, ix, g)))
    return _assemble(s, policy, ix, found, carry.comps, queued, dispatched), ix, carry


def _cycles(s: Snapshot, ix: fd.Index, es: list, c: Carry, dirty: set) -> tuple | None:
    """The cyclic components of the new graph from the old ones and what changed (None: too much changed).

    A new cyclic component either holds an end of a changed edge (it is that end's component, found
    as forward ∩ backward reachability), or all its edges are old: then it lies within one old
    component, which is either the same (kept) or lost an edge (so holds a changed end, and is searched
    again). R, the union of the components to search again, is therefore a union of whole new components."""
    new = frozenset(es)
    diff = new ^ c.edges
    ends = {e[0] for e in diff} | {e[1] for e in diff}
    if len(ends) > MAX_ENDS:
        return None
    marks = {"ticket:" + t for t in dirty}
    redo = [comp for comp, _f in c.comps if not comp.isdisjoint(ends) or not comp.isdisjoint(marks)]
    if not ends and not redo:
        return tuple((comp, replace(f, since=s.now) if f is not None else None) for comp, f in c.comps)
    region: set[str] = set()
    for comp in redo:
        region |= comp
    if ends:
        out: dict[str, list[str]] = {}
        inn: dict[str, list[str]] = {}
        for u, v, _k, _lb in es:
            out.setdefault(u, []).append(v)
            inn.setdefault(v, []).append(u)
        for n in ends:
            if n in region or n not in out or n not in inn:
                continue  # already searched, or no way into or out of it: on no cycle
            scc = _reach(n, out) & _reach(n, inn)
            if len(scc) > 1 or n in out[n]:
                region |= scc
    kept = [(comp, replace(f, since=s.now) if f is not None else None) for comp, f in c.comps if comp.isdisjoint(region)]
    g = nx.DiGraph()
    g.add_edges_from((u, v, waitfor._data(k, lb)) for u, v, k, lb in es if u in region and v in region)
    comps = kept + waitfor.components(s, ix, g)
    comps.sort(key=lambda cf: min(cf[0]))
    return tuple(comps)


def _reach(n: str, adj: dict[str, list[str]]) -> set[str]:
    seen = {n}
    stack = [n]
    while stack:
        for m in adj.get(stack.pop(), ()):
            if m not in seen:
                seen.add(m)
                stack.append(m)
    return seen
