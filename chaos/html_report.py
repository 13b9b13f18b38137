"""report.html: one self-contained page per game day (plotly, its JavaScript inlined; no network).

Per scenario: a swimlane per ticket (its states as bars, faults and healer's actions as marks on the
same time axis), a lane for the fleet (faults and alerts about no ticket), and the expectations with the
counts they checked. Chaos Toolkit experiments get one lane per phase (steady state before, method,
steady state after, rollbacks) with each activity as a bar.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import Any

from healer.ctk.journal import errors, verdict
from healer.ctk.journal import ok as passed

STATE_COLORS = {"queued": "#9aa5b1", "in_progress": "#2f80ed", "review": "#9b51e0", "done": "#27ae60",
                "blocked": "#f2994a", "needs_human": "#eb5757", "closed": "#4f4f4f"}
MARKS = (  # (kind prefix, legend name, colour, symbol)
    ("chaos.", "fault", "#d0021b", "x"),
    ("intent.", "healer action", "#00a676", "diamond"),
    ("remedy.", "healer action", "#00a676", "diamond"),
    ("repair.", "repair agent", "#00a676", "star"),
    ("notify.", "alert", "#f5a623", "triangle-up"),
    ("dispatch.", "dispatch", "#4a90e2", "circle-open"),
    ("proposal.", "proposal", "#7b61ff", "square-open"),
)
MAX_LANES = 60


def _t(off: float) -> datetime:
    """Offsets drawn on a date axis from the epoch: the axis reads as elapsed h:m:s."""
    return datetime.fromtimestamp(max(0.0, off), UTC).replace(tzinfo=None)


def _mark(kind: str):
    return next((m for m in MARKS if kind.startswith(m[0])), None)


def swimlanes(timeline: list[tuple[float, str, str, str]], span: float):
    """(lanes, bars, marks) from a game day's timeline: bars (lane, start, end, state), marks (lane, t, legend, text)."""
    tickets: list[str] = []
    state: dict[str, tuple[str, float]] = {}
    bars: list[tuple[str, float, float, str]] = []
    marks: list[tuple[str, float, str, str]] = []
    for off, kind, subject, text in timeline:
        if kind == "ticket.moved" and " -> " in text:
            frm, _, rest = text.partition(" -> ")
            to = rest.split(" ", 1)[0]
            if subject not in state:
                tickets.append(subject)
                if off > 0:
                    bars.append((subject, 0.0, off, frm.strip()))
            else:
                s, since = state[subject]
                bars.append((subject, since, off, s))
            state[subject] = (to, off)
    for subject, (s, since) in state.items():
        bars.append((subject, since, max(span, since), s))
    known = set(tickets)
    for off, kind, subject, text in timeline:
        m = _mark(kind)
        if m is None:
            continue
        lane = subject if subject in known else next((t for t in tickets if t in subject.split(":")), "fleet")
        marks.append((lane, off, m[1], f"{kind} {subject}: {text}"))
    lanes = tickets[:MAX_LANES]
    shown = set(lanes) | {"fleet"}
    bars = [b for b in bars if b[0] in shown]
    marks = [m for m in marks if m[0] in shown]
    if any(m[0] == "fleet" for m in marks):
        lanes.append("fleet")
    return lanes, bars, marks, max(0, len(tickets) - MAX_LANES)


def figure(lanes, bars, marks, title: str):
    import plotly.graph_objects as go

    fig = go.Figure()
    for st, colour in STATE_COLORS.items():
        mine = [b for b in bars if b[3] == st]
        if not mine:
            continue
        fig.add_trace(go.Bar(
            y=[b[0] for b in mine], base=[_t(b[1]) for b in mine], x=[(b[2] - b[1]) * 1000 for b in mine],
            orientation="h", name=st, marker_color=colour, opacity=0.75,
            hovertext=[f"{b[0]}: {st} for {human_seconds(b[2] - b[1])} (from +{human_seconds(b[1])})" for b in mine],
            hoverinfo="text"))
    for prefix_name in dict.fromkeys(m[1] for m in MARKS):
        mine = [m for m in marks if m[2] == prefix_name]
        if not mine:
            continue
        spec = next(x for x in MARKS if x[1] == prefix_name)
        fig.add_trace(go.Scatter(
            y=[m[0] for m in mine], x=[_t(m[1]) for m in mine], mode="markers", name=prefix_name,
            marker={"color": spec[2], "symbol": spec[3], "size": 9, "line": {"width": 1}},
            hovertext=[f"+{human_seconds(m[1])} {m[3]}"[:300] for m in mine], hoverinfo="text"))
    fig.update_layout(
        title=title, barmode="overlay", height=max(260, 110 + 26 * len(lanes)), margin={"l": 110, "r": 20, "t": 50, "b": 40},
        xaxis={"type": "date", "tickformat": "%H:%M:%S", "title": "time since the start (h:m:s)"},
        yaxis={"categoryorder": "array", "categoryarray": list(reversed(lanes)), "title": ""},
        legend={"orientation": "h", "y": -0.2}, template="plotly_white")
    return fig


def human_seconds(s: float) -> str:
    s = float(s)
    if s < 60:
        return f"{s:.1f}s" if s % 1 else f"{int(s)}s"
    m, sec = divmod(int(round(s)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}.ok{color:#1e7e34;font-weight:600}.bad{color:#c0392b;font-weight:600}
h2{margin-top:36px;border-top:1px solid #eee;padding-top:16px}small{color:#666}"""


def page(title: str, summary_rows: list[list[str]], sections: list[dict[str, Any]]) -> str:
    """sections: {title, ok, meta, figure (plotly Figure or None), checks: [(ok, name, kind, message)], extra: html}."""
    e = html.escape
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{e(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{e(title)}</h1>", "<table><tr><th>name</th><th>result</th><th>checks</th><th>span</th><th>wall</th></tr>"]
    for row in summary_rows:
        cls = "ok" if row[1] == "PASS" else "bad"
        parts.append("<tr>" + "".join(f"<td class='{cls}'>{e(c)}</td>" if i == 1 else f"<td>{e(c)}</td>"
                                      for i, c in enumerate(row)) + "</tr>")
    parts.append("</table>")
    first = True
    for sec in sections:
        parts.append(f"<h2>{e(sec['title'])} — <span class='{'ok' if sec['ok'] else 'bad'}'>{'PASS' if sec['ok'] else 'FAILED'}</span></h2>")
        parts.append(f"<p><small>{e(sec.get('meta', ''))}</small></p>")
        if sec.get("figure") is not None:
            parts.append(sec["figure"].to_html(full_html=False, include_plotlyjs=first, config={"displaylogo": False,
                                                                                              "responsive": True}))
            first = False
        if sec.get("checks"):
            parts.append("<table><tr><th></th><th>expectation</th><th>checker</th><th>what it counted</th></tr>")
            for ok, name, kind, message in sec["checks"]:
                parts.append(f"<tr><td class='{'ok' if ok else 'bad'}'>{'✔' if ok else '✘'}</td><td>{e(name)}</td>"
                             f"<td>{e(kind)}</td><td>{e(message)}</td></tr>")
            parts.append("</table>")
        parts.append(sec.get("extra", ""))
    parts.append("</body></html>")
    return "\n".join(parts)


def scenarios(results) -> str:
    """report.html of healer scenarios (chaos.engine.Result)."""
    rows, sections = [], []
    for r in results:
        sc = r.scenario
        lanes, bars, marks, hidden = swimlanes(r.timeline, r.span)
        fig = figure(lanes, bars, marks, f"{sc.name}: tickets over time") if lanes else None
        passed = sum(c.ok for c in r.checks)
        rows.append([sc.name, "PASS" if r.ok else r.status.upper(), f"{passed}/{len(r.checks)}", human_seconds(r.span),
                     human_seconds(r.wall)])
        meta = (f"mode {sc.mode}, seed {r.seed}{', feature disabled' if r.disabled else ''}; {len(r.timeline)} events"
                + (f"; {hidden} more ticket lanes not drawn" if hidden else "") + (f"; error: {r.error}" if r.error else ""))
        sections.append({"title": sc.name, "ok": r.ok, "meta": meta, "figure": fig,
                         "checks": [(c.ok, c.name, c.kind, c.message) for c in r.checks]})
    return page("Game day report", rows, sections)


def experiments(journals: list[dict[str, Any]]) -> str:
    """report.html of Chaos Toolkit journals: one lane per phase, each activity a bar."""
    rows, sections = [], []
    for j in journals:
        t0 = _epoch(j.get("start"))
        items: list[tuple[str, dict]] = []
        ss = j.get("steady_states") or {}
        for phase in ("before", "after"):
            for p in (ss.get(phase) or {}).get("probes", []) or []:
                items.append((f"hypothesis {phase}", p))
        for a in j.get("run") or []:
            items.append(("method", a))
        for a in j.get("rollbacks") or []:
            items.append(("rollbacks", a))
        lanes = list(dict.fromkeys(lane for lane, _ in items))
        bars, marks = [], []
        for lane, a in items:
            s, e = _epoch(a.get("start")) - t0, _epoch(a.get("end")) - t0
            bars.append((lane, s, max(e, s + 0.05), a.get("status", "")))
            marks.append((lane, s, "activity", f"{a.get('activity', {}).get('name')}: {a.get('status')}"))
        fig = _activity_figure(bars, items, lanes, j["experiment"].get("title", "experiment"), t0)
        checks = [(bool(p.get("tolerance_met")), p.get("activity", {}).get("name", "?"), f"steady state {phase}",
                   f"output {str(p.get('output'))[:200]}")
                  for phase in ("before", "after") for p in (ss.get(phase) or {}).get("probes", []) or []]
        rows.append([j["experiment"].get("title", "?"), verdict(j), f"{sum(c[0] for c in checks)}/{len(checks)}",
                     human_seconds(j.get("duration") or 0), human_seconds(j.get("duration") or 0)])
        undo = (j.get("healer") or {}).get("undo") or []
        extra = ("<p>healer undid: " + html.escape("; ".join(f"{u['kind']}: {u['result']}" for u in undo)) + "</p>") if undo else ""
        extra += "".join(f"<p><b>error:</b> {html.escape(e)}</p>" for e in errors(j))
        sections.append({"title": j["experiment"].get("title", "?"), "ok": passed(j),
                         "meta": f"status {j.get('status')}, deviated {j.get('deviated')}, started {j.get('start')}",
                         "figure": fig, "checks": checks, "extra": extra})
    return page("Chaos Toolkit experiment report", rows, sections)


def _activity_figure(bars, items, lanes, title: str, t0: float):
    import plotly.graph_objects as go

    colours = {"succeeded": "#27ae60", "failed": "#eb5757", "skipped": "#9aa5b1"}
    fig = go.Figure()
    for st in dict.fromkeys(b[3] for b in bars):
        mine = [(b, a) for b, (_, a) in zip(bars, items, strict=True) if b[3] == st]
        fig.add_trace(go.Bar(y=[b[0] for b, _ in mine], base=[_t(b[1]) for b, _ in mine],
                             x=[(b[2] - b[1]) * 1000 for b, _ in mine], orientation="h", name=st or "?",
                             marker_color=colours.get(st, "#2f80ed"),
                             text=[a.get("activity", {}).get("name", "") for _, a in mine], textposition="inside",
                             hovertext=[f"{a.get('activity', {}).get('name')} ({a.get('activity', {}).get('type')}): {st}, "
                                        f"{human_seconds(b[2] - b[1])}" for b, a in mine], hoverinfo="text"))
    fig.update_layout(title=title, barmode="overlay", height=max(260, 110 + 40 * len(lanes)),
                      xaxis={"type": "date", "tickformat": "%H:%M:%S", "title": "time since the start (h:m:s)"},
                      yaxis={"categoryorder": "array", "categoryarray": list(reversed(lanes))},
                      template="plotly_white", margin={"l": 130, "r": 20, "t": 50, "b": 40})
    return fig


def _epoch(iso_time: str | None) -> float:
    if not iso_time:
        return 0.0
    d = datetime.fromisoformat(str(iso_time).replace("Z", "+00:00"))
    if d.tzinfo is None:
        d = d.replace(tzinfo=UTC)
    return d.timestamp()
