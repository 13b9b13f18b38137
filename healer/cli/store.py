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
            from healer.store import identity

            data.update(events=s.last_event_id(), tickets=len(s.tickets()), fleet_id=s.get_setting(identity.SETTING),
                        git_fleet_id=identity.git_id(r))
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


@app.command("restore")
def restore(file: Path = typer.Argument(..., help="An SQLite copy of this fleet's board: a backup, or the output of "
                                        "`sqlite3 healer.db .recover | sqlite3 FILE`."),
            root: Path = RootOpt) -> None:
    """Put a copy of this fleet's SQLite board back as its store (the store there now, if any, is kept aside).
    The copy must be a sound healer store of this fleet (its fleet id is the one in the fleet's git)."""
    import os
    import sqlite3

    from healer.errors import INVALID_INPUT, HealerError, UsageError
    from healer.store import ENV_URL, db_path, identity, open_store, read_config, sqlite_path
    from healer.store.migrations import CURRENT

    r = find_root(root)
    url = os.environ.get(ENV_URL) or read_config(r).get("store")
    if url and not str(url).startswith("sqlite:"):
        raise UsageError(f"{url.split('@')[-1]}: `healer store restore` puts back an SQLite board; restore a "
                         "PostgreSQL one with the database's own tools (pg_restore), into the same schema")
    dest = sqlite_path(str(url)) if url else db_path(r)
    src = Path(file).resolve()
    if not src.is_file() or src.stat().st_size == 0:
        raise UsageError(f"{file}: no such store file (or an empty one)")
    if dest.exists() and src.samefile(dest):
        raise UsageError(f"{file}: that is the fleet's store itself")
    try:
        con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
        try:
            check = con.execute("PRAGMA integrity_check").fetchone()[0]
            version = con.execute("PRAGMA user_version").fetchone()[0]
            row = con.execute("SELECT value FROM settings WHERE key=?", (identity.SETTING,)).fetchone()
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        raise HealerError(f"{file}: not a healer store ({e})", INVALID_INPUT) from None
    if check != "ok":
        raise HealerError(f"{file}: damaged ({check.splitlines()[0]}); recover it first: `sqlite3 {file} .recover | "
                          f"sqlite3 {file}.recovered`", INVALID_INPUT)
    if version > CURRENT:
        raise HealerError(f"{file}: schema v{version} is newer than this healer's (v{CURRENT}): upgrade healer", INVALID_INPUT)
    import json

    fid = json.loads(row[0]) if row else None
    gid = identity.git_id(r)
    if gid and fid != gid:
        raise HealerError(f"{file}: the board of another fleet ({fid or 'no fleet id'}; this fleet is {gid} in git config "
                          f"{identity.GIT_KEY})", INVALID_INPUT)
    from healer.clock import system

    now = system().now()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".restoring")
    a, b = sqlite3.connect(f"file:{src}?mode=ro", uri=True), sqlite3.connect(tmp)
    try:
        a.backup(b)  # a consistent copy, whatever journal the source has
    finally:
        a.close()
        b.close()
    kept = None
    if dest.exists():
        kept = dest.with_name(f"{dest.name}.old-{int(now)}")
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(dest) + suffix)
            if p.exists():
                os.replace(p, Path(str(kept) + suffix))
    os.replace(tmp, dest)
    s = open_store(r)
    try:
        if fid is None:  # a board from before fleet ids, restored into a fleet that has none either
            identity.check_open(s, r, str(dest), identity.git_id(r))
        s.append("store.restored", str(dest), {"from": str(src), "kept": str(kept) if kept else None, "actor": "human"})
        n = len(s.tickets())
    finally:
        s.close()
    typer.echo(f"restored {dest} from {src} ({n} tickets)" + (f"; the store that was there is kept as {kept}" if kept else ""))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="store")
