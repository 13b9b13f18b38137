"""Helpers shared by the CLI modules: the fleet root, the store, output."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from healer.clock import Clock, system
from healer.errors import INVALID_INPUT, STOPPED, HealerError, UsageError
from healer.policy_in_force import policy_for, policy_with_runbooks, read_texts  # noqa: F401 - the commands' loaders
from healer.store import open_store
from healer.terminal import make_console

if TYPE_CHECKING:
    from healer.store.base import Store


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
