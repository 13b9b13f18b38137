"""CLI: `healer containers kill|pause|unpause|stop|restart|list|cleanup` (container faults, issue 8).

Without --name or --label the targets are this fleet's containers (label
healer.fleet=<fleet root>); a fault never picks among every container on the host.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from healer.cli.common import JsonOpt, RootOpt, console, find_root, print_json
from healer.errors import UsageError

containers_app = typer.Typer(help="Container faults for game days (Docker): kill, pause, stop, restart.", no_args_is_help=True)

NameOpt = typer.Option(None, "--name", "-n", help="Container name or id (repeatable).")
LabelOpt = typer.Option(None, "--label", "-l", help="Label filter KEY or KEY=VALUE (repeatable, ANDed). Default: this fleet's containers.")
CountOpt = typer.Option(None, "--count", "-c", min=0, help="Blast radius: act on at most N targets, picked at random.")
SeedOpt = typer.Option(None, "--seed", help="Seed of the random pick (same seed, same targets).")
DryOpt = typer.Option(False, "--dry-run", help="List the targets, act on nothing.")


def _scope(root: Path | None, name: list[str] | None, label: list[str] | None) -> tuple[list[str], list[str], Path | None]:
    r = find_root(root)
    fleet = r if (r / ".healer").is_dir() else None
    names, labels = list(name or []), list(label or [])
    if not names and not labels:
        if fleet is None:
            raise UsageError(f"{r}: not a healer fleet; give --name or --label (or --root of a fleet)")
        labels = [f"healer.fleet={fleet}"]
    return names, labels, fleet


def _show(outcomes, as_json: bool) -> None:
    if as_json:
        print_json([o.to_dict() for o in outcomes])
        return
    if not outcomes:
        console.print("no matching container")
        return
    t = Table("action", "name", "id", "before", "after", "note")
    for o in outcomes:
        note = "dry run" if o.dry_run else (o.error or "")
        t.add_row(o.action, o.name, o.id[:12], o.before, o.after, note)
    console.print(t)


def kill(signal: str = typer.Option("SIGKILL", "--signal", "-s", help="Signal name or number."),
         name: list[str] = NameOpt, label: list[str] = LabelOpt, count: int = CountOpt, seed: int = SeedOpt,
         dry_run: bool = DryOpt, root: Path = RootOpt, as_json: bool = JsonOpt) -> None:
    """Send a signal (default SIGKILL) to the targets."""
    from chaos.faults import containers as cf  # lazy: pulls chaos: 9.8 ms of `healer --help`

    names, labels, _ = _scope(root, name, label)
    _show(cf.kill(signal, name=names, label=labels, count=count, seed=seed, dry_run=dry_run), as_json)


def pause(name: list[str] = NameOpt, label: list[str] = LabelOpt, count: int = CountOpt, seed: int = SeedOpt,
          dry_run: bool = DryOpt, root: Path = RootOpt, as_json: bool = JsonOpt) -> None:
    """Freeze the targets (an unpause is journaled first; `healer containers cleanup` replays it)."""
    from chaos.faults import containers as cf  # lazy: pulls chaos: 9.7 ms of `healer --help`

    names, labels, fleet = _scope(root, name, label)
    _show(cf.pause(name=names, label=labels, count=count, seed=seed, dry_run=dry_run,
                   journal=cf.default_journal_path(fleet)), as_json)


def unpause(name: list[str] = NameOpt, label: list[str] = LabelOpt, count: int = CountOpt, seed: int = SeedOpt,
            dry_run: bool = DryOpt, root: Path = RootOpt, as_json: bool = JsonOpt) -> None:
    """Thaw paused targets."""
    from chaos.faults import containers as cf  # lazy: pulls chaos: 9.7 ms of `healer --help`

    names, labels, _ = _scope(root, name, label)
    _show(cf.unpause(name=names, label=labels, count=count, seed=seed, dry_run=dry_run), as_json)


def stop(timeout: float = typer.Option(10.0, "--timeout", "-t", min=0, help="Seconds between SIGTERM and SIGKILL."),
         name: list[str] = NameOpt, label: list[str] = LabelOpt, count: int = CountOpt, seed: int = SeedOpt,
         dry_run: bool = DryOpt, root: Path = RootOpt, as_json: bool = JsonOpt) -> None:
    """Stop the targets: SIGTERM, then SIGKILL after --timeout."""
    from chaos.faults import containers as cf  # lazy: pulls chaos: 9.8 ms of `healer --help`

    names, labels, _ = _scope(root, name, label)
    _show(cf.stop(timeout, name=names, label=labels, count=count, seed=seed, dry_run=dry_run), as_json)


def restart(timeout: float = typer.Option(10.0, "--timeout", "-t", min=0, help="Seconds between SIGTERM and SIGKILL."),
            name: list[str] = NameOpt, label: list[str] = LabelOpt, count: int = CountOpt, seed: int = SeedOpt,
            dry_run: bool = DryOpt, root: Path = RootOpt, as_json: bool = JsonOpt) -> None:
    """Restart the targets (running, paused or exited)."""
    from chaos.faults import containers as cf  # lazy: pulls chaos: 9.6 ms of `healer --help`

    names, labels, _ = _scope(root, name, label)
    _show(cf.restart(timeout, name=names, label=labels, count=count, seed=seed, dry_run=dry_run), as_json)


def list_cmd(name: list[str] = NameOpt, label: list[str] = LabelOpt, count: int = CountOpt, seed: int = SeedOpt,
             root: Path = RootOpt, as_json: bool = JsonOpt) -> None:
    """List the containers a fault with the same options would hit (all states)."""
    from chaos.faults import containers as cf  # lazy: pulls chaos: 9.6 ms of `healer --help`

    names, labels, _ = _scope(root, name, label)
    targets = cf.listing(name=names, label=labels, count=count, seed=seed)
    if as_json:
        print_json([{"id": t.id, "name": t.name, "state": t.state, "labels": t.labels} for t in targets])
        return
    t = Table("name", "id", "state", "ticket", "run")
    for x in targets:
        t.add_row(x.name, x.id[:12], x.state, x.labels.get("healer.ticket", ""), x.labels.get("healer.run", ""))
    console.print(t)


def cleanup(root: Path = RootOpt, as_json: bool = JsonOpt) -> None:
    """Replay the fleet's undo journal and unpause every paused container of the fleet."""
    from chaos.faults import containers as cf  # lazy: pulls chaos: 9.8 ms of `healer --help`

    r = find_root(root)
    if not (r / ".healer").is_dir():
        raise UsageError(f"{r}: not a healer fleet (no .healer/); pass --root")
    _show(cf.cleanup(str(r), journal=cf.default_journal_path(r)), as_json)


def register(app: typer.Typer) -> None:
    for fn, cmd in ((kill, "kill"), (pause, "pause"), (unpause, "unpause"), (stop, "stop"), (restart, "restart"),
                    (list_cmd, "list"), (cleanup, "cleanup")):
        containers_app.command(cmd)(fn)
    app.add_typer(containers_app, name="containers")
