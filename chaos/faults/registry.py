"""Every fault a game day can inject: name -> what it does, its parameters, how it is undone, and its
inject function in each world that has it (chaos/faults/sim_world.py, chaos/faults/real_world.py).

The engines hold no list of faults: they call `inject(world, engine, fault)` (and `undo(...)` at the
end for a fault left in force). `healer gameday list --faults` prints this table; both engines refuse
(with the same message) a fault their world does not have, and a test keeps the table equal to the
scenario schema's list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SIM, REAL = "simulated", "real"
WORLDS = (SIM, REAL)


@dataclass(frozen=True)
class FaultSpec:
    name: str
    what: str
    undo: str  # how its effect goes away (a human's line)
    uses: tuple[str, ...] = ()  # the Fault fields it reads besides `at` / `on_event` (target, count, seconds)
    undone_by: str | None = None  # the fault that reverses it; injected at the end for one left in force

    @property
    def worlds(self) -> tuple[str, ...]:
        return tuple(w for w in WORLDS if self.name in _impls(w))

    @property
    def params(self) -> list[str]:
        from chaos.scenario import FAULT_PARAMS

        return [*self.uses, *(f"params.{k}" for k in FAULT_PARAMS.get(self.name, {}))]

    def injector(self, world: str) -> Callable[[Any, Any], str] | None:
        return _impls(world).get(self.name)


T, TS = ("target",), ("target", "seconds")
_SPECS = (
    FaultSpec("kill_supervisor", "SIGKILL the supervisor (it restarts after restart_after)", "restart"),
    FaultSpec("stop_supervisor", "SIGSTOP the supervisor", "continue_supervisor / SIGCONT at the end",
              undone_by="continue_supervisor"),
    FaultSpec("continue_supervisor", "SIGCONT the supervisor", "-"),
    FaultSpec("kill_dispatcher", "SIGKILL the dispatcher (its agents live on)", "restart"),
    FaultSpec("stop_dispatcher", "SIGSTOP the dispatcher", "continue_dispatcher / SIGCONT at the end",
              undone_by="continue_dispatcher"),
    FaultSpec("continue_dispatcher", "SIGCONT the dispatcher", "-"),
    FaultSpec("frozen_dispatch", "dispatch stops launching, silently", "thaw_dispatch / at the end", undone_by="thaw_dispatch"),
    FaultSpec("thaw_dispatch", "dispatch launches again", "-"),
    FaultSpec("kill_agent", "SIGKILL the target's agents (whole tree)", "-", T),
    FaultSpec("stop_agent", "SIGSTOP the target's agents", "continue_agent / SIGCONT at the end", T, "continue_agent"),
    FaultSpec("continue_agent", "SIGCONT the target's agents", "-", T),
    FaultSpec("hung_agent", "the target's agents stop making progress and stop heart-beating", "SIGCONT at the end (real)", T),
    FaultSpec("alert_flood", "`count` alerts over `params.keys` keys through notify", "-", ("count",)),
    FaultSpec("broken_proposal", "the target's proposals fail the merge gates (real: its next runs commit a BROKEN "
              "file; the scenario's merge gates refuse it)", "-", T),
    FaultSpec("same_commit_repush", "the target's agents fail and push the same commit every run (real: from its next run)",
              "-", T),
    FaultSpec("stale_labels", "`params.label` (to-review) added `seconds` ago to the target tickets", "-", TS),
    FaultSpec("orphan_worktree", "a worktree for a finished ticket, `seconds` old", "-", TS),
    FaultSpec("unknown_files", "`count` unknown files in the target's worktrees (quarantine must keep them)",
              "restore check", ("target", "count")),
    FaultSpec("delete_worktree", "the target's worktree vanishes under a running ticket", "kept in the game day's trash (real)", T),
    FaultSpec("busy_worktree", "a live process with its cwd inside the target's worktree", "release_worktree / killed at the end",
              T, "release_worktree"),
    FaultSpec("release_worktree", "the busy_worktree holders end", "-"),
    FaultSpec("red_main", "main's gates fail", "green_main"),
    FaultSpec("green_main", "main's gates pass again", "-"),
    FaultSpec("move_ticket", "a human moves the target ticket to `params.to` (the lifecycle table allowing)", "-", T),
    FaultSpec("zombie_ticket", "the target's work is already merged on main", "-", T),
    FaultSpec("clock_jump", "the wall clock jumps `seconds` (monotonic time does not; real: every healer process of the "
              "run, through healer/clock.py)", "the run's clock file goes at the end (real)", ("seconds",)),
    FaultSpec("index_lock", "a stale .git/index.lock in the fleet repository", "removed at the end", T),
    FaultSpec("failpoint", "arm a named failpoint (`failpoint` glob, `hit` N): the shell dies there", "disarmed at the end",
              ("failpoint", "hit", "action")),
    FaultSpec("pg_restart", "`pg_ctl restart -m fast` of the game day's own PostgreSQL server (a `hosts:` game day, "
              "chaos/pgday.py): every connection ended, the server back when it returns", "-"),
    FaultSpec("pg_kill_mid_merge", "pg_terminate_backend of the host stopped at its failpoint (a `hosts:` game day with "
              "`hosts.failpoints`, e.g. inside a merge's store transaction), held until the supervisor ticked, then "
              "SIGCONT", "-"),
    FaultSpec("command", "run `params.command` (argv), its `params.undo` journaled first", "params.undo"),
    *(FaultSpec(f"container_{op}", f"docker {op} the target's agent containers", "-", ("target", "count"))
      for op in ("kill", "pause", "unpause", "stop", "restart")),
)
FAULTS: dict[str, FaultSpec] = {f.name: f for f in _SPECS}


def _impls(world: str) -> dict[str, Callable[[Any, Any], str]]:
    if world == SIM:
        from chaos.faults.sim_world import INJECT
    elif world == REAL:
        from chaos.faults.real_world import INJECT
    else:
        return {}
    return INJECT


def spec(name: str) -> FaultSpec | None:
    return FAULTS.get(name)


def unsupported(name: str, world: str) -> str | None:
    """Why `world` cannot inject `name` (reported as the activity's output, never a crash), or None."""
    f = FAULTS.get(name)
    if f is None:
        return f"unknown fault {name}"
    if world not in f.worlds:
        return f"{name}: not in the {world} world (only {', '.join(f.worlds)}); ignored"
    return None


def inject(world: str, engine: Any, fault: Any) -> str:
    """Inject `fault` into `engine`'s world: one line saying what happened. Raises NotApplied when nothing did."""
    from chaos.faults import NotApplied

    why = unsupported(fault.fault, world)
    if why:
        raise NotApplied(why)
    fn = FAULTS[fault.fault].injector(world)
    assert fn is not None
    return fn(engine, fault)


def undo(world: str, engine: Any, fault: Any) -> str | None:
    """Reverse `fault` by injecting the fault that undoes it (same target), or None when none does."""
    s = FAULTS.get(fault.fault)
    if s is None or s.undone_by is None or unsupported(s.undone_by, world):
        return None
    return inject(world, engine, fault.model_copy(update={"fault": s.undone_by}))


def rows() -> list[dict[str, Any]]:
    """The table `healer gameday list --faults` prints."""
    return [{"fault": f.name, "worlds": list(f.worlds), "params": f.params, "what": f.what, "undo": f.undo,
             "undone_by": f.undone_by} for f in FAULTS.values()]
