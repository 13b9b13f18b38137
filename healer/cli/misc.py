"""CLI: init, failpoints, doctor, demo."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import typer
from rich.table import Table

from healer import failpoints, git, sandbox
from healer.cli.common import JsonOpt, RootOpt, console, find_root, print_json, state
from healer.errors import HealerError, InvalidInput, StoreCorrupt, UsageError
from healer.init import init_fleet
from healer.store import open_store, store_url
from healer.store.corrupt import corrupt, recover_hint
from healer.store.sqlite import SQLITE_VERSION, SqliteStore
from healer.store.urls import redact


def init(root: Path = RootOpt,
         store: str = typer.Option(None, "--store", help="Store URL, e.g. postgresql://healer@db:5432/fleet (several hosts, "
                                   "one board); default: the embedded SQLite file. $HEALER_STORE_URL overrides it."),
         new_board: bool = typer.Option(False, "--new-board", help="Start a new, empty board on purpose: the old SQLite "
                                        "store is kept aside, ticket ids continue after the old board's.")) -> None:
    """Create .healer/ in the fleet root, a healer.yaml policy if absent, and ignore .healer/ in git."""
    from healer import log  # lazy: pulls loguru: 31 ms of `healer --help`

    r = find_root(root) if root else Path.cwd().resolve()
    if root is not None and not r.exists() and not r.is_symlink():  # a mistyped --root must not become a new fleet
        raise UsageError(f"--root {root}: no such folder (make it first, then run healer init there)")
    res = init_fleet(r, store=store, new_board=new_board)
    log.setup(r, bool(state["debug"]))
    for what in res.created:
        typer.echo(f"created {what}")
    typer.echo(f"store: {redact(store_url(r))}")
    typer.echo(f"healer fleet ready at {r}" + ("" if res.created else " (already set up; nothing changed)"))
    if not _in_git(r):
        # not an error: supervise, watch and the board work anywhere; say it before dispatch fails on it
        typer.echo(f"healer: note: {r} is not a git repository; `healer dispatch` and `healer loop run` need one "
                   "(run `git init -b main` and commit once)", err=True)


def _in_git(root: Path) -> bool:
    try:
        o = git.run(root, "rev-parse", "--is-inside-work-tree", check=False, timeout=30)
    except git.GitError:
        return True  # cannot tell (no git): doctor reports that
    return o.code == 0 and o.stdout == "true"


def failpoints_cmd(as_json: bool = JsonOpt) -> None:
    """List every failpoint name and where it sits (aim HEALER_FAILPOINTS at them)."""
    failpoints.load_all()
    pts = failpoints.registry()
    if as_json:
        print_json([{"name": p.name, "where": p.where, "module": p.module, "line": p.line} for p in pts])
        return
    t = Table("name", "where", "module")
    for p in pts:
        t.add_row(p.name, p.where, f"{p.module}:{p.line}")
    console.print(t)


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail | info
    detail: str
    required: bool = False


def _check_python() -> Check:
    v = sys.version_info
    ok = v >= (3, 11)
    return Check("python", "ok" if ok else "fail", f"{v.major}.{v.minor}.{v.micro} ({sys.executable})" + ("" if ok else "; healer needs 3.11+"), True)


def _check_git() -> Check:
    git = shutil.which("git")
    if not git:
        return Check("git", "fail", "git not found on PATH; the fleet needs it for worktrees and proposals", True)
    try:
        out = subprocess.run([git, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("git", "fail", f"{git} does not run: {e}", True)
    return Check("git", "ok", out, True)


def _check_postgres(root: Path) -> Check:
    where = redact(store_url(root))
    try:
        s = open_store(root)
        try:
            with s.tx(fenced=False):  # a write transaction can be opened and committed
                pass
            from healer.store.postgres import PgStore  # lazy: pulls psycopg, 115 ms of every command; open_store paid it here

            if not isinstance(s, PgStore):
                raise HealerError(f"{where}: not a PostgreSQL store")
            i = s.server_info()
            t0 = s.clock.monotonic()
            s.last_event_id()
            rtt = (s.clock.monotonic() - t0) * 1000
        finally:
            s.close()
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return Check("store", "fail", f"{where}: {e}", True)
    return Check("store", "ok", f"{where}: PostgreSQL {i['server_version'].split()[0]}, schema {i['schema']} "
                                f"v{i['schema_version']}, round trip {rtt:.1f} ms", True)


def _check_sqlite(root: Path | None) -> Check:
    if root is not None and not store_url(root).startswith("sqlite:"):
        return _check_postgres(root)
    if root is not None:
        try:
            s = open_store(root)
            try:
                mode = s.journal_mode()
                with s.tx():  # a write lock can be taken and released
                    pass
                detail = f"{s.path}: journal_mode={mode}, schema v{s.version()}, {s.last_event_id()} events"
                damage = s.integrity(quick=True)  # every page read: damaged interiors show here
                if damage != "ok":
                    raise StoreCorrupt(f"database disk image is malformed ({damage})")
            finally:
                s.close()
        except Exception as e:  # noqa: BLE001 - reported, not raised
            path = store_url(root).removeprefix("sqlite:")
            hint = f"; {recover_hint(path)}" if corrupt(e) else ""
            return Check("store", "fail", f"{path}: {type(e).__name__}: {e}{hint}", True)
        return Check("store", "ok" if mode == "wal" else "fail", detail + ("" if mode == "wal" else " (WAL unavailable here)"), True)

    with tempfile.TemporaryDirectory() as d:
        probe = SqliteStore(Path(d) / "probe.db")
        try:
            mode = probe.journal_mode()
        finally:
            probe.close()
    return Check("store", "ok" if mode == "wal" else "fail", f"no fleet here; SQLite {SQLITE_VERSION} WAL in a temp dir: {mode}", True)


def _check_policy(root: Path | None) -> Check:
    from healer.policy import load_policy  # lazy: pulls pydantic: 113 ms of `healer --help`

    path = root / "healer.yaml" if root is not None and (root / "healer.yaml").exists() else None
    try:
        load_policy(path)
    except InvalidInput as e:
        more = f" (+{len(e.lines) - 1} more)" if len(e.lines) > 1 else ""
        return Check("policy", "fail", e.lines[0] + more, True)
    return Check("policy", "ok", f"{path}: valid" if path else "no healer.yaml; the embedded default is valid", True)


def _check_dispatch(root: Path | None) -> list[Check]:
    """Can `healer dispatch` start here? Informational: supervise, watch and the board need neither."""
    if root is None:
        return []
    from healer.fleet.dispatcher import preflight  # lazy: pulls pydantic, networkx…: 267 ms of `healer --help`
    from healer.policy import load_policy  # lazy: pulls pydantic: 113 ms of `healer --help`

    out = []
    if not _in_git(root):
        out.append(Check("dispatch", "warn", f"{root} is not a git repository; dispatch and loop run need one"))
    try:
        path = root / "healer.yaml"
        preflight(load_policy(path if path.exists() else None))
    except InvalidInput as e:
        out.append(Check("dispatch", "warn", e.lines[0] + (f" (+{len(e.lines) - 1} more)" if len(e.lines) > 1 else "")))
    return out or [Check("dispatch", "ok", "git repository; the policy has an agent and gates")]


def _check_docker() -> Check:
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith(("tcp://", "http://", "https://", "ssh://")):
        h = urlparse(host).hostname or ""
        if h not in ("localhost", "127.0.0.1", "::1"):
            return Check("docker", "info", f"not checked: DOCKER_HOST={host} is off this machine")
    try:
        import docker  # lazy: pulls docker: 70 ms of `healer --help`

        client = docker.from_env(timeout=3)
        try:
            v = client.version()
        finally:
            client.close()
    except Exception as e:  # noqa: BLE001 - optional: the process runtime works without it
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        return Check("docker", "info", f"engine not reachable ({first[:100]}); the container runtime is unavailable, the process runtime works")
    return Check("docker", "ok", f"engine {v.get('Version', '?')}, API {v.get('ApiVersion', '?')}")


def _check_sandbox() -> Check:
    """What `loop.sandbox: auto` will use here (informational: unsandboxed loops still run)."""
    why = sandbox.unavailable()
    if why is None:
        return Check("sandbox", "ok", "bubblewrap works: loop.sandbox auto confines agents and gates")
    return Check("sandbox", "info", f"{why}; loop.sandbox auto runs agents unsandboxed (container needs Docker)")


def _check_failpoints() -> Check:
    spec = os.environ.get(failpoints.ENV)
    if not spec:
        return Check("failpoints", "ok", f"{failpoints.ENV} unset (inert)")
    return Check("failpoints", "warn", f"{failpoints.ENV}={spec}: a game-day setting, active in every healer process started from here")


def doctor(root: Path = RootOpt, as_json: bool = JsonOpt) -> None:
    """Check the machine and the fleet: python, git, SQLite WAL, policy, Docker (informational)."""
    r = find_root(root)
    fleet = r if (r / ".healer").is_dir() else None
    checks = [_check_python(), _check_git(), _check_sqlite(fleet), _check_policy(fleet), *_check_dispatch(fleet),
              _check_docker(), _check_sandbox(), _check_failpoints()]
    broken = [c for c in checks if c.required and c.status == "fail"]
    if as_json:
        print_json({"root": str(fleet) if fleet else None, "ok": not broken,
                    "checks": [c.__dict__ for c in checks]})
    else:
        style = {"ok": "green", "warn": "yellow", "fail": "bold red", "info": "cyan"}
        t = Table("check", "status", "detail", title=f"healer doctor: {fleet or 'no fleet here'}", title_justify="left")
        for c in checks:
            t.add_row(c.name, f"[{style[c.status]}]{c.status}[/]", c.detail)
        console.print(t)
    if broken:
        raise typer.Exit(1)


def demo(keep: bool = typer.Option(False, "--keep", help="Keep the demo fleet folder and print where it is."),
         suite: bool = typer.Option(True, "--suite/--no-suite",
                                    help="End with the standard game-day suite (minutes); --no-suite stops after the live heal."),
         report: Path | None = typer.Option(None, "--report", help="Write the suite's report here "
                                            "(default: ~/.cache/healer/demo-report, or $HEALER_CACHE_DIR/demo-report).")) -> None:
    """What `make run` runs: a demo fleet broken and healed live, then the standard game-day suite."""
    from healer import demo as demo_mod  # lazy: pulls pydantic, chaos…: 428 ms of `healer --help`

    rc = demo_mod.run(console, keep=keep, suite=suite, report=report)
    if rc:
        raise typer.Exit(rc)


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("failpoints")(failpoints_cmd)
    app.command("doctor")(doctor)
    app.command("demo")(demo)
