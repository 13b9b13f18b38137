"""The `healer` command. Each area registers its commands from its own module.

Errors: a HealerError (user mistake, bad input) prints one line on stderr and exits
with its code (README "Exit codes"); click usage errors exit 64; anything else is an internal
error (70), with the traceback only under --debug.
"""

from __future__ import annotations

import os
import sys
import traceback

try:  # typer >= 0.29 vendors click; its exceptions live there
    from typer._click import exceptions as _cx
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as _cx  # type: ignore[no-redef]  # the same module, where an older typer keeps it
import typer

from healer import __version__, early, errors
from healer.cli import (
    adopt,
    board,
    console,
    containers,
    fleet,
    gameday,
    loop,
    misc,
    policy,
    repair,
    runbook,
    store,
    supervise,
)
from healer.cli.common import state

app = typer.Typer(
    name="healer",
    help="Self-healing supervisor for fleets of autonomous coding-agent loops.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_state = state  # the same dict: tests save and restore it as healer.cli._state


def _version(value: bool) -> None:
    if value:
        typer.echo(f"healer {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks too (the exit code stays the same)."),
    version: bool = typer.Option(False, "--version", help="Print the version and exit.", callback=_version, is_eager=True),
) -> None:
    _state["debug"] = debug or bool(os.environ.get("HEALER_DEBUG"))
    from healer import failpoints, log  # lazy: pulls loguru: 34 ms of `healer --help`

    log.setup(None, _state["debug"])
    spec = os.environ.get(failpoints.ENV)
    if spec:  # a typo in a game-day spec must fail loudly before anything runs
        try:
            failpoints.parse_spec(spec)
        except ValueError as e:
            raise errors.UsageError(str(e)) from None


def _register() -> None:
    for mod in (misc, policy, board, loop, fleet, supervise, adopt, console, runbook, repair, gameday, containers, store):
        mod.register(app)


_register()


def err(line: str) -> None:
    sys.stderr.write(line + "\n")


def _trace(debug: bool) -> None:
    """--debug adds the traceback; it never changes the exit code (a 64 stays 64)."""
    if debug:
        traceback.print_exc()


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or bool(os.environ.get("HEALER_DEBUG"))
    try:
        rv = app(args=args, prog_name="healer", standalone_mode=False)
        # typer turns Ctrl-C (KeyboardInterrupt) into exit 130, returned here; healer's table says 4 (stopped)
        if rv == 130:
            err("healer: interrupted")
            return errors.STOPPED
        return int(rv or 0)
    except errors.InvalidInput as e:
        _trace(debug)
        for line in e.lines:
            err(line)
        return e.exit_code
    except errors.HealerError as e:
        _trace(debug)
        err(f"healer: {e}")
        return e.exit_code
    except typer.Exit as e:
        return errors.STOPPED if e.exit_code == 130 else e.exit_code  # Ctrl-C, as above
    except typer.Abort:
        err("healer: aborted")
        return errors.STOPPED
    except _cx.NoArgsIsHelpError as e:
        e.show()
        return errors.USAGE
    except _cx.UsageError as e:
        ctx = f" (see '{e.ctx.command_path} --help')" if e.ctx else ""
        err(f"healer: {e.format_message()}{ctx}")
        return errors.USAGE
    except _cx.ClickException as e:
        err(f"healer: {e.format_message()}")
        return errors.USAGE
    except KeyboardInterrupt:
        err("healer: interrupted")
        return errors.STOPPED
    except BrokenPipeError:
        return 0
    except Exception as e:  # noqa: BLE001 - the last line of defence: one line, exit 70
        _trace(debug)
        code, line = errors.unexpected(e)
        err(line + ("" if debug or code != errors.INTERNAL else " (run with --debug for the traceback)"))
        return code


def entry() -> None:
    early.arm()
    sys.exit(main())
