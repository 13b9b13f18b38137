"""CLI: `healer repair run|list` and `healer mcp serve` (docs/repair.md, README "Commands")."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import typer
from rich.table import Table

from healer.cli.common import JsonOpt, PolicyOpt, RootOpt, console, policy_for, print_json, require_fleet
from healer.clock import iso, system
from healer.errors import STOPPED, HealerError, UsageError
from healer.store import open_store

PRESETS = ("builtin", "claude", "codex", "command")


def mcp_serve(
    root: Path = RootOpt,
    run_id: str = typer.Option(None, "--run-id", help="Repair run this session belongs to (the tool-call budget is per run)."),
    policy: Path = PolicyOpt,
) -> None:
    """Serve the repair agent's tools over MCP (stdio). Read-only diagnosis plus the five safe actions."""
    from healer.repair.server import serve  # lazy: pulls pydantic, docker…: 806 ms of `healer --help`

    r = require_fleet(root)
    if run_id is not None and not _safe_run_id(run_id):
        raise UsageError(f"--run-id: expected letters, digits, '.', '_' or '-', got {run_id!r}")
    serve(r, run_id=run_id, policy=policy_for(r, policy))


def _safe_run_id(s: str) -> bool:
    return bool(re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", s))


def repair_run(
    root: Path = RootOpt,
    agent: str = typer.Option(None, "--agent", help="builtin | claude | codex | command (default: the policy's repair_agent.agent.preset)."),
    force: bool = typer.Option(False, "--force", help="Run even past today's cap of repair runs, or under .healer/HALT (every action then refused)."),
    policy: Path = PolicyOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Launch the repair agent now, confined to `healer mcp serve`; print what it did.

    An operator asking is the trigger, so the blockage conditions are not checked;
    the daily cap and .healer/HALT are (unless --force; under HALT every action is still refused).
    """
    from healer.core.trigger import runs_today  # lazy: pulls pydantic, networkx: 243 ms of `healer --help`
    from healer.repair import launcher  # lazy: pulls pydantic, docker…: 546 ms of `healer --help`

    if agent is not None and agent not in PRESETS:
        raise UsageError(f"--agent: expected one of {', '.join(PRESETS)}, got {agent!r}")
    r = require_fleet(root)
    pol = policy_for(r, policy)
    if (r / ".healer" / "HALT").exists() and not force:
        raise HealerError(f"{r / '.healer' / 'HALT'} exists: observe-only, the repair agent would be refused every action; "
                          "remove it, or pass --force to diagnose anyway", STOPPED)
    clock = system()
    store = open_store(r, clock)
    try:
        n = runs_today(launcher.runs(store), clock.now())
        if n >= pol.repair_agent.max_runs_per_day and not force:
            raise UsageError(f"repair agent: daily cap reached ({n} of {pol.repair_agent.max_runs_per_day} runs today); "
                             "pass --force to run anyway")
        res = launcher.launch(r, pol, store, clock, agent=agent, reason="operator: healer repair run")
    finally:
        store.close()
    if as_json:
        print_json(res.as_dict())
    else:
        status = "timed out (tree killed)" if res.timed_out else f"exit {res.exit_code}"
        console.print(f"repair run [bold]{res.run_id}[/] ({res.agent}): {status}; {res.calls} tool calls, "
                      f"{res.done} done, {res.refused} refused; tickets touched: {_few(res.touched)}")
        console.print(f"scratch: {res.scratch}")
    if res.timed_out:
        raise typer.Exit(2)


def _few(items: list[str], n: int = 8) -> str:
    if not items:
        return "none"
    return ", ".join(items) if len(items) <= n else f"{len(items)} ({', '.join(items[:n])}, …)"


def repair_list(root: Path = RootOpt, as_json: bool = JsonOpt) -> None:
    """List past repair runs (from the event log)."""
    store = open_store(require_fleet(root))
    try:
        ends = {e.subject: e for e in store.events(kinds=["repair.ended"])}
        rows = []
        for e in store.events(kinds=["repair.started"]):
            end = ends.get(e.subject)
            rows.append({"run": e.subject, "started": iso(e.at), "agent": e.payload.get("agent"),
                         "reason": e.payload.get("reason", ""),
                         **({k: end.payload.get(k) for k in ("exit_code", "timed_out", "calls", "done", "refused")} if end else {})})
    finally:
        store.close()
    if as_json:
        print_json(rows)
        return

    t = Table("run", "started", "agent", "exit", "calls", "done", "refused", "reason")
    for r in rows:
        t.add_row(r["run"], r["started"], str(r["agent"]), "timeout" if r.get("timed_out") else str(r.get("exit_code", "…")),
                  str(r.get("calls", "")), str(r.get("done", "")), str(r.get("refused", "")), r["reason"])
    console.print(t)


def repair_builtin_agent(
    config: Path = typer.Option(..., "--config", help="The generated MCP config (mcpServers.healer)."),
    max_calls: int = typer.Option(None, "--max-calls", help="Stop before this many tool calls (default: what the server reports)."),
) -> None:
    """The deterministic built-in repair agent: an MCP client that diagnoses and applies the safe actions."""
    from healer.repair import builtin  # lazy: pulls pydantic, docker…: 778 ms of `healer --help`

    summary = builtin.run_from_config(config, max_calls=max_calls)
    from healer.repair import container  # lazy: pulls pydantic, docker…: 551 ms of `healer --help`

    if container.sandboxed():  # stdout is the MCP channel in the docker sandbox: report on stderr
        sys.stderr.write(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
        return
    print_json(summary)


def register(app: typer.Typer) -> None:
    repair = typer.Typer(help="The constrained repair agent (last resort).", no_args_is_help=True)
    repair.command("run")(repair_run)
    repair.command("list")(repair_list)
    repair.command("builtin-agent", hidden=True)(repair_builtin_agent)
    app.add_typer(repair, name="repair")
    mcp = typer.Typer(help="The MCP tool server the repair agent talks to.", no_args_is_help=True)
    mcp.command("serve")(mcp_serve)
    app.add_typer(mcp, name="mcp")
