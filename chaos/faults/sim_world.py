"""The simulated world's faults: name -> inject(world, fault) -> what happened (one line).

Each acts on the simulated engine's world through its `SimWorld` interface (chaos/faults/world.py): its virtual
processes, main's colour, the store. The git and worktree faults are chaos/faults/checkouts.py's, the same as real
mode's, through the world's Git port over its repository model. chaos/faults/registry.py describes them (one `FaultSpec`
each), chaos/faults/worlds.py joins this table to the records; the engine only calls `worlds.inject(SIM, self, fault)`.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import replace
from pathlib import Path

from chaos.agents.behaviours import make
from chaos.faults import NotApplied, adopted, checkouts, operator
from chaos.faults.board import alert_flood, move_ticket, stale_labels, tickets
from chaos.faults.command import inject as run_command
from chaos.faults.world import SimAgent, SimWorld
from chaos.scenario import match
from chaos.scenario_parts import Fault
from healer import conventions as cv
from healer import procs


def _procs(e: SimWorld, f: Fault) -> list[SimAgent]:
    """The live agents the fault aims at; none is a fault that did not happen (NotApplied)."""
    ps = [p for p in e.procs.values() if p.alive and match(f.target or "*", p.ticket)]
    if not ps:
        raise NotApplied(f"no live agent on {f.target or 'any ticket'}")
    return ps


def _supervisor(e: SimWorld) -> None:
    if not e.supervisor_up:
        raise NotApplied("no live supervisor")


def _dispatcher(e: SimWorld) -> None:
    if not e.dispatcher_up:
        raise NotApplied("no live dispatcher")


def command(e: SimWorld, f: Fault) -> str:
    # a real command even in a simulated world: its undo is journaled first, as in real mode
    pr = f.params
    r = run_command(pr["command"], undo=pr.get("undo"), cwd=pr.get("cwd"), timeout=float(pr.get("timeout", 60)), journal=e.undo)
    return f"exit {r['status']}"


def failpoint(e: SimWorld, f: Fault) -> str:
    return "failpoint: armed before the run"


def kill_agent(e: SimWorld, f: Fault) -> str:
    ps = _procs(e, f)
    for p in ps:
        p.run = replace(p.run, outcome="die")
        e.kill_agent(p.agent_id)
    return f"killed {len(ps)} agent(s)"


def stop_agent(e: SimWorld, f: Fault) -> str:
    ps = _procs(e, f)
    for p in ps:
        p.paused = True
    return f"stop_agent on {len(ps)} agent(s)"


def continue_agent(e: SimWorld, f: Fault) -> str:
    ps = _procs(e, f)
    for p in ps:
        p.paused = False
        if p.ended_early:
            e.at(e.sim_now(), "proc_end", p.agent_id, p.gen)
    return f"continue_agent on {len(ps)} agent(s)"


def hung_agent(e: SimWorld, f: Fault) -> str:
    ps = _procs(e, f)
    for p in ps:
        p.run = replace(p.run, outcome="hang", heartbeats=False, duration=e.now - p.started)
        p.gen += 1
    return f"hung_agent on {len(ps)} agent(s)"


def kill_supervisor(e: SimWorld, f: Fault) -> str:
    _supervisor(e)
    e.supervisor_up = False  # its memory lives on in the store (the product persists it every tick)
    e.at(e.sim_now() + float(f.params.get("restart_after", e.tick)), "restart_supervisor")
    return "supervisor killed"


def stop_supervisor(e: SimWorld, f: Fault) -> str:
    _supervisor(e)
    e.supervisor_paused = True
    return "supervisor stopped"


def continue_supervisor(e: SimWorld, f: Fault) -> str:
    _supervisor(e)
    e.supervisor_paused = False
    return "supervisor continued"


def kill_dispatcher(e: SimWorld, f: Fault) -> str:
    _dispatcher(e)
    e.dispatcher_up = False
    e.dispatcher_paused = False
    if f.params.get("restart_after"):
        e.at(e.sim_now() + float(f.params["restart_after"]), "restart_dispatcher")
        e.next_dispatcher_host = f.params.get("host") or None
    return "kill_dispatcher" + (f" (back as host {f.params['host']})" if f.params.get("host") else "")


def stop_dispatcher(e: SimWorld, f: Fault) -> str:
    _dispatcher(e)
    e.dispatcher_paused = True
    return "stop_dispatcher"


def continue_dispatcher(e: SimWorld, f: Fault) -> str:
    _dispatcher(e)
    e.dispatcher_paused = False
    return "continue_dispatcher"


def frozen_dispatch(e: SimWorld, f: Fault) -> str:
    _dispatcher(e)
    e.frozen = True
    return "dispatcher launches nothing from now on"


def thaw_dispatch(e: SimWorld, f: Fault) -> str:
    _dispatcher(e)
    e.frozen = False
    return "dispatcher thawed"


def red_main(e: SimWorld, f: Fault) -> str:
    e.set_main("red")
    return "main is red"


def green_main(e: SimWorld, f: Fault) -> str:
    e.set_main("green")
    return "main is green"


def broken_proposal(e: SimWorld, f: Fault) -> str:
    for tid in tickets(e, f):
        e.broken.add(tid)
        e.broken_since.setdefault(tid, e.now)
    return "proposals of the target fail the merge gates"


def same_commit_repush(e: SimWorld, f: Fault) -> str:
    for tid in tickets(e, f):
        e.behaviours[tid] = make("fails_same_commit", {})
    return "agents push the same commit"


def disk_full(e: SimWorld, f: Fault) -> str:
    e.disk.free_bytes = int(f.params.get("free_mib", 100)) << 20  # every folder the fleet writes to, one file system
    return f"the disk has {e.disk.free_bytes >> 20} MiB free"


def disk_freed(e: SimWorld, f: Fault) -> str:
    e.disk.free_bytes = e.disk.PLENTY
    return "the disk has room again"


def _infra_down(e: SimWorld, f: Fault, cause: str, what: str) -> str:
    """The target's next `count` runs (default 3) end for the infrastructure (chaos/agents/behaviours.py InfraDown)."""
    ids = tickets(e, f)
    n = int(f.count or 3)
    for tid in ids:
        e.behaviours[tid] = make("infra_down", {"first": e.runs.get(tid, 0), "times": n, "cause": cause})
    return f"{what} for the next {n} run(s) of {len(ids)} ticket(s)"


def model_down(e: SimWorld, f: Fault) -> str:
    return _infra_down(e, f, "model_unavailable", "the model endpoint answers only 529")


def store_read_only(e: SimWorld, f: Fault) -> str:
    return _infra_down(e, f, "store_unavailable", "the store takes no writes (read-only) past the runners' tolerance")


def clock_jump(e: SimWorld, f: Fault) -> str:
    s = float(f.seconds or 3600) * (-1 if (f.params or {}).get("back") else 1)  # params.back: a step back
    e.clock.jump(s)
    e.offset += s
    return f"wall clock jumped {s:+.0f}s"


def busy_worktree(e: SimWorld, f: Fault) -> str:
    # a REAL process with its cwd inside: the real executor's busy check must see it
    n = 0
    for w in e.store.worktrees():
        if match(f.target or "*", w.ticket_id or "") and Path(w.path).exists():
            argv = [sys.executable, "-c", "import time; time.sleep(3600)"]
            marker = f"gameday-busy-{e.seed}-{n}-{id(e)}"
            proc, tree = procs.spawn(argv, cwd=w.path, marker=marker)
            e.undo.register("kill_tree", pid=proc.pid, marker=marker, role="busy worktree holder")
            e.busy_procs.append((proc, tree))
            n += 1
    e.wait_busy()
    return f"{n} worktree(s) held by a live process"


def _hold(e: SimWorld, folder: Path, n: int) -> None:
    """A REAL process with its cwd inside `folder` (the real busy check must see it), journaled to be killed."""
    argv = [sys.executable, "-c", "import time; time.sleep(3600)"]
    marker = f"gameday-busy-{e.seed}-{n}-{id(e)}"
    proc, tree = procs.spawn(argv, cwd=str(folder), marker=marker)
    e.undo.register("kill_tree", pid=proc.pid, marker=marker, role="busy worktree holder")
    e.busy_procs.append((proc, tree))


def half_made_worktree(e: SimWorld, f: Fault) -> str:
    """The dispatcher was killed inside `git worktree add` for each target ticket: the folder is on disk with part of
    the checkout, git never registered it (so `git worktree add` refuses the path); `params.held`: a git child the
    kill missed still works inside."""
    made = []
    for tid in tickets(e, f):
        wt = cv.worktree_for(e.root, tid)
        if e.git.half_made(e.root, wt) is None and wt.exists():
            continue  # a real worktree is there: nothing half-made to leave
        wt.mkdir(parents=True, exist_ok=True)
        for part in (wt / "README.md", wt / "src" / "part.py"):  # a checkout stops mid-tree: a file, a folder begun
            part.parent.mkdir(parents=True, exist_ok=True)
            part.write_text(f"{tid}: checked out halfway when the dispatcher was killed\n")
            e.injected[str(part.relative_to(e.root))] = hashlib.sha256(part.read_bytes()).hexdigest()  # kept, wherever
        if f.params.get("held"):
            _hold(e, wt, len(e.busy_procs))
        made.append(tid)
    if not made:
        raise NotApplied(f"no ticket without a worktree among {f.target or 'all'}")
    if f.params.get("held"):
        e.wait_busy()
    return f"half-made worktree(s) for {', '.join(made)}" + (" (held by a live process)" if f.params.get("held") else "")


def branch_checked_out(e: SimWorld, f: Fault) -> str:
    """A human's own checkout of each target ticket's branch (`git worktree add ../human/T-1 healer/T-1`), beside the
    fleet: git refuses the branch to the ticket's worktree while it is there."""
    ids = tickets(e, f)
    for tid in ids:
        e.git.add_worktree(e.root, e.root.parent / "human" / tid, cv.branch_for(tid), e.policy.fleet.main_branch)
    return f"{len(ids)} branch(es) checked out by a human"


def release_worktree(e: SimWorld, f: Fault) -> str:
    for proc, tree in e.busy_procs:
        tree.kill(0.5)
        try:
            proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 - reaped by the tree kill already
            pass
    n = len(e.busy_procs)
    e.busy_procs.clear()
    return f"{n} holder process(es) ended"


INJECT = {**checkouts.INJECT, **{fn.__name__: fn for fn in (
    command, failpoint, kill_agent, stop_agent, continue_agent, hung_agent, kill_supervisor, stop_supervisor,
    continue_supervisor, kill_dispatcher, stop_dispatcher, continue_dispatcher, frozen_dispatch, thaw_dispatch,
    red_main, green_main, move_ticket, stale_labels, broken_proposal, same_commit_repush, alert_flood, clock_jump,
    busy_worktree, release_worktree, half_made_worktree, branch_checked_out, model_down, store_read_only, disk_full,
    disk_freed)}, **adopted.SIM, **operator.SIM}
