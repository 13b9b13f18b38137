"""Game-day engines: `simulated` (chaos/engine/sim.py) and `real` (chaos/engine/real.py).

`run(scenario, workdir, ...)` picks the engine from the scenario's mode, runs it, and
returns a `Result`: the checks, the activities (faults and probes, Chaos Toolkit style),
the rollbacks (every fault undone) and a timeline for the report.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.checkers import Check, History, run_checks
from chaos.faults import undo
from chaos.scenario import Scenario
from healer import switches
from healer.clock import Clock, system


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
    from chaos.faults import NotApplied

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
    return result


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
    from chaos.scenario import match

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


def run(scenario: Scenario, workdir: str | Path | None = None, *, seed: int | None = None, disabled: bool = False,
        overrides: dict | None = None, progress=None, clock: Clock | None = None, keep: bool | None = None) -> Result:
    """Run one scenario in `workdir` (a fresh temp dir by default) and check it.

    A temp dir of its own is removed at the end unless `keep` (a given `workdir` is the caller's, kept unless
    keep=False; it must be new, empty or an earlier game day's, which is moved aside: chaos/workdir.py). `disable:`'s product switches are set in this process's environment for the run, so every
    child (supervisor ticks, the dispatcher) inherits them; the environment is restored after."""
    from chaos import workdir as kept

    owned = workdir is None
    wd = Path(tempfile.mkdtemp(prefix=f"gameday-{scenario.name}-")) if owned else Path(workdir)
    if owned:
        undo.claim(wd)  # a SIGKILLed run's folder is then known dead to `healer gameday clean`
    moved = None if owned else kept.take(wd)  # a folder not healer's is refused, an earlier game day's moved aside
    keep = (not owned) if keep is None else keep
    clock = clock or system()
    if scenario.mode == "simulated" and scenario.storm is not None:
        from chaos.engine.simstorm import SimStormEngine as Engine
    elif scenario.mode == "simulated":
        from chaos.engine.sim import SimEngine as Engine  # type: ignore[assignment]
    elif scenario.storm is not None:
        from chaos.storm import StormEngine as Engine  # type: ignore[assignment]
    elif scenario.hosts is not None:
        from chaos.pgday import PgDayEngine as Engine  # type: ignore[assignment]
    else:
        from chaos.engine.real import RealEngine as Engine  # type: ignore[assignment]
    started = clock.now()
    saved = os.environ.get(switches.ENV)
    off = scenario.switches_off(disabled)
    if off:
        os.environ[switches.ENV] = switches.env_value(off)
    eng = None
    try:
        eng = Engine(scenario, wd, seed=seed, disabled=disabled, overrides=overrides, progress=progress, wall=clock)
        result = eng.run()
    except Exception as e:  # noqa: BLE001 - an engine crash is a failed game day, reported, not a traceback
        import traceback

        if eng is not None and hasattr(eng, "abort"):
            with contextlib.suppress(Exception):  # best effort: the crash is what gets reported
                eng.abort()  # a simulated world's armed failpoints would fire in this process's later runs

        result = Result(scenario, "error", error=f"{type(e).__name__}: {e}", seed=scenario.seed if seed is None else seed,
                        disabled=disabled, workdir=str(wd))
        result.stats["traceback"] = traceback.format_exc(limit=8)
    except KeyboardInterrupt:  # Ctrl-C: undo what the run did, leave no work folder of ours, then stop (exit 4)
        if eng is not None and hasattr(eng, "abort"):
            with contextlib.suppress(Exception):
                eng.abort()
        j = getattr(eng, "undo", None)
        if isinstance(j, undo.UndoJournal):
            with contextlib.suppress(Exception):
                j.undo_all()
        if owned and not keep:
            shutil.rmtree(wd, ignore_errors=True)
        raise
    finally:
        if off:
            if saved is None:
                os.environ.pop(switches.ENV, None)
            else:
                os.environ[switches.ENV] = saved
        _drop_settled_journal(eng)
    result.started = result.started or started
    result.ended = clock.now()
    result.workdir = str(wd)
    result.kept = keep
    result.moved_aside = str(moved) if moved else ""
    if not keep:
        shutil.rmtree(wd, ignore_errors=True)
    return result


def _drop_settled_journal(eng: Any) -> None:
    """An engine's undo journal with nothing left to undo is removed (with the owner folder once empty):
    a passing game day leaves nothing in the temp folder."""
    j = getattr(eng, "undo", None)
    if isinstance(j, undo.UndoJournal):
        j.finish()  # a no-op when the engine finished it already, or when something is left to undo
