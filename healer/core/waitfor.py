"""The wait-for graph: who waits for whom, and the cycles that wait forever.

Nodes are `ticket:ID`, `agent:ID`, `worktree:PATH`, `label:ID#LABEL`, `reviewer:ID#LABEL`.
An edge u -> v means "u cannot move until v does". Edges (kind in the edge data):

  ticket T -> ticket U        blocked_by      U in T.blocked_by and U not done/closed (or unknown)
                                              (a needs_human ticket has no outgoing edge: it waits for a human)
  ticket T -> ticket U        waits_for       U in T.data["waits_for"] (external trackers), U not done/closed
  ticket T -> agent A         waits_for_agent T in_progress and A is registered running on T
  agent A -> worktree W       resumes_in      A is not live: it can only be resumed in its worktree W
  worktree W -> ticket T      recreated_by    W is gone from disk (or unknown) and T is in_progress: only a
                                              new dispatch of T recreates it, and T is not queued
  ticket T -> label T#L       held_by_label   T carries L, one of health.stale_labels (a gate label)
  label T#L -> ticket R       reviewed_by     R is a live ticket whose data["reviews"] is T
  label T#L -> reviewer T#L   no_reviewer     nobody reviews T (a dead end, kept as evidence)

Live agents have no outgoing edge (they make progress), so the "43 tickets frozen,
each waiting for an agent that no longer existed" incident is T -> A -> W -> T for
each T. A cycle is broken at its youngest ticket (largest created_at, then id):
its outgoing edge in the cycle says how (`BREAK`); a dependency between tickets
has no whitelisted remedy, so a human decides (escalate).
"""

from __future__ import annotations

import networkx as nx

from healer import lifecycle
from healer.core.findings import SEVERITY, Index, is_live
from healer.core.model import Finding, Snapshot

BREAK = {
    "waits_for_agent": "requeue_ticket",
    "held_by_label": "drop_label",
    "blocked_by": "escalate",
    "waits_for": "escalate",
}


def edges(s: Snapshot, policy, ix: Index) -> list[tuple[str, str, dict]]:
    """Every wait-for edge (u, v, data), as documented at the top of this module."""
    return [(u, v, _data(k, lb)) for u, v, k, lb in edge_tuples(s, policy, ix)]


def _data(kind: str, label: str | None) -> dict:
    return {"kind": kind} if label is None else {"kind": kind, "label": label}


def edge_tuples(s: Snapshot, policy, ix: Index, tickets=None) -> list[tuple[str, str, str, str | None]]:
    """The edges as hashable (u, v, kind, label) in the order `edges` gives them; `tickets`: only the ticket
    part of these (the incremental decision passes the tickets that can have ticket edges at all)."""
    out: list[tuple[str, str, str, str | None]] = []
    gate_labels = policy.health.stale_labels
    for t in s.tickets if tickets is None else tickets:
        ticket_edges(t, ix, gate_labels, out)
    agent_edges(s, ix, out)
    return out


def has_ticket_edges(t, gate_labels) -> bool:
    """Could `ticket_edges` give this ticket any edge (whatever the other tickets' states)?"""
    if t.state in lifecycle.TERMINAL or t.state == lifecycle.NEEDS_HUMAN:
        return False
    if t.blocked_by or isinstance(t.data.get("waits_for") if t.data else None, list):
        return True
    return any(label in gate_labels for label in t.labels)


def ticket_edges(t, ix: Index, gate_labels, out: list) -> None:
    term = lifecycle.TERMINAL
    if t.state in term or t.state == lifecycle.NEEDS_HUMAN:  # handed to a human: it waits for them alone
        return
    tickets = ix.tickets

    def pending(tid: str) -> bool:
        u = tickets.get(tid)
        return u is None or u.state not in term

    tn = "ticket:" + t.id
    for u in t.blocked_by:
        if pending(u):
            out.append((tn, "ticket:" + u, "blocked_by", None))
    waits = t.data.get("waits_for") if t.data else None
    if isinstance(waits, list):
        for u in waits:
            if isinstance(u, str) and pending(u):
                out.append((tn, "ticket:" + u, "waits_for", None))
    for label in t.labels:
        if label in gate_labels:
            ln = f"label:{t.id}#{label}"
            out.append((tn, ln, "held_by_label", label))
            rv = ix.reviewers.get(t.id)
            if rv:
                for r in rv:
                    out.append((ln, "ticket:" + r, "reviewed_by", None))
            else:
                out.append((ln, f"reviewer:{t.id}#{label}", "no_reviewer", None))


def agent_edges(s: Snapshot, ix: Index, out: list) -> None:
    tickets = ix.tickets
    for v in s.agents:
        a = v.agent
        if a.state != "running" or a.ticket_id is None:
            continue
        t = tickets.get(a.ticket_id)
        if t is None or t.state != lifecycle.IN_PROGRESS:
            continue
        an = "agent:" + a.id
        out.append(("ticket:" + t.id, an, "waits_for_agent", None))
        if is_live(v) or not a.worktree:
            continue
        wn = "worktree:" + a.worktree
        out.append((an, wn, "resumes_in", None))
        w = ix.worktree_by_path.get(a.worktree)
        if w is None or not w.exists or w.worktree.state != "active":
            out.append((wn, "ticket:" + t.id, "recreated_by", None))


def build(s: Snapshot, policy, ix: Index) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_edges_from(edges(s, policy, ix))
    return g


def core(es: list[tuple[str, str, dict]]) -> list[tuple[str, str, dict]]:
    """The edges that can lie on a cycle: peel sources and sinks until none is left (linear time).

    Most of a healthy fleet's edges end at a live agent or a done ticket; networkx then only
    sees the few nodes that may really wait in a circle.
    """
    outs: dict[str, set[str]] = {}
    ins: dict[str, set[str]] = {}
    for u, v, _d in es:
        outs.setdefault(u, set()).add(v)
        ins.setdefault(v, set()).add(u)
        outs.setdefault(v, set())
        ins.setdefault(u, set())
    gone: set[str] = set()
    stack = [n for n in outs if not outs[n] or not ins[n]]
    while stack:
        n = stack.pop()
        if n in gone:
            continue
        gone.add(n)
        for v in outs[n]:
            ins[v].discard(n)
            if not ins[v] and v not in gone:
                stack.append(v)
        for u in ins[n]:
            outs[u].discard(n)
            if not outs[u] and u not in gone:
                stack.append(u)
    return [e for e in es if e[0] not in gone and e[1] not in gone]


def _created(ix: Index, node: str) -> tuple[float, str]:
    tid = node[len("ticket:"):]
    t = ix.tickets.get(tid)
    return ((t.created_at if t else float("-inf")), tid)


def cycles(s: Snapshot, policy, ix: Index, g: nx.DiGraph | None = None) -> list[Finding]:
    """One wait_cycle finding per strongly connected component that holds a cycle."""
    if g is None:
        g = nx.DiGraph()
        g.add_edges_from(core(edges(s, policy, ix)))
    return [f for _comp, f in components(s, ix, g) if f is not None]


def components(s: Snapshot, ix: Index, g: nx.DiGraph) -> list[tuple[frozenset[str], Finding | None]]:
    """Each strongly connected component of `g` that holds a cycle, with its wait_cycle finding (None: no ticket on it)."""
    out: list[tuple[frozenset[str], Finding | None]] = []
    for comp in sorted(nx.strongly_connected_components(g), key=min):
        if len(comp) == 1:
            (n,) = comp
            if not g.has_edge(n, n):
                continue
        out.append((frozenset(comp), _finding(s, ix, g, comp)))
    return out


def _finding(s: Snapshot, ix: Index, g: nx.DiGraph, comp) -> Finding | None:
    start = min(comp)
    cyc = nx.find_cycle(g.subgraph(comp), source=start)
    nodes = [u for u, _v in cyc]
    tix = [n for n in nodes if n.startswith("ticket:") and n[len("ticket:"):] in ix.tickets]
    if not tix:
        return None
    youngest = max(tix, key=lambda n: _created(ix, n))
    tid = youngest[len("ticket:"):]
    u, v = next((u, v) for u, v in cyc if u == youngest)
    kind = g.edges[u, v]["kind"]
    action = BREAK.get(kind, "escalate")
    ev = {
        "ticket": tid, "cycle": nodes, "edges": [[a, b, g.edges[a, b]["kind"]] for a, b in cyc],
        "break_at": tid, "break_edge": [u, v, kind], "break_action": action,
        "tickets": sorted(n[len("ticket:"):] for n in comp if n.startswith("ticket:")),
        "expect": ix.tickets[tid].state,
    }
    if kind == "held_by_label":
        ev["labels"] = {g.edges[u, v]["label"]: ix.tickets[tid].labels.get(g.edges[u, v]["label"])}
    if kind == "waits_for_agent":
        ev["stale_agents"] = [v[len("agent:"):]]
    return Finding("wait_cycle", tid, s.now, ev, SEVERITY["wait_cycle"])
