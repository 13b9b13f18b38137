"""Helpers shared by the CLI modules: the fleet root, the store, output."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from healer.clock import Clock, system
from healer.errors import INVALID_INPUT, STOPPED, HealerError, InvalidInput, UsageError
from healer.store import open_store

if TYPE_CHECKING:
    from healer.store.base import Store


def make_console(stderr: bool = False) -> Console:
    """A terminal gets rich's width; a pipe or a CI log gets 200 columns (unless COLUMNS says otherwise),
    plain lines are never wrapped, and tables fold long cells instead of cutting them with "…", so
    scenario names, broken expectations and run ids survive `| tee`."""
    stream = sys.stderr if stderr else sys.stdout
    tty = hasattr(stream, "isatty") and stream.isatty()
    wide = None if tty or os.environ.get("COLUMNS") else 200
    return Console(stderr=stderr, width=wide, soft_wrap=not tty)


console = make_console()
err_console = make_console(stderr=True)

# the root options (--debug), set by healer/cli/__init__.py's callback before any command runs; the commands read it
state: dict[str, bool] = {"debug": False}

RootOpt = typer.Option(None, "--root", "-C", help="Fleet root (default: $HEALER_ROOT or the nearest folder with .healer/).")
JsonOpt = typer.Option(False, "--json", help="Print JSON instead of a table.")
PolicyOpt = typer.Option(None, "--policy", "-p", help="Policy file (default: healer.yaml in the fleet root, else the embedded default).")


def find_root(root: Path | None) -> Path:
    if root is not None:
        return root.resolve()
    env = os.environ.get("HEALER_ROOT")
    if env:
        return Path(env).resolve()
    here = Path.cwd().resolve()
    for p in (here, *here.parents):
        if (p / ".healer").is_dir():
            return p
    return here


def require_fleet(root: Path | None) -> Path:
    r = find_root(root)
    if not (r / ".healer").is_dir():
        raise UsageError(f"{r}: not a healer fleet (no .healer/); run 'healer init' first or pass --root")
    return r


def store_for(root: Path | None, clock: Clock | None = None, *, readonly: bool = False) -> Store:
    return open_store(require_fleet(root), clock, readonly=readonly)


def read_texts(paths: list[str | Path], base: str | Path | None = None) -> list[tuple[str, str]]:
    """(source, text) for every runbook under `paths` (folders: their *.md, sorted by name).

    Relative paths are taken from `base` (the fleet root). An unreadable path is one clear error (65).
    """
    from healer.policy.yamlpos import YamlProblem, read_capped  # lazy: pulls yaml: 13 ms every command would pay
    from healer.policy.yamlpos import line as yaml_line  # lazy: pulls yaml: the same 13 ms

    out: list[tuple[str, str]] = []
    for raw in paths:
        p = Path(raw)
        if not p.is_absolute() and base is not None:
            p = Path(base) / p
        if p.is_dir():
            files = sorted(f for f in p.glob("*.md") if f.is_file() and f.name.lower() != "readme.md")
        elif p.is_file():
            files = [p]
        else:
            raise InvalidInput(f"{raw}: no such runbook file or folder")
        for f in files:
            try:
                out.append((str(f), read_capped(f).decode("utf-8-sig")))  # its front matter goes to yamlpos.load_one
            except YamlProblem as yp:
                raise InvalidInput(yaml_line(str(f), yp.problem)) from None
            except UnicodeDecodeError:
                raise InvalidInput(f"{f}:1:1: (file): expected UTF-8 text, got undecodable bytes") from None
            except OSError as e:
                raise InvalidInput(f"{f}: cannot read: {e.strerror}") from None
    return out


def policy_with_runbooks(policy, root: str | Path):
    """The policy in force: `include_runbooks` read from `root` and turned into rules (InvalidInput on any problem)."""
    from healer.core.runbooks import rules_from_runbooks, with_rules  # lazy: pulls pydantic, networkx: 261 ms of `healer --help`

    if not policy.include_runbooks:
        return policy
    rules, problems = rules_from_runbooks(read_texts(list(policy.include_runbooks), root))
    if problems:
        raise InvalidInput(problems[0], problems)
    return with_rules(policy, rules)


def policy_for(root: Path, policy: Path | None):
    """The policy in force: the file given, else ROOT/healer.yaml, else the default;
    with `include_runbooks` (relative to the policy file's folder) turned into rules."""
    from healer.policy import load_policy  # lazy: pulls pydantic: 128 ms of `healer --help`

    path = policy if policy is not None else (root / "healer.yaml")
    if policy is None and not path.exists():
        return load_policy(None)
    return policy_with_runbooks(load_policy(path), path.resolve().parent)


def on_ctrl_c(stop) -> list[int]:
    """A daemon's Ctrl-C (SIGINT) calls `stop` and is remembered in the list returned: the daemon then ends
    with `exit_if_interrupted`, exit 4 as the README's table says for `healer up` (SIGTERM, a service
    manager's stop, stays exit 0)."""
    interrupted: list[int] = []

    def handler(*_: Any) -> None:
        interrupted.append(1)
        stop()

    signal.signal(signal.SIGINT, handler)
    return interrupted


def exit_if_interrupted(interrupted: list[int], who: str) -> None:
    if interrupted:
        sys.stderr.write(f"healer {who}: stopped (interrupted)\n")
        raise typer.Exit(STOPPED)


def utf8(text: str, where: str) -> str:
    """Text bound for the store, refused (65, one line naming `where`) when it is not UTF-8: an argument or
    stdin in another encoding reaches Python as lone surrogates, which no store can keep."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise HealerError(f"{where}: expected UTF-8 text, got a byte that is not UTF-8 at character {e.start + 1}",
                          INVALID_INPUT) from None
    return text


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def store_awaited(root: Path, who: str, early: list[int], tolerance: float):
    """A daemon's store, ridden out for up to `tolerance` (store.outage_tolerance) when it is away at start. `early`
    holds the signals seen so far (0 SIGTERM, 1 Ctrl-C): one ends the wait as a stop at any other moment would,
    with one line and exit 0 (SIGTERM) or 4 (Ctrl-C)."""
    from healer.store import open_store_waiting, outage  # lazy: pulls prometheus_client: 34 ms of `healer --help`

    outage.set_tolerance(tolerance)
    clock = system()

    def wait(seconds: float) -> bool:
        clock.sleep(seconds)
        return bool(early)

    store = open_store_waiting(root, clock, wait=wait, who=who)
    if store is None:
        ctrl_c = bool(early) and early[-1] == 1
        typer.echo(f"healer {who}: stopped before the store came back" + (" (interrupted)" if ctrl_c else ""))
        raise typer.Exit(STOPPED if ctrl_c else 0)
    return store


def end_leftovers(root: Path, policy) -> None:
    """Every daemon's start (dispatch, up, supervise): end what killed runs left on this machine (stale run cgroups)
    and in this fleet's worktrees (agent trees whose runner is gone): healer/loop/leftovers.py. One line if any."""
    from healer.loop import leftovers  # lazy: healer.loop.state and procs: 7 ms, for the daemons only

    line = leftovers.at_start(leftovers.fleet_workdirs(root), policy.loop.kill_grace).line()
    if line:
        typer.echo(line, err=True)
