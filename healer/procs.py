"""Process trees: spawn in a new session, find every descendant, kill them all.

A deadline must kill the whole tree (trio's cancel scopes: cancelling the scope
cancels everything inside). Children that `setsid()` or double-fork leave the process
group and may be reparented away, so membership is the union of:
  - psutil descendants of the root (and of this process, when it is a subreaper),
  - any process whose environment carries this tree's marker (HEALER_TREE=<id>).
Members are remembered once seen, so a process found early is killed even if it
later escapes both nets (pid reuse is guarded by the create time).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from healer.clock import Clock, system

MARKER = "HEALER_TREE"
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphaned descendants get reparented to us instead of init (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        p = psutil.Process(pid)
        return p.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def stopped(pid: int | None) -> bool:
    """True when the process is SIGSTOPped (or traced-stopped)."""
    if not pid:
        return False
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_STOPPED, getattr(psutil, "STATUS_TRACING_STOP", "tracing-stop"))
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


@dataclass(frozen=True)
class Member:
    pid: int
    create_time: float


class ProcessTree:
    """The root process plus everything it ever started."""

    def __init__(self, root_pid: int, marker: str | None = None) -> None:
        self.root_pid = root_pid
        self.marker = marker
        self._members: dict[int, Member] = {}
        self._add(root_pid)

    def _add(self, pid: int) -> None:
        try:
            p = psutil.Process(pid)
            self._members.setdefault(pid, Member(pid, p.create_time()))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass

    def refresh(self) -> None:
        roots = [self.root_pid, *list(self._members)]
        for pid in roots:
            try:
                for c in psutil.Process(pid).children(recursive=True):
                    self._add(c.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        if self.marker:
            want = f"{MARKER}={self.marker}"
            me = os.getpid()
            for p in psutil.process_iter(["pid"]):
                if p.pid == me or p.pid in self._members:
                    continue
                try:
                    env = p.environ()
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
                    continue
                if env.get(MARKER) == self.marker or want in env.values():
                    self._add(p.pid)

    def living(self) -> list[psutil.Process]:
        out = []
        for m in list(self._members.values()):
            try:
                p = psutil.Process(m.pid)
                if abs(p.create_time() - m.create_time) > 0.01:
                    continue  # pid reused by a stranger
                if p.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                    _reap(m.pid)
                    continue
                out.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return out

    def pids(self) -> list[int]:
        return sorted(self._members)

    def signal_all(self, sig: int) -> None:
        self.refresh()
        try:
            os.killpg(self.root_pid, sig)
        except (ProcessLookupError, PermissionError, OSError):
            pass
        for p in self.living():
            try:
                if sig == signal.SIGKILL or sig == signal.SIGTERM:
                    # a stopped process never handles SIGTERM; wake it so it can die
                    p.send_signal(signal.SIGCONT)
                p.send_signal(sig)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass

    def kill(self, grace: float, clock: Clock | None = None, poll: float = 0.05) -> list[int]:
        """SIGTERM the whole tree, SIGKILL what is left after `grace`. Returns the pids that were alive."""
        clock = clock or system()
        self.refresh()
        victims = [p.pid for p in self.living()]
        if not victims:
            return []
        self.signal_all(signal.SIGTERM)
        deadline = clock.monotonic() + grace
        while clock.monotonic() < deadline:
            self.refresh()
            if not self.living():
                break
            clock.sleep(poll)
        for _ in range(50):
            self.signal_all(signal.SIGKILL)
            left = self.living()
            if not left:
                break
            psutil.wait_procs(left, timeout=0.1)
        for pid in victims:
            _reap(pid)
        return victims


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        pass


def spawn(argv: Sequence[str], *, cwd: str | Path, env: Mapping[str, str] | None = None, stdout=None, stderr=None,
          stdin=subprocess.DEVNULL, marker: str | None = None) -> tuple[subprocess.Popen, ProcessTree]:
    """Start argv (never through a shell) in its own session, tagged with a tree marker."""
    marker = marker or uuid.uuid4().hex
    full_env = dict(os.environ if env is None else env)
    full_env[MARKER] = marker
    proc = subprocess.Popen(list(argv), cwd=str(cwd), env=full_env, stdout=stdout, stderr=stderr, stdin=stdin,
                            start_new_session=True, close_fds=True)
    return proc, ProcessTree(proc.pid, marker)


@dataclass
class Completed:
    exit_code: int | None  # None when killed at the deadline
    timed_out: bool
    killed: list[int]
    elapsed: float


def run(argv: Sequence[str], *, cwd: str | Path, timeout: float, grace: float, clock: Clock | None = None,
        env: Mapping[str, str] | None = None, stdout=None, stderr=None, stdin=subprocess.DEVNULL,
        should_stop=None, poll: float = 0.05) -> Completed:
    """Run argv under a deadline around the whole tree; leave no descendant alive.

    `should_stop()` (e.g. SIGTERM received, kill switch) ends the run early like a deadline.
    """
    clock = clock or system()
    start = clock.monotonic()
    proc, tree = spawn(argv, cwd=cwd, env=env, stdout=stdout, stderr=stderr, stdin=stdin)
    deadline = start + timeout
    timed_out = False
    code: int | None = None
    n = 0
    while True:
        try:
            code = proc.wait(timeout=poll)
            break
        except subprocess.TimeoutExpired:
            pass
        n += 1
        if n % 4 == 0:
            tree.refresh()
        if clock.monotonic() >= deadline or (should_stop is not None and should_stop()):
            timed_out = clock.monotonic() >= deadline
            break
    killed = tree.kill(grace, clock) if (code is None) else tree.kill(min(grace, 1.0), clock)
    if code is None:
        try:
            proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass
        code = None
    return Completed(code, timed_out, killed, clock.monotonic() - start)


def busy_pids(path: str | Path) -> list[int]:
    """Processes whose cwd, or one of whose open files, is inside `path`."""
    root = str(Path(path).resolve())
    prefix = root.rstrip("/") + "/"
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            cwd = p.cwd()
            if cwd == root or cwd.startswith(prefix):
                out.append(p.pid)
                continue
            for f in p.open_files():
                if f.path == root or f.path.startswith(prefix):
                    out.append(p.pid)
                    break
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return sorted(set(out))
