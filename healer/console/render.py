"""Page data (views.py) -> HTML. Every value goes through `e()` (html.escape, quotes included): ticket titles and
bodies, agent output, reasons and evidence are written by agents and by whoever files a ticket. No inline script or
style anywhere (the Content-Security-Policy forbids both); the live parts are static/console.js."""

from __future__ import annotations

import json
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from healer import durations
from healer.clock import iso

NAV = (("/", "board"), ("/agents", "agents"), ("/adopted", "adopted"), ("/supervisor", "supervisor"), ("/gamedays", "game days"), ("/cost", "cost"))


def e(x: Any) -> str:
    return escape("" if x is None else str(x), quote=True)


def when(t: float | None) -> str:
    return iso(t) if t else "-"


def age(s: float | None) -> str:
    return "-" if s is None else durations.format(max(0, round(s)))


def usd(x: float) -> str:
    return f"${x:,.4f}"


def link(path: str, text: Any) -> str:
    return f'<a href="{e(path)}">{e(text)}</a>'


def tid_link(tid: str) -> str:
    return link(f"/tickets/{quote(tid, safe='')}", tid)


def page(title: str, body: str, *, ctx: dict[str, Any], active: str = "/", data: dict[str, str] | None = None) -> str:
    """The shell of every page: nav, the fleet's state line, the body. `data`: attributes console.js reads."""
    nav = " ".join(f'<a href="{p}"{" class=on" if p == active else ""}>{n}</a>' for p, n in NAV)
    attrs = " ".join(f'data-{k}="{e(v)}"' for k, v in (data or {}).items())
    mode = '<span class="ro">read-only</span>' if ctx.get("read_only") else f'operator {e(ctx.get("operator", ""))}'
    paused = ctx.get("paused")
    dispatch = ("dispatch <b class=bad>paused</b> " + steer_form("resume", "dispatch", "resume", ctx)) if paused else \
               ("dispatch running " + steer_form("pause", "dispatch", "pause", ctx))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)} · healer</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/static/console.css"></head>
<body {attrs}>
<header><b>healer</b> <span class="root">{e(ctx.get("root", ""))}</span> <nav>{nav}</nav>
<span class="state">{dispatch} · {mode} · <span id="live" class="live off" title="live updates">live</span></span></header>
<main>
{body}
</main>
<script src="/static/console.js"></script>
</body></html>"""


def steer_form(action: str, subject: str, label: str, ctx: dict[str, Any], *, danger: bool = False) -> str:
    """A POST form for one steering action: the CSRF token in a hidden field (double-submit with its cookie)."""
    if ctx.get("read_only"):
        return ""
    cls = ' class="danger"' if danger else ""
    return (f'<form method="post" action="/steer/{e(action)}" class="steer">'
            f'<input type="hidden" name="csrf" value="{e(ctx.get("csrf", ""))}">'
            f'<input type="hidden" name="subject" value="{e(subject)}">'
            f'<button type="submit"{cls} data-action="{e(action)}" data-subject="{e(subject)}">{e(label)}</button></form>')


def table(head: list[str], rows: list[list[str]], *, cls: str = "", empty: str = "none") -> str:
    if not rows:
        return f'<p class="empty">{e(empty)}</p>'
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{e(cls)}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


# -- the board ------------------------------------------------------------------------

def ticket_card(c: dict[str, Any]) -> str:
    blocked = f'<span class="by">blocked by {", ".join(tid_link(b) for b in c["blocked_by"])}</span>' if c["blocked_by"] else ""
    labels = "".join(f'<span class="label">{e(lb)}</span>' for lb in c["labels"])
    return (f'<li class="card" data-ticket="{e(c["id"])}">{tid_link(c["id"])} <span class="prio">p{e(c["priority"])}</span>'
            f' <span class="title">{e(c["title"])}</span>{blocked}{labels}</li>')


def board(b: dict[str, Any], ctx: dict[str, Any]) -> str:
    opts = "".join(f'<option value="{e(s)}"{" selected" if s == b["state"] else ""}>{e(s)}</option>' for s in b["states"])
    form = (f'<form method="get" action="/" class="filter"><input type="search" name="q" value="{e(b["q"])}" '
            f'placeholder="id or title"><select name="state"><option value="">every state</option>{opts}</select>'
            f'<button type="submit">filter</button></form>')
    cols = []
    for col in b["columns"]:
        more = ""
        if col["more"]:
            nxt = urlencode({"state": col["state"], "q": b["q"], "offset": col["offset"] + b["limit"]})
            more = f'<p class="more"><a href="/?{e(nxt)}">{e(col["more"])} more</a></p>'
        cards = "".join(ticket_card(c) for c in col["tickets"])
        cols.append(f'<section class="col" data-state="{e(col["state"])}"><h2>{e(col["state"])} '
                    f'<span class="count">{e(col["count"])}</span></h2><ul>{cards}</ul>{more}</section>')
    graph = ""
    if b["edges"]:
        graph = "<details><summary>blocked_by graph</summary><ul class=edges>" + "".join(
            f"<li>{tid_link(a)} waits for {tid_link(z)}</li>" for a, z in b["edges"]) + "</ul></details>"
    return (f'<h1>board <span class="count">{e(b["total"])} tickets</span></h1>{form}<div class="board">{"".join(cols)}</div>'
            f'{graph}<h2>live</h2><ol id="feed" class="feed"></ol>')


# -- one ticket -----------------------------------------------------------------------

def ticket(d: dict[str, Any], ctx: dict[str, Any]) -> str:
    t = d["ticket"]
    tid = t["id"]
    acts = " ".join(x for x in (steer_form("requeue", tid, "requeue", ctx), steer_form("escalate", tid, "escalate to needs_human", ctx, danger=True),
                                steer_form("release", tid, "release to the queue", ctx)) if x)
    trans = table(["#", "at", "from", "to", "actor", "reason"],
                  [[e(x["id"]), e(when(x["at"])), e(x["from"]), e(x["to"]), e(x["actor"]), e(x["reason"])] for x in d["transitions"]],
                  cls="transitions")
    atts = table(["id", "kind", "at", "ended", "exit", "run", "signature", "gate log"],
                 [[e(a["id"]), e(a["kind"]), e(when(a["at"])), e(when(a["ended_at"])), e(a["exit_code"]), e(a["run"]), e(a["signature"]),
                   f'<pre>{e(a["gate_log_tail"][-2000:])}</pre>' if a["gate_log_tail"] else ""] for a in d["attempts"]])
    its = table(["run", "n", "at", "gates", "spend", "verdict"],
                [[e(i["run"]), e(i["n"]), e(when(i["at"])), e(", ".join(f'{g["name"]} {g["outcome"]}' for g in i["gates"])),
                  e(usd(i["cost_usd"])), e(i["verdict"])] for i in d["iterations"]])
    props = table(["id", "branch", "commit", "state", "gate log"],
                  [[e(p["id"]), e(p["branch"]), e(p["commit"]), e(p["state"]), f'<pre>{e(p["gate_log"][-2000:])}</pre>' if p["gate_log"] else ""]
                   for p in d["proposals"]])
    agents = table(["agent", "state", "started", "exit", "evidence"],
                   [[link(f"/agents/{quote(a['id'], safe='')}", a["id"]), e(a["state"]), e(when(a["started_at"])), e(a["exit_code"]),
                     link(f"/agents/{quote(a['id'], safe='')}/log", "log")] for a in d["agents"]])
    intents = intents_table(d["intents"])
    comments = "".join(f'<div class="comment"><b>{e(c["author"])}</b> {e(when(c["at"]))}<pre>{e(c["body"])}</pre></div>'
                       for c in d["comments"])
    blocked = ", ".join(tid_link(b) for b in t["blocked_by"]) or "nothing"
    return (f'<h1>{e(tid)} <span class="title">{e(t["title"])}</span></h1>'
            f'<p>state <b class="tstate" id="tstate">{e(t["state"])}</b> · priority {e(t["priority"])} · blocked by {blocked}'
            f' · labels {e(", ".join(t["labels"]) or "none")} · spend {e(usd(d["spend_usd"]))}</p><div class="acts">{acts}</div>'
            f'<pre class="body">{e(t["body"])}</pre>'
            f'<h2>transitions</h2>{trans}<h2>attempts</h2>{atts}<h2>iterations</h2>{its}<h2>proposals</h2>{props}'
            f'<h2>agents</h2>{agents}<h2>actions on it</h2>{intents}<h2>comments</h2>{comments or "<p class=empty>none</p>"}')


def intents_table(rows: list[dict[str, Any]]) -> str:
    return table(["#", "at", "action", "subject", "actor", "intent", "outcome", "verification", "why"],
                 [[e(i["id"]), e(when(i["at"])), e(i["action"]), e(i["subject"]), e(i["actor"]), e(i["state"]), e(i["status"]),
                   e(i["verification"]), e(i["why"] or i["reason"])] for i in rows], cls="intents")


# -- agents ---------------------------------------------------------------------------

def agents(rows: list[dict[str, Any]], ctx: dict[str, Any]) -> str:
    body = table(["agent", "ticket", "state", "loop", "iteration", "age", "idle", "spend", ""],
                 [[link(f"/agents/{quote(a['id'], safe='')}", a["id"]), tid_link(a["ticket"]) if a["ticket"] else "", e(a["state"]),
                   e(a["run"]), e(a["iteration"] if a["iteration"] is not None else "-"), e(age(a["age"])), e(age(a["idle"])),
                   e(usd(a["spend_usd"])), steer_form("stop", a["id"], "stop", ctx, danger=True) if a["state"] == "running" else ""]
                  for a in rows], cls="agents", empty="no agent yet")
    return f"<h1>agents</h1>{body}"


def adopted(rows: list[dict[str, Any]]) -> str:
    """Loops healer did not launch, as the store last recorded them (docs/adopt.md); acted on only by policy rules."""
    body = table(["loop", "rule", "host", "pid", "cli", "state", "age", "session", "worktree"],
                 [[e(a["id"]), e(a["rule"]), e(a["host"]), e(a["pid"]), e(a["cli"]), e(a["state"]), e(age(a["age"])),
                   e(a["session_id"] or "-"), e(a["worktree"])] for a in rows],
                 cls="adopted", empty="no adopted loop (the policy's adopt: rules; healer adopt)")
    return f"<h1>adopted loops</h1>{body}"


def agent(a: dict[str, Any], ctx: dict[str, Any]) -> str:
    stop = steer_form("stop", a["id"], "stop this agent", ctx, danger=True) if a["state"] == "running" else ""
    whole = link(f"/agents/{quote(a['id'], safe='')}/log", "whole log")
    return (f'<h1>agent {e(a["id"])}</h1><p>ticket {tid_link(a["ticket"]) if a["ticket"] else "-"} · <b>{e(a["state"])}</b>'
            f' · loop {e(a["run"])} · iteration {e(a["iteration"] if a["iteration"] is not None else "-")} · age {e(age(a["age"]))}'
            f' · idle {e(age(a["idle"]))} · spend {e(usd(a["spend_usd"]))} · {whole}</p>'
            f'<div class="acts">{stop}</div><h2>output <span id="stream" class="live off">streaming</span></h2>'
            f'<pre id="output" class="output"></pre>')


# -- the supervisor -------------------------------------------------------------------

def supervisor(plan: dict[str, Any] | None, plan_error: str, acted: list[dict], pages: list[dict], ctx: dict[str, Any]) -> str:
    out = ["<h1>supervisor</h1>"]
    if plan is None:
        out.append(f'<p class="bad">no plan: {e(plan_error)}</p>')
    else:
        sent = table(["sentinel", "state", "since"],
                     [[e(s["name"]), f'<span class="s-{e(s["state"])}">{e(s["state"])}</span>', e(when(s["since"]))] for s in plan["sentinels"]],
                     cls="sentinels")
        finds = table(["kind", "subject", "severity", "status", "since", "evidence"],
                      [[e(f["kind"]), e(f["subject"]), e(f["severity"]), e(f["status"]), e(when(f["since"])),
                        f'<code>{e(json.dumps(f["evidence"], sort_keys=True, default=str)[:400])}</code>'] for f in plan["findings"]],
                      empty="none: the fleet looks healthy")
        would = table(["action", "subject", "rule", "finding"],
                      [[e(a["action"]), e(a["subject"]), e(a["rule"]), e(a["reason"])] for a in plan["actions"]], empty="nothing")
        deferred = table(["action", "subject", "why"], [[e(a["action"]), e(a["subject"]), e(a["why"])] for a in plan["deferred"]],
                         empty="nothing")
        halted = ' <b class="bad">HALTED: observe-only</b>' if plan["halted"] else ""
        out.append(f"<p>plan at {e(when(plan['at']))}{halted}; needs a human: "
                   f"{', '.join(tid_link(t) for t in plan['needs_human']) or 'nobody'}</p>"
                   f"<h2>sentinels</h2>{sent}<h2>findings</h2>{finds}<h2>would do</h2>{would}<h2>deferred</h2>{deferred}")
    prow = []
    for p in pages:
        state = "acknowledged by " + p["acked_by"] if p["acked_at"] else ("resolved" if p["resolved_at"] else "open")
        ack = "" if p["acked_at"] else steer_form("ack", p["key"], "acknowledge", ctx)
        prow.append([e(p["key"]), e(p["severity"]), e(p["text"]), e(when(p["sent_at"])), e(p["sends"]), e(when(p["resolved_at"])),
                     f'<span class="pstate">{e(state)}</span>', ack])
    out.append("<h2>pages</h2>" + table(["key", "severity", "text", "sent", "sends", "resolved", "state", ""], prow, cls="pages",
                                        empty="no page sent"))
    out.append("<h2>what it did</h2>" + intents_table(acted))
    return "".join(out)


# -- game days, cost ------------------------------------------------------------------

def gamedays(reports: list[dict], scenarios: list[str], running: list[dict], ctx: dict[str, Any]) -> str:
    rows = [[e(r["name"]), e(r["status"]), " ".join(link(f"/gamedays/{quote(r['name'], safe='')}/{quote(f, safe='')}", f) for f in r["files"])]
            for r in reports]
    start = ""
    if not ctx.get("read_only"):
        start = "".join(f'<li>{e(s)} {steer_form("gameday", s, "start against this fleet", ctx)}</li>' for s in scenarios)
        start = f"<h2>start a game day (--root this fleet)</h2><ul>{start or '<li>no shipped --root scenario found</li>'}</ul>"
    run = table(["report", "scenario", "pid", "state"], [[e(r["name"]), e(r["scenario"]), e(r["pid"]), e(r["state"])] for r in running],
                empty="none running")
    return f"<h1>game days</h1>{table(['report', 'status', 'files'], rows, empty='no game-day report yet')}{start}<h2>started here</h2>{run}"


def cost(c: dict[str, Any], ctx: dict[str, Any]) -> str:
    def t(rows: list[dict], head: str, ticket: bool = False) -> str:
        return table([head, "spend"], [[tid_link(r["name"]) if ticket and r["name"] != "(no ticket)" else e(r["name"]), e(usd(r["usd"]))]
                                       for r in rows], empty="nothing spent")
    return (f'<h1>cost <span class="count">{e(usd(c["total_usd"]))}</span></h1>'
            f'<h2>per agent CLI</h2>{t(c["per_cli"], "agent CLI")}<h2>per day (UTC)</h2>{t(c["per_day"], "day")}'
            f'<h2>per ticket</h2>{t(c["per_ticket"], "ticket", ticket=True)}')


def steered(out: dict[str, Any], back: str, ctx: dict[str, Any]) -> str:
    return (f'<h1>{e(out["action"])} {e(out["subject"])}</h1><p class="outcome s-{e(out["status"])}" id="outcome">{e(out["status"])}: '
            f'{e(out["reason"])}</p><p>intent {e(out.get("intent") or "-")} · actor {e(out.get("actor", ""))}</p>'
            f'<p>{link(back, "back")}</p>')


def message(title: str, text: str) -> str:
    return f"<h1>{e(title)}</h1><p>{e(text)}</p>"
