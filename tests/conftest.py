"""Shared fixtures: real git repositories, real SQLite stores, clocks.

Each area keeps its own fixtures in tests/<area>/conftest.py.
"""

from __future__ import annotations

import atexit
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from healer.clock import VirtualClock, system
from healer.store import open_store

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable

GIT_ENV = {
    "GIT_AUTHOR_NAME": "healer-test",
    "GIT_AUTHOR_EMAIL": "test@healer.invalid",
    "GIT_COMMITTER_NAME": "healer-test",
    "GIT_COMMITTER_EMAIL": "test@healer.invalid",
}
os.environ.update(GIT_ENV)
# healer's cache of validated policies (healer/policy/cache.py): one private folder per test session,
# removed at its end, so tests neither read a stale home cache nor leave one behind
_CACHE_DIR = tempfile.mkdtemp(prefix="healer-test-cache-")
os.environ["HEALER_CACHE_DIR"] = _CACHE_DIR
# also when no session runs (a usage error, --collect-only): conftest is imported before either
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir():
    yield
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A real git repository on branch main with one commit."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "test@healer.invalid")
    git(path, "config", "user.name", "healer-test")
    for name, text in (files or {"README.md": "# demo\n"}).items():
        f = path / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    (path / ".gitignore").write_text(".healer/\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


# Commands that start no daemon, install no signal handler and fork nothing that outlives them: `healer()`
# runs them in this process through the real entry point (healer.cli.main), which saves an interpreter start
# and the CLI's imports (~0.4 s of CPU) per call; the child process would prove nothing more about them. Keys
# are the command's words; a group's name alone admits every subcommand. Everything else (up, dispatch,
# supervise, loop run, watch, mcp serve, repair run, gameday run/replay/explore, demo, containers, store
# copy/migrate, ...) runs in a real child, as does any call while a failpoint is armed (a failpoint may kill
# or stop its process), any call with a clock offset file, and every call when HEALER_TEST_SUBPROCESS=1.
IN_PROCESS = frozenset({
    ("policy", "validate"), ("policy", "show"), ("policy", "schema"), ("policy", "import"),
    ("board", "add"), ("board", "list"), ("board", "show"), ("board", "states"), ("board", "move"),
    ("board", "label"),
    ("init",), ("plan",), ("status",), ("journal",), ("doctor",), ("failpoints",),
    ("gameday", "validate"), ("gameday", "list"), ("gameday", "new"),
    ("runbook", "check"), ("runbook", "new"),
    ("quarantine", "list"),
    ("store", "info"),
    ("loop", "list"), ("loop", "status"),
    ("repair", "list"),
})
_GLOBAL_FLAGS = ("--debug",)
# bool(os.environ.get(...)) at call time: a test may set it with monkeypatch
SUBPROCESS_ENV = "HEALER_TEST_SUBPROCESS"


def in_process(args: tuple[str, ...], env: dict | None = None) -> bool:
    """Whether `healer(*args)` may run in this process (see IN_PROCESS)."""
    if os.environ.get(SUBPROCESS_ENV) or (env or {}).get(SUBPROCESS_ENV):
        return False
    # an armed failpoint may kill or stop its process; healer.clock picks its clock from
    # HEALER_CLOCK_OFFSET_FILE when it is imported, once: only a fresh process sees a new one
    for name in ("HEALER_FAILPOINTS", "HEALER_CLOCK_OFFSET_FILE"):
        if os.environ.get(name) or (env or {}).get(name):
            return False
    words = [a for a in args if a not in _GLOBAL_FLAGS]
    if not words or words[0].startswith("-"):
        return True  # --version, --help, no command: usage and help only
    return (words[0],) in IN_PROCESS or (len(words) > 1 and (words[0], words[1]) in IN_PROCESS)


def healer(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 120, input: str | None = None):
    """Run the real CLI: in this process for the commands of IN_PROCESS, else in a child process.
    Returns a subprocess.CompletedProcess (args, returncode, stdout, stderr) either way."""
    if in_process(args, env):
        return _run_in_process(list(args), cwd=cwd, env=env, input=input)
    full = {**os.environ, **(env or {})}
    return subprocess.run([PY, "-m", "healer", *args], cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=timeout, input=input)


_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGPIPE,
                             signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM))


def global_state() -> dict:
    """What an in-process CLI call could leave changed for the next test: compared before and after."""
    from loguru import logger

    from healer import failpoints

    return {
        "environ": dict(os.environ),
        "cwd": os.getcwd(),
        "umask": _umask(),
        "argv": list(sys.argv),
        "streams": (sys.stdin, sys.stdout, sys.stderr),
        "loguru": sorted(logger._core.handlers),  # type: ignore[attr-defined]
        "failpoints": (dict(failpoints._hits), failpoints._spec_cache),
        "signals": {s: signal.getsignal(s) for s in _SIGNALS},
        "threads": sorted(t.ident or 0 for t in threading.enumerate()),
    }


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _run_in_process(args: list[str], *, cwd, env, input) -> subprocess.CompletedProcess:
    from loguru import logger

    from healer import cli, failpoints, log
    from healer.cli import common

    consoles = (common.console, common.err_console)
    saved_shape = [(c._width, c.soft_wrap) for c in consoles]
    saved_env, saved_cwd, saved_argv, saved_mask = dict(os.environ), os.getcwd(), list(sys.argv), _umask()
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    saved_handlers = set(logger._core.handlers)  # type: ignore[attr-defined]
    saved_signals = {s: signal.getsignal(s) for s in _SIGNALS}
    saved_debug = dict(cli._state)
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.update({k: str(v) for k, v in (env or {}).items()})
        if cwd is not None:
            os.chdir(cwd)
        sys.argv = [str(Path(PY).parent / "healer"), *args]
        sys.stdin, sys.stdout, sys.stderr = io.StringIO(input or ""), out, err
        # the CLI's consoles were shaped once, when this process imported them: shape them as a child's would be
        # for this call's environment and streams (a pipe gets 200 columns unless COLUMNS says otherwise)
        for c, fresh in zip(consoles, (common.make_console(), common.make_console(stderr=True)), strict=True):
            c._width, c.soft_wrap = fresh._width, fresh.soft_wrap
        try:
            code = cli.main(args)
        except SystemExit as e:  # a command that exits on its own, as the child would
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        for c, (w, soft) in zip(consoles, saved_shape, strict=True):
            c._width, c.soft_wrap = w, soft
        log.shutdown()  # the sinks this call added write to its (now dropped) stderr
        for hid in set(logger._core.handlers) - saved_handlers:  # type: ignore[attr-defined]
            logger.remove(hid)
        for s, h in saved_signals.items():
            if signal.getsignal(s) is not h and h is not None:
                signal.signal(s, h)
        cli._state.clear()
        cli._state.update(saved_debug)
        failpoints.reset()
        os.umask(saved_mask)
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()  # in place: healer.failpoints keeps a reference to os.environ's dict
        os.environ.update(saved_env)
    return subprocess.CompletedProcess([PY, "-m", "healer", *args], code, out.getvalue(), err.getvalue())


def wait_until(cond, timeout: float = 60.0, what="condition", poll: float = 0.05):
    """Poll `cond` until it returns something truthy (returned), or fail the test after
    `timeout` seconds. `what` (a string, or a callable giving one at failure) names the wait.
    The timeout is a budget, not a measurement: CI's 2 cores are shared and loaded, so keep it generous
    (a condition that holds returns at once; only a failing test waits the budget out)."""
    clock = system()
    end = clock.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if clock.monotonic() >= end:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what() if callable(what) else what}")
        clock.sleep(poll)


def need_root() -> None:
    """Mounting a tmpfs (a disk that fills) needs root and mount(8): CI has both and never skips."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs as root with mount(8): this test must run there")
        pytest.skip(reason="needs root and mount(8) for a tmpfs / read-only bind mount")


@pytest.fixture
def tiny_disk(tmp_path):
    """A 24 MB tmpfs: a disk a test can fill (fill_disk), unmounted at the end."""
    need_root()
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)
        if os.path.ismount(disk):
            subprocess.run(["umount", "-l", str(disk)], check=False)


def fill_disk(path) -> None:
    """Write `path` until its disk refuses one more byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 20, 4096, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError:
                    break
    finally:
        os.close(fd)


@pytest.fixture
def vclock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def store(tmp_path: Path, vclock: VirtualClock):
    s = open_store(tmp_path / "fleet", vclock)
    yield s
    s.close()


def pytest_unconfigure(config):
    """pytest removes a passing session's tmp_path folders (tmp_path_retention_policy = failed) but keeps
    their parent, /tmp/pytest-of-USER: gone too when empty (another session's folders keep it)."""
    factory = getattr(config, "_tmp_path_factory", None)
    base = getattr(factory, "_basetemp", None)
    if base is not None and base.parent.name.startswith("pytest-of-"):
        try:
            base.parent.rmdir()
        except OSError:
            pass


_CODEX_DAEMON = Path("/tmp") / f"codex-daemon-{os.getuid()}"
_CODEX_DAEMON_BEFORE = _CODEX_DAEMON.exists()
# Claude Code's socket folder, made in /tmp by a CLI run whose TMPDIR a test did not set (a user's own is left alone)
_CC_SOCKS = Path("/tmp") / f"cc-socks-{os.getuid()}"
_CC_SOCKS_BEFORE = _CC_SOCKS.exists()


def pytest_sessionfinish(session, exitstatus):
    """Codex makes its socket folder /tmp/codex-daemon-UID itself, whatever TMPDIR says (an unsandboxed
    loop cannot move it): once every worker is done, the controller removes it if this session made it
    and it is empty (a user's own Codex keeps it). The same for Claude Code's /tmp/cc-socks-UID, with the
    sockets this session's CLIs left in it."""
    if hasattr(session.config, "workerinput"):
        return
    if not _CODEX_DAEMON_BEFORE:
        try:
            _CODEX_DAEMON.rmdir()
        except OSError:
            pass
    if not _CC_SOCKS_BEFORE and _CC_SOCKS.is_dir():  # this session made it: only its CLIs' sockets are in it
        for s in _CC_SOCKS.iterdir():
            if s.is_socket():
                s.unlink(missing_ok=True)
        try:
            _CC_SOCKS.rmdir()
        except OSError:
            pass
