"""Game days on loops healer did not launch (issue 44, docs/adopt.md): the adopted_* faults, in both worlds.

Simulated: through the world's adopted loops (chaos/engine/sim_adopt.py), virtual processes the REAL adoption and
supervisor see through the swapped process-table port.

Real: the fixture loop.sh (not ours; HEALER_LOOP_SH_FIXTURE names it) around the real Claude Code CLI, which talks
to the game day's scripted model server (`real: {model: SCRIPT}`), in a git worktree of its own under the game-day
folder, in a session of its own as a person's loop runs. Its kill is journaled first (its tree marker); a SIGSTOP
journals its SIGCONT first. The engine ends it at the end like its other props (`holders`).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from chaos.faults import NotApplied, repo
from chaos.faults import process as pfault
from chaos.faults.world import RealWorld, SimWorld
from chaos.scenario_parts import Fault
from healer import procs

# the reference loop.sh (not ours) where the test machines keep it; else the same shape shipped in chaos/agents/
REFERENCE_LOOP_SH = Path("/work/shared/fixtures/loop-sh/loop.sh")
OWN_LOOP_SH = Path(__file__).resolve().parents[1] / "agents" / "loop.sh"


def loop_sh() -> Path:
    named = os.environ.get("HEALER_LOOP_SH_FIXTURE")
    if named:
        return Path(named)
    return REFERENCE_LOOP_SH if REFERENCE_LOOP_SH.is_file() else OWN_LOOP_SH
CLAUDE_ARGV = "claude -p --permission-mode acceptEdits --allowedTools Bash,Read,Edit,Write --model claude-sonnet-4-5"
RUNAWAY_SCRIPT = "cost_fast"  # the scripted model's turns that bill about $1 each (chaos/agents/models/scripts.py)


def _name(f: Fault) -> str:
    if not f.target:
        raise NotApplied("an adopted_* fault names its loop in `target`")
    return f.target


# -- simulated ---------------------------------------------------------------------------------------------

def sim_loop(e: SimWorld, f: Fault) -> str:
    p = f.params
    converge = p.get("converge_after")
    return e.adopt.start(_name(f), float(p.get("every", 60)), int(p.get("tokens", 10_000)),
                         int(converge) if converge else None)


def sim_hung_cli(e: SimWorld, f: Fault) -> str:
    return e.adopt.hang(_name(f))


def sim_runaway_cost(e: SimWorld, f: Fault) -> str:
    return e.adopt.runaway(_name(f), int(f.params.get("tokens", 1_000_000)))


def sim_endless_loop(e: SimWorld, f: Fault) -> str:
    return e.adopt.endless(_name(f))


def sim_leaking_children(e: SimWorld, f: Fault) -> str:
    return e.adopt.leak(_name(f), int(f.params.get("per_turn", 1)), int(f.params.get("rss_mib", 50)) << 20)


def sim_same_failure(e: SimWorld, f: Fault) -> str:
    p = f.params
    if not p.get("gates") and not p.get("tool"):
        raise NotApplied("adopted_same_failure names the failure: params.gates (its gates' error) or params.tool")
    return e.adopt.failing(_name(f), p.get("gates") or None, p.get("tool") or None)


def sim_flip_flop(e: SimWorld, f: Fault) -> str:
    return e.adopt.working(_name(f), "cycle")


def sim_spinning(e: SimWorld, f: Fault) -> str:
    return e.adopt.working(_name(f), "still")


def sim_killed_session(e: SimWorld, f: Fault) -> str:
    after = f.params.get("reuse_after")
    return e.adopt.kill(_name(f), float(after) if after is not None else None)


# -- real ----------------------------------------------------------------------------------------------------

def _marker(e: RealWorld, name: str) -> str:
    return f"gameday-adopted-{name}-{e.run_id}"


def _real(e: RealWorld, f: Fault) -> tuple[int, str]:
    """The loop's pid, as this game day recorded it when it started it (its chaos.adopt.started event)."""
    name = _name(f)
    pids = [ev.payload["pid"] for ev in e.store.events(kinds=["chaos.adopt.started"]) if ev.subject == name]
    if not pids or not procs.alive(pids[-1]):
        raise NotApplied(f"no running adopted loop {name!r}")
    return pids[-1], _marker(e, name)


def real_loop(e: RealWorld, f: Fault) -> str:
    name = _name(f)
    script = loop_sh()
    if not script.is_file():
        raise NotApplied(f"the loop.sh fixture is not at {script} (HEALER_LOOP_SH_FIXTURE names it)")
    if getattr(e, "model", None) is None:
        raise NotApplied("adopted_loop (real) drives the real Claude Code CLI: the scenario needs `real: {model: SCRIPT}`")
    wt = e.gd / "adopted" / name
    repo.init(wt, {"task.md": "Make the tests pass.\n"})
    repo.git(wt, "add", "-A")
    repo.git(wt, "commit", "-q", "-m", "task")
    tmp = e.gd / "adopted-tmp" / name  # the CLI's scratch (claude-UID/, cc-socks/) in the game day's folder
    tmp.mkdir(parents=True, exist_ok=True)
    p = f.params
    env = e.env({"AGENT": CLAUDE_ARGV, "GATES": "false", "MAX_ITER": str(p.get("converge_after", 50)),
                 "TMPDIR": str(tmp), "LANG": "C.UTF-8"})
    marker = _marker(e, name)
    e.undo.register("kill_marker", marker=marker, role=f"adopted loop {name}")  # before it starts
    (e.gd / "logs").mkdir(exist_ok=True)
    log = open(e.gd / "logs" / f"adopted-{name}.log", "ab")  # noqa: SIM115 - the child holds it; closed below
    try:
        proc, tree = procs.spawn(["bash", str(script)], cwd=wt, env=env, stdout=log, stderr=log, marker=marker)
    finally:
        log.close()
    e.holders.append((proc, tree))
    e.store.append("chaos.adopt.started", name, {"loop": name, "pid": proc.pid, "worktree": str(wt)})
    return f"loop {name} started: loop.sh around claude (pid {proc.pid})"


def real_hung_cli(e: RealWorld, f: Fault) -> str:
    pid, marker = _real(e, f)
    cli = [c for c in pfault.members(pid, marker) if c != pid]
    if not cli:
        raise NotApplied(f"loop {f.target} runs no CLI right now")
    for c in cli:
        pfault.stop(e.undo, c, tree=False, role=f"adopted loop {f.target}'s CLI")  # its SIGCONT journaled first
    return f"loop {f.target}: its CLI stopped ({len(cli)} process(es)), the loop waits on it"


def real_runaway_cost(e: RealWorld, f: Fault) -> str:
    from chaos.agents.models.scripts import build  # lazy: the model scripts, for this fault only, 2 ms

    _real(e, f)
    model = getattr(e, "model", None)
    if model is None:
        raise NotApplied("no scripted model server in this game day (real.model)")
    model.script = build(RUNAWAY_SCRIPT)  # every turn from now bills about $1
    return f"loop {f.target}: the model's turns now bill about $1 each"


def real_killed_session(e: RealWorld, f: Fault) -> str:
    pid, _marker = _real(e, f)
    os.killpg(pid, signal.SIGKILL)  # the session this game day started for the loop (its pgid is its pid)
    e.store.append("chaos.adopt.ended", str(f.target), {"loop": f.target, "pid": pid, "reason": "killed"})
    return f"loop {f.target}: its session killed (pid {pid})"


SIM = {"adopted_loop": sim_loop, "adopted_hung_cli": sim_hung_cli, "adopted_runaway_cost": sim_runaway_cost,
       "adopted_endless_loop": sim_endless_loop, "adopted_killed_session": sim_killed_session,
       "adopted_leaking_children": sim_leaking_children, "adopted_same_failure": sim_same_failure,
       "adopted_flip_flop": sim_flip_flop, "adopted_spinning": sim_spinning}
REAL = {"adopted_loop": real_loop, "adopted_hung_cli": real_hung_cli, "adopted_runaway_cost": real_runaway_cost,
        "adopted_killed_session": real_killed_session}
