"""Game-day scenarios: the YAML format, validated like policies (`FILE:LINE:COL: key: expected …, got …`).

A scenario names a mode (`simulated` or `real`), a seed, a policy (a path and/or inline
overrides deep-merged onto the default policy), a fleet (tickets with scripted agent
behaviours from `chaos/agents/`), faults (at a time, at the Nth event of a kind, or at
the Nth hit of a named failpoint), a duration, and expectations (named checkers over
the event log and the final state, see chaos/checkers.py).

`disable:` is the policy override that switches off the healer feature the scenario
exercises; `healer gameday run --disable` (and tests/chaos/test_can_fail.py) run the
scenario with it and expect it to FAIL, naming the broken expectation. That is how the
suite proves it can fail.
"""

from __future__ import annotations

import copy
import fnmatch
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from chaos import event_catalogue
from chaos.faults import registry as faults
from chaos.faults.registry import did_you_mean
from chaos.scenario_parts import Checker, Fault, FleetSpec, HostsSpec, RealSpec, StormSpec, Strict
from healer import durations, failpoints
from healer.errors import InvalidInput
from healer.policy.load import load_policy, problems_for
from healer.policy.schema import ACTIONS, Duration, Policy
from healer.policy.yamlpos import Problem, YamlProblem, load_one, load_path, mark_for, reading
from healer.policy_in_force import policy_with_runbooks
from healer.switches import SWITCHES

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
ROOT_DIR = SCENARIO_DIR / "root"  # the shipped game days for your own fleet (`for_root: true`), run by name with --root
# the faults that make sense on a fleet healer did not build (chaos/engine/fleet.py applies them)


class Scenario(Strict):
    name: str = Field(min_length=1)
    description: str = ""
    exercises: str = Field("", description="the healer feature it proves")
    mode: Literal["simulated", "real"] = "simulated"
    seed: int = 0
    duration: Duration = "1h"
    tick: Duration | None = Field(None, description="supervisor tick (default: the policy's supervisor.tick)")
    policy: str | dict[str, Any] | None = Field(None, description="a policy path, or inline overrides on the default")
    overrides: dict[str, Any] = Field(default_factory=dict, description="deep-merged on top of policy")
    disable: dict[str, Any] = Field(default_factory=dict, description=(
        "switches off the ONE feature the scenario exercises: a policy override, plus `switches_off: [NAME]` "
        "(product switches, healer/switches.py) and `actions_off: [ACTION]` (removed from remediation.allowed); "
        "`rules:` here go before the scenario's own (the first rule per finding wins)"))
    disable_breaks: list[str] = Field(default_factory=list, description="the expectations `disable:` must break; "
                                                                        "no other may break, except")
    disable_may_break: list[str] = Field(default_factory=list, description="expectations the disabled run may break "
                                                                           "too (real processes: how far a disabled "
                                                                           "run gets depends on the machine's speed)")
    incident: list[Checker] = Field(default_factory=list, description="checks that must HOLD in the disabled run: "
                                                                      "the incident reproduced at its scale")
    fleet: FleetSpec = Field(default_factory=FleetSpec)
    faults: list[Fault] = Field(default_factory=list)
    faults_may_miss: bool = Field(False, description="a fault that finds nothing to act on (or never fires) is "
                                                     "listed, not an error: generated schedules (gameday explore) only")
    expect: list[Checker] = Field(min_length=1)
    timeout: Duration = Field("120s", description="real mode: wall-clock cap on the whole scenario")
    real: RealSpec = Field(default_factory=RealSpec, description="real mode: which real processes run, when it ends")
    storm: StormSpec | None = Field(None, description="a restart storm (chaos/storm.py, chaos/engine/simstorm.py) "
                                                      "instead of timed faults")
    hosts: HostsSpec | None = Field(None, description="a multi-host game day on a PostgreSQL server of its own "
                                                      "(chaos/pgday.py): real `healer up` hosts, the faults timed")
    for_root: bool = Field(False, description="a game day for YOUR fleet (`healer gameday run SCENARIO --root FLEET`, "
                                              "chaos/engine/fleet.py): no fleet built, only timed faults a FaultSpec marks for_root; "
                                              "run only with --root, and --root runs only these")

    # set by load(), not part of the YAML
    source: str = Field("", exclude=True)
    warnings: list[str] = Field(default_factory=list, exclude=True)

    @model_validator(mode="after")
    def _hosts(self) -> Scenario:
        if self.hosts is not None and (self.mode != "real" or self.storm is not None):
            raise ValueError("expected mode: real and no storm: with hosts: (real `healer up` hosts on PostgreSQL) @hosts")
        return self

    @model_validator(mode="after")
    def _for_root(self) -> Scenario:
        if not self.for_root:
            return self
        if self.mode != "real" or self.storm is not None or self.hosts is not None:
            raise ValueError("expected mode: real and no storm: or hosts: with for_root: true (a game day for your "
                             "fleet runs real processes on it) @for_root")
        if self.fleet.tickets or self.fleet.random_tickets or self.fleet.files:
            raise ValueError("expected no fleet.tickets, random_tickets or files with for_root: true (the tickets are "
                             "your fleet's: expectations name real tickets or globs) @fleet")
        for i, f in enumerate(self.faults):
            if f.fault not in faults.for_root() or f.at is None:
                raise ValueError(f"expected one of {', '.join(faults.for_root())} at a time (`at:`) against your own "
                                 f"fleet, got {f.fault}" + (" on an event" if f.at is None else "") + f" @faults.{i}.fault")
        return self

    @model_validator(mode="after")
    def _disable(self) -> Scenario:
        sw = self.disable.get("switches_off", [])
        if not isinstance(sw, list) or not all(isinstance(x, str) for x in sw):
            raise ValueError(f"expected a list of product switch names, got {sw!r} @disable")
        for x in sw:
            if x not in SWITCHES:
                raise ValueError(f"expected a product switch in disable.switches_off ({', '.join(SWITCHES)}), "
                                 f"got {x!r}{did_you_mean(x, SWITCHES)} @disable")
        acts = self.disable.get("actions_off", [])
        if not isinstance(acts, list) or not all(isinstance(x, str) for x in acts):
            raise ValueError(f"expected a list of remediation actions, got {acts!r} @disable")
        for x in acts:
            if x not in ACTIONS:
                raise ValueError(f"expected a remediation action in disable.actions_off ({', '.join(ACTIONS)}), "
                                 f"got {x!r}{did_you_mean(x, ACTIONS)} @disable")
        titles = [c.title for c in self.expect]
        if self.disable_breaks and not self.disable:
            raise ValueError("expected a `disable:` for the expectations named in disable_breaks, got none @disable_breaks")
        for key, names in (("disable_breaks", self.disable_breaks), ("disable_may_break", self.disable_may_break)):
            for n in names:
                if n not in titles:
                    raise ValueError(f"expected the name of an expectation in {key}, got {n!r}"
                                     f"{did_you_mean(n, titles)} @{key}")
        if self.disable_may_break and not self.disable_breaks:
            raise ValueError("expected disable_breaks (what must break) beside disable_may_break @disable_may_break")
        if self.incident and not self.disable:
            raise ValueError("expected a `disable:` whose run the incident checks judge, got none @incident")
        if self.mode != "simulated" and any(t.behaviour == "cannot_start" for t in self.fleet.tickets):
            raise ValueError("expected mode: simulated with behaviour cannot_start (the real engine's agents always "
                             "start), got mode: real @fleet")
        if self.mode != "simulated" and any(t.behaviour == "merge_stalls" for t in self.fleet.tickets):
            raise ValueError("expected mode: simulated with behaviour merge_stalls (a real merge is decided by real "
                             "gates), got mode: real @fleet")
        if self.fleet.standby_supervisor and self.mode != "simulated":
            raise ValueError("expected mode: simulated with fleet.standby_supervisor (the real engine runs one "
                             "supervisor), got mode: real @fleet")
        if self.fleet.main == "unknown" and self.mode != "simulated":
            raise ValueError("expected mode: simulated with fleet.main: unknown (a real gate decides for itself), "
                             "got mode: real @fleet")
        reds = self.fleet.main in ("red", "unknown") or any(f.fault == "red_main" for f in self.faults)
        if reds and self.policy is None and not (self.overrides.get("fleet") or {}).get("main_gates"):
            # without a main gate the product never judges main: a red main would be a fault nobody can see
            raise ValueError("expected overrides.fleet.main_gates (a gate that judges main) with a red main "
                             "(fleet.main: red or a red_main fault), got none @fleet")
        return self

    def broke_as_declared(self, broken: set[str]) -> bool:
        """A disabled run broke every expectation of disable_breaks, and nothing outside it and disable_may_break."""
        want = set(self.disable_breaks)
        return bool(want) and want <= broken <= want | set(self.disable_may_break)

    def switches_off(self, disabled: bool) -> list[str]:
        return list(self.disable.get("switches_off", [])) if disabled else []

    def _folder(self) -> Path | None:
        """Where the scenario's relative paths start: its file's folder (a generated scenario has none: the cwd)."""
        return Path(self.source).resolve().parent if self.source else None

    def _merged(self, extra: dict[str, Any] | None, disabled: bool) -> dict[str, Any]:
        base: dict[str, Any] = {}
        here = self._folder()
        if isinstance(self.policy, str):
            p = Path(self.policy)
            if not p.is_absolute() and self.source:
                cand = Path(self.source).parent / p
                p = cand if cand.exists() else p
            # a policy file's include_runbooks are read from its own folder, as a fleet reads them (policy_for)
            base = runbooks_from(load_policy(p).model_dump(mode="json", by_alias=True), p.resolve().parent)
        elif isinstance(self.policy, dict):
            base = deep_merge(Policy().model_dump(mode="json", by_alias=True), runbooks_from(self.policy, here))
        else:
            base = Policy().model_dump(mode="json", by_alias=True)
        # the scenario's fleet keys that are policy keys, in both worlds (the dispatcher reads them from the policy);
        # `overrides:` may still set them (it comes after)
        base = deep_merge(base, fleet_policy(self.fleet))
        merged = deep_merge(base, runbooks_from(self.overrides, here))
        if disabled:
            merged = apply_disable(merged, runbooks_from(self.disable, here))
        if extra:
            merged = deep_merge(merged, runbooks_from(extra, None))
        return merged

    def effective_policy(self, extra: dict[str, Any] | None = None, disabled: bool = False) -> Policy:
        """The policy in force, as a fleet has it: `include_runbooks` read and their rules after the policy's own
        (healer/policy_in_force.policy_with_runbooks, the loader of `supervise`); the runbooks are then inlined
        (`include_runbooks: []`), so a real fleet given this policy does not read them a second time."""
        merged = self._merged(extra, disabled)
        probs = problems_for(merged, {}, Policy)
        if probs:  # load() has located the scenario's own keys already: what is left came from --override
            lines = [f"--override: {p.path}: {p.message}" for p in probs]
            raise InvalidInput(lines[0], lines)
        pol = policy_with_runbooks(Policy.model_validate(merged), None)
        return pol.model_copy(update={"include_runbooks": []})

    def rules_in_force(self, extra: dict[str, Any] | None = None, disabled: bool = False) -> list[dict[str, Any]]:
        """Each finding kind's rule in force (id, when, where it comes from: the policy, a runbook file, the default),
        what a game day's report lists beside how often each fired."""
        merged = self._merged(extra, disabled)
        pol = Policy.model_validate(merged)
        origin = {id(r): "policy" for r in pol.rules}
        full = policy_with_runbooks(pol, None)
        for r in full.rules[len(pol.rules):]:
            origin[id(r)] = "runbook"
        return in_force(full, origin)


# What the simulated world does with each key of a scenario's `fleet:` (tests/chaos/test_sim_fleet_keys.py checks
# that every key is listed and that each one changes the world): "policy" keys become the policy's `fleet.*`,
# read by the product's own dispatcher and supervisor; "world" keys are built by the engine.
FLEET_KEYS: dict[str, str] = {
    "pool_size": "policy: fleet.pool_size (the dispatcher launches at most this many live agents)",
    "tickets": "world: the board the engine creates (states, labels and their ages, blocked_by, agents, worktrees)",
    "random_tickets": "world: extra tickets with behaviours drawn from the seed",
    "main": "world: main's colour at the start (SimGates answers it; red_main/green_main faults flip it)",
    "files": "world: user files written into the fleet root",
    "standby_supervisor": "world: a second product Supervisor on another host",
}


def runbooks_from(over: dict[str, Any] | None, folder: Path | None) -> dict[str, Any]:
    """`over` with its `include_runbooks` made absolute from `folder` (the scenario's, or a policy file's): a
    scenario's relative runbook path means the same from any working directory (docs/chaos.md)."""
    if not isinstance(over, dict) or "include_runbooks" not in over:
        return over or {}
    paths = over["include_runbooks"]
    paths = [paths] if isinstance(paths, str) else paths
    if not isinstance(paths, list) or folder is None:
        return over  # the schema words a wrong type
    return {**over, "include_runbooks": [str(folder / p) if isinstance(p, str) and not Path(p).is_absolute() else p
                                         for p in paths]}


def in_force(policy, origin: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """The rules in force, one per finding kind (and per label set): a policy's first, then the defaults."""
    from healer.core.rules import DEFAULT_RULES  # lazy: healer.core pulls the planner (networkx): 60 ms of `gameday validate`

    origin = origin or {}
    out: list[dict[str, Any]] = []
    seen: set[tuple] = set()
    for r in policy.rules:
        key = (r.when, tuple(sorted(r.labels)))
        if key not in seen:
            seen.add(key)
            out.append({"id": r.id, "when": r.when, "labels": list(r.labels), "from": origin.get(id(r), "policy"),
                        "do": list(r.do), "escalate_after": r.escalate_after})
    for r in DEFAULT_RULES:
        if (r.when, ()) not in seen:
            out.append({"id": r.id, "when": r.when, "labels": [], "from": "default", "do": list(r.do),
                        "escalate_after": r.escalate_after})
    return out


def fleet_policy(fleet: FleetSpec) -> dict[str, Any]:
    """The policy part of a scenario's `fleet:` (see FLEET_KEYS)."""
    return {"fleet": {"pool_size": fleet.pool_size}} if fleet.pool_size is not None else {}


def apply_disable(merged: dict[str, Any], disable: dict[str, Any]) -> dict[str, Any]:
    """The disabled policy: `actions_off` leave the whitelist, `rules` go first, the rest is deep-merged."""
    over = {k: v for k, v in disable.items() if k not in ("switches_off", "actions_off", "rules")}
    out = deep_merge(merged, over)
    if disable.get("rules"):
        out["rules"] = [*copy.deepcopy(disable["rules"]), *out.get("rules", [])]
    off = set(disable.get("actions_off", []))
    if off:
        rem = out.setdefault("remediation", {})
        rem["allowed"] = [a for a in rem.get("allowed", []) if a not in off]
    return out


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def parse_override(text: str) -> dict[str, Any]:
    """`retry.max_launches=9` -> {"retry": {"max_launches": 9}} (value read as YAML)."""
    if "=" not in text:
        raise InvalidInput(f"--override {text!r}: expected key.path=value")
    key, raw = text.split("=", 1)
    if not key.strip():
        raise InvalidInput(f"--override {text!r}: expected key.path=value")
    try:
        value = load_one(raw).data
    except YamlProblem:
        value = raw
    out: dict[str, Any] = {}
    cur = out
    parts = key.strip().split(".")
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value
    return out


def load(path: str | Path) -> Scenario:
    """Read and validate a scenario file: every problem is one `FILE:LINE:COL: key: expected …, got …` line
    (InvalidInput, exit 65); doubtful event kinds become `sc.warnings` (same shape, with a "did you mean")."""
    p = Path(path)
    src = str(path)
    try:
        with reading(path, "scenario file"):
            located = load_path(p)
    except YamlProblem as yp:
        raise InvalidInput(_line(src, yp.problem), [_line(src, yp.problem)]) from None
    data, marks = located.data, located.marks
    if not isinstance(data, dict):
        prob = Problem(1, 1, "(top)", "expected a mapping (name, mode, fleet, faults, expect, ...), got "
                       + ("an empty document" if data is None else type(data).__name__))
        raise InvalidInput(_line(src, prob), [_line(src, prob)])
    probs = problems_for(data, marks, Scenario)
    if not probs:
        sc = Scenario.model_validate(data)
        sc.source = str(p)
        probs = _semantic(sc, marks)
    if probs:
        lines = [_line(src, x) for x in sorted(probs, key=lambda x: (x.line, x.col))]
        raise InvalidInput(lines[0], lines)
    sc.warnings = [_line(src, w) for w in _warnings(sc, marks)]
    return sc


def _line(source: str, p: Problem) -> str:
    return f"{source}:{p.line}:{p.col}: {p.path}: {p.message}"


def _under(marks: dict, prefix: tuple) -> dict:
    return {k[len(prefix):]: v for k, v in marks.items() if k[:len(prefix)] == prefix}


def _semantic(sc: Scenario, marks: dict) -> list[Problem]:
    """What the models cannot see alone: the policy the overrides make (located in the scenario), failpoints."""
    out: list[Problem] = []
    try:
        merged = sc._merged(None, False)
    except InvalidInput as e:  # the named policy file itself is bad
        line, col = mark_for(marks, ("policy",))
        return [Problem(line, col, "policy", e.lines[0] if e.lines else str(e))]
    where = ("overrides",) if sc.overrides else ("policy",)
    for pr in problems_for(merged, {**_under(marks, ("policy",)), **_under(marks, ("overrides",))}, Policy):
        out.append(Problem(pr.line, pr.col, f"{where[0]}.{pr.path}", pr.message))
    if not out:
        out += _runbook_problems(sc, merged, marks)
    if not out and sc.disable:
        dmarks = _under(marks, ("disable",))
        for pr in problems_for(sc._merged(None, True), dmarks, Policy):
            line, col = (pr.line, pr.col) if dmarks else mark_for(marks, ("disable",))
            out.append(Problem(line, col, f"disable.{pr.path}", pr.message))
    named = [(i, f) for i, f in enumerate(sc.faults) if f.failpoint]
    if named:
        failpoints.load_all()
        names = [d.name for d in failpoints.registry()]
        for i, f in named:
            if not any(match(f.failpoint, n) for n in names):
                line, col = mark_for(marks, ("faults", i, "failpoint"))
                out.append(Problem(line, col, f"faults[{i}].failpoint", f"expected a failpoint name or glob that "
                                   f"`healer failpoints` lists, got {f.failpoint!r}{did_you_mean(f.failpoint, names)}"))
    return out + _missed_targets(sc, marks)


def _runbook_problems(sc: Scenario, merged: dict[str, Any], marks: dict) -> list[Problem]:
    """A runbook the scenario names that is missing or invalid fails validate (65) as it fails a fleet's policy:
    located at the scenario's `include_runbooks`, saying the runbook's own located line."""
    if not merged.get("include_runbooks"):
        return []
    for key in (("overrides", "include_runbooks"), ("policy", "include_runbooks"), ("policy",)):
        if any(k[:len(key)] == key for k in marks):
            break
    try:
        policy_with_runbooks(Policy.model_validate(merged), None)
    except InvalidInput as e:
        line, col = mark_for(marks, key)
        return [Problem(line, col, ".".join(key), f"expected runbooks that load, got: {x}") for x in (e.lines or [str(e)])]
    return []


def _missed_targets(sc: Scenario, marks: dict) -> list[Problem]:
    """A fault aimed at tickets the scenario never makes would do nothing, and the game day pass without its
    chaos: a located problem. Not checked where the tickets are not the scenario's to know (a storm, or no
    fleet.tickets: a game day for `--root`, against a fleet of yours)."""
    if sc.storm is not None or sc.hosts is not None or not (sc.fleet.tickets or sc.fleet.random_tickets):
        return []
    ids = [t for spec in sc.fleet.tickets for t in spec.ids()] + [f"R-{i + 1}" for i in range(sc.fleet.random_tickets)]
    out = []
    for i, f in enumerate(sc.faults):
        spec = faults.FAULTS.get(f.fault)
        if f.target is None or spec is None or "target" not in spec.uses or f.target in spec.other_targets:
            continue
        if not any(match(f.target, t) for t in ids):
            line, col = mark_for(marks, ("faults", i, "target"))
            few = ", ".join(ids[:5]) + (f", … ({len(ids)} in all)" if len(ids) > 5 else "")
            out.append(Problem(line, col, f"faults[{i}].target", f"expected a ticket of the fleet ({few}) or a glob "
                               f"matching one, got {f.target!r}{did_you_mean(f.target, ids)}"))
    return out


def _warnings(sc: Scenario, marks: dict) -> list[Problem]:
    known = known_event_kinds()
    out: list[Problem] = []
    for section, checks in (("expect", sc.expect), ("incident", sc.incident)):
        for i, c in enumerate(checks):
            for path, sel in c.selectors():
                for kind in sel.kinds():
                    if any(match(kind, k) for k in known):
                        continue
                    loc = (section, i, *path)
                    line, col = mark_for(marks, loc)
                    out.append(Problem(line, col, f"{section}[{i}].{'.'.join(path)}",
                                       f"warning: no event of kind {kind!r} is ever written{did_you_mean(kind, known)}"))
                out += _impossible_payload(sel, (section, i, *path[:-1]), marks)
    return out


def _impossible_payload(sel, loc: tuple, marks: dict) -> list[Problem]:
    """A payload key no writer of the selected kinds ever gives (chaos/event_catalogue.py) can never match: the
    checker would pass or fail for a reason that is not the one it names."""
    if not sel.payload:
        return []
    out = []
    for key, known in event_catalogue.impossible(sel.kinds(), sel.payload):
        line, col = mark_for(marks, (*loc, "payload", key))
        kinds = " or ".join(repr(k) for k in sel.kinds())
        out.append(Problem(line, col, ".".join(str(x) if isinstance(x, str) else f"[{x}]" for x in (*loc, "payload", key))
                           .replace(".[", "["),
                           f"warning: no {kinds} event ever carries payload key {key!r}, so this can never match "
                           f"(its writers give: {', '.join(sorted(known)) or 'no payload'}){did_you_mean(key, known)}"))
    return out


_KIND = re.compile(r"""["']((?:ticket|dispatch|supervisor|intent|remedy|lease|notify|proposal|repair|quarantine|chaos|main|"""
                   r"""agent|worktree|loop|fleet|human|watch|store|container|gameday|label|clock|attempt|adopt)\.[a-z_]+(?:\.[a-z_]+)?)["']""")
_known_kinds: list[str] | None = None


def known_event_kinds() -> list[str]:
    """Every event kind healer or the game days write, read off the source (string literals shaped like kinds),
    plus the families written by formatting (`intent.{state}`, `proposal.{state}`, `remedy.{status}`)."""
    global _known_kinds
    if _known_kinds is None:
        root = Path(__file__).resolve().parents[1]
        found: set[str] = set()
        for pkg in ("healer", "chaos"):
            for f in (root / pkg).rglob("*.py"):
                found.update(_KIND.findall(f.read_text(errors="replace")))
        found |= {f"intent.{s}" for s in ("planned", "begun", "done", "aborted")}
        found |= {f"proposal.{s}" for s in ("open", "merged", "rejected")}
        found |= {f"remedy.{s}" for s in ("done", "aborted", "refused", "failed", "skipped")}
        _known_kinds = sorted(found)
    return _known_kinds


def discover(paths: list[str | Path] | None = None) -> list[Path]:
    """Scenario files from files and folders (a folder: its *.yaml, sorted)."""
    out: list[Path] = []
    for raw in paths or [SCENARIO_DIR]:
        p = Path(raw)
        if not p.exists() and not p.is_absolute() and (SCENARIO_DIR.parents[1] / p).exists():
            p = SCENARIO_DIR.parents[1] / p  # `chaos/scenarios[/x.yaml]` as the docs write it, from any folder
        if p.is_dir():
            out += sorted(list(p.glob("*.yaml")) + list(p.glob("*.yml")))
        elif p.exists():
            out.append(p)
        else:
            named = SCENARIO_DIR / f"{p.name}.yaml"
            long = SCENARIO_DIR / "campaigns" / f"{p.name}.yaml"  # long campaigns: run by name, not in the standard suite
            mine = ROOT_DIR / f"{p.name}.yaml"  # game days for your fleet: by name, with --root
            if named.exists():
                out.append(named)
            elif long.exists():
                out.append(long)
            elif mine.exists():
                out.append(mine)
            else:
                names = sorted({q.stem for q in SCENARIO_DIR.glob("*.yaml")} |
                               {q.stem for q in (SCENARIO_DIR / "campaigns").glob("*.yaml")} |
                               {q.stem for q in ROOT_DIR.glob("*.yaml")})
                raise InvalidInput(f"{raw}: no such scenario file or folder{did_you_mean(p.stem, names)}")
    return out


def match(pattern: str | None, value: str) -> bool:
    return pattern is None or pattern == value or fnmatch.fnmatchcase(value, pattern)


def seconds(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) else durations.parse(str(v))


SKELETON = """\
# A game day: break the fleet on purpose, then check from the event log that healer healed it.
# Format: docs/chaos.md. Check it with `healer gameday validate {name}.yaml`, run it with
# `healer gameday run {name}.yaml`, and prove it can fail with `healer gameday run --disable {name}.yaml`.
name: {name}
description: |
  What incident this reproduces, and what healer must do about it.
exercises: the healer feature it proves
mode: simulated          # or real (real processes, thresholds in seconds)
seed: 1
duration: 2h             # virtual time (simulated); a cap in real seconds (real)
overrides:               # deep-merged on the default policy (validated as a policy)
  remediation: {{quiet_period: 5m}}
disable:                 # switches off ONLY the feature exercised: a policy override, and/or
  actions_off: [drop_label]          # remediation actions taken off the whitelist
  # switches_off: [intent_recovery]  # product switches (`healer gameday list --switches`)
disable_breaks:          # exactly the expectations the disabled run must break
  - every label dropped
fleet:
  pool_size: 2
  tickets:
    - {{id: S-, count: 3, state: queued, labels: {{to-review: 3h}}, age: 3h, behaviour: succeeds, params: {{duration: 10m}}}}
faults: []               # e.g. - {{at: 30m, fault: kill_agent, target: S-1}}  (docs/chaos.md lists them)
expect:
  - name: every label dropped
    labels: {{match: "S-*", label: to-review, present: false}}
  - invariant: intents_settled
"""


def skeleton(name: str) -> str:
    return SKELETON.format(name=name)
