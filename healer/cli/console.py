"""CLI: `healer console` (docs/console.md, README "Commands")."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import typer

from healer.cli.common import PolicyOpt, RootOpt, policy_for, require_fleet
from healer.errors import STOPPED

HostOpt = typer.Option("127.0.0.1", "--host", help="Address to listen on; anything but loopback needs a token.")
TokenOpt = typer.Option(None, "--token", help="Require this token (Authorization: Bearer, or /login); NAME=SECRET names "
                                              "its holder as the operator. Default: $HEALER_CONSOLE_TOKEN.")
OperatorOpt = typer.Option(None, "--operator", help="Who steers: recorded as actor operator:NAME (default: $USER).")
ReadOnlyOpt = typer.Option(False, "--read-only", help="Serve the pages only: every steering POST is refused (403).")


def console_access(host: str, token: str | None, operator: str | None, read_only: bool):
    from healer.console import security  # lazy: stdlib only, but keeps `healer --help` off the console (1 ms)

    return security.access(host, token, operator, read_only)


def console(
    port: int = typer.Option(0, "--port", min=0, max=65535, help="Port (0: a free one; the URL is printed on one line)."),
    host: str = HostOpt,
    read_only: bool = ReadOnlyOpt,
    token: str = TokenOpt,
    operator: str = OperatorOpt,
    root: Path = RootOpt,
    policy: Path = PolicyOpt,
) -> None:
    """Serve the operator console: the board, agents and their output live, the supervisor, game days, cost; steering."""
    acc = console_access(host, token, operator, read_only)  # a non-loopback host without a token: refused before anything
    r = require_fleet(root)
    stop = threading.Event()
    interrupted: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    def interrupt(*_: object) -> None:
        interrupted.append(1)
        stop.set()

    signal.signal(signal.SIGINT, interrupt)
    from healer.clock import system  # lazy: healer.clock (1 ms)
    from healer.console import serve  # lazy: the web stack: 200 ms, only here
    from healer.store import open_store  # lazy: the store (already loaded by require_fleet's module, 0 ms)

    pol = policy_for(r, policy)
    clock = system()
    store = open_store(r, clock)
    runtime = None
    try:
        from healer.fleet.runtimes import runtime_for  # lazy: pulls docker: 58 ms

        runtime = runtime_for(pol, clock)
    except Exception:  # noqa: BLE001 - no runtime: liveness by pid, as the supervisor falls back
        runtime = None
    served = serve.start(r, store, pol, clock, acc, host=host, port=port, runtime=runtime)
    typer.echo(served.url, nl=True)
    import sys  # lazy: stdlib (0 ms)

    sys.stdout.flush()
    try:
        while not stop.is_set() and served.thread.is_alive():
            stop.wait(0.5)
    finally:
        served.stop()
        store.close()
    if interrupted:
        typer.echo("healer console: stopped (interrupted)", err=True)
        raise typer.Exit(STOPPED)


def register(app: typer.Typer) -> None:
    app.command("console")(console)
