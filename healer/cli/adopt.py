"""CLI: adopt — find the agent loops healer did not launch and register them (docs/adopt.md, README "Commands")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from healer.cli.common import JsonOpt, PolicyOpt, RootOpt, policy_for, print_json, require_fleet, store_for
from healer.clock import system


def _row(a, status: str, views: dict) -> dict[str, Any]:
    v = views.get(a.id)
    return {"status": status, "id": a.id, "rule": a.rule, "pid": a.pid, "pgid": a.pgid, "start_ticks": a.start_ticks,
            "started_at": a.started_at, "cwd": a.cwd, "worktree": a.worktree, "cli": a.cli,
            "session_id": (v.adopted.session_id if v else None) or a.session_id, "adopted_at": a.adopted_at,
            "argv": (a.data or {}).get("argv", []), "cost_usd": v.cost_usd if v else None,
            "activity_at": v.activity_at if v else None, "iterations": v.iterations if v else None,
            "sessions": list(v.sessions) if v else []}


def adopt(as_json: bool = JsonOpt, root: Path = RootOpt, policy: Path = PolicyOpt,
          dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be adopted; register nothing.")) -> None:
    """Scan this host's processes with the policy's `adopt:` rules; register the loops found (never restarted)."""
    from healer import adopt as shell  # lazy: pulls the loop's usage meter and git: 60 ms of `healer --help`

    r = require_fleet(root)
    pol = policy_for(r, policy)
    store = store_for(r, readonly=dry_run)
    try:
        res = shell.scan(store, pol, system(), write=not dry_run)
        views = {} if dry_run else {v.adopted.id: v for v in shell.observe(store, pol, system())}
        rows = ([_row(a, "would adopt" if dry_run else "adopted", views) for a in res.registered]
                + [_row(a, "known", views) for a in res.known] + [_row(a, "gone", views) for a in res.gone])
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
