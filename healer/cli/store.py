"""`healer store migrate|copy|info`: the fleet's store, SQLite or PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import typer

from healer.cli.common import JsonOpt, RootOpt, console, find_root, print_json

app = typer.Typer(help="The fleet's store: migrate its schema, copy it to another backend.", no_args_is_help=True)

UrlOpt = typer.Option(None, "--url", help="Store URL (default: $HEALER_STORE_URL, .healer/config.yaml, else the SQLite file).")


def _url(root: Path | None, url: str | None) -> tuple[str, Path]:
    """The store to inspect or migrate: it must be there (these commands never make one)."""
    import os

    from healer.store import ENV_URL, existing, store_url

    r = find_root(root)
    where = "--url" if url else ENV_URL if os.environ.get(ENV_URL) else f"the store of {r}"
    return existing(url or store_url(r), where), r


@app.command("migrate")
def migrate(root: Path = RootOpt, url: str = UrlOpt, as_json: bool = JsonOpt) -> None:
    """Bring the store's schema to this healer's version (forward-only; safe to repeat, safe on many hosts at once)."""
    from healer.store import open_url

    u, r = _url(root, url)
    s = open_url(u, root=r, migrate=False)
    try:
        before, after = s.migrate()
        where = s.path
    finally:
        s.close()
    if as_json:
        print_json({"store": where, "before": before, "after": after})
    else:
        typer.echo(f"{where}: schema v{before} → v{after}" + (" (already current)" if before == after else ""))


@app.command("copy")
def copy(src: str = typer.Option(..., "--from", help="Source store URL, e.g. sqlite:.healer/healer.db"),
         dst: str = typer.Option(..., "--to", help="Destination store URL (empty), e.g. postgresql://healer@db/fleet"),
         as_json: bool = JsonOpt) -> None:
    """Copy every table, ids kept, into an empty store; the source is not changed."""
    from healer.store import check_url, existing, open_url
    from healer.store.copy import copy_store

    existing(src, "--from")
    check_url(dst)
    a = open_url(src)
    try:
        b = open_url(dst)
        try:
            rep = copy_store(a, b)
        finally:
            b.close()
    finally:
        a.close()
    if as_json:
        print_json({"from": rep.source, "to": rep.dest, "rows": rep.rows})
        return
    total = sum(rep.rows.values())
    typer.echo(f"copied {total} rows ({', '.join(f'{t} {n}' for t, n in rep.rows.items() if n)}) from {rep.source} to {rep.dest}")
    typer.echo("next: `healer init --store URL` on each host (or set HEALER_STORE_URL)")


@app.command("info")
def info(root: Path = RootOpt, url: str = UrlOpt, as_json: bool = JsonOpt) -> None:
    """Which store this fleet uses, its schema version and size."""
    from healer.store import open_url
    from healer.store.migrations import CURRENT

    u, r = _url(root, url)
    s = open_url(u, root=r, migrate=False)  # an inspection: it neither migrates the store nor refuses a newer one
    try:
        v = s.version()
        data: dict = {"store": s.path, "schema_version": v}
        if v == CURRENT:
            data.update(events=s.last_event_id(), tickets=len(s.tickets()))
        else:
            data["note"] = (f"newer than this healer ({CURRENT}): upgrade healer" if v > CURRENT else
                            f"older than this healer ({CURRENT}): `healer store migrate` brings it up")
        if hasattr(s, "server_info"):
            data.update(s.server_info())
    finally:
        s.close()
    if as_json:
        print_json(data)
    else:
        for k, v in data.items():
            console.print(f"{k}: {v}")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="store")
