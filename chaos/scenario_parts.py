"""The models of a game-day scenario's parts (chaos/scenario.py holds the whole, `Scenario`, and loads it).

Each part is a strict model (an unknown or misspelt key is a located error): the fleet (`FleetSpec`, its tickets
`TicketSpec` with scripted behaviours from chaos/agents/), the faults (`Fault`, their names and params read from
the fault registry), the expectations (`Checker`, one model per checker kind, run by chaos/checkers.py) and the
settings of real mode, restart storms and multi-host game days (`RealSpec`, `StormSpec`, `HostsSpec`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from chaos.faults import registry as faults
from chaos.faults.registry import check_param, did_you_mean
from healer.policy.schema import Duration


def _written(info: ValidationInfo) -> bool:
    """What a person wrote (schema.WRITTEN): a duration param needs its unit there, as every duration does."""
    return bool(info.context and info.context.get("written"))


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
    def _when(self, info: ValidationInfo) -> Fault:
        self.params.update(faults.FAULTS[self.fault].check(self.params, written=_written(info)))
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
    def _behaviour(self, info: ValidationInfo) -> TicketSpec:
        names = [n.strip() for n in self.behaviour.split(",")]
        if len(names) == 1 and names[0] in BEHAVIOUR_PARAMS:
            known = BEHAVIOUR_PARAMS[names[0]]
            for k, v in list(self.params.items()):
                if k not in known:
                    raise ValueError(f"expected a parameter of {names[0]} ({', '.join(known) or 'none'}), got {k!r}"
                                     f"{did_you_mean(k, known)} @params")
                try:
                    self.params[k] = check_param(known[k], v, written=_written(info))
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
    main: Literal["green", "red", "unknown"] = Field("green", description="main's colour at the start; unknown "
                                                                        "(simulated only): its gates cannot decide")
    files: dict[str, str] = Field(default_factory=dict, description="user files in the fleet root: path -> text")
    standby_supervisor: bool = Field(False, description="simulated mode: a second supervisor on another host ticks beside "
                                                        "the leader; it cannot see the leader's pid, so it takes over only "
                                                        "once the lease expires")


# -- checkers: one strict model each, so a misspelt key is a located error, not a check that counts everything
TicketState = Literal["queued", "in_progress", "review", "done", "blocked", "needs_human", "closed"]
INVARIANT_NAMES = ("one_live_agent_per_ticket", "no_user_file_deleted", "intents_settled", "one_lease_holder",
                   "notifications_within_quota", "no_leftovers", "no_corpse", "never_merged_broken", "no_double_effect",
                   "ticket_moves_legal", "launch_only_in_progress", "no_launch_while_held", "launches_within_budget",
                   "escalations_reach_needs_human", "escalations_leave_evidence", "intents_journaled", "remedies_within_limits",
                   "ticks_report_their_work", "no_internal_error")
InvariantName = Literal[INVARIANT_NAMES]  # type: ignore[valid-type]
# what `state:` can look at (the engines' observations of the final world)
STATE_KEYS = ("dispatch_paused", "dispatch_paused_reason", "ticks", "failpoints_left", "failpoints_missed", "failpoints_fired", "outside_unchanged",
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
    per_day: bool = Field(False, description="the bounds hold for the busiest UTC day's events (a daily cap, as "
                                             "repair_agent.max_runs_per_day counts them), not the whole run's")

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
