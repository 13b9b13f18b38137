"""Reports of Chaos Toolkit experiments run by `healer gameday run`: the journal as chaostoolkit-lib wrote
it (what `chaos report` reads), report.md, report.html, JUnit XML."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from chaos.ctk_journal import errors, not_steady, ok, verdict
from chaos.html_report import experiments as html_experiments
from chaos.html_report import human_seconds

__all__ = ["write", "markdown", "junit", "human_seconds"]


def _name(a: dict[str, Any]) -> str:
    return str((a.get("activity") or {}).get("name", "?"))


def markdown(journals: list[dict[str, Any]]) -> str:
    lines = ["# Chaos Toolkit experiment report", "", "| experiment | status | deviated | duration |", "|---|---|---|---|"]
    for j in journals:
        lines.append(f"| {j['experiment'].get('title')} | {verdict(j)} | {j.get('deviated')} | "
                     f"{human_seconds(j.get('duration') or 0)} |")
    for j in journals:
        lines += ["", f"## {j['experiment'].get('title')} — {verdict(j)}",
                  "", f"started {j.get('start')}, ended {j.get('end')}, source `{(j.get('healer') or {}).get('source')}`"]
        for e in errors(j):
            lines += ["", f"**error:** `{e}`"]
        ss = j.get("steady_states") or {}
        for phase in ("before", "after"):
            st = ss.get(phase)
            if not st:
                continue
            lines += ["", f"### Steady state {phase}: {'met' if st.get('steady_state_met') else 'NOT met'}", ""]
            for p in st.get("probes") or []:
                lines.append(f"- {'✅' if p.get('tolerance_met') else '❌'} {_name(p)}: output `{str(p.get('output'))[:200]}`")
        for title, key in (("Method", "run"), ("Rollbacks", "rollbacks")):
            acts = j.get(key) or []
            if acts:
                lines += ["", f"### {title}", "", "| activity | type | status | start | duration |", "|---|---|---|---|---|"]
                for a in acts:
                    lines.append(f"| {_name(a)} | {(a.get('activity') or {}).get('type')} | {a.get('status')} | {a.get('start')} | "
                                 f"{human_seconds(a.get('duration') or 0)} |")
        undo = (j.get("healer") or {}).get("undo") or []
        if undo:
            lines += ["", "### Undone by healer", ""] + [f"- {u['kind']}: {u['result']}" for u in undo]
    return "\n".join(lines) + "\n"


def junit(journals: list[dict[str, Any]]) -> str:
    suite = ET.Element("testsuite", name="healer-gameday-ctk", tests=str(len(journals)),
                       failures=str(sum(not ok(j) and not errors(j) for j in journals)),
                       errors=str(sum(bool(errors(j)) for j in journals)),
                       time=f"{sum(float(j.get('duration') or 0) for j in journals):.3f}")
    for j in journals:
        case = ET.SubElement(suite, "testcase", classname="gameday.chaostoolkit", name=str(j["experiment"].get("title")),
                             time=f"{float(j.get('duration') or 0):.3f}")
        if errors(j):
            el = ET.SubElement(case, "error", message=errors(j)[0], type="ActivityFailed")
            el.text = "\n".join(errors(j))
        elif not_steady(j):
            el = ET.SubElement(case, "failure", message=str(not_steady(j)), type="SteadyStateNotMet")
            el.text = str(not_steady(j))
        elif not ok(j):
            bad = [p for ph in ("before", "after") for p in ((j.get("steady_states") or {}).get(ph) or {}).get("probes") or []
                   if not p.get("tolerance_met")]
            msg = f"status {j.get('status')}, deviated {j.get('deviated')}" + (f": {_name(bad[0])}" if bad else "")
            ET.SubElement(case, "failure", message=msg, type="Deviated")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")[:60] or "experiment"


def write(journals: list[dict[str, Any]], report_dir: str | Path | None, junit_file: str | Path | None) -> dict[str, Path]:
    out: dict[str, Path] = {}
    if report_dir:
        d = Path(report_dir)
        d.mkdir(parents=True, exist_ok=True)
        if len(journals) == 1:
            (d / "journal.json").write_text(json.dumps(journals[0], indent=2, default=str) + "\n")
            out["journal"] = d / "journal.json"
        else:
            for i, j in enumerate(journals, 1):
                f = d / f"journal-{i}-{_slug(str(j['experiment'].get('title')))}.json"
                f.write_text(json.dumps(j, indent=2, default=str) + "\n")
                out[f"journal {i}"] = f
        (d / "report.md").write_text(markdown(journals))
        (d / "report.html").write_text(html_experiments(journals))
        out["markdown"] = d / "report.md"
        out["html"] = d / "report.html"
    if junit_file:
        jf = Path(junit_file)
        jf.parent.mkdir(parents=True, exist_ok=True)
        jf.write_text(junit(journals))
        out["junit"] = jf
    return out
