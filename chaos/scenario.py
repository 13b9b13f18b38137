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

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from chaos.faults import registry as faults
from chaos.faults.registry import check_param, did_you_mean
from healer import durations
from healer.errors import InvalidInput
from healer.policy.load import load_policy, problems_for
from healer.policy.schema import Duration, Policy
from healer.policy.yamlpos import Problem, YamlProblem, load_one, mark_for, read_text

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


# the fault names and each fault's params (their types, the required ones) are the fault registry's records
# (chaos/faults/registry.py): a fault registered there is a scenario's from then on, with no list here to update
# behaviour -> its params (chaos/agents/behaviours.py); real mode also takes fleet_agent's outcome lists
BEHAVIOUR_PARAMS: dict[str, dict[str, str]] = {
    "succeeds": {"duration": "duration"},
    "fails_same_commit": {"duration": "duration", "signature": "str"},
    "fails": {"duration": "duration"},
    "dies": {"after": "duration", "commit": "bool", "deaths": "int", "duration": "duration"},
    "hangs": {"after": "duration"},
    "broken_proposal": {"duration": "duration"},
    "noop": {"duration": "duration"},
    "cannot_start": {"error": "str", "times": "int", "duration": "duration"},  # simulated mode only
    "merge_stalls": {"duration": "duration"},  # simulated mode only
    "random": {},
}
REAL_OUTCOMES = ("success", "fail", "die", "hang", "noop", "broken", "stall", "budget", "diskfull", "die+commit",
                 "hang+commit")


class Fault(Strict):
    fault: str = Field(description="a fault of the registry (chaos/faults/registry.py; `healer gameday list --faults`)")
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
    params: dict[str, Any] = Field(default_factory=dict, description="per fault: its FaultSpec's params")
    pick: int | None = Field(None, ge=1, description="aim at this many of the tickets `target` matches, drawn from the seed "
                                                    "(one fault per picked ticket)")
    jitter: Duration | None = Field(None, description="with at: fire at `at` plus a delay drawn from the seed in [0, jitter]")

    @field_validator("fault")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in faults.FAULTS:
            raise ValueError(f"expected a fault of the registry ({', '.join(faults.FAULTS)}), got {v!r}"
                             f"{did_you_mean(v, faults.FAULTS)}")
        return v

    @model_validator(mode="after")
    def _when(self) -> Fault:
        self.params.update(faults.FAULTS[self.fault].check(self.params))
        whens = [w for w in (self.at is not None, self.on_event is not None, self.fault == "failpoint") if w]
        if self.fault == "failpoint" and not self.failpoint:
            raise ValueError("expected a failpoint name for fault: failpoint @failpoint")
        if len(whens) == 0:
            raise ValueError("expected one of 'at', 'on_event' (or fault: failpoint), got neither @at")
        if self.at is not None and self.on_event is not None:
            raise ValueError("expected one of 'at' or 'on_event', got both @on_event")
        if self.jitter is not None and self.at is None:
            raise ValueError("expected 'at' with 'jitter' (a delay added to a timed fault), got no 'at' @jitter")
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

    @model_validator(mode="after")
    def _behaviour(self) -> TicketSpec:
        names = [n.strip() for n in self.behaviour.split(",")]
        if len(names) == 1 and names[0] in BEHAVIOUR_PARAMS:
            known = BEHAVIOUR_PARAMS[names[0]]
            for k, v in list(self.params.items()):
                if k not in known:
                    raise ValueError(f"expected a parameter of {names[0]} ({', '.join(known) or 'none'}), got {k!r}"
                                     f"{did_you_mean(k, known)} @params")
                try:
                    self.params[k] = check_param(known[k], v)
                except ValueError as e:
                    raise ValueError(f"expected a valid params.{k}: {e} @params") from None
            return self
        bad = [n for n in names if n not in REAL_OUTCOMES]
        if bad:
            every = (*BEHAVIOUR_PARAMS, *REAL_OUTCOMES)
            raise ValueError(f"expected a behaviour ({', '.join(BEHAVIOUR_PARAMS)}; in real mode also a list of "
                             f"{', '.join(REAL_OUTCOMES)}), got {bad[0]!r}{did_you_mean(bad[0], every)} @behaviour")
        return self

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
    standby_supervisor: bool = Field(False, description="simulated mode: a second supervisor on another host ticks beside "
                                                        "the leader; it cannot see the leader's pid, so it takes over only "
                                                        "once the lease expires")


# -- checkers: one strict model each, so a misspelt key is a located error, not a check that counts everything
TicketState = Literal["queued", "in_progress", "review", "done", "blocked", "needs_human", "closed"]
INVARIANT_NAMES = ("one_live_agent_per_ticket", "no_user_file_deleted", "intents_settled", "one_lease_holder",
                   "notifications_within_quota", "no_leftovers", "no_corpse", "never_merged_broken", "no_double_effect")
InvariantName = Literal[INVARIANT_NAMES]  # type: ignore[valid-type]
# what `state:` can look at (the engines' observations of the final world)
STATE_KEYS = ("dispatch_paused", "ticks", "failpoints_left", "failpoints_missed", "failpoints_fired", "outside_unchanged",
              "unregistered_worktrees", "git_worktrees", "main",
              "containers_paused", "containers_left",  # the real engine with the container runtime (chaos/engine/real.py)
              # the restart storm's facts (chaos/storm.py)
              "merged_twice", "never_merged", "unmerged_done", "off_board_merges", "escalations", "left", "integrity",
              "tracebacks",
              # the multi-host PostgreSQL game day's facts (chaos/pgday.py)
              "up_exits", "pages", "shared_main")


class Events(Strict):
    """Which events: a kind glob, a subject glob, payload values that must match."""

    kind: str | list[str] = Field(description="event kind, a glob (dispatch.*), or a list of them (any matches)")
    subject: str | None = Field(None, description="event subject, a glob (T-*)")
    payload: dict[str, Any] | None = Field(None, description="payload values that must match (nested mappings "
                                                             "key by key, strings as globs)")

    @model_validator(mode="after")
    def _kinds(self) -> Events:
        if not self.kind or (isinstance(self.kind, list) and not all(isinstance(k, str) and k for k in self.kind)):
            raise ValueError("expected an event kind (a glob) or a non-empty list of them @kind")
        return self

    def kinds(self) -> list[str]:
        return list(self.kind) if isinstance(self.kind, list) else [self.kind]


class _Bounded(Strict):
    min: int | None = Field(None, ge=0)
    max: int | None = Field(None, ge=0)
    equals: int | None = Field(None, ge=0)


class CountSpec(Events, _Bounded):
    per_tick: bool = Field(False, description="the bounds hold for each supervisor tick's events (those up to its "
                                              "supervisor.tick event), not the whole run's: a blast radius")

    @model_validator(mode="after")
    def _bounded(self) -> CountSpec:
        if self.min is None and self.max is None and self.equals is None:
            raise ValueError("expected a bound (min, max or equals), got none: the check would hold whatever happened")
        return self


class EventSpec(Events, _Bounded):
    pass


class NeverSpec(Events):
    pass


class NeverAfterSpec(Strict):
    after: Events
    never: Events
    until: Events | None = None


class WithinSpec(Events):
    after: Events | None = Field(None, description="the anchor (default: the start)")
    max: Duration | None = None
    min: Duration | None = None

    @model_validator(mode="after")
    def _bounded(self) -> WithinSpec:
        if self.max is None and self.min is None:
            raise ValueError("expected max or min (a duration), got neither @max")
        return self


class GapsSpec(Events):
    min: list[Duration] = Field(default_factory=list, description="the i-th gap is at least min[i] (the last repeats)")
    max: list[Duration] = Field(default_factory=list, description="the i-th gap is at most max[i] (the last repeats)")
    require: bool = Field(True, description="fail when there are fewer than two events")

    @model_validator(mode="after")
    def _bounded(self) -> GapsSpec:
        if not self.min and not self.max:
            raise ValueError("expected min or max (a list of durations), got neither @min")
        return self


class TicketsSpec(_Bounded):
    match: str | None = None
    state: TicketState | list[TicketState] | None = None
    not_state: TicketState | list[TicketState] | None = None


class LabelsSpec(_Bounded):
    match: str | None = None
    label: str = Field(min_length=1)
    present: bool | None = None


class NotificationsSpec(_Bounded):
    key: str | None = Field(None, description="notification key, a glob")
    window: Duration = Field(description="the window, stated by the scenario (never the policy's own cooldown: "
                                         "the check must fail when the cooldown is what is broken)")
    max_per_window: int = Field(1, ge=1)
    across_keys: bool = Field(False, description="count every key the glob matches together (one page per condition)")


class FilesSpec(Strict):
    absent: list[str] = Field(default_factory=list)
    present: list[str] = Field(default_factory=list)
    quarantined: int | None = Field(None, ge=0, description="at least this many files in quarantine")
    restorable: bool = False


class Checker(Strict):
    """One expectation. Exactly one checker key besides `name`."""

    name: str | None = None
    ticket_states: dict[str, list[TicketState]] | None = None
    tickets: TicketsSpec | None = None
    count: CountSpec | None = None
    event: EventSpec | None = None
    never: NeverSpec | None = None
    never_after: NeverAfterSpec | None = None
    invariant: InvariantName | None = None  # type: ignore[valid-type]
    notifications: NotificationsSpec | None = None
    within: WithinSpec | None = None
    gaps: GapsSpec | None = None
    labels: LabelsSpec | None = None
    files: FilesSpec | None = None
    state: dict[str, Any] | None = None
    command: dict[str, Any] | None = None  # a probe run after the game day: {run: argv, status: 0, stdout_contains: TEXT}

    @model_validator(mode="after")
    def _one(self) -> Checker:
        keys = self.keys()
        if len(keys) != 1:
            known = ", ".join(k for k in type(self).model_fields if k != "name")
            got = ", ".join(keys) or "none"
            raise ValueError(f"expected exactly one checker ({known}), got {got}")
        if self.ticket_states is not None:
            for k, v in self.ticket_states.items():
                if not v:
                    raise ValueError(f"expected a path of at least one state for {k}, got an empty list @ticket_states")
        if self.command is not None:
            bad = [k for k in self.command if k not in ("run", "status", "stdout_contains", "cwd", "timeout")]
            if "run" not in self.command or bad:
                raise ValueError("expected command: {run: argv, status, stdout_contains, cwd, timeout}, got "
                                 f"{bad[0] if bad else 'no run'!r} @command")
        if self.state is not None:
            bad = [k for k in self.state if k not in STATE_KEYS]
            if bad:
                raise ValueError(f"expected a known state key ({', '.join(STATE_KEYS)}), got {bad[0]!r}{did_you_mean(bad[0], STATE_KEYS)} @state")
        return self

    def keys(self) -> list[str]:
        return [k for k in type(self).model_fields if k != "name" and getattr(self, k) is not None]

    @property
    def kind(self) -> str:
        return self.keys()[0]

    @property
    def spec(self) -> Any:
        v = getattr(self, self.kind)
        return v.model_dump(exclude_none=True) if isinstance(v, BaseModel) else v

    @property
    def title(self) -> str:
        if self.name:
            return self.name
        spec = self.spec
        if isinstance(spec, dict):
            inner = ", ".join(f"{k}={v}" for k, v in spec.items())
            return f"{self.kind}({inner})"
        return f"{self.kind}({spec})"

    def selectors(self) -> list[tuple[tuple, Events]]:
        """(path inside the checker, event selector) of every event kind it names: for the unknown-kind warning."""
        v = getattr(self, self.kind)
        out: list[tuple[tuple, Events]] = []
        if isinstance(v, Events):
            out.append(((self.kind, "kind"), v))
        for sub in ("after", "never", "until"):
            s = getattr(v, sub, None)
            if isinstance(s, Events):
                out.append(((self.kind, sub, "kind"), s))
        return out


class RealSpec(Strict):
    """How the real engine (chaos/engine/real.py) runs the fleet; ignored in simulated mode."""

    supervisor: Literal["once", "none"] = Field("once", description="a real `healer supervise --once` child per tick, or none")
    dispatcher: Literal["auto", "daemon", "none"] = Field(
        "auto", description="a real `healer dispatch` daemon child (auto: when a ticket starts queued)")
    until: dict[str, Any] | None = Field(None, description="settle only once this event happened ({kind, subject, payload})")
    until_within: Duration | None = Field(None, description="stop waiting at this time if `until` has not happened: "
                                                           "the story has already deviated (a disabled run ends sooner)")
    disabled_within: Duration | None = Field(
        None, description="a disabled run (--disable) stops waiting for `until` at this time instead of `until_within`: "
                          "what it must show is something that never comes, and waiting the pass run's whole margin "
                          "for it proves nothing more")
    settle_ticks: int = Field(1, ge=1, description="end after this many supervisor ticks that changed nothing, once no "
                                                   "fault is pending and no agent runs (the duration is the cap)")
    pidfiles: list[str] = Field(default_factory=list, description="files (in the game-day folder) listing pids that must "
                                                                  "all be dead at the end; each pid becomes a chaos.pid event")
    outside: dict[str, str] = Field(default_factory=dict, description="files outside the fleet (in the game-day folder) "
                                                                      "that nothing may touch: path -> text")
    model: str | None = Field(None, description="a scripted model (chaos/agents/models/scripts.py) served on "
                                                "127.0.0.1 for the run; the claude and codex presets use it (issue 32)")
    symlinks: dict[str, str] = Field(default_factory=dict, description="fleet-relative symlink -> target "
                                                                       "({gameday_dir} allowed)")


class StormSpec(Strict):
    """A restart storm: a fleet whose `healer up` is killed again and again, then left to finish. Real mode: a real
    fleet, `up` SIGKILLed (chaos/storm.py); simulated: the same in virtual time (chaos/engine/simstorm.py)."""

    tickets: int = Field(30, ge=1)
    kills: int = Field(20, ge=0, description="how many times `healer up` is SIGKILLed, each time restarted")
    with_runners: float = Field(0.5, ge=0, le=1, description="share of the kills that take the loop runners down too "
                                                             "(a host crash); 1: every kill does")
    pool_size: int = Field(4, ge=1)
    agent_delay: Duration = Field("1s", description="each agent run takes this long, so kills land mid-flight")
    uptime: list[Duration] = Field(default_factory=lambda: ["200ms", "3s"],
                                   description="[min, max]: how long `up` runs (once up) before each kill, drawn from the seed")
    finish_within: Duration = Field("5m", description="after the last restart, the cap (wall clock; simulated: virtual) "
                                                      "for every ticket to end")
    mid_step: float = Field(0.5, ge=0, le=1, description="simulated: share of the kills that land inside a step, at a "
                                                         "random store commit of the dispatcher or the supervisor")
    downtime: Duration = Field("5s", description="simulated: how long `up` stays down before its restart")


class HostsSpec(Strict):
    """A multi-host game day on PostgreSQL (chaos/pgday.py): a throwaway PostgreSQL server, `count` real `healer up`
    hosts on one board and one shared repository, the runner their service manager; the scenario's timed faults
    (`pg_restart`...) hit them while `tickets` tickets are worked."""

    count: int = Field(2, ge=1, le=4, description="how many hosts (each a real `healer up`)")
    tickets: int = Field(8, ge=1)
    lease_ttl: Duration = Field("3s", description="the supervisor lease ttl (hosts are lost after twice that)")
    agent_delay: Duration = Field("1s", description="each agent run takes this long")
    finish_within: Duration = Field("5m", description="the cap (wall clock) for every ticket to end")
    failpoints: str = Field("", description="HEALER_FAILPOINTS of every host's `healer up` (e.g. "
                            "`dispatch.merge_recorded=stop@1`: each host stops itself inside its first merge's store "
                            "transaction, where a `pg_kill_mid_merge` fault finds it)")


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

    # set by load(), not part of the YAML
    source: str = Field("", exclude=True)
    warnings: list[str] = Field(default_factory=list, exclude=True)

    @model_validator(mode="after")
    def _hosts(self) -> Scenario:
        if self.hosts is not None and (self.mode != "real" or self.storm is not None):
            raise ValueError("expected mode: real and no storm: with hosts: (real `healer up` hosts on PostgreSQL) @hosts")
        return self

    @model_validator(mode="after")
    def _disable(self) -> Scenario:
        from healer.policy.schema import ACTIONS
        from healer.switches import SWITCHES

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
        reds = self.fleet.main == "red" or any(f.fault == "red_main" for f in self.faults)
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

    def _merged(self, extra: dict[str, Any] | None, disabled: bool) -> dict[str, Any]:
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
        # the scenario's fleet keys that are policy keys, in both worlds (the dispatcher reads them from the policy);
        # `overrides:` may still set them (it comes after)
        base = deep_merge(base, fleet_policy(self.fleet))
        merged = deep_merge(base, self.overrides)
        if disabled:
            merged = apply_disable(merged, self.disable)
        if extra:
            merged = deep_merge(merged, extra)
        return merged

    def effective_policy(self, extra: dict[str, Any] | None = None, disabled: bool = False) -> Policy:
        merged = self._merged(extra, disabled)
        probs = problems_for(merged, {}, Policy)
        if probs:  # load() has located the scenario's own keys already: what is left came from --override
            lines = [f"--override: {p.path}: {p.message}" for p in probs]
            raise InvalidInput(lines[0], lines)
        return Policy.model_validate(merged)


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
    """Read and validate a scenario file: every problem is one `FILE:LINE:COL: key: expected …, got …` line
    (InvalidInput, exit 65); doubtful event kinds become `sc.warnings` (same shape, with a "did you mean")."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such scenario file") from None
    except IsADirectoryError:
        raise InvalidInput(f"{path}: is a directory, expected a scenario file") from None
    src = str(path)
    try:
        located = load_one(read_text(raw))
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
    if not out and sc.disable:
        dmarks = _under(marks, ("disable",))
        for pr in problems_for(sc._merged(None, True), dmarks, Policy):
            line, col = (pr.line, pr.col) if dmarks else mark_for(marks, ("disable",))
            out.append(Problem(line, col, f"disable.{pr.path}", pr.message))
    named = [(i, f) for i, f in enumerate(sc.faults) if f.failpoint]
    if named:
        from healer import failpoints

        failpoints.load_all()
        names = [d.name for d in failpoints.registry()]
        for i, f in named:
            if not any(match(f.failpoint, n) for n in names):
                line, col = mark_for(marks, ("faults", i, "failpoint"))
                out.append(Problem(line, col, f"faults[{i}].failpoint", f"expected a failpoint name or glob that "
                                   f"`healer failpoints` lists, got {f.failpoint!r}{did_you_mean(f.failpoint, names)}"))
    return out + _missed_targets(sc, marks)


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
        if f.target is None or spec is None or "target" not in spec.uses or (f.fault == "index_lock" and f.target == "main"):
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
    from chaos import event_catalogue

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
                   r"""agent|worktree|loop|fleet|human|watch|store|container|gameday|label)\.[a-z_]+(?:\.[a-z_]+)?)["']""")
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
            if named.exists():
                out.append(named)
            elif long.exists():
                out.append(long)
            else:
                names = sorted({q.stem for q in SCENARIO_DIR.glob("*.yaml")} |
                               {q.stem for q in (SCENARIO_DIR / "campaigns").glob("*.yaml")})
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
