"""Every fault a game day can inject, one record each (`FaultSpec`): its name, what it does, the fields and
`params` it reads (with their types and which are required), how it is undone, how `gameday explore` draws it,
and, for a fault that brings its own, its inject function per world.

Everything else is derived from these records: the scenario schema's fault names and the validation of each
fault's `params` (chaos/scenario_parts.py), the explorer's lists (chaos/explore.py), `healer gameday list --faults`
and the fault table of docs/chaos.md (tests/chaos/test_fault_registry.py keeps it equal to `markdown()`).
The built-in faults' injectors live in each world's table (chaos/faults/sim_world.py, real_world.py), joined
to these records by chaos/faults/inject.py, which the engines call.

This module imports nothing of chaos: the scenario schema sits above it, the worlds and the engines above that.

Adding a fault: one `FaultSpec` here with its injectors in `inject=` (or in a world's table), and a test.
`register(spec)` does the same at run time (a plug-in, or a test's toy fault).
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from healer import durations

SIM, REAL = "simulated", "real"
WORLDS = (SIM, REAL)

# a param's type -> what its validation expects (a duration: a string like 10m, or seconds)
PARAM_TYPES = ("str", "int", "bool", "duration", "argv")


def check_param(kind: str, v: Any, *, written: bool = False) -> Any:
    """The value of a fault param of type `kind`, normalised; ValueError naming what was expected. `written`: the
    value is what a person wrote in a scenario (a duration needs its unit there: `after: 90` is refused)."""
    if kind == "argv":  # a `command` fault's argv: a list of strings (no shell), or one string split like a shell would
        ok = isinstance(v, str) and v.strip() or isinstance(v, list) and v and all(isinstance(x, str | int | float) for x in v)
        if not ok:
            raise ValueError(f"expected an argv (a list of strings), got {v!r}")
        return v
    if kind == "duration":
        why = durations.needs_unit(v) if written else None
        if why:
            raise ValueError(why)
        return durations.parse(v)
    if kind == "int":
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"expected an integer, got {v!r}")
        return v
    if kind == "bool":
        if not isinstance(v, bool):
            raise ValueError(f"expected true or false, got {v!r}")
        return v
    if not isinstance(v, str):
        raise ValueError(f"expected a string, got {v!r}")
    return v


@dataclass(frozen=True)
class Explore:
    """How `gameday explore` draws a fault into a generated schedule (chaos/explore.py); a spec without one is not
    drawn (it needs a world the explorer does not run, or it is chaos no invariant could blame on the healer)."""

    ticket: bool = False  # aimed at a ticket (the explorer draws its `target`)
    size: Callable[[int], dict[str, Any]] | None = None  # size n (1..8) -> the fault's fields that have a size


@dataclass(frozen=True)
class FaultSpec:
    name: str
    what: str
    undo: str  # how its effect goes away (a human's line)
    uses: tuple[str, ...] = ()  # the Fault fields it reads besides `at` / `on_event` (target, count, seconds)
    undone_by: str | None = None  # the fault that reverses it; injected at the end for one left in force
    params: Mapping[str, str] = field(default_factory=dict)  # `params.<key>` -> its type (PARAM_TYPES)
    required: Mapping[str, str] = field(default_factory=dict)  # required params -> what they are (for the message)
    explore: Explore | None = None
    # `target` words naming something other than a ticket (index_lock: `main`, the repository itself): the scenario
    # validator does not look for a ticket of that name
    other_targets: tuple[str, ...] = ()
    # it makes sense on a fleet healer did not build (`gameday run --root`, chaos/engine/fleet.py applies it)
    for_root: bool = False
    # world -> inject(world, fault) -> one line; a built-in's are in its worlds' tables (chaos/faults/*_world.py)
    inject: Mapping[str, Callable[[Any, Any], str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = {k: t for k, t in self.params.items() if t not in PARAM_TYPES}
        if bad or not set(self.required) <= set(self.params) or not set(self.inject) <= set(WORLDS):
            raise ValueError(f"fault {self.name}: params types {bad or 'ok'}, required {sorted(self.required)} among "
                             f"{sorted(self.params)}, worlds {sorted(self.inject)} among {WORLDS}")

    def check(self, params: dict[str, Any], *, written: bool = False) -> dict[str, Any]:
        """`params` validated and normalised against this spec; ValueError ending in `@params` (its place)."""
        out = dict(params)
        for k, v in params.items():
            kind = self.params.get(k)
            if kind is None:
                names = ", ".join(self.params) or "none"
                raise ValueError(f"expected a parameter of {self.name} ({names}), got {k!r}{did_you_mean(k, self.params)} @params")
            try:
                out[k] = check_param(kind, v, written=written)
            except ValueError as e:
                raise ValueError(f"expected a valid params.{k}: {e} @params") from None
        for k, why in self.required.items():
            if not out.get(k):
                raise ValueError(f"expected params.{k} ({why}) for fault: {self.name} @params")
        return out

    @property
    def fields(self) -> list[str]:
        """What a scenario may set for it besides when: its fields and `params.<key>`s (`gameday list --faults`)."""
        return [*self.uses, *(f"params.{k}" for k in self.params)]


def did_you_mean(word: str, known) -> str:
    """" (did you mean 'x'?)" for a near miss among `known`, else "" (every name a scenario spells is checked so)."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


T, TS = ("target",), ("target", "seconds")
AGENT = Explore(ticket=True)
_RESTART = {"restart_after": "duration"}
_CONTAINER = {"name": "str", "label": "str", "signal": "str", "timeout": "duration"}
# the order of the explored faults is the explorer's (a seed's schedule draws from that list: keep it stable)
_SPECS = (
    FaultSpec("kill_agent", "SIGKILL the target's agents (whole tree)", "-", T, explore=AGENT),
    FaultSpec("stop_agent", "SIGSTOP the target's agents", "continue_agent / SIGCONT at the end", T, "continue_agent",
              explore=AGENT),
    FaultSpec("continue_agent", "SIGCONT the target's agents", "-", T, explore=AGENT),
    FaultSpec("hung_agent", "the target's agents stop making progress and stop heart-beating", "SIGCONT at the end (real)", T,
              explore=AGENT),
    FaultSpec("red_main", "main's gates fail", "green_main", explore=Explore()),
    FaultSpec("green_main", "main's gates pass again", "-", explore=Explore()),
    FaultSpec("kill_supervisor", "SIGKILL the supervisor (it restarts after restart_after)", "restart", params=_RESTART, for_root=True,
              explore=Explore(size=lambda n: {"params": {"restart_after": 60 * n}})),
    FaultSpec("stop_supervisor", "SIGSTOP the supervisor", "continue_supervisor / SIGCONT at the end",
              undone_by="continue_supervisor", explore=Explore()),
    FaultSpec("continue_supervisor", "SIGCONT the supervisor", "-", explore=Explore()),
    FaultSpec("kill_dispatcher", "SIGKILL the dispatcher (its agents live on); params.host: it comes back under that "
              "HEALER_HOST_ID", "restart", params={**_RESTART, "host": "str"}, for_root=True,
              explore=Explore(size=lambda n: {"params": {"restart_after": 60 * n}})),
    FaultSpec("stop_dispatcher", "SIGSTOP the dispatcher", "continue_dispatcher / SIGCONT at the end",
              undone_by="continue_dispatcher", explore=Explore()),
    FaultSpec("continue_dispatcher", "SIGCONT the dispatcher", "-", explore=Explore()),
    FaultSpec("frozen_dispatch", "dispatch stops launching, silently", "thaw_dispatch / at the end", undone_by="thaw_dispatch",
              explore=Explore(), for_root=True),
    FaultSpec("thaw_dispatch", "dispatch launches again", "-", explore=Explore(), for_root=True),
    FaultSpec("stale_labels", "`params.label` (to-review) added `seconds` ago to the target tickets", "-", TS,
              params={"label": "str"}, explore=Explore(ticket=True, size=lambda n: {"seconds": f"{n}h"})),
    FaultSpec("orphan_worktree", "a worktree for a finished ticket, `seconds` old", "-", TS, explore=AGENT),
    FaultSpec("unknown_files", "`count` unknown files in the target's worktrees (quarantine must keep them)",
              "restore check", ("target", "count"), explore=Explore(ticket=True, size=lambda n: {"count": n})),
    FaultSpec("zombie_ticket", "the target's work is already merged on main", "-", T, explore=AGENT),
    FaultSpec("broken_proposal", "the target's proposals fail the merge gates (real: its next runs commit a BROKEN "
              "file; the scenario's merge gates refuse it)", "-", T, explore=AGENT),
    FaultSpec("same_commit_repush", "the target's agents fail and push the same commit every run (real: from its next run)",
              "-", T, explore=AGENT),
    FaultSpec("alert_flood", "`count` alerts over `params.keys` keys through notify", "-", ("count",), params={"keys": "int"},
              explore=Explore(size=lambda n: {"count": 10 * n})),
    FaultSpec("clock_jump", "the wall clock jumps `seconds` forward, or back with `params.back` (monotonic time does not; "
              "real: every healer process of the run, through healer/clock.py)", "the run's clock file goes at the end (real)",
              ("seconds",), params={"back": "bool"},
              explore=Explore(size=lambda n: {"seconds": f"{15 * n}m"})),
    # not explored: `delete_worktree` is the chaos itself deleting files, which `no_user_file_deleted` would (rightly)
    # blame on nobody but us; the others need the real world, or a process or a human the explorer does not play
    FaultSpec("model_down", "the target's model endpoint answers only 5xx/429 for its next `count` runs (default 3): "
              "each ends 69 model_unavailable (simulated)", "-", ("target", "count")),
    FaultSpec("disk_full", "the fleet's file system has only `params.free_mib` MiB free (default 100; simulated: the "
              "disk-free port's answer for every folder)", "disk_freed", params={"free_mib": "int"},
              undone_by="disk_freed"),
    FaultSpec("disk_freed", "the fleet's file system has room again", "-"),
    FaultSpec("store_read_only", "the store takes no writes past the target's runners' store.outage_tolerance for its "
              "next `count` runs (default 3): each ends 69 store_unavailable (simulated)", "-", ("target", "count")),
    FaultSpec("delete_worktree", "the target's worktree vanishes under a running ticket", "kept in the game day's trash (real)", T),
    FaultSpec("busy_worktree", "a live process with its cwd inside the target's worktree", "release_worktree / killed at the end",
              T, "release_worktree"),
    FaultSpec("release_worktree", "the busy_worktree holders end", "-"),
    FaultSpec("branch_checked_out", "a human checks the target's branch out in a checkout of their own, outside the "
              "fleet (git then refuses the branch to any other worktree) (simulated)", "-", T),
    FaultSpec("half_made_worktree", "the target's worktree folder is left half-made, as by a dispatcher killed inside "
              "`git worktree add`: on disk with part of a checkout, never registered by git; `params.held`: a git child "
              "the kill missed still works inside (simulated)", "the holder ends at the end (release_worktree)", T,
              params={"held": "bool"}),
    FaultSpec("move_ticket", "a human moves the target ticket to `params.to` (the lifecycle table allowing)", "-", T,
              params={"to": "str"}, required={"to": "the state a human moves the ticket to"}),
    FaultSpec("index_lock", "a stale index.lock in the fleet repository's main checkout (`target: main`) or in the "
              "target's worktree", "removed at the end", T,
              other_targets=("main",)),
    FaultSpec("failpoint", "arm a named failpoint (`failpoint` glob, `hit` N): the shell dies there", "disarmed at the end",
              ("failpoint", "hit", "action"), for_root=True),
    FaultSpec("pg_restart", "`pg_ctl restart -m fast` of the game day's own PostgreSQL server (a `hosts:` game day, "
              "chaos/pgday.py): every connection ended, the server back when it returns", "-"),
    FaultSpec("pg_kill_mid_merge", "pg_terminate_backend of the host stopped at its failpoint (a `hosts:` game day with "
              "`hosts.failpoints`, e.g. inside a merge's store transaction), held until the supervisor ticked, then "
              "SIGCONT", "-"),
    FaultSpec("command", "run `params.command` (argv), its `params.undo` journaled first", "params.undo",
              params={"command": "argv", "undo": "argv", "cwd": "str", "timeout": "duration"},
              required={"command": "an argv"}, for_root=True),
    FaultSpec("operator", "an operator steers from the console (healer/console/steer.py, actor operator:gameday): "
              "`params.action` (release, ack, requeue, escalate, stop, pause, resume) on the target ticket; `ack` takes "
              "the newest page whose key matches `params.page` (a glob)", "-", T,
              params={"action": "str", "page": "str"}, required={"action": "the console's steering action"},
              other_targets=("dispatch",)),
    # loops healer did not launch (docs/adopt.md; chaos/faults/adopted.py): `target` names the loop, not a ticket
    FaultSpec("adopted_loop", "a loop healer did not launch starts in a git worktree of its own, named by `target` "
              "(sim: a virtual `bash loop.sh` appending a Claude Code turn of `params.tokens` every `params.every`, "
              "ending by itself after `params.converge_after` turns; real: the fixture loop.sh around the real Claude "
              "Code CLI and the game day's scripted model)", "ended at the end (real: its tree marker killed)", T,
              params={"every": "duration", "tokens": "int", "converge_after": "int"}),
    FaultSpec("adopted_hung_cli", "the target adopted loop's CLI hangs: alive and silent (real: the CLI's processes "
              "SIGSTOPped)", "SIGCONT at the end (real)", T),
    FaultSpec("adopted_runaway_cost", "the target adopted loop's turns bill `params.tokens` input tokens each from now "
              "(real: the scripted model's turns bill about $1 each)", "-", T, params={"tokens": "int"}),
    FaultSpec("adopted_endless_loop", "the target adopted loop never converges: it iterates on", "-", T),
    FaultSpec("adopted_killed_session", "the target adopted loop's session is SIGKILLed, not through healer; sim: "
              "with `params.reuse_after` its pid goes to a process no rule matches that long after", "-", T,
              params={"reuse_after": "duration"}),
    FaultSpec("adopted_leaking_children", "each turn of the target adopted loop leaves `params.per_turn` processes "
              "of `params.rss_mib` MiB running (its tests' dev servers: every other one daemonised, setsid), "
              "simulated", "ended with its group; the daemonised ones outlive it", T,
              params={"per_turn": "int", "rss_mib": "int"}),
    FaultSpec("adopted_same_failure", "each turn of the target adopted loop fails the same way: its gates write "
              "`params.gates` to .loop/gates.log (a timing that changes around it), and/or a tool call returns "
              "`params.tool` (a Claude Code tool_result, is_error), simulated", "-", T,
              params={"gates": "str", "tool": "str"}),
    FaultSpec("adopted_flip_flop", "each turn of the target adopted loop undoes the last one (work.txt A, B, A, B; its "
              ".loop/ scratch ignored), simulated", "-", T),
    FaultSpec("adopted_spinning", "the target adopted loop's turns go on (transcripts, prompts) and change nothing in "
              "its worktree (its .loop/ scratch ignored), simulated", "-", T),
    *(FaultSpec(f"container_{op}", f"docker {op} the target's agent containers", "-", ("target", "count"), params=_CONTAINER)
      for op in ("kill", "pause", "unpause", "stop", "restart")),
)
FAULTS: dict[str, FaultSpec] = {f.name: f for f in _SPECS}


def spec(name: str) -> FaultSpec | None:
    return FAULTS.get(name)


def for_root() -> tuple[str, ...]:
    """The faults a game day may apply to your own fleet (`for_root: true` scenarios, chaos/engine/fleet.py)."""
    return tuple(n for n, s in FAULTS.items() if s.for_root)


def names() -> tuple[str, ...]:
    """The scenario schema's fault names (chaos/scenario_parts.py validates `fault:` against them)."""
    return tuple(FAULTS)


def register(s: FaultSpec) -> FaultSpec:
    """Add a fault at run time: from then on scenarios validate it, its worlds inject it, the explorer draws it."""
    if s.name in FAULTS:
        raise ValueError(f"fault {s.name} is already registered")
    if s.undone_by is not None and s.undone_by not in FAULTS and s.undone_by != s.name:
        raise ValueError(f"fault {s.name}: undone_by {s.undone_by} is no registered fault")
    FAULTS[s.name] = s
    return s


@contextlib.contextmanager
def registered(s: FaultSpec) -> Iterator[FaultSpec]:
    """`register(s)` for the duration of a block (a test's toy fault)."""
    register(s)
    try:
        yield s
    finally:
        FAULTS.pop(s.name, None)
