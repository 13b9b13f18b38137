"""Pure views: store records in, page data out. No I/O, no clock: the shell passes `now`.

Each function takes what the shell read (tickets, events, intents...) and returns plain dicts and lists that
render.py turns into HTML and the JSON API returns as they are."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from healer import lifecycle

BOARD_LIMIT = 200  # cards per state column: a 10,000-ticket board stays one quick page (bench/console.py)
SENTINELS = ("dispatch_frozen", "pool_saturated", "no_closes", "main_red", "supervisor_silent", "spend_rate")
PAGE_KINDS = ("notify.sent", "notify.resolved", "notify.acked")
SPEND_KINDS = ("loop.iteration", "loop.spend_counted")


def _usd(x: Any) -> float:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and x > 0 else 0.0


def day_of(at: float) -> str:
    """The UTC day of a moment, without the clock module (pure)."""
    import datetime as _dt  # lazy: only the cost view needs it (0.1 ms)

    return _dt.datetime.fromtimestamp(at, _dt.UTC).strftime("%Y-%m-%d")


# -- the board ------------------------------------------------------------------------

def card(t) -> dict[str, Any]:
    return {"id": t.id, "title": t.title, "state": t.state, "priority": t.priority, "blocked_by": list(t.blocked_by),
            "labels": sorted(t.labels)}


def board(tickets: Iterable, *, state: str | None = None, q: str = "", limit: int = BOARD_LIMIT,
          offset: int = 0) -> dict[str, Any]:
    """Tickets by state (priority, then id), filtered by state and by a search of id and title; `limit` cards per
    column from `offset`, the rest counted. `blocked_by` edges of the shown cards form the graph."""
    needle = q.strip().lower()
    cols: dict[str, list] = {s: [] for s in lifecycle.STATES}
    for t in tickets:
        if state and t.state != state:
            continue
        if needle and needle not in t.id.lower() and needle not in t.title.lower():
            continue
        cols.setdefault(t.state, []).append(t)
    limit, offset = max(1, limit), max(0, offset)
    out: list[dict[str, Any]] = []
    for s, ts in cols.items():
        if state and s != state:
            continue
        ts.sort(key=lambda t: (t.priority, t.id))
        shown = ts[offset:offset + limit]
        out.append({"state": s, "count": len(ts), "tickets": [card(t) for t in shown],
                    "more": max(0, len(ts) - offset - len(shown)), "offset": offset})
    shown_ids = {c["id"] for col in out for c in col["tickets"]}
    edges = sorted((c["id"], b) for col in out for c in col["tickets"] for b in c["blocked_by"] if b in shown_ids)
    return {"columns": out, "state": state or "", "q": q, "limit": limit, "offset": offset, "edges": edges,
            "total": sum(c["count"] for c in out), "states": list(lifecycle.STATES)}


# -- one ticket -----------------------------------------------------------------------

def transitions(events: Iterable) -> list[dict[str, Any]]:
    """Every ticket.moved with its reason and actor, oldest first."""
    return [{"id": e.id, "at": e.at, "from": e.payload.get("from"), "to": e.payload.get("to"),
             "actor": e.payload.get("actor", ""), "reason": e.payload.get("reason", "")}
            for e in events if e.kind == "ticket.moved"]


def iterations(events: Iterable) -> list[dict[str, Any]]:
    out = []
    for e in events:
        if e.kind != "loop.iteration":
            continue
        p = e.payload
        out.append({"run": e.subject, "at": e.at, "n": p.get("n"), "cost_usd": _usd(p.get("cost_usd")),
                    "gates": [{"name": g.get("name", ""), "outcome": g.get("outcome", ""), "exit_code": g.get("exit_code")}
                              for g in p.get("gates") or [] if isinstance(g, dict)],
                    "verdict": (p.get("verdict") or {}).get("reason", ""), "signature": p.get("signature") or ""})
    return out


def ticket_page(t, *, attempts, proposals, comments, events, run_events, intents, agents) -> dict[str, Any]:
    """One ticket: attempts, iterations and their gates, spend, proposals, transitions, the intents that acted on it,
    its agents (their logs are the evidence)."""
    its = iterations(run_events)
    spend = sum(_usd(e.payload.get("cost_usd") if e.kind == "loop.iteration" else e.payload.get("usd")) for e in run_events)
    return {
        "ticket": {**card(t), "body": t.body, "created_at": t.created_at, "updated_at": t.updated_at},
        "attempts": [{"id": a.id, "kind": a.kind, "at": a.at, "ended_at": a.ended_at, "exit_code": a.exit_code,
                      "run": a.run_id or "", "signature": a.failure_signature or "", "gate_log_tail": a.gate_log_tail or ""}
                     for a in attempts],
        "iterations": its,
        "spend_usd": round(spend, 6),
        "proposals": [{"id": p.id, "branch": p.branch, "commit": p.commit[:12], "state": p.state, "gate_log": p.gate_log or ""}
                      for p in proposals],
        "comments": [{"at": c.at, "author": c.author, "body": c.body} for c in comments],
        "transitions": transitions(events),
        "intents": [intent_row(i) for i in intents],
        "agents": [{"id": a.id, "state": a.state, "started_at": a.started_at, "exit_code": a.exit_code} for a in agents],
    }


def intent_row(i) -> dict[str, Any]:
    r = i.result or {}
    return {"id": i.id, "action": i.action, "subject": i.subject, "state": i.state, "actor": i.actor, "reason": i.reason,
            "at": i.created_at, "status": r.get("status", ""), "verification": r.get("reason", ""),
            "why": (i.params.get("params") or {}).get("why", "") if isinstance(i.params.get("params"), dict) else ""}


# -- agents ---------------------------------------------------------------------------

def agents_page(agents: Iterable, run_events: Iterable, now: float) -> list[dict[str, Any]]:
    """Each agent: its loop (run), the iteration it is at, age, idle time (since its last progress), spend so far."""
    last_n: dict[str, Any] = {}
    spent: dict[str, float] = defaultdict(float)
    for e in run_events:
        if e.kind == "loop.iteration":
            last_n[e.subject] = e.payload.get("n")
            spent[e.subject] += _usd(e.payload.get("cost_usd"))
        elif e.kind == "loop.spend_counted":
            spent[e.subject] += _usd(e.payload.get("usd"))
    out = []
    for a in agents:
        live = a.state == "running"
        end = now if live or a.ended_at is None else a.ended_at
        out.append({"id": a.id, "ticket": a.ticket_id or "", "state": a.state, "run": a.run_id or "", "pid": a.pid,
                    "iteration": last_n.get(a.run_id or ""), "age": max(0.0, end - a.started_at) if a.started_at else None,
                    "idle": max(0.0, now - (a.progress_at or a.started_at)) if live and (a.progress_at or a.started_at) else None,
                    "spend_usd": round(spent.get(a.run_id or "", 0.0), 6), "exit_code": a.exit_code})
    out.sort(key=lambda r: (r["state"] != "running", r["id"]))
    return out


# -- the supervisor -------------------------------------------------------------------

def plan_view(rep) -> dict[str, Any]:
    """What `healer plan` shows: findings with evidence, planned and deferred actions, alerts, who needs a human."""
    s, d = rep.snapshot, rep.decision

    def act(a) -> dict[str, Any]:
        return {"action": a.action, "subject": a.subject, "reason": a.reason, "rule": a.rule or ""}

    findings = [{"key": f.key, "kind": f.kind, "subject": f.subject, "since": f.since, "severity": f.severity,
                 "status": f.status, "evidence": f.evidence} for f in d.findings]
    return {"at": s.now, "halted": s.halted, "failed_sources": sorted(s.failed_sources), "findings": findings,
            "actions": [act(a) for a in d.actions], "deferred": [{**act(a), "why": why} for a, why in d.deferred],
            "alerts": [{"key": al.key, "text": al.text, "severity": al.severity} for al in d.alerts],
            "needs_human": sorted(t.id for t in s.tickets if t.state == lifecycle.NEEDS_HUMAN),
            "sentinels": sentinels(findings, s.failed_sources)}


def sentinels(findings: list[dict], failed_sources: Iterable[str] = ()) -> list[dict[str, Any]]:
    by_kind = {f["kind"]: f for f in findings if f["kind"] in SENTINELS}
    out = []
    for k in SENTINELS:
        f = by_kind.get(k)
        state = "firing" if f and f["status"] != "unknown" else "unknown" if f else "ok"
        out.append({"name": k, "state": state, "since": f["since"] if f else None})
    return out


def pages(events: Iterable) -> list[dict[str, Any]]:
    """Every page (alert key) with its last send, resolve and acknowledgement, newest send first."""
    rows: dict[str, dict[str, Any]] = {}
    for e in events:
        r = rows.setdefault(e.subject, {"key": e.subject, "sent_at": None, "severity": "", "text": "", "sends": 0,
                                        "resolved_at": None, "acked_at": None, "acked_by": "", "_sent_id": 0})
        if e.kind == "notify.sent":
            r.update(sent_at=e.at, severity=e.payload.get("severity", ""), text=e.payload.get("text", ""), _sent_id=e.id,
                     resolved_at=None, acked_at=None, acked_by="")
            r["sends"] += 1
        elif e.kind == "notify.resolved" and e.id > r["_sent_id"]:
            r["resolved_at"] = e.at
        elif e.kind == "notify.acked" and e.id > r["_sent_id"]:
            r.update(acked_at=e.at, acked_by=e.payload.get("actor", ""))
    out = [{k: v for k, v in r.items() if k != "_sent_id"} for r in rows.values() if r["sent_at"] is not None]
    out.sort(key=lambda r: -r["sent_at"])
    return out


# -- cost -----------------------------------------------------------------------------

def agent_cli(started_payload: dict) -> str:
    """The agent CLI of a loop: its preset (claude, codex), else the program of a command preset. A bounded set of
    names (a path's last part, at most 40 characters)."""
    preset = started_payload.get("preset") or ""
    if preset and preset != "command":
        return str(preset)[:40]
    argv = started_payload.get("agent") or []
    if argv and isinstance(argv[0], str):
        prog = argv[0].rsplit("/", 1)[-1]
        if prog.startswith("python") and len(argv) > 1 and isinstance(argv[1], str):
            prog = argv[1].rsplit("/", 1)[-1]
        return prog[:40] or "command"
    return preset or "unknown"


def cost(spend_events: Iterable, started_events: Iterable, run_ticket: dict[str, str]) -> dict[str, Any]:
    """Spend per ticket, per day and per agent CLI, from the loops' spend events (loop.iteration's cost_usd, a
    discarded iteration's loop.spend_counted usd). `run_ticket`: run id -> ticket (the attempts and agents say)."""
    cli = {e.subject: agent_cli(e.payload) for e in started_events}
    per_ticket: dict[str, float] = defaultdict(float)
    per_day: dict[str, float] = defaultdict(float)
    per_cli: dict[str, float] = defaultdict(float)
    total = 0.0
    spend_events = list(spend_events)
    # a discarded iteration's spend_counted names no ticket: its run's iterations (or the attempts) do
    run_ticket = {**run_ticket, **{e.subject: e.payload["ticket"] for e in spend_events if e.payload.get("ticket")}}
    for e in spend_events:
        usd = _usd(e.payload.get("cost_usd") if e.kind == "loop.iteration" else e.payload.get("usd"))
        if not usd:
            continue
        tid = run_ticket.get(e.subject) or "(no ticket)"
        per_ticket[str(tid)] += usd
        per_day[day_of(e.at)] += usd
        per_cli[cli.get(e.subject, "unknown")] += usd
        total += usd

    def rows(d: dict[str, float], by_key: bool = False) -> list[dict[str, Any]]:
        items = sorted(d.items(), reverse=True) if by_key else sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))
        return [{"name": k, "usd": round(v, 6)} for k, v in items]

    return {"total_usd": round(total, 6), "per_ticket": rows(per_ticket), "per_day": rows(per_day, by_key=True),
            "per_cli": rows(per_cli)}


# -- the live feed --------------------------------------------------------------------

def live_event(e) -> dict[str, Any]:
    """What the browser gets of one event: small, JSON, never HTML (the page sets it as text)."""
    p = e.payload if isinstance(e.payload, dict) else {}
    out: dict[str, Any] = {"id": e.id, "at": e.at, "kind": e.kind, "subject": e.subject}
    for k in ("from", "to", "actor", "reason", "action", "state", "severity", "title"):
        v = p.get(k)
        if isinstance(v, str | int | float) and not isinstance(v, bool):
            out[k] = v if not isinstance(v, str) else v[:300]
    return out
