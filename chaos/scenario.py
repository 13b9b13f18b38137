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
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from healer import durations
from healer.errors import InvalidInput
from healer.policy.load import load_policy, validate_text
from healer.policy.schema import Duration, Policy

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


FaultKind = Literal[
    "kill_supervisor", "stop_supervisor", "continue_supervisor",
    "kill_dispatcher", "stop_dispatcher", "continue_dispatcher",
    "kill_agent", "stop_agent", "continue_agent",
    "hung_agent", "alert_flood", "broken_proposal", "frozen_dispatch", "thaw_dispatch",
    "stale_labels", "orphan_worktree", "unknown_files", "red_main", "green_main",
    "delete_worktree", "zombie_ticket", "same_commit_repush", "index_lock", "clock_jump",
    "failpoint", "busy_worktree", "release_worktree",
    # real mode, Docker (chaos/faults/containers.py): target a ticket glob, params {name, label, signal, timeout}
    "container_kill", "container_pause", "container_unpause", "container_stop", "container_restart",
    # any world (chaos/faults/command.py): params {command: argv, undo: argv, cwd, timeout}; the undo is journaled first
    "command",
]
FAULTS = FaultKind.__args__  # type: ignore[attr-defined]


class Fault(Strict):
    fault: FaultKind
    at: Duration | None = Field(None, description="time after the start (simulated or real seconds)")
    on_event: str | None = Field(None, description="fire at the Nth event of this kind (see `nth`)")
    subject: str | None = Field(None, description="with on_event: only events about this subject (glob)")
    nth: int = Field(1, ge=1)
    failpoint: str | None = Field(None, description="with fault: failpoint — the failpoint name, or a glob (remedy.*) to run once per matching point")
    hit: int = Field(1, ge=1, description="with failpoint: act at this hit")
    action: str = Field("kill", description="with failpoint: kill | raise | stop | exit(N)")
    target: str | None = Field(None, description="ticket id (or glob), process role, or path the fault aims at")
    count: int = Field(1, ge=1, description="how many (alerts, labels, files…)")
    seconds: Duration | None = Field(None, description="clock jump size, hang length…")
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _when(self) -> Fault:
        whens = [w for w in (self.at is not None, self.on_event is not None, self.fault == "failpoint") if w]
        if self.fault == "failpoint" and not self.failpoint:
            raise ValueError("expected a failpoint name for fault: failpoint @failpoint")
        if len(whens) == 0:
            raise ValueError("expected one of 'at', 'on_event' (or fault: failpoint), got neither @at")
        if self.at is not None and self.on_event is not None:
            raise ValueError("expected one of 'at' or 'on_event', got both @on_event")
        return self


class TicketSpec(Strict):
    id: str | None = Field(None, description="a ticket id; with count > 1 the id is a prefix: T-1 … T-N")
    count: int = Field(1, ge=1)
    title: str = "scenario ticket"
    state: Literal["queued", "in_progress", "review", "done", "blocked", "needs_human", "closed"] = "queued"
    priority: int = 2
    labels: dict[str, Duration] = Field(default_factory=dict, description="label -> its age at the start")
    blocked_by: list[str] = Field(default_factory=list)
    behaviour: str = Field("succeeds", description="scripted agent behaviour (chaos/agents/behaviours.py)")
    params: dict[str, Any] = Field(default_factory=dict, description="behaviour parameters")
    agent: Literal["none", "live", "dead"] = Field("none", description="an in_progress ticket's agent at the start")
    worktree: bool = Field(True, description="an in_progress ticket has a worktree at the start")
    merged: bool = Field(False, description="its work is already on main (a zombie if not done)")
    age: Duration = Field("0s", description="how long ago it was created / last updated")
    cycle: bool = Field(False, description="with count > 1: each blocked_by the next, last by the first (a wait-for cycle)")

    def ids(self) -> list[str]:
        base = self.id or "T"
        if self.count == 1:
            return [base]
        return [f"{base}{i}" for i in range(1, self.count + 1)]


class FleetSpec(Strict):
    pool_size: int | None = Field(None, ge=1)
    tickets: list[TicketSpec] = Field(default_factory=list)
    random_tickets: int = Field(0, ge=0, description="extra tickets with random behaviours drawn from the seed")
    main: Literal["green", "red"] = "green"
    files: dict[str, str] = Field(default_factory=dict, description="user files in the fleet root: path -> text")


class Checker(Strict):
    """One expectation. Exactly one checker key besides `name`."""

    name: str | None = None
    ticket_states: dict[str, list[str]] | None = None
    tickets: dict[str, Any] | None = None
    count: dict[str, Any] | None = None
    event: dict[str, Any] | None = None
    never: dict[str, Any] | None = None
    never_after: dict[str, Any] | None = None
    invariant: str | None = None
    notifications: dict[str, Any] | None = None
    within: dict[str, Any] | None = None
    gaps: dict[str, Any] | None = None
    labels: dict[str, Any] | None = None
    files: dict[str, Any] | None = None
    state: dict[str, Any] | None = None
    command: dict[str, Any] | None = None  # a probe run after the game day: {run: argv, status: 0, stdout_contains: TEXT}

    @model_validator(mode="after")
    def _one(self) -> Checker:
        keys = self.keys()
        if len(keys) != 1:
            known = ", ".join(k for k in type(self).model_fields if k != "name")
            got = ", ".join(keys) or "none"
            raise ValueError(f"expected exactly one checker ({known}), got {got}")
        return self

    def keys(self) -> list[str]:
        return [k for k in type(self).model_fields if k != "name" and getattr(self, k) is not None]

    @property
    def kind(self) -> str:
        return self.keys()[0]

    @property
    def spec(self) -> Any:
        return getattr(self, self.kind)

    @property
    def title(self) -> str:
        if self.name:
            return self.name
        spec = self.spec
        if isinstance(spec, dict):
            inner = ", ".join(f"{k}={v}" for k, v in spec.items())
            return f"{self.kind}({inner})"
        return f"{self.kind}({spec})"


class RealSpec(Strict):
    """How the real engine (chaos/engine/real.py) runs the fleet; ignored in simulated mode."""

    supervisor: Literal["once", "none"] = Field("once", description="a real `healer supervise --once` child per tick, or none")
    dispatcher: Literal["auto", "daemon", "none"] = Field(
        "auto", description="a real `healer dispatch` daemon child (auto: when a ticket starts queued)")
    until: dict[str, Any] | None = Field(None, description="settle only once this event happened ({kind, subject, payload})")
    until_within: Duration | None = Field(None, description="stop waiting at this time if `until` has not happened: "
                                                           "the story has already deviated (a disabled run ends sooner)")
    settle_ticks: int = Field(1, ge=1, description="end after this many supervisor ticks that changed nothing, once no "
                                                   "fault is pending and no agent runs (the duration is the cap)")
    pidfiles: list[str] = Field(default_factory=list, description="files (in the game-day folder) listing pids that must "
                                                                  "all be dead at the end; each pid becomes a chaos.pid event")
    outside: dict[str, str] = Field(default_factory=dict, description="files outside the fleet (in the game-day folder) "
                                                                      "that nothing may touch: path -> text")
    symlinks: dict[str, str] = Field(default_factory=dict, description="fleet-relative symlink -> target "
                                                                       "({gameday_dir} allowed)")


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
    disable: dict[str, Any] = Field(default_factory=dict, description="override that switches off the exercised feature")
    fleet: FleetSpec = Field(default_factory=FleetSpec)
    faults: list[Fault] = Field(default_factory=list)
    expect: list[Checker] = Field(min_length=1)
    timeout: Duration = Field("120s", description="real mode: wall-clock cap on the whole scenario")
    real: RealSpec = Field(default_factory=RealSpec, description="real mode: which real processes run, when it ends")

    # set by load(), not part of the YAML
    source: str = Field("", exclude=True)

    def effective_policy(self, extra: dict[str, Any] | None = None, disabled: bool = False) -> Policy:
        base: dict[str, Any] = {}
        if isinstance(self.policy, str):
            p = Path(self.policy)
            if not p.is_absolute() and self.source:
                cand = Path(self.source).parent / p
                p = cand if cand.exists() else p
            base = load_policy(p).model_dump(mode="json", by_alias=True)
        elif isinstance(self.policy, dict):
            base = deep_merge(Policy().model_dump(mode="json", by_alias=True), self.policy)
        else:
            base = Policy().model_dump(mode="json", by_alias=True)
        merged = deep_merge(base, self.overrides)
        if disabled:
            merged = deep_merge(merged, self.disable)
        if extra:
            merged = deep_merge(merged, extra)
        text = yaml.safe_dump(merged, sort_keys=False)
        where = f"{self.source or self.name} (effective policy)"
        return validate_text(text, where, model=Policy)


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
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = raw
    out: dict[str, Any] = {}
    cur = out
    parts = key.strip().split(".")
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value
    return out


def load(path: str | Path) -> Scenario:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such scenario file") from None
    except IsADirectoryError:
        raise InvalidInput(f"{path}: is a directory, expected a scenario file") from None
    sc = validate_text(raw, str(path), model=Scenario)
    sc.source = str(p)
    for f in sc.faults:
        if f.failpoint and not f.failpoint.replace("*", "x").replace(".", "").replace("_", "").isalnum():
            raise InvalidInput(f"{path}: faults: failpoint {f.failpoint!r} is not a failpoint name")
    sc.effective_policy()  # a bad override is a scenario error, reported now
    return sc


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
            if named.exists():
                out.append(named)
            else:
                raise InvalidInput(f"{raw}: no such scenario file or folder")
    return out


def match(pattern: str | None, value: str) -> bool:
    return pattern is None or pattern == value or fnmatch.fnmatchcase(value, pattern)


def seconds(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) else durations.parse(str(v))
