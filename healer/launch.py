"""The `healer` executable: `healer loop run ...` (what the dispatcher launches per ticket) starts without the
full CLI; everything else, and anything the fast path does not recognise, goes to `healer.cli`."""

from __future__ import annotations

import atexit
import gc
import os
import sys

from healer import early


def _loop_run(argv: list[str]) -> int | None:
    # start-up allocates thousands of objects that live as long as the process: no collection
    # while they are made, then frozen out of every later one (a few % of a short run's CPU)
    gc.disable()
    try:
        from healer.loop.start import parse  # lazy: made with the collector off, then frozen: 148 ms of `loop run`'s start

        kw = parse(argv)
        if kw is None:
            return None
        import healer.loop.runner  # lazy: inside the collector-off window; 0.2 ms after parse
        import healer.store  # noqa: F401 - every run opens its store  # lazy: inside the collector-off window; 0.2 ms after parse
    finally:
        gc.freeze()
        gc.enable()
    from healer import errors, failpoints  # lazy: after early.arm() and the frozen start-up: 17 ms from a bare interpreter

    # no loguru here: nothing on the loop's path logs through it (its events go to the store,
    # its lines to stdout), and configuring it costs more CPU than a short iteration's git work
    try:
        spec = os.environ.get(failpoints.ENV)
        if spec:
            failpoints.parse_spec(spec)
        from healer.loop.start import start  # lazy: loaded with parse above (0.2 ms here)

        return start(**kw)
    except ValueError as e:  # a bad failpoint spec, as the full CLI reports it
        sys.stderr.write(f"healer: {e}\n")
        return errors.USAGE
    except errors.InvalidInput as e:
        for line in e.lines:
            sys.stderr.write(line + "\n")
        return e.exit_code
    except errors.HealerError as e:
        sys.stderr.write(f"healer: {e}\n")
        return e.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("healer: interrupted\n")
        return errors.STOPPED
    except Exception as e:  # noqa: BLE001 - the last line of defence, as in healer.cli.main
        code, line = errors.unexpected(e)
        sys.stderr.write(line + (" (run with --debug for the traceback)\n" if code == errors.INTERNAL else "\n"))
        return code


def _leave(code: int) -> None:
    """End a finished `loop run` without the interpreter's teardown.

    Freeing every module and object of a process that is about to vanish costs a short run about a tenth of
    its own CPU. Nothing is lost by skipping it: the run's store is closed and its files are written
    by now, and the atexit handlers still run; only buffered output needs flushing by hand. A process with a
    thread still running, or under a profiler, takes the normal exit."""
    if sys.gettrace() is not None or sys.getprofile() is not None:
        sys.exit(code)  # under a profiler or coverage: they write their report after this function returns
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        sys.exit(code)  # a thread still runs (none does on this path today): the normal exit waits for it
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: what the normal exit would report, minus the noise
            pass
    os._exit(code)


def entry() -> None:
    early.arm()  # before any heavy import: a SIGTERM from here on stops `loop run` cleanly (exit 4)
    args = sys.argv[1:]
    if args[:2] == ["loop", "run"]:
        hide_secrets()
        code = _loop_run(args[2:])
        if code is not None:
            _leave(code)
    if not early.wants(args):
        _private()
    from healer.cli import entry as full  # lazy: the full CLI (typer, rich, every command): 78 ms a `loop run` never pays

    full()


SECRETS = ("PGPASSWORD", "PGPASSFILE", "HEALER_STORE_URL")  # healer/environ.py's NEVER, less the failpoints


def hide_secrets() -> None:
    """`loop run` stays dumpable (the supervisor finds a run by its environment), so anyone of its user, an
    agent under `sandbox: none` included, reads /proc/<runner>/environ: the block the process started with.
    The store's credentials are wiped in that block, in place, after a copy is handed to the C environment
    (libpq reads PGPASSWORD through getenv; Python's os.environ keeps its own): /proc then shows
    `PGPASSWORD=` and NULs (tests/security/test_containment.py::test_runner_environ_hides_the_store_password)."""
    if not sys.platform.startswith("linux") or not any(os.environ.get(n) for n in SECRETS):
        return
    import ctypes  # lazy: after early.arm(), only when a secret is set: 2.6 ms from a bare interpreter

    try:
        with open("/proc/self/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (proc(5) fields 50 and 51)
        block = ctypes.string_at(start, end - start)
    except (OSError, ValueError, IndexError):
        return
    keys = []
    for name in SECRETS:
        if os.environ.get(name):
            os.environ[name] = os.environ[name]  # putenv: the C environment now points at a copy, not at the block
            keys.append(name.encode() + b"=")
    off = 0
    for entry in block.split(b"\0"):
        key = next((k for k in keys if entry.startswith(k)), None)
        if key is not None and len(entry) > len(key):
            ctypes.memset(start + off + len(key), 0, len(entry) - len(key))
        off += len(entry) + 1


def _private() -> None:
    """Every command but `loop run` is made non-dumpable: its /proc/PID/environ (the block it started with,
    a notifier's secret included, healer/notify/secrets.py), memory and fds then need CAP_SYS_PTRACE, which no
    sandboxed agent has, to read. `loop run` stays dumpable: the supervisor finds a run by its environment."""
    if sys.platform.startswith("linux"):
        import ctypes  # lazy: after early.arm(): 2.6 ms from a bare interpreter

        try:
            ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
        except (OSError, AttributeError):
            pass


if __name__ == "__main__":
    entry()
