"""Every fault a game day can inject: name -> what it does, how it is undone, which worlds have it.

`healer gameday list --faults` prints this table; both engines refuse (with the same message) a
fault their world does not have, and a test keeps the table equal to the scenario schema's list.
"""

from __future__ import annotations

from dataclasses import dataclass

SIM, REAL = "simulated", "real"
BOTH = (SIM, REAL)


@dataclass(frozen=True)
class FaultSpec:
    name: str
    what: str
    undo: str
    worlds: tuple[str, ...] = BOTH


_SPECS = (
    FaultSpec("kill_supervisor", "SIGKILL the supervisor (it restarts after restart_after)", "restart"),
    FaultSpec("stop_supervisor", "SIGSTOP the supervisor", "continue_supervisor / SIGCONT at the end"),
    FaultSpec("continue_supervisor", "SIGCONT the supervisor", "-"),
    FaultSpec("kill_dispatcher", "SIGKILL the dispatcher (its agents live on)", "restart"),
    FaultSpec("stop_dispatcher", "SIGSTOP the dispatcher", "continue_dispatcher / SIGCONT at the end"),
    FaultSpec("continue_dispatcher", "SIGCONT the dispatcher", "-"),
    FaultSpec("frozen_dispatch", "dispatch stops launching, silently", "thaw_dispatch / at the end"),
    FaultSpec("thaw_dispatch", "dispatch launches again", "-"),
    FaultSpec("kill_agent", "SIGKILL the target's agents (whole tree)", "-"),
    FaultSpec("stop_agent", "SIGSTOP the target's agents", "continue_agent / SIGCONT at the end"),
    FaultSpec("continue_agent", "SIGCONT the target's agents", "-"),
    FaultSpec("hung_agent", "the target's agents stop making progress and stop heart-beating", "-"),
    FaultSpec("alert_flood", "`count` alerts over `params.keys` keys through notify", "-"),
    # real mode: a ticket behaviour plays these (chaos/agents/), not yet an injected fault
    FaultSpec("broken_proposal", "the target's proposals fail the merge gates", "-", (SIM,)),
    FaultSpec("same_commit_repush", "the target's agents fail and push the same commit every run", "-", (SIM,)),
    FaultSpec("stale_labels", "`params.label` (to-review) added `seconds` ago to the target tickets", "-"),
    FaultSpec("orphan_worktree", "a worktree for a finished ticket, `seconds` old", "-"),
    FaultSpec("unknown_files", "`count` unknown files in the target's worktrees (quarantine must keep them)", "restore check"),
    FaultSpec("delete_worktree", "the target's worktree vanishes under a running ticket", "kept in the game day's trash (real)"),
    FaultSpec("busy_worktree", "a live process with its cwd inside the target's worktree", "release_worktree / killed at the end"),
    FaultSpec("release_worktree", "the busy_worktree holders end", "-"),
    FaultSpec("red_main", "main's gates fail", "green_main"),
    FaultSpec("green_main", "main's gates pass again", "-"),
    FaultSpec("zombie_ticket", "the target's work is already merged on main", "-"),
    FaultSpec("clock_jump", "the wall clock jumps `seconds` (monotonic time does not)", "-", (SIM,)),
    FaultSpec("index_lock", "a stale .git/index.lock in the fleet repository", "removed at the end", (REAL,)),
    FaultSpec("failpoint", "arm a named failpoint (`failpoint` glob, `hit` N): the shell dies there", "disarmed at the end"),
    FaultSpec("command", "run `params.command` (argv), its `params.undo` journaled first", "params.undo"),
    *(FaultSpec(f"container_{op}", f"docker {op} the target's agent containers", "-", (REAL,))
      for op in ("kill", "pause", "unpause", "stop", "restart")),
)
FAULTS: dict[str, FaultSpec] = {f.name: f for f in _SPECS}


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
