"""CLI: init, failpoints, doctor."""

from __future__ import annotations

import shutil
from pathlib import Path

import typer
from rich.table import Table

from healer.cli.common import JsonOpt, RootOpt, console, find_root, print_json


def init(root: Path = RootOpt) -> None:
    """Create .healer/ in the fleet root, a healer.yaml policy if absent, and ignore .healer/ in git."""
    from healer.policy.load import default_policy_path
    from healer.store import open_store

    r = find_root(root) if root else Path.cwd().resolve()
    (r / ".healer").mkdir(parents=True, exist_ok=True)
    store = open_store(r)
    store.append("fleet.init", str(r), {})
    store.close()
    pol = r / "healer.yaml"
    if not pol.exists():
        shutil.copyfile(default_policy_path(), pol)
        typer.echo(f"wrote {pol}")
    gi = r / ".gitignore"
    lines = gi.read_text().splitlines() if gi.exists() else []
    if ".healer/" not in lines and ".healer" not in lines:
        with gi.open("a") as f:
            if lines and lines[-1] != "":
                f.write("\n")
            f.write(".healer/\n")
    typer.echo(f"healer fleet ready at {r}")


def failpoints_cmd(as_json: bool = JsonOpt) -> None:
    """List every failpoint name and where it sits (aim HEALER_FAILPOINTS at them)."""
    from healer import failpoints

    failpoints.load_all()
    pts = failpoints.registry()
    if as_json:
        print_json([{"name": p.name, "where": p.where, "module": p.module, "line": p.line} for p in pts])
        return
    t = Table("name", "where", "module")
    for p in pts:
        t.add_row(p.name, p.where, f"{p.module}:{p.line}")
    console.print(t)


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("failpoints")(failpoints_cmd)
