"""report.html: one self-contained page per game day: plain HTML and inline SVG drawn here (no script, no network).

Per scenario: a swimlane per ticket (its states as bars; healer's actions, alerts, dispatch and proposals as
marks on the same time axis), a lane for the fleet (what concerns no ticket), each fault a labelled line across
every lane (its name, not a bare ✖), condition bands shaded behind the lanes (main red, dispatch paused, the
store away), and a time axis in clock time (UTC; the simulated clock in simulated mode) over the time since the
start. Then the expectations with the counts they checked. Chaos Toolkit experiments get one lane per phase
(steady state before, method, steady state after, rollbacks) with each activity as a labelled bar.

It once inlined plotly's 4.7 MB script per report (4.8 MB for one scenario); SVG keeps one scenario's page
in tens of kilobytes (`tests/interop/test_reports.py` bounds it at 1 MB and renders it in headless chromium).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from chaos.ctk_journal import errors, verdict
from chaos.ctk_journal import ok as passed

STATE_COLORS = {"queued": "#9aa5b1", "in_progress": "#2f80ed", "review": "#9b51e0", "done": "#27ae60",
                "blocked": "#f2994a", "needs_human": "#eb5757", "closed": "#4f4f4f"}
FAULT = ("chaos.fault", "chaos.fault_not_applied")
MARKS = (  # (kind prefix, legend name, colour, shape)
    ("intent.", "healer action", "#00a676", "diamond"),
    ("remedy.", "healer action", "#00a676", "diamond"),
    ("repair.", "repair agent", "#00a676", "star"),
    ("notify.", "alert", "#f5a623", "triangle"),
    ("dispatch.", "dispatch", "#4a90e2", "circle"),
    ("proposal.", "proposal", "#7b61ff", "square"),
)
# condition bands: (name, colour, kinds that open it, kinds that close it)
BANDS = (
    ("main red", "#eb5757", ("main.red",), ("main.green",)),
    ("dispatch paused", "#f2994a", ("dispatch.paused",), ("dispatch.unpaused", "dispatch.resumed_dispatch", "dispatch.resumed")),
    ("store away", "#7f8c8d", ("store.unavailable",), ("store.back",)),
)
MAX_LANES = 60
MAX_MARKS = 600  # marks drawn per chart (the timeline itself is capped at 400 entries)

WIDTH, LEFT, RIGHT, LANE, AXIS = 1240, 120, 56, 22, 46


def _mark(kind: str):
    return next((m for m in MARKS if kind.startswith(m[0])), None)


def swimlanes(timeline: list[tuple[float, str, str, str]], span: float):
    """(lanes, bars, marks, hidden) from a game day's timeline: bars (lane, start, end, state), marks (lane, t, legend, text)."""
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
    if any(m[0] == "fleet" for m in marks) or any(k in FAULT for _, k, _, _ in timeline):
        lanes.append("fleet")
    return lanes, bars, marks, max(0, len(tickets) - MAX_LANES)


@dataclass(frozen=True)
class Fault:
    t: float
    name: str  # the fault's kind (red_main, kill_supervisor...)
    text: str
    applied: bool


def faults(timeline: list[tuple[float, str, str, str]]) -> list[Fault]:
    """Each fault of the timeline, named: `fault red_main on M-1` -> red_main."""
    out = []
    for off, kind, subject, text in timeline:
        if kind in FAULT:
            name = text.split()[1] if text.startswith("fault ") and len(text.split()) > 1 else (subject or "fault")
            out.append(Fault(off, name, f"{kind} {subject}: {text}", kind == "chaos.fault"))
    return out


def bands(timeline: list[tuple[float, str, str, str]], span: float) -> list[tuple[str, str, float, float]]:
    """(name, colour, start, end) of each condition period the timeline shows; one still open ends at the span."""
    out, open_at = [], {}
    for off, kind, _subject, text in timeline:
        for name, colour, opens, closes in BANDS:
            if kind in opens and not (kind == "dispatch.paused" and "value=False" in text) and name not in open_at:
                open_at[name] = off
            elif (kind in closes or (kind == "dispatch.paused" and "value=False" in text)) and name in open_at:
                out.append((name, colour, open_at.pop(name), off))
    colours = {b[0]: b[1] for b in BANDS}
    out += [(name, colours[name], start, max(span, start)) for name, start in open_at.items()]
    return sorted(out, key=lambda b: b[2])


def human_seconds(s: float) -> str:
    s = float(s)
    if s < 60:
        return f"{s:.1f}s" if s % 1 else f"{int(s)}s"
    m, sec = divmod(int(round(s)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


def _nice_step(span: float, ticks: int = 8) -> float:
    raw = max(span, 1.0) / ticks
    return next((s for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
                 if s >= raw), 86400 * (int(raw // 86400) + 1))


def _clock(epoch: float, with_date: bool = False) -> str:
    d = datetime.fromtimestamp(epoch, UTC)
    return d.strftime("%Y-%m-%d %H:%M:%S UTC" if with_date else "%H:%M:%S")


def chart(lanes: list[str], bars: list[tuple[str, float, float, str]], marks: list[tuple[str, float, str, str]],
          span: float, t0: float, title: str, *, fault_list: list[Fault] = (), band_list=(), colours=None,
          bar_text: dict[int, str] | None = None, clock_name: str = "clock") -> str:
    """An SVG swimlane chart: lanes top to bottom, bars, marks, faults as labelled lines, bands shaded; the x axis
    reads the clock (t0 + offset, UTC) over the time since the start."""
    e = html.escape
    colours = colours or STATE_COLORS
    span = max(span, max((b[2] for b in bars), default=0.0), max((m[1] for m in marks), default=0.0), 1.0)
    plot_w = WIDTH - LEFT - RIGHT
    x = lambda t: LEFT + plot_w * max(0.0, min(t, span)) / span  # noqa: E731 - the one scale of the chart
    # fault labels in rows above the lanes, a label moved down a row when it would overlap the one before
    rows: list[float] = []
    placed = []
    for f in fault_list:
        w = 7 * len(f.name) + 14
        r = next((i for i, end in enumerate(rows) if x(f.t) > end), len(rows))
        if r == len(rows):
            rows.append(0.0)
        rows[r] = x(f.t) + w
        placed.append((f, r))
    present = list(dict.fromkeys(b[0] for b in band_list))  # a row of labels per kind of band, under the faults'
    band_y = {name: 34 + 16 * len(rows) + 13 * i + 8 for i, name in enumerate(present)}
    top = 34 + 16 * len(rows) + 13 * len(present) + (4 if present else 0)
    height = top + LANE * len(lanes) + AXIS
    y_of = {lane: top + i * LANE for i, lane in enumerate(lanes)}
    out = [f"<svg class='timeline' role='img' width='{WIDTH}' height='{height}' "
           f"viewBox='0 0 {WIDTH} {height}' font-family='system-ui,sans-serif' font-size='11'>",
           f"<title>{e(title)}</title><text x='{LEFT}' y='16' font-size='14' font-weight='600'>{e(title)}</text>"]
    bottom = top + LANE * len(lanes)
    for name, colour, s, t in band_list:
        ty = band_y[name]
        out.append(f"<g class='band'><rect x='{x(s):.1f}' y='{top}' width='{max(1.5, x(t) - x(s)):.1f}' height='{bottom - top}' "
                   f"fill='{colour}' fill-opacity='0.13'><title>{e(name)}: +{human_seconds(s)} to +{human_seconds(t)} "
                   f"({human_seconds(t - s)})</title></rect><text x='{x(s) + 3:.1f}' y='{ty}' fill='{colour}' font-size='10' "
                   f"font-weight='600'>{e(name)}</text></g>")
    for i, lane in enumerate(lanes):
        y = y_of[lane]
        if i % 2:
            out.append(f"<rect x='{LEFT}' y='{y}' width='{plot_w}' height='{LANE}' fill='#000' fill-opacity='0.025'/>")
        out.append(f"<text x='{LEFT - 6}' y='{y + LANE / 2 + 4}' text-anchor='end'>{e(lane[:18])}</text>")
    for n, (lane, s, t, st) in enumerate(bars):
        if lane not in y_of:
            continue
        label = (bar_text or {}).get(n, "")
        w = max(1.0, x(t) - x(s))
        out.append(f"<rect x='{x(s):.1f}' y='{y_of[lane] + 4}' width='{w:.1f}' height='{LANE - 8}' fill='{colours.get(st, '#2f80ed')}' "
                   f"fill-opacity='0.8'><title>{e(lane)}: {e(st)} for {human_seconds(t - s)} (from +{human_seconds(s)}"
                   f"{', ' + e(label) if label else ''})</title></rect>")
        if label and w > 7 * len(label[:40]) * 0.8:
            out.append(f"<text x='{x(s) + 3:.1f}' y='{y_of[lane] + LANE / 2 + 4}' fill='#fff'>{e(label[:40])}</text>")
    for f, r in placed:
        fx, ly = x(f.t), 30 + 16 * r
        colour = "#d0021b" if f.applied else "#8b572a"
        label = f.name + ("" if f.applied else " (not applied)")
        out.append(f"<g class='fault'><title>+{human_seconds(f.t)} {_clock(t0 + f.t)} {e(f.text)[:300]}</title>"
                   f"<line x1='{fx:.1f}' y1='{ly + 3}' x2='{fx:.1f}' y2='{bottom}' stroke='{colour}' stroke-width='1.5' "
                   f"stroke-dasharray='4 3'/><text x='{fx + 3:.1f}' y='{ly}' fill='{colour}' font-weight='600'>"
                   f"⚡ {e(label)}</text></g>")
    for lane, t, legend, text in marks[:MAX_MARKS]:
        if lane not in y_of:
            continue
        spec = next((m for m in MARKS if m[1] == legend), ("", legend, "#555", "circle"))
        out.append(_shape(spec[3], x(t), y_of[lane] + LANE / 2, spec[2],
                          f"+{human_seconds(t)} {_clock(t0 + t)} {text}"[:300]))
    # the axis: clock time over the time since the start
    step = _nice_step(span)
    out.append(f"<line x1='{LEFT}' y1='{bottom}' x2='{LEFT + plot_w}' y2='{bottom}' stroke='#888'/>")
    k = 0
    while k * step <= span + 1e-9:
        tx = x(k * step)
        out.append(f"<line x1='{tx:.1f}' y1='{top}' x2='{tx:.1f}' y2='{bottom + 4}' stroke='#ccc' stroke-width='0.5'/>"
                   f"<text class='tick' x='{tx:.1f}' y='{bottom + 16}' text-anchor='middle'>{_clock(t0 + k * step)}</text>"
                   f"<text x='{tx:.1f}' y='{bottom + 29}' text-anchor='middle' fill='#777'>+{human_seconds(k * step)}</text>")
        k += 1
    out.append(f"<text x='{LEFT}' y='{bottom + 42}' fill='#555'>{e(clock_name)} from {_clock(t0, True)} (top row); "
               f"time since the start (bottom row)</text></svg>")
    return "".join(out)


def _shape(shape: str, cx: float, cy: float, colour: str, tip: str) -> str:
    tip = f"<title>{html.escape(tip)}</title>"
    if shape == "diamond":
        pts = f"{cx},{cy - 6} {cx + 6},{cy} {cx},{cy + 6} {cx - 6},{cy}"
        return f"<polygon points='{pts}' fill='{colour}' stroke='#fff' stroke-width='0.8'>{tip}</polygon>"
    if shape == "triangle":
        pts = f"{cx},{cy - 6} {cx + 6},{cy + 5} {cx - 6},{cy + 5}"
        return f"<polygon points='{pts}' fill='{colour}' stroke='#fff' stroke-width='0.8'>{tip}</polygon>"
    if shape == "square":
        return f"<rect x='{cx - 4}' y='{cy - 4}' width='8' height='8' fill='none' stroke='{colour}' stroke-width='1.5'>{tip}</rect>"
    if shape == "star":
        return f"<text x='{cx}' y='{cy + 5}' text-anchor='middle' font-size='14' fill='{colour}'>★{tip}</text>"
    return f"<circle cx='{cx}' cy='{cy}' r='4' fill='none' stroke='{colour}' stroke-width='1.5'>{tip}</circle>"


def legend(colours: dict[str, str], with_marks: bool = True) -> str:
    e = html.escape
    items = [f"<span class='key'><i style='background:{c}'></i>{e(s)}</span>" for s, c in colours.items()]
    if with_marks:
        items.append("<span class='key'><b style='color:#d0021b'>⚡ name</b> fault</span>")
        items += [f"<span class='key'><b style='color:{c}'>{'◆' if sh == 'diamond' else '▲' if sh == 'triangle' else '□' if sh == 'square' else '★' if sh == 'star' else '○'}"
                  f"</b> {e(n)}</span>" for n, (_, _, c, sh) in {m[1]: m for m in MARKS}.items()]
        items += [f"<span class='key'><i style='background:{c};opacity:.35'></i>{e(n)}</span>" for n, c, _, _ in BANDS]
    return "<p class='legend'>" + " ".join(items) + "</p>"


CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}.ok{color:#1e7e34;font-weight:600}.bad{color:#c0392b;font-weight:600}
h2{margin-top:36px;border-top:1px solid #eee;padding-top:16px}small{color:#666}
.legend{font-size:12px;color:#444}.key{margin-right:12px;white-space:nowrap}
.key i{display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:middle}
svg.timeline{max-width:100%;height:auto}"""


def page(title: str, summary_rows: list[list[str]], sections: list[dict[str, Any]]) -> str:
    """sections: {title, ok, meta, figure (SVG text or None), legend (html), checks: [(ok, name, kind, message)], extra: html}."""
    e = html.escape
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{e(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{e(title)}</h1>", "<table><tr><th>name</th><th>result</th><th>checks</th><th>span</th><th>wall</th></tr>"]
    for row in summary_rows:
        cls = "ok" if row[1] == "PASS" else "bad"
        parts.append("<tr>" + "".join(f"<td class='{cls}'>{e(c)}</td>" if i == 1 else f"<td>{e(c)}</td>"
                                      for i, c in enumerate(row)) + "</tr>")
    parts.append("</table>")
    for sec in sections:
        parts.append(f"<h2>{e(sec['title'])} — <span class='{'ok' if sec['ok'] else 'bad'}'>{'PASS' if sec['ok'] else 'FAILED'}</span></h2>")
        parts.append(f"<p><small>{e(sec.get('meta', ''))}</small></p>")
        if sec.get("figure"):
            parts.append(sec["figure"])
            parts.append(sec.get("legend", ""))
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
        simulated = sc.mode == "simulated"
        t0 = getattr(r, "clock_start", 0.0) or r.started
        fig = chart(lanes, bars, marks, r.span, t0, f"{sc.name}: tickets over time", fault_list=faults(r.timeline),
                    band_list=bands(r.timeline, r.span),
                    clock_name="simulated clock (UTC)" if simulated else "clock (UTC)") if lanes else None
        passed = sum(c.ok for c in r.checks)
        rows.append([sc.name, "PASS" if r.ok else r.status.upper(), f"{passed}/{len(r.checks)}", human_seconds(r.span),
                     human_seconds(r.wall)])
        meta = (f"mode {sc.mode}, seed {r.seed}{', feature disabled' if r.disabled else ''}; {len(r.timeline)} events"
                + (f"; {hidden} more ticket lanes not drawn" if hidden else "") + (f"; error: {r.error}" if r.error else ""))
        sections.append({"title": sc.name, "ok": r.ok, "meta": meta, "figure": fig, "legend": legend(STATE_COLORS),
                         "checks": [(c.ok, c.name, c.kind, c.message) for c in r.checks], "extra": _rules(r)})
    return page("Game day report", rows, sections)


def _rules(r) -> str:
    """The rules in force and how often each fired (stats["rules"], chaos/engine/base.rules_report)."""
    rules = (getattr(r, "stats", None) or {}).get("rules") or []
    if not rules:
        return ""
    e = html.escape
    rows = "".join(f"<tr><td>{e(x['id'])}</td><td>{e(x['when'])}</td><td>{e(str(x['from']))}</td><td>{x.get('fired', 0)}</td></tr>"
                   for x in rules)
    return f"<h3>Rules in force</h3><table><tr><th>rule</th><th>when</th><th>from</th><th>fired</th></tr>{rows}</table>"


ACTIVITY_COLOURS = {"succeeded": "#27ae60", "failed": "#eb5757", "skipped": "#9aa5b1"}


def experiments(journals: list[dict[str, Any]]) -> str:
    """report.html of Chaos Toolkit journals: one lane per phase, each activity a labelled bar."""
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
        bars, names = [], {}
        for n, (lane, a) in enumerate(items):
            s, e = _epoch(a.get("start")) - t0, _epoch(a.get("end")) - t0
            bars.append((lane, s, max(e, s + 0.05), a.get("status", "")))
            names[n] = str(a.get("activity", {}).get("name", ""))
        span = max((b[2] for b in bars), default=float(j.get("duration") or 0))
        fig = chart(lanes, bars, [], span, t0, j["experiment"].get("title", "experiment"), colours=ACTIVITY_COLOURS,
                    bar_text=names) if lanes else None
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
                         "figure": fig, "legend": legend(ACTIVITY_COLOURS, with_marks=False), "checks": checks, "extra": extra})
    return page("Chaos Toolkit experiment report", rows, sections)


def _epoch(iso_time: str | None) -> float:
    if not iso_time:
        return 0.0
    d = datetime.fromisoformat(str(iso_time).replace("Z", "+00:00"))
    if d.tzinfo is None:
        d = d.replace(tzinfo=UTC)
    return d.timestamp()
