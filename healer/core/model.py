"""The core's vocabulary: what it is given (Snapshot, Memory) and what it returns (Decision).

The core is pure: `decide(snapshot, policy, memory) -> Decision`, where `snapshot.now`
is the only time it knows. Adapters build snapshots (healer/fleet/snapshot.py) and
carry out decisions (healer/remedy/). Add fields here additively; never read the
world from the core.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from healer.core.trusted_time import Timebase, TimeState
from healer.records import Agent, Attempt, Proposal, Ticket, Worktree

UNKNOWN = "unknown"


@dataclass(frozen=True)
class AgentView:
    agent: Agent
    alive: bool | None  # None: could not tell (fail-open: not dead)
    paused: bool = False  # SIGSTOPped process or paused container
    last_commit_at: float | None = None
    exit_code: int | None = None  # a process that ended and said how (its exit status or result file): not dead


@dataclass(frozen=True)
class WorktreeView:
    worktree: Worktree
    exists: bool
    busy_pids: tuple[int, ...] = ()  # processes with cwd or an open file inside
    unknown_files: tuple[str, ...] = ()  # paths relative to the worktree, untracked and not ignored
    head: str | None = None


@dataclass(frozen=True)
class Snapshot:
    now: float
    tickets: tuple[Ticket, ...] = ()
    agents: tuple[AgentView, ...] = ()
    worktrees: tuple[WorktreeView, ...] = ()
    proposals: tuple[Proposal, ...] = ()
    attempts: dict[str, tuple[Attempt, ...]] = field(default_factory=dict)
    merged_tickets: frozenset[str] = frozenset()  # tickets whose work is already on main
    reopened: frozenset[str] = frozenset()  # tickets moved out of done since their merge (a human's reopen)
    main_status: str = "green"  # green | red | unknown
    main_red_since: float | None = None
    dispatch_paused: bool = False
    dispatch_paused_by: str | None = None  # "healer" when the supervisor paused it (only then may it resume it)
    pool_size: int = 4
    last_launch_at: float | None = None
    last_open_at: float | None = None  # last proposal opened
    last_close_at: float | None = None  # last proposal merged or rejected, or ticket done
    last_supervisor_tick: float | None = None
    last_dispatch_tick: float | None = None
    dispatcher_alive: bool | None = None  # the dispatcher lease holder's pid on this host (None: cannot tell)
    unknown_files: tuple[str, ...] = ()  # in managed areas outside worktrees, relative to the fleet root
    halted: bool = False  # .healer/HALT present: observe only
    spend: tuple[tuple[float, str, float], ...] = ()  # (at, run id, USD) of the loops' spend within sentinels.spend_window
    failed_sources: frozenset[str] = frozenset()  # data sources that raised: dependent sentinels say unknown
    notes: dict[str, Any] = field(default_factory=dict)
    # the store's, this host's and this process's clocks when gathered (`now` is time.store), and what the shell's
    # TimeState knows of jumps and skews: ages that crossed one are not acted on (healer/core/trusted_time.py)
    time: Timebase | None = None
    clock: TimeState | None = None
    adopted: tuple[Any, ...] = ()  # healer.core.adopt.AdoptedView: loops healer did not launch (docs/adopt.md)


@dataclass(frozen=True)
class Finding:
    kind: str  # one of healer.policy.schema.FINDINGS
    subject: str  # ticket id, agent id, worktree path, file path, or a sentinel key
    since: float  # when the condition began (the threshold is measured from here)
    evidence: dict[str, Any] = field(default_factory=dict)
    severity: str = "warning"  # info | warning | critical
    status: str = "firing"  # firing | unknown (fail-open sentinel)

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.subject}"


@dataclass(frozen=True)
class PlannedAction:
    action: str  # one of healer.policy.schema.ACTIONS
    subject: str
    params: dict[str, Any] = field(default_factory=dict)
    reason: str = ""  # the finding key or rule id that asked for it
    rule: str | None = None


@dataclass(frozen=True)
class Alert:
    key: str  # cooldown key
    text: str
    severity: str = "warning"
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Memory:
    """What the supervisor remembers between ticks (persisted by the shell)."""

    first_seen: dict[str, float] = field(default_factory=dict)  # finding key -> first tick it fired
    signals: dict[str, int] = field(default_factory=dict)  # finding key -> times signalled
    attempts: dict[str, list[float]] = field(default_factory=dict)  # subject -> remediation attempt times
    action_times: dict[str, list[float]] = field(default_factory=dict)  # action -> times (rate limits)
    cooldowns: dict[str, float] = field(default_factory=dict)  # alert key -> last sent
    repair_runs: list[float] = field(default_factory=list)
    rule_times: dict[str, list[float]] = field(default_factory=dict)  # rule id -> times it acted (limits.max_per_hour)


@dataclass(frozen=True)
class Decision:
    findings: tuple[Finding, ...] = ()
    actions: tuple[PlannedAction, ...] = ()
    alerts: tuple[Alert, ...] = ()
    deferred: tuple[tuple[PlannedAction, str], ...] = ()  # (action, why not now: rate limit, quiet period, blast radius, halt)
    memory: Memory = field(default_factory=Memory)
    repair: bool = False  # launch the repair agent now
    repair_reason: str = ""  # why (or why not) the repair agent is launched, for the journal
