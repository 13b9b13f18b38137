"""What every game-day engine shares: a run's `Result` and `Activity`s, applying a fault, and `finish` (the checks,
the timeline, the verdict); and `Engine`, the protocol the runners implement (chaos/engine/__init__.py's `run` picks
one by the scenario's mode: sim, simstorm, real, storm, pgday, and the fleet engine of `healer gameday` on a fleet of
yours). An engine imports this module, never the package that picks it, so no engine sits in a circle with `run`.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from chaos.checkers import Check, History, run_checks, standard_checks
from chaos.faults import NotApplied
from chaos.scenario import Scenario, match
from healer.clock import Clock, system

# failpoints a supervisor child can hit (the repair agent and quarantine run inside it): what a real game day arms
SUPERVISOR_SIDE = ("remedy.", "supervisor.", "quarantine.", "repair.", "store.")
# events that mean the fleet changed (a tick without any is a quiet tick)
CHANGES = ("ticket.", "worktree.", "quarantine.", "intent.done", "remedy.done", "dispatch.launched", "dispatch.resumed",
           "dispatch.replayed", "dispatch.budget_exhausted", "dispatch.blocked", "repair.", "loop.", "proposal.",
           "attempt.", "agent.")


def signame(rc: int | None) -> str | None:
    """The signal a child's negative return code names (SIGKILL), None for an exit."""
    if rc is None or rc >= 0:
        return None
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


@dataclass
class Activity:
    name: str
    type: str  # action (a fault) | probe (a check) | rollback
    start: float
    end: float
    status: str  # succeeded | failed
    output: Any = None


@dataclass
class Result:
    scenario: Scenario
    status: str  # passed | failed | error
    checks: list[Check] = field(default_factory=list)
    activities: list[Activity] = field(default_factory=list)
    rollbacks: list[Activity] = field(default_factory=list)
    timeline: list[tuple[float, str, str, str]] = field(default_factory=list)  # (offset s, kind, subject, text)
    started: float = 0.0  # wall clock
    clock_start: float = 0.0  # the scenario's clock at offset 0 (the simulated clock in simulated mode): the report's axis
    ended: float = 0.0
    span: float = 0.0  # scenario time covered (virtual seconds in simulated mode)
    seed: int = 0
    disabled: bool = False
    error: str | None = None
    steady_before: dict[str, Any] = field(default_factory=dict)
    steady_after: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    workdir: str = ""
    kept: bool = True  # the work folder is still there (False: removed at the end of the run)
    moved_aside: str = ""  # where an earlier game day's folder in a given `workdir` was moved (chaos/workdir.py)
    incident: list[Check] = field(default_factory=list)  # disabled run: the scenario's `incident:` checks

    @property
    def ok(self) -> bool:
        return self.status == "passed"

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    @property
    def wall(self) -> float:
        return max(0.0, self.ended - self.started)


def apply_fault(inject, f) -> tuple[str, str, str]:
    """Inject fault `f` with `inject(f)`: (status, output, event kind). A fault that raised is `failed`, one that found
    nothing to act on (chaos.faults.NotApplied: no live dispatcher) is `skipped`; either did not happen, so its
    event is `chaos.fault_not_applied` (an expectation anchored on `chaos.fault` never sees it) and `finish` makes the
    game day `error` with its reason."""
    try:
        return "succeeded", str(inject(f)), "chaos.fault"
    except NotApplied as e:
        return "skipped", f"not applied: {e}", "chaos.fault_not_applied"
    except Exception as e:  # noqa: BLE001 - a fault that cannot be injected is reported, the game day goes on
        return "failed", f"could not inject: {type(e).__name__}: {e}", "chaos.fault_not_applied"


def fault_errors(activities: list[Activity]) -> list[str]:
    """One line per fault that did not happen (raised or skipped): the reasons a game day is `error`."""
    return [f"{a.name}: {a.output}" for a in activities if a.type == "action" and a.status in ("failed", "skipped")]


# timeline: only what a reader needs to follow the story
TIMELINE_PREFIXES = ("chaos.", "dispatch.", "ticket.moved", "ticket.unlabeled", "ticket.commented", "intent.done", "intent.aborted",
                     "notify.sent", "proposal.", "repair.", "lease.taken_over", "supervisor.recovered", "quarantine.",
                     "main.red", "main.green", "store.unavailable", "store.back")  # the last four: the report's bands


def timeline_from(history: History, limit: int = 400) -> list[tuple[float, str, str, str]]:
    out = []
    for e in history.events:
        if not e.kind.startswith(TIMELINE_PREFIXES) or e.kind in ("chaos.proc.started", "chaos.proc.ended", "dispatch.tick"):
            continue
        p = e.payload
        if e.kind == "ticket.moved":
            text = f"{p.get('from')} -> {p.get('to')} by {p.get('actor', '?')}" + (f" ({p['reason']})" if p.get("reason") else "")
        elif e.kind.startswith("intent."):
            text = f"{p.get('action')} {e.kind.split('.')[1]}"
        elif e.kind == "notify.sent":
            text = str(p.get("text", ""))[:100]
        elif e.kind == "chaos.fault":
            text = f"fault {p.get('fault')}" + (f" on {p['target']}" if p.get("target") else "")
        elif e.kind == "chaos.fault_not_applied":
            text = f"fault {p.get('fault')} NOT APPLIED ({p.get('status')}): {p.get('result') or p.get('output')}"
        else:
            text = ", ".join(f"{k}={v}" for k, v in list(p.items())[:3])
        out.append((e.at - history.start, e.kind, e.subject, text))
    if len(out) > limit:
        out = out[: limit // 2] + [(out[limit // 2][0], "…", "", f"{len(out) - limit} entries elided")] + out[-limit // 2:]
    return out


def finish(result: Result, history: History, clock: Clock | None = None) -> Result:
    """Run the scenario's expectations over the history and settle the status."""
    clock = clock or system()
    t0 = clock.now()
    result.checks = run_checks(result.scenario.expect, history)
    if result.scenario.mode == "simulated" and not result.disabled:
        # the standard invariants hold in every simulated run of the product as shipped (a disabled run switches a
        # feature off on purpose: it is held to what its `disable_breaks:` declares, nothing more)
        result.checks += standard_checks(result.scenario.expect, history)
    t1 = clock.now()
    for c in result.checks:
        result.activities.append(Activity(c.name, "probe", t0, t1, "succeeded" if c.ok else "failed", c.message))
    sc = result.scenario
    if result.disabled and sc.incident:  # the disabled run must show the incident itself, at its scale
        result.incident = run_checks(sc.incident, history)
    result.timeline = timeline_from(history)
    result.clock_start = history.start
    result.span = history.end - history.start
    flag_vacuous(result)
    errors = fault_errors(result.activities)
    silent = never_fired(result)
    if silent and not result.disabled:  # a disabled run may never reach a fault's trigger: that is its story
        errors += silent
    elif silent:
        result.stats["faults_never_applied"] = silent
    if errors and result.scenario.faults_may_miss:  # a generated schedule's random aims: listed, not an error
        result.stats["faults_not_applied"] = errors
        errors = []
    if errors:  # a fault that did not happen: the expectations did not test what they claim
        why = "fault not applied: " + "; ".join(errors)
        result.error = why if result.error is None else f"{result.error}; {why}"
    if result.error is None:
        result.status = "passed" if all(c.ok for c in result.checks) else "failed"
    else:
        result.status = "error"
    result.stats.setdefault("events", len(history.events))
    rules_report(result, history)
    return result


def rules_report(result: Result, history: History) -> None:
    """stats["rules"]: each rule in force (an engine that knows its policy better sets it first) and how many
    actions it planned in the run (`intent.planned` events naming it): a game day that "proves" a runbook shows
    whether the runbook's rule ever fired."""
    rules = result.stats.get("rules")
    if rules is None:
        try:
            rules = result.scenario.rules_in_force(None, result.disabled)
        except Exception:  # noqa: BLE001 - a report detail; the policy's own problems were reported at load
            return
    fired: dict[str, int] = {}
    for e in history.events:
        if e.kind == "intent.planned":
            rid = (e.payload.get("params") or {}).get("rule")
            if rid:
                fired[rid] = fired.get(rid, 0) + 1
    for r in rules:
        r["fired"] = fired.get(r["id"], 0)
    result.stats["rules"] = rules


def never_fired(result: Result) -> list[str]:
    """The scenario's faults that never ran at all (an `on_event` whose event never came, an `at` beyond the run):
    the game day did not do what it claims."""
    names = [a.name for a in result.activities if a.type == "action"]
    out = []
    for f in result.scenario.faults:
        if f.fault == "failpoint":
            continue  # armed before the run; whether it fired is the `failpoints_fired` state's business
        if not any(n == f"fault {f.fault}" or n.startswith(f"fault {f.fault} ") for n in names):
            when = f"on_event {f.on_event}" if f.on_event else f"at {f.at}"
            out.append(f"fault {f.fault}" + (f" on {f.target}" if f.target else "") + f": never applied ({when} never came)")
    return out


def _fault_names(spec: Any) -> set[str] | None:
    """The fault names a checker's selectors anchor on (`{kind: chaos.fault, payload: {fault: X}}`), '*' for any
    chaos.fault; None when it anchors on none."""
    found: set[str] = set()

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            kinds = v.get("kind")
            kinds = kinds if isinstance(kinds, list) else [kinds]
            if any(isinstance(k, str) and k == "chaos.fault" for k in kinds):
                fault = (v.get("payload") or {}).get("fault") if isinstance(v.get("payload"), dict) else None
                found.add(str(fault) if fault else "*")
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(spec)
    return found or None


def flag_vacuous(result: Result) -> None:
    """An expectation anchored on a fault that was never applied holds only vacuously: it is broken, saying so."""
    applied = [a.name.split()[1] for a in result.activities if a.type == "action" and a.status == "succeeded"
               and a.name.startswith("fault ")]
    by_title = {c.title: c for c in result.scenario.expect}
    for i, c in enumerate(result.checks):
        spec = by_title.get(c.name)
        names = _fault_names(getattr(spec, "spec", None)) if spec is not None else None
        if not c.ok or not names:
            continue
        missing = sorted(n for n in names if not any(match(n, a) for a in applied))
        if missing:
            what = ", ".join("any fault" if n == "*" else n for n in missing)
            result.checks[i] = Check(c.name, False, f"expectation '{c.name}' broken: holds only vacuously: no {what} "
                                     f"fault was ever applied ({c.message})", c.kind)
            for a in result.activities:
                if a.type == "probe" and a.name == c.name:
                    a.status, a.output = "failed", result.checks[i].message


class Engine(Protocol):
    """A game-day runner: built from the scenario and a work folder (`EngineFactory`), it runs once and returns its
    `Result`; `abort` disarms what a run that crashed or was interrupted left armed in this process (the simulated
    world's failpoints). Its undo journal, when it keeps one as `undo`, is undone by `run`'s caller on Ctrl-C."""

    def run(self) -> Result: ...

    def abort(self) -> None: ...


class EngineFactory(Protocol):
    def __call__(self, scenario: Scenario, workdir: Path, *, seed: int | None = None, disabled: bool = False,
                 overrides: dict | None = None, progress: Any = None, wall: Clock | None = None) -> Engine: ...
