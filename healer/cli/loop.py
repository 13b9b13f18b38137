"""CLI: `healer loop run|status|list|pause` (docs/loop.md, README "Commands")."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.table import Table

from healer import procs
from healer.cli.common import JsonOpt, console, print_json
from healer.clock import system
from healer.errors import InvalidInput, UsageError  # noqa: F401 - used by the other commands
from healer.loop.start import _fleet_root, _workdir, start
from healer.loop.state import RunPaths, check_run_id, describe, run_ids
from healer.store import open_store

loop_app = typer.Typer(help="The governed loop: one agent, one task, one working tree, until the gates pass.",
                       no_args_is_help=True)

WorkdirOpt = typer.Option(None, "--workdir", "-w", help="The working tree (default: the current folder).")
FleetOpt = typer.Option(None, "--root", help="Fleet root whose store gets the events (default: $HEALER_ROOT, else the "
                                             "working tree's own .healer/healer.db).")


def run_cmd(
    ctx: typer.Context,
    policy: Path | None = typer.Option(None, "--policy", "-p", help="Policy file (default: WORKDIR/healer.yaml, else the "
                                                                    "embedded default, which has no gates)."),
    task: Path | None = typer.Option(None, "--task", "-t", help="The task, a Markdown file."),
    workdir: Path | None = WorkdirOpt,
    agent: str | None = typer.Option(None, "--agent", help="Agent preset: command, claude or codex (overrides the policy)."),
    agent_cmd: str | None = typer.Option(None, "--agent-cmd", help="Agent argv as one string, split into words (never run "
                                                                   "by a shell); or give the argv after `--`."),
    resume: str | None = typer.Option(None, "--resume", help="Continue this run from its persisted state."),
    run_id: str | None = typer.Option(None, "--run-id", help="The run id (default: a fresh one)."),
    root: Path | None = FleetOpt,
    max_iterations: int | None = typer.Option(None, "--max-iterations", min=1, help="Override loop.max_iterations "
                                                                                    "(never above absolute_max)."),
    allow_dirty: bool = typer.Option(False, "--allow-dirty", help="Start although tracked files have changes (staged or "
                                                                  "not); the loop's commits never include them."),
) -> None:
    """Run the governed loop until the gates pass (0), the budget ends (2), it stalls (3) or is stopped (4)."""
    raise typer.Exit(start(policy=policy, task=task, workdir=workdir, agent=agent, agent_cmd=agent_cmd,
                           argv_after=list(ctx.args), resume=resume, run_id=run_id, root=root,
                           max_iterations=max_iterations, allow_dirty=allow_dirty))


def _fleet_workdirs(root: Path | None) -> dict[str, Path]:
    """run id -> working tree, from the fleet's loop.started events."""
    r = _fleet_root(root) or _nearest_store()
    if r is None:
        return {}

    s = open_store(r)
    try:
        return {e.subject: Path(e.payload["workdir"]) for e in s.events(kinds=["loop.started"]) if e.payload.get("workdir")}
    finally:
        s.close()


def _nearest_store() -> Path | None:
    # `healer loop list` run in a fleet's root should see the fleet's runs without --root
    here = Path.cwd().resolve()
    return next((d for d in (here, *here.parents) if (d / ".healer" / "healer.db").is_file()), None)


def _locate(run_id: str, workdir: Path | None, root: Path | None) -> Path:
    check_run_id(run_id)
    wd = _workdir(workdir)
    if RunPaths(wd, run_id).state.exists():
        return wd
    if workdir is None:
        found = _fleet_workdirs(root).get(run_id)
        if found is not None and RunPaths(found, run_id).state.exists():
            return found
    raise UsageError(f"no run {run_id!r} in {wd}" + ("" if workdir else " nor in the fleet's event log"))


def status_cmd(run_id: str = typer.Argument(..., help="The run id."), workdir: Path | None = WorkdirOpt,
               root: Path | None = FleetOpt, as_json: bool = JsonOpt) -> None:
    """Show one run: status, iterations, last gates, failure signature, cost, exit."""
    d = describe(_locate(run_id, workdir, root), run_id, procs.same)
    if as_json:
        print_json(d)
        return
    t = Table(show_header=False, box=None)
    for k in ("run_id", "workdir", "status", "iterations", "max_iterations", "exit_code", "reason", "cost_usd",
              "state_hash", "failure_signature", "last_failure", "committed", "commit"):
        t.add_row(k, "" if d[k] is None else str(d[k]))
    t.add_row("gates", ", ".join(f"{g['name']} {g['outcome']}" for g in d["gates"]))
    console.print(t)


def list_cmd(workdir: Path | None = WorkdirOpt, root: Path | None = FleetOpt, as_json: bool = JsonOpt) -> None:
    """List the runs of a working tree and of the fleet's working trees (--root, $HEALER_ROOT or the fleet around
    the current folder)."""
    wd = _workdir(workdir)
    places: dict[tuple[str, str], Path] = {}
    for rid in run_ids(wd):
        places[(str(wd), rid)] = wd
    for rid, w in _fleet_workdirs(root).items():
        if (w / ".healer" / "runs" / rid / "state.json").exists():
            places[(str(w), rid)] = w
    rows = []
    for (_, rid), w in sorted(places.items()):
        try:
            rows.append(describe(w, rid, procs.same))
        except UsageError:
            continue
    rows.sort(key=lambda d: d["started_at"])
    if as_json:
        print_json(rows)
        return
    t = Table("run", "status", "iter", "exit", "reason", "cost", "workdir")
    for d in rows:
        t.add_row(d["run_id"], d["status"], f"{d['iterations']}/{d['max_iterations']}",
                  "" if d["exit_code"] is None else str(d["exit_code"]), (d["reason"] or "")[:60],
                  f"${d['cost_usd']:.2f}", d["workdir"])
    console.print(t)


def pause_cmd(run_id: str = typer.Argument(..., help="The run id."), workdir: Path | None = WorkdirOpt,
              root: Path | None = FleetOpt) -> None:
    """Ask a run to stop before its next iteration (exit 4); continue it later with --resume."""
    wd = _locate(run_id, workdir, root)
    d = describe(wd, run_id, procs.same)
    if d["status"] == "ended":  # a PAUSE file would only mislead: nothing runs to read it
        more = f"; continue it with: healer loop run --workdir {wd} --resume {run_id}" if d["exit_code"] == 4 else ""
        typer.echo(f"{run_id} already ended (exit {d['exit_code']}: {d['reason']}); nothing to pause{more}")
        return
    p = RunPaths(wd, run_id).pause
    p.write_text(f"pause requested at {system().now():.3f} by pid {os.getpid()}\n")
    typer.echo(f"pause requested for {run_id}: it stops before its next iteration (exit 4); "
               f"continue with: healer loop run --workdir {wd} --resume {run_id}")


def register(app: typer.Typer) -> None:
    loop_app.command("run", context_settings={"allow_extra_args": True})(run_cmd)
    loop_app.command("status")(status_cmd)
    loop_app.command("list")(list_cmd)
    loop_app.command("pause")(pause_cmd)
    app.add_typer(loop_app, name="loop")
