"""CLI: adopt — find the agent loops healer did not launch and register them (docs/adopt.md, README "Commands")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from healer.cli.common import JsonOpt, PolicyOpt, RootOpt, policy_for, print_json, require_fleet, store_for
from healer.clock import system


def _row(a, status: str) -> dict[str, Any]:
    return {"status": status, "id": a.id, "rule": a.rule, "pid": a.pid, "pgid": a.pgid, "start_ticks": a.start_ticks,
            "cwd": a.cwd, "worktree": a.worktree, "cli": a.cli, "session_id": a.session_id, "adopted_at": a.adopted_at,
            "argv": (a.data or {}).get("argv", [])}


def adopt(as_json: bool = JsonOpt, root: Path = RootOpt, policy: Path = PolicyOpt,
          dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be adopted; register nothing.")) -> None:
    """Scan this host's processes with the policy's `adopt:` rules; register the loops found (never restarted)."""
    from healer import adopt as shell  # lazy: pulls the loop's usage meter and git: 60 ms of `healer --help`

    r = require_fleet(root)
    pol = policy_for(r, policy)
    store = store_for(r, readonly=dry_run)
    try:
        res = shell.scan(store, pol, system(), write=not dry_run)
        rows = ([_row(a, "would adopt" if dry_run else "adopted") for a in res.registered]
                + [_row(a, "known") for a in res.known] + [_row(a, "gone") for a in res.gone])
    finally:
        store.close()
    if as_json:
        print_json({"rules": [x.name for x in pol.adopt.rules], "dry_run": dry_run, "loops": rows})
        return
    if not pol.adopt.rules:
        typer.echo("no adopt rules in the policy (adopt.rules): nothing to look for")
        return
    if not rows:
        typer.echo(f"no running loop matches the adopt rules ({', '.join(x.name for x in pol.adopt.rules)})")
    for x in rows:
        typer.echo(f"{x['status']:<12} {x['id']:<22} pid {x['pid']:<7} pgid {x['pgid']:<7} {x['rule']:<12} {x['cli']:<8} "
                   f"{x['worktree']}")


def register(app: typer.Typer) -> None:
    app.command("adopt")(adopt)
