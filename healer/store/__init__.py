"""The store: `open_store(root)` opens the fleet's store.

Which store: `$HEALER_STORE_URL` when set, else the `store:` line of `.healer/config.yaml` (written by
`healer init --store URL`), else the embedded SQLite file `.healer/healer.db`. A URL is
`postgresql://user@host:port/db[?options=-csearch_path%3Dfleet]` or `sqlite:PATH`. A password is
better kept out of the URL (libpq reads PGPASSWORD and ~/.pgpass); when present it is never printed.
"""

from __future__ import annotations

import os
from pathlib import Path

from healer.clock import Clock
from healer.errors import UsageError
from healer.store import identity
from healer.store.sqlite import SqliteStore

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from healer.store.base import Store

HEALER_DIR = ".healer"
DB_NAME = "healer.db"
CONFIG_NAME = "config.yaml"
ENV_URL = "HEALER_STORE_URL"


def db_path(root: str | Path) -> Path:
    return Path(root) / HEALER_DIR / DB_NAME


def config_path(root: str | Path) -> Path:
    return Path(root) / HEALER_DIR / CONFIG_NAME


def read_config(root: str | Path) -> dict:
    p = config_path(root)
    if not p.exists():
        return {}
    from healer.policy.yamlpos import YamlProblem, line, load_path  # lazy: pulls yaml: 13 ms of `loop run`'s start

    try:
        data = load_path(p).data or {}
    except YamlProblem as yp:
        raise UsageError(line(str(p), yp.problem)) from None
    if not isinstance(data, dict):
        raise UsageError(f"{p}: expected a mapping such as `store: postgresql://...`")
    return data


def write_config(root: str | Path, **values) -> Path:
    """Merge `values` into .healer/config.yaml, readable by its owner only (it may hold a URL with a secret)."""
    import yaml  # lazy: pulls yaml: 13 ms of `loop run`'s start

    p = config_path(root)
    p.parent.mkdir(parents=True, exist_ok=True)
    data = {**read_config(root), **values}
    tmp = p.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("# healer: this host's settings for the fleet (not in git: it may hold a secret)\n")
        yaml.safe_dump(data, f, sort_keys=True)
    os.replace(tmp, p)
    return p


class StoreUrl:
    """A store URL, parsed once (`parse_url`): `sqlite` is the file of a `sqlite:` URL, None for PostgreSQL."""

    __slots__ = ("sqlite", "text")

    def __init__(self, text: str, sqlite: Path | None) -> None:
        self.text, self.sqlite = text, sqlite


def parse_url(url: str) -> StoreUrl:
    """A store URL we can open, or a UsageError naming what is accepted."""
    if url.startswith(("postgresql://", "postgres://")):
        return StoreUrl(url, None)
    if url.startswith("sqlite:") and str(sqlite_path(url)) not in ("", "."):
        return StoreUrl(url, sqlite_path(url))
    raise UsageError(f"store URL {url.split('://')[0] + '://…' if '://' in url else url!r}: expected postgresql://… or sqlite:PATH")


def _configured(root: Path, use_env: bool = True) -> tuple[str, str] | None:
    """(the fleet's store URL, where it is set) from $HEALER_STORE_URL, then .healer/config.yaml; None: neither."""
    env = os.environ.get(ENV_URL) if use_env else None
    if env:
        return env, ENV_URL
    url = read_config(root).get("store")
    return (str(url), f"{config_path(root)}: store") if url else None


def store_url(root: str | Path = ".") -> str:
    """The fleet's store URL (env, then config, then the embedded default)."""
    found = _configured(Path(root))
    return found[0] if found else f"sqlite:{db_path(Path(root).resolve())}"


def check_url(url: str) -> str:
    """`url` when it is a store URL we can open, else a UsageError naming what is accepted."""
    parse_url(url)
    return url


def _must_exist(u: StoreUrl, where: str) -> None:
    """A mistyped `sqlite:` path must not become a new, empty store (a board that looks as if every ticket were
    gone). Creating one is `healer init`'s job."""
    if u.sqlite is not None and not u.sqlite.exists():
        raise UsageError(f"{where}: {u.sqlite}: no such store file (`healer init --store {u.text}` makes one)")


def existing(url: str, where: str) -> str:
    """`url`, checked, when it names a store that is there (see _must_exist)."""
    _must_exist(parse_url(url), where)
    return url


def sqlite_path(url: str) -> Path:
    p = url[len("sqlite:"):]
    if p.startswith("///"):
        p = p[2:]
    elif p.startswith("//"):
        p = p[2:]
    return Path(p)


def open_url(url: str, clock: Clock | None = None, root: str | Path | None = None, migrate: bool = True) -> Store:
    return _open(parse_url(url), clock, root, migrate=migrate)


def _open(u: StoreUrl, clock: Clock | None, root: str | Path | None, *, migrate: bool = True,
          readonly: bool = False) -> Store:
    if u.sqlite is not None:
        return SqliteStore(u.sqlite, clock, root=root, migrate=migrate, readonly=readonly)
    from healer.store.postgres import PgStore  # lazy: pulls psycopg, prometheus_client: 115 ms of `loop run`'s start

    return PgStore(u.text, clock, root=str(root) if root is not None else None, migrate=migrate)


def open_store(root: str | Path = ".", clock: Clock | None = None, *, readonly: bool = False,
               create: bool = False, use_env: bool = True, identity_checks: bool = True) -> Store:
    """`readonly`: for commands that only read (status, plan, journal); works on a read-only .healer/.
    The embedded file is made when missing; a `sqlite:` URL from $HEALER_STORE_URL or .healer/config.yaml
    must name a store that is there, unless `create` (`healer init`). `use_env=False`: a game day's own
    throwaway fleet, whose store an operator's exported $HEALER_STORE_URL must never redirect.
    The store's fleet id is checked against the one in the fleet's git (healer/store/identity.py): a missing,
    empty or foreign store for a fleet that had one is refused; `identity_checks=False` only for
    `healer init --new-board` and `healer store restore`, which set it themselves."""
    root = Path(root).resolve()
    found = _configured(root, use_env)
    if found is None:  # the embedded file
        u, where = StoreUrl(f"sqlite:{db_path(root)}", db_path(root)), str(db_path(root))
    else:
        u, where = parse_url(found[0]), found[1]
        if not create:
            _must_exist(u, where)
    gid = identity.git_id(root) if identity_checks else None  # one git call per open
    if identity_checks and u.sqlite is not None:
        identity.check_before_open(root, u.sqlite, where, gid)  # a lost board is not remade empty
    # `readonly` opens the embedded file read-only; a configured store is opened as before, read-write
    s = _open(u, clock, root, readonly=readonly and found is None)
    if identity_checks:
        try:
            identity.check_open(s, root, where, gid, readonly=readonly)
        except BaseException:
            s.close()
            raise
    return s


def open_store_waiting(root: str | Path, clock: Clock, *, wait=None, who: str = ""):
    """`open_store` for a daemon: a store that is away when it starts (PostgreSQL down or restarting, SQLite locked)
    is ridden out for up to store.outage_tolerance (healer/store/outage.py's open_waiting; set the tolerance
    first). None when `wait` says the daemon was stopped meanwhile."""
    from healer.store import outage  # lazy: pulls prometheus_client: 34 ms of `loop run`'s start

    root = Path(root).resolve()
    url = store_url(root)
    key = str(sqlite_path(url)) if url.startswith("sqlite:") else url
    return outage.open_waiting(lambda: open_store(root, clock), key, clock, wait=wait, who=who)


def __getattr__(name: str):
    if name == "Store":  # the port (a typing Protocol): imported by whoever names it, not by every store user
        from healer.store.base import Store  # lazy: healer.store.base: 3.8 ms of `loop run`'s start

        return Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DB_NAME", "ENV_URL", "HEALER_DIR", "SqliteStore", "Store", "StoreUrl", "db_path", "existing", "open_store", "open_url",
           "parse_url", "store_url"]
