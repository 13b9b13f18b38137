"""Game-day results as data, then rendered: journal.json (Chaos Toolkit-like), report.md, JUnit XML, a rich table.

The journal follows the shape of a Chaos Toolkit journal (`chaoslib-version`, `platform`,
`experiment`, `status`, `deviated`, `steady_states.before/after`, `run`, `rollbacks`,
`start`, `end`, `duration`) with one experiment entry per scenario under `experiments`
and the first one's fields repeated at the top level when a single scenario ran, so a
tool that reads one journal reads ours.
"""

from __future__ import annotations

import json
import platform
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import chaoslib
from rich.console import Console
from rich.table import Table

from chaos import html_report
from chaos.engine.base import Activity, Result
from healer.clock import iso
from healer.terminal import make_console

CHAOSLIB_VERSION = str(chaoslib.__version__)  # SemVer, as Chaos Toolkit's tools parse it (they pick a report template by it)


def _provider(module: str, func: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "python", "module": module, "func": func,
            "arguments": {k: v for k, v in arguments.items() if v is not None}}


def _probe_def(c) -> dict[str, Any]:
    return {"type": "probe", "name": c.title, "tolerance": True,
            "provider": _provider("chaos.checkers", c.kind, {"expectation": c.title})}


def _action_def(f) -> dict[str, Any]:
    return {"type": "action", "name": f.fault,
            "provider": _provider("chaos.faults", f.fault, {"at": f.at, "on_event": f.on_event, "target": f.target})}


def _activity(a: Activity, kind: str | None = None) -> dict[str, Any]:
    typ = a.type if a.type in ("probe", "action") else "action"
    return {
        "activity": {"type": typ, "name": a.name,
                     "provider": _provider("chaos.checkers" if typ == "probe" else "chaos.faults", kind or a.name, {})},
        "status": a.status if a.status in ("succeeded", "failed", "skipped") else ("succeeded" if a.status == "ok" else "failed"),
        "start": iso(a.start),
        "end": iso(a.end),
        "duration": round(a.end - a.start, 6),
        "output": a.output,
    }


def experiment(r: Result) -> dict[str, Any]:
    sc = r.scenario
    kinds = {c.title: c.kind for c in sc.expect}
    after = [{**_activity(a, kinds.get(a.name)), "tolerance_met": a.status in ("succeeded", "ok")}
             for a in r.activities if a.type == "probe"]
    run = [_activity(a) for a in r.activities if a.type != "probe"] or [{  # no fault: the run itself is the method
        "activity": {"type": "action", "name": "run the fleet", "provider": _provider("chaos.engine", "run", {"mode": sc.mode})},
        "status": "failed" if r.status == "error" else "succeeded", "start": iso(r.started), "end": iso(r.ended),
        "duration": round(r.wall, 6), "output": {"events": len(r.timeline), "span_s": r.span}}]
    return {
        "experiment": {
            "title": sc.name,
            "description": sc.description.strip() or sc.name,
            "tags": [sc.mode],
            "configuration": {"mode": sc.mode, "seed": r.seed, "duration": sc.duration, "disabled": r.disabled,
                              "source": sc.source},
            "steady-state-hypothesis": {"title": sc.exercises or sc.name, "probes": [_probe_def(c) for c in sc.expect]},
            "method": [_action_def(f) for f in sc.faults] or [
                {"type": "action", "name": "run the fleet", "provider": _provider("chaos.engine", "run", {"mode": sc.mode})}],
            "rollbacks": [],
        },
        # Chaos Toolkit's words: a run that went to its end is `completed`; a broken expectation is `deviated`
        "status": "aborted" if r.status == "error" else "completed",
        "deviated": r.status != "error" and not r.ok,
        "steady_states": {
            "before": {"steady_state_met": True, "state": r.steady_before, "probes": [{
                "activity": {"type": "probe", "name": "fleet before the faults", "tolerance": True,
                             "provider": _provider("chaos.engine", "steady_state", {})},
                "status": "succeeded", "tolerance_met": True, "output": r.steady_before,
                "start": iso(r.started), "end": iso(r.started), "duration": 0.0}]},
            "after": {"steady_state_met": r.ok, "probes": after, "state": r.steady_after},
            "during": [],
        },
        "run": run,
        "rollbacks": [_activity(a) for a in r.rollbacks],
        "start": iso(r.started),
        "end": iso(r.ended),
        "duration": round(r.wall, 3),
        "error": r.error,
        "stats": {k: v for k, v in r.stats.items() if k != "traceback"},
    }


def journal(results: list[Result]) -> dict[str, Any]:
    exps = [experiment(r) for r in results]
    ok = all(r.ok for r in results)
    out: dict[str, Any] = {
        "chaoslib-version": CHAOSLIB_VERSION,
        "platform": platform.platform(),
        "node": platform.node(),
        "status": "aborted" if any(r.status == "error" for r in results) else "completed",
        "deviated": not ok,
        "start": iso(min((r.started for r in results), default=0.0)),
        "end": iso(max((r.ended for r in results), default=0.0)),
        "duration": round(sum(r.wall for r in results), 3),
        "summary": {"scenarios": len(results), "passed": sum(r.ok for r in results),
                    "failed": sum(not r.ok for r in results)},
        "experiments": exps,
    }
    if len(exps) == 1:
        e = exps[0]
        out.update({k: e[k] for k in ("experiment", "steady_states", "run", "rollbacks")})
    else:
        out["experiment"] = {"title": "game day", "description": f"{len(exps)} scenarios",
                             "steady-state-hypothesis": {"title": "every expectation holds",
                                                         "probes": [p for e in exps for p in e["experiment"]["steady-state-hypothesis"]["probes"]]},
                             "method": [a for e in exps for a in e["experiment"]["method"]], "rollbacks": []}
        out["steady_states"] = {"before": {"steady_state_met": True,
                                           "probes": [p for e in exps for p in e["steady_states"]["before"]["probes"]]},
                                "after": {"steady_state_met": ok, "probes": [p for e in exps for p in e["steady_states"]["after"]["probes"]]},
                                "during": []}
        out["run"] = [a for e in exps for a in e["run"]]
        out["rollbacks"] = [a for e in exps for a in e["rollbacks"]]
    return out


def _fmt_offset(s: float) -> str:
    s = int(round(s))
    h, rem = divmod(abs(s), 3600)
    m, sec = divmod(rem, 60)
    return f"{'-' if s < 0 else '+'}{h:02d}:{m:02d}:{sec:02d}"


def markdown(results: list[Result]) -> str:
    ok = sum(r.ok for r in results)
    lines = ["# Game day report", "", f"{ok}/{len(results)} scenarios passed.", "",
             "| scenario | mode | result | checks | span | wall |", "|---|---|---|---|---|---|"]
    for r in results:
        passed = sum(c.ok for c in r.checks)
        lines.append(f"| {r.scenario.name} | {r.scenario.mode} | {'PASS' if r.ok else r.status.upper()} | "
                     f"{passed}/{len(r.checks)} | {_fmt_offset(r.span)} | {r.wall:.2f}s |")
    for r in results:
        sc = r.scenario
        lines += ["", f"## {sc.name} — {'PASS' if r.ok else r.status.upper()}", ""]
        if sc.description:
            lines += [sc.description.strip(), ""]
        lines.append(f"mode `{sc.mode}`, seed `{r.seed}`" + (", feature **disabled**" if r.disabled else "")
                     + f", {len(r.activities)} activities, workdir `{r.workdir}`")
        if r.error:
            lines += ["", f"**error:** `{r.error}`"]
        lines += ["", "### Expectations", ""]
        for c in r.checks:
            lines.append(f"- {'✅' if c.ok else '❌'} **{c.name}** — {c.message}")
        if r.stats.get("rules"):
            lines += ["", "### Rules in force", "", "| rule | when | from | fired |", "|---|---|---|---|"]
            lines += [f"| {x['id']} | {x['when']}{''.join(f' [{lb}]' for lb in x.get('labels') or [])} | {x['from']} | "
                      f"{x.get('fired', 0)} |" for x in r.stats["rules"]]
        lines += ["", "### Timeline", "", "| t | event | subject | detail |", "|---|---|---|---|"]
        for off, kind, subject, text in r.timeline:
            lines.append(f"| {_fmt_offset(off)} | {kind} | {subject} | {text.replace('|', '/')[:120]} |")
        if r.rollbacks:
            lines += ["", "### Rollbacks", ""]
            lines += [f"- {a.name}: {a.output or a.status}" for a in r.rollbacks]
    return "\n".join(lines) + "\n"


def junit(results: list[Result]) -> str:
    suite = ET.Element("testsuite", name="healer-gameday", tests=str(len(results)),
                       failures=str(sum(r.status == "failed" for r in results)),
                       errors=str(sum(r.status == "error" for r in results)),
                       time=f"{sum(r.wall for r in results):.3f}")
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=f"gameday.{r.scenario.mode}", name=r.scenario.name,
                             time=f"{r.wall:.3f}")
        if r.status == "error":
            el = ET.SubElement(case, "error", message=r.error or "engine error", type="EngineError")
            el.text = r.stats.get("traceback", r.error or "")
        elif not r.ok:
            fails = r.failures
            el = ET.SubElement(case, "failure", message=fails[0].message if fails else "failed", type="ExpectationBroken")
            el.text = "\n".join(c.message for c in fails)
        out = ET.SubElement(case, "system-out")
        out.text = "\n".join([c.line() for c in r.checks] + ([rules_line(r)] if r.stats.get("rules") else []))
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write(results: list[Result], report_dir: str | Path | None = None, junit_file: str | Path | None = None) -> dict[str, Path]:
    out: dict[str, Path] = {}
    if report_dir:
        d = Path(report_dir)
        d.mkdir(parents=True, exist_ok=True)
        (d / "journal.json").write_text(json.dumps(journal(results), indent=2, default=str) + "\n")
        (d / "report.md").write_text(markdown(results))
        (d / "report.html").write_text(html_report.scenarios(results))
        out["journal"] = d / "journal.json"
        out["markdown"] = d / "report.md"
        out["html"] = d / "report.html"
    if junit_file:
        j = Path(junit_file)
        j.parent.mkdir(parents=True, exist_ok=True)
        j.write_text(junit(results))
        out["junit"] = j
    return out


def summary_table(results: list[Result]) -> Table:
    t = Table(title="game day", show_lines=False)
    for col in ("scenario", "mode", "result", "checks", "span", "wall", "broken expectation"):
        t.add_column(col, overflow="fold")  # never "…": the name and the broken expectation are what a CI log is read for
    for r in results:
        passed = sum(c.ok for c in r.checks)
        res = "[green]PASS[/]" if r.ok else f"[red]{r.status.upper()}[/]"
        broken = r.error or (r.failures[0].message if r.failures else "")
        t.add_row(r.scenario.name, r.scenario.mode, res, f"{passed}/{len(r.checks)}", _fmt_offset(r.span).lstrip("+"),
                  f"{r.wall:.2f}s", broken)
    return t


def rules_line(r: Result) -> str:
    """The rules of a run in one line: those not the default (from the policy or a runbook), and which fired."""
    rules = r.stats.get("rules") or []
    chosen = [f"{x['id']} ({x['from']})" for x in rules if x["from"] != "default"]
    fired = [f"{x['id']} {x['fired']}x" for x in rules if x.get("fired")]
    return (f"rules in force: {len(rules)}, " + (f"not the default: {', '.join(chosen)}" if chosen else "all default")
            + f"; fired: {', '.join(fired) if fired else 'none'}")


def print_summary(results: list[Result], console: Console | None = None, report: Path | None = None) -> None:
    c = console or make_console()
    c.print(summary_table(results))
    for r in results:
        if r.stats.get("rules"):
            c.print(f"{r.scenario.name}: {rules_line(r)}", markup=False, highlight=False, soft_wrap=True)
    ok = sum(r.ok for r in results)
    if ok == len(results):
        c.print(f"{ok}/{len(results)} scenarios passed")
        return
    if report is not None:
        c.print(f"{ok}/{len(results)} scenarios passed — see {report} for the broken expectations")
        return
    c.print(f"{ok}/{len(results)} scenarios passed; broken:")
    for r in results:
        for line in ([r.error] if r.error else [f.message for f in r.failures]):
            c.print(f"  {r.scenario.name}: {line}", markup=False, highlight=False, soft_wrap=True)
