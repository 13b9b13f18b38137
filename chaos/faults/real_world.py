"""The real world's faults: name -> inject(world, fault) -> what happened (one line).

Each acts, through the real engine's `RealWorld` interface (chaos/faults/world.py), on real processes (signals),
real git repositories and files, the fleet's store, Docker containers. Every fault journals its own undo in the
run's undo journal before it acts. chaos/faults/registry.py describes them (one `FaultSpec` each),
chaos/faults/worlds.py joins this table to the records; the real engine only calls `worlds.inject(REAL, self, fault)`.
"""

from __future__ import annotations

from pathlib import Path

from chaos.faults import NotApplied, adopted, checkouts, repo
from chaos.faults import containers as cf
from chaos.faults import process as pfault
from chaos.faults.board import alert_flood, move_ticket, stale_labels, tickets
from chaos.faults.command import inject as run_command
from chaos.faults.world import RealWorld, ServerWorld
from chaos.scenario import match
from chaos.scenario_parts import Fault
from healer.records import Agent, Worktree


def _agents(e: RealWorld, f: Fault) -> list[Agent]:
    return [a for a in e.store.agents(states=["running"])
            if (a.pid or (a.kind == "container" and a.container)) and match(f.target or "*", a.ticket_id or "")]


def _worktrees(e: RealWorld, f: Fault) -> list[Worktree]:
    return [w for w in e.store.worktrees() if match(f.target or "*", w.ticket_id or "") and Path(w.path).exists()]


def _outcomes(kind: str, out: list) -> str:
    if not out:
        return f"{kind}: no container to act on"
    return f"{kind}: " + ", ".join(f"{o.name} {o.before}->{o.after}" + (f" ({o.error})" if o.error else "") for o in out)


# -- the healer's own processes ------------------------------------------------------------
def kill_supervisor(e: RealWorld, f: Fault) -> str:
    if e.sup is None:
        raise NotApplied("no live supervisor (no supervisor tick running)")
    e.sup.faulted = f.fault
    return f"SIGKILL {pfault.kill(e.sup.proc.pid, e.sup.tree.marker)}"


def stop_supervisor(e: RealWorld, f: Fault) -> str:
    if e.sup is None:
        raise NotApplied("no live supervisor (no supervisor tick running)")
    return f"SIGSTOP {pfault.stop(e.undo, e.sup.proc.pid, e.sup.tree.marker, role='supervisor')}"


def continue_supervisor(e: RealWorld, f: Fault) -> str:
    if e.sup is None:
        raise NotApplied("no live supervisor (no supervisor tick running)")
    return f"SIGCONT {pfault.cont(e.sup.proc.pid, e.sup.tree.marker)}"


def kill_dispatcher(e: RealWorld, f: Fault) -> str:
    c = e.disp
    if c is None:
        raise NotApplied("no live dispatcher")
    c.faulted = f.fault  # the dispatcher only: its agents live in their own sessions and survive it
    if f.params.get("restart_after") is not None:
        e.disp_restart_at = e.elapsed() + float(f.params["restart_after"])
        e.disp_host = f.params.get("host") or e.disp_host  # back under another HEALER_HOST_ID (issue 40)
    return f"SIGKILL {pfault.kill(c.proc.pid, tree=False)}"


def stop_dispatcher(e: RealWorld, f: Fault) -> str:
    if e.disp is None:
        raise NotApplied("no live dispatcher")
    return f"SIGSTOP {pfault.stop(e.undo, e.disp.proc.pid, tree=False, role='dispatcher')}"


def continue_dispatcher(e: RealWorld, f: Fault) -> str:
    if e.disp is None:
        raise NotApplied("no live dispatcher")
    return f"SIGCONT {pfault.cont(e.disp.proc.pid, tree=False)}"


frozen_dispatch = stop_dispatcher  # a frozen dispatcher: alive, its lease held, doing nothing
thaw_dispatch = continue_dispatcher


# -- agents ---------------------------------------------------------------------------------
def _agent_fault(e: RealWorld, f: Fault) -> str:
    k = f.fault
    done: list[int] = []
    boxed = []
    for a in _agents(e, f):
        if not a.pid:
            boxed.append(_container_agent_fault(e, k, a))
            continue
        marker = (a.data or {}).get("marker")
        if k == "kill_agent":
            done += pfault.kill(a.pid, marker)
        elif k == "continue_agent":
            done += pfault.cont(a.pid, marker)
        else:  # stopped or hung: alive, silent, no progress
            done += pfault.stop(e.undo, a.pid, marker, role=f"agent {a.id}")
    sig = {"kill_agent": "SIGKILL", "continue_agent": "SIGCONT"}.get(k, "SIGSTOP")
    if not done and not boxed:
        raise NotApplied(f"{k}: no live agent on {f.target or 'any ticket'}")
    return "; ".join([f"{k}: {sig} pids {done}"] * bool(done or not boxed) + boxed)


def _container_agent_fault(e: RealWorld, k: str, a: Agent) -> str:
    """kill_agent / stop_agent / continue_agent on an agent that lives in a container (no pid on this host)."""
    common = dict(name=a.container, label=e.fleet_label(), client=e.docker(), store=e.store)
    if k == "kill_agent":
        out = cf.kill("KILL", **common)
    elif k == "continue_agent":
        out = cf.unpause(**common)
    else:  # stopped or hung: alive, silent, no progress -- a paused container
        out = cf.pause(journal=e.undo, guard=False, **common)
    return _outcomes(k, out)


def container(e: RealWorld, f: Fault) -> str:
    """container_kill|pause|unpause|stop|restart on the fleet's containers, aimed by ticket glob (`target`),
    `params.name` / `params.label`, at most `count` of them (seeded pick); the unpause of each pause is
    journaled in the run's undo journal before it acts. States before/after come from the SDK."""
    params = dict(f.params)
    name, label = params.pop("name", None), params.pop("label", None)
    out = cf.inject(f.fault, fleet=str(e.root), target=f.target, count=f.count, seed=e.seed, params=params,
                    journal=e.undo, guard=False, client=e.docker(), store=e.store, name=name, label=label)
    return _outcomes(f.fault, out)


def same_commit_repush(e: RealWorld, f: Fault) -> str:
    """From the next run on, the target's agents fail without committing: the same head, pushed again and again."""
    ids = tickets(e, f)
    for tid in ids:
        e.script(tid, "fail")
    return f"{len(ids)} ticket(s) whose agents fail on the same commit from the next run on"


def broken_proposal(e: RealWorld, f: Fault) -> str:
    """From the next run on, the target's agents commit a BROKEN file: their proposals fail a merge gate that
    refuses it (the scenario's `merge_gates` must have one)."""
    ids = tickets(e, f)
    for tid in ids:
        e.script(tid, "broken")
    return f"{len(ids)} ticket(s) whose proposals fail the merge gates from the next run on"


def clock_jump(e: RealWorld, f: Fault) -> str:
    """Every healer process of the run reads its wall clock through healer/clock.py, which adds the offset in the
    run's clock file (HEALER_CLOCK_OFFSET_FILE): it jumps for all of them at once; monotonic time does not."""
    s = float(f.seconds or 3600) * (-1 if (f.params or {}).get("back") else 1)  # params.back: a step back
    total = e.jump_clock(s)
    return f"wall clock jumped {s:+.0f}s (offset now {total:+.0f}s)"


# -- files and git ----------------------------------------------------------------------------
def busy_worktree(e: RealWorld, f: Fault) -> str:
    n = 0
    for w in _worktrees(e, f):
        e.holders.append(pfault.hold(e.undo, w.path, env=e.env(), role="busy worktree holder", clock=e.wall))
        n += 1
    return f"{n} worktree(s) held by a live process (cwd inside)"


def release_worktree(e: RealWorld, f: Fault) -> str:
    n = len(e.holders)
    for proc, tree in e.holders:
        pfault.release(proc, tree, e.wall)
    e.holders.clear()
    return f"{n} holder process(es) ended"


def red_main(e: RealWorld, f: Fault) -> str:
    return f"main at {repo.set_main(e.root, True)[:12]} is red"


def green_main(e: RealWorld, f: Fault) -> str:
    return f"main at {repo.set_main(e.root, False)[:12]} is green"


# -- the store and notifications -------------------------------------------------------------
def command(e: RealWorld, f: Fault) -> str:
    pr = f.params
    r = run_command(pr["command"], undo=pr.get("undo"), cwd=pr.get("cwd") or str(e.root), timeout=float(pr.get("timeout", 60)),
                    journal=e.undo)
    return f"exit {r['status']}"


def pg_restart(e: ServerWorld, f: Fault) -> str:
    """`pg_ctl restart -m fast`: an operator's routine restart of the game day's own server (chaos/pgday.py holds it
    as `cluster`); a game day without one (the SQLite fleet of chaos/engine/real.py) has nothing to restart."""
    cluster = getattr(e, "cluster", None)  # the SQLite real engine has none (not a ServerWorld)
    if cluster is None:
        raise NotApplied("no PostgreSQL server of the game day's own to restart (a `hosts:` game day runs one)")
    before = cluster.pid
    cluster.restart("fast")
    return f"pg_ctl restart -m fast: postmaster {before} -> {cluster.pid}"


def pg_kill_mid_merge(e: ServerWorld, f: Fault) -> str:
    """The store's connection killed mid-merge: the host stopped at its failpoint loses its PostgreSQL backends
    (chaos/pgday.py's kill_mid_merge); a game day without hosts on a server of its own has none."""
    if getattr(e, "cluster", None) is None or getattr(e, "fleet", None) is None:
        raise NotApplied("no hosts on a PostgreSQL server of the game day's own (a `hosts:` game day runs them)")
    return e.kill_mid_merge()


def failpoint(e: RealWorld, f: Fault) -> str:
    return "failpoint: armed before the run"


INJECT = {
    **{fn.__name__: fn for fn in (
        kill_supervisor, stop_supervisor, continue_supervisor, kill_dispatcher, stop_dispatcher, continue_dispatcher,
        busy_worktree, release_worktree, red_main, green_main, move_ticket, stale_labels, alert_flood, command,
        failpoint, same_commit_repush, broken_proposal, clock_jump, pg_restart, pg_kill_mid_merge)},
    **checkouts.INJECT,
    "frozen_dispatch": frozen_dispatch, "thaw_dispatch": thaw_dispatch,
    **dict.fromkeys(("kill_agent", "stop_agent", "continue_agent", "hung_agent"), _agent_fault),
    **dict.fromkeys((f"container_{op}" for op in ("kill", "pause", "unpause", "stop", "restart")), container),
    **adopted.REAL,
}
