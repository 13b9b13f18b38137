"""`healer store migrate|copy|info|backup|restore`: the fleet's store, SQLite or PostgreSQL."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from healer.cli.common import JsonOpt, RootOpt, console, find_root, print_json
from healer.clock import system
from healer.errors import INVALID_INPUT, HealerError, UsageError
from healer.store import ENV_URL, check_url, existing, identity, open_url, store_url
from healer.store.migrations import CURRENT

app = typer.Typer(help="The fleet's store: migrate its schema, copy it to another backend, back it up and restore it.", no_args_is_help=True)

UrlOpt = typer.Option(None, "--url", help="Store URL (default: $HEALER_STORE_URL, .healer/config.yaml, else the SQLite file).")


def _url(root: Path | None, url: str | None) -> tuple[str, Path]:
    """The store to inspect or migrate: it must be there (these commands never make one)."""
    r = find_root(root)
    where = "--url" if url else ENV_URL if os.environ.get(ENV_URL) else f"the store of {r}"
    return existing(url or store_url(r), where), r


@app.command("migrate")
def migrate(root: Path = RootOpt, url: str = UrlOpt, as_json: bool = JsonOpt) -> None:
    """Bring the store's schema to this healer's version (forward-only; safe to repeat, safe on many hosts at once)."""
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
    from healer.store.copy import copy_store  # lazy: healer.store.copy: 2.2 ms of `healer --help`

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
    u, r = _url(root, url)
    s = open_url(u, root=r, migrate=False)  # an inspection: it neither migrates the store nor refuses a newer one
    try:
        v = s.version()
        data: dict = {"store": s.path, "schema_version": v}
        if v == CURRENT:
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


@app.command("backup")
def backup_cmd(file: Path = typer.Argument(..., help="The backup file to write (it must not exist): an SQLite store file."),
               root: Path = RootOpt, url: str = UrlOpt, as_json: bool = JsonOpt) -> None:
    """Write the fleet's board, SQLite or PostgreSQL, to FILE in one consistent read: an SQLite store file that
    `healer store restore FILE` puts back into either dialect."""
    from healer.store import backup, open_url  # lazy: healer.store.backup: 2.2 ms of `healer --help`

    u, r = _url(root, url)
    s = open_url(u, root=r, migrate=False)  # a backup changes nothing, not even the schema
    try:
        if s.version() != CURRENT:
            raise HealerError(f"{s.path}: schema v{s.version()}, this healer's is v{CURRENT}: `healer store migrate` "
                              "first (or back it up with the healer that wrote it)", INVALID_INPUT)
        counts = backup.backup(s, Path(file))
        where = s.path
    finally:
        s.close()
    if as_json:
        print_json({"store": where, "file": str(file), "rows": counts})
        return
    typer.echo(f"backed up {sum(counts.values())} rows of {where} to {file}")


@app.command("restore")
def restore(file: Path = typer.Argument(..., help="A copy of this fleet's board: a `healer store backup` file, an SQLite "
                                        "board, or the output of `sqlite3 healer.db .recover | sqlite3 FILE`."),
            other_fleet: bool = typer.Option(False, "--other-fleet", help="Restore a board whose fleet id is not this "
                                             "fleet's (its id then becomes the fleet's, in git config too)."),
            root: Path = RootOpt) -> None:
    """Put a copy of this fleet's board back as its store, SQLite or PostgreSQL. The board there now is kept (an
    SQLite file aside it, or for PostgreSQL a backup file in .healer/), never deleted. The copy must be a sound
    healer store of this fleet (its fleet id is the one in the fleet's git) unless --other-fleet."""
    from healer.store import (  # lazy: store.backup, store.identity: 2.3 ms of `healer --help`
        ENV_URL,
        backup,
        db_path,
        identity,
        open_store,
        read_config,
        sqlite_path,
    )

    r = find_root(root)
    url = os.environ.get(ENV_URL) or read_config(r).get("store")
    dest: Path | None = sqlite_path(str(url)) if url and str(url).startswith("sqlite:") else db_path(r) if not url else None
    src = Path(file).resolve()
    if dest is not None and dest.exists() and src.exists() and src.samefile(dest):
        raise UsageError(f"{file}: that is the fleet's store itself")
    tables, fid = backup.read_file(src)  # sound, not newer than this healer, its fleet id (one line otherwise)
    gid = identity.git_id(r)
    if gid and fid != gid and not other_fleet:
        raise HealerError(f"{file}: the board of another fleet ({fid or 'no fleet id'}; this fleet is {gid} in git config "
                          f"{identity.GIT_KEY}); --other-fleet restores it anyway", INVALID_INPUT)

    now = system().now()
    kept: Path | None
    if dest is None:
        kept, n, where = _restore_server(str(url), r, tables, now)
    else:
        kept, where = _restore_file(src, dest, now), str(dest)
    if other_fleet and fid and fid != gid:
        identity.set_git_id(r, fid)
    s = open_store(r)
    try:
        if fid is None:  # a board from before fleet ids, restored into a fleet that has none either
            identity.check_open(s, r, where, identity.git_id(r))
        s.append("store.restored", where, {"from": str(src), "kept": str(kept) if kept else None, "actor": "human",
                                           "fleet_id": fid, "other_fleet": bool(other_fleet and fid != gid)})
        n = len(s.tickets())
    finally:
        s.close()
    typer.echo(f"restored {where} from {src} ({n} tickets)" + (f"; the board that was there is kept as {kept}" if kept else ""))


def _restore_file(src: Path, dest: Path, now: float) -> Path | None:
    """SQLite: the copy made aside and renamed into place; the file there now moved aside (with its -wal/-shm)."""
    from healer.store.backup import copy_file  # lazy: healer.store.backup: 2.3 ms of `healer --help`

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".restoring")
    copy_file(src, tmp)
    kept = None
    if dest.exists():
        kept = dest.with_name(f"{dest.name}.old-{int(now)}")
        for suffix in ("", "-wal", "-shm"):
            p = Path(str(dest) + suffix)
            if p.exists():
                os.replace(p, Path(str(kept) + suffix))
    os.replace(tmp, dest)
    return kept


def _restore_server(url: str, r: Path, tables: dict, now: float) -> tuple[Path, int, str]:
    """PostgreSQL: the board there now written to .healer/store-before-restore-TIME.db first, then every table
    replaced in one transaction (cut short, the board is as it was)."""
    from healer.store import HEALER_DIR, backup, open_url  # lazy: healer.store.backup: 2.2 ms of `healer --help`

    s = open_url(url, root=r)  # the schema brought to this healer's, as any command does
    try:
        kept = r / HEALER_DIR / f"store-before-restore-{int(now)}.db"
        kept.parent.mkdir(parents=True, exist_ok=True)
        n = 0
        while kept.exists():
            n += 1
            kept = r / HEALER_DIR / f"store-before-restore-{int(now)}-{n}.db"
        backup.backup(s, kept)
        backup.replace(s, tables)
        return kept, 0, s.path
    finally:
        s.close()


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="store")
