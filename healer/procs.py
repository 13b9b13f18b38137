"""Process trees: spawn in a new session, find every descendant, kill them all.

A deadline must kill the whole tree (trio's cancel scopes: cancelling the scope
cancels everything inside). Children that `setsid()` or double-fork leave the process
group and may be reparented away, so membership is the union of:
  - psutil descendants of the root (and of this process, when it is a subreaper),
  - any process whose environment carries this tree's marker (HEALER_TREE=<id>, or <id>
    among HEALER_TREE_ANCESTORS when it was spawned by a tree inside this one).
Members are remembered once seen, so a process found early is killed even if it
later escapes both nets (pid reuse is guarded by the create time).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from healer.clock import Clock, system

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing


class _LazyPsutil:
    """psutil, imported on first use: a loop whose agent and gates exit by themselves never needs it
    (the /proc reads below answer), and importing it costs a short iteration's worth of CPU."""

    def __getattr__(self, name: str):
        import psutil as mod  # lazy: pulls psutil: 10 ms of `loop run`'s start

        globals()["psutil"] = mod
        return getattr(mod, name)


psutil = _LazyPsutil()
if TYPE_CHECKING:
    import psutil as psutil_types  # the real module's types, for annotations

MARKER = "HEALER_TREE"
ANCESTORS = "HEALER_TREE_ANCESTORS"  # markers of the trees this one was spawned inside
_PR_SET_CHILD_SUBREAPER = 36


_subreaper = False


def become_subreaper() -> bool:
    """Orphaned descendants get reparented to us instead of init (Linux only)."""
    global _subreaper
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        _subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        _subreaper = False
    return _subreaper


_HAS_PROC_CHILDREN = os.path.exists(f"/proc/self/task/{os.getpid()}/children")  # needs CONFIG_PROC_CHILDREN


def _children(pid: int) -> list[int] | None:
    """Direct children of pid from /proc/PID/task/*/children (Linux): a few small reads
    instead of psutil's scan of every process. None when unavailable."""
    if not _HAS_PROC_CHILDREN:
        return None
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    except OSError:
        return None
    out: list[int] = []
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
        except FileNotFoundError:
            continue
        except OSError:
            return None
    return out


def _descendants(pid: int) -> list[int]:
    seen: list[int] = []
    todo = [pid]
    while todo:
        kids = _children(todo.pop())
        if kids is None:  # no /proc children files here: let psutil walk the whole table
            try:
                return [c.pid for c in psutil.Process(pid).children(recursive=True)]
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                return seen
        for k in kids:
            if k not in seen:
                seen.append(k)
                todo.append(k)
    return seen


_PROC_STAT = os.path.exists(f"/proc/{os.getpid()}/stat")
_boot_id: list[str] = []
GONE = ("", 0.0)


def _stat(pid: int) -> tuple[str, float] | None:
    """(state letter, start in seconds since boot) from /proc/PID/stat; GONE when no such process;
    None where /proc cannot say (psutil answers then).

    The start is the kernel's own count of clock ticks since boot, never a wall-clock time: psutil's
    create_time adds the boot time of /proc/stat, which moves whenever the clock is stepped (NTP at
    boot, a virtual machine resumed, `date -s`), so two readings of the same process taken on either
    side of a step differ and the process passes for a stranger (a tree that could not be killed)."""
    if not _PROC_STAT:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()
        return fields[0].decode(), int(fields[19]) / _TICKS
    except (FileNotFoundError, ProcessLookupError):
        return GONE
    except (OSError, ValueError, IndexError):
        return None


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def start_of(pid: int) -> float | None:
    """When the process started, for telling it from a later one given the same pid within this
    process's life: seconds since boot on Linux (immune to clock steps), psutil's create time
    elsewhere. None when it is gone. To keep across processes and restarts, use `mark`."""
    st = _stat(pid)
    if st is None:
        try:
            return psutil.Process(pid).create_time()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
    return st[1] if st is not GONE else None


def _boot() -> str:
    if not _boot_id:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                _boot_id.append(f.read().strip()[:8])
        except OSError:
            _boot_id.append("")
    return _boot_id[0]


def mark(pid: int) -> str | None:
    """Who the process at pid is, as a string to store: "<boot>:<start ticks>" on Linux (the boot's id
    and the kernel's start time: a clock step does not move it, a reboot changes it), "ct:<create
    time>" elsewhere. None when it is gone. `same(pid, m)` tells later whether pid is still it."""
    st = _stat(pid)
    if st is None:
        ct = start_of(pid)
        return None if ct is None else f"ct:{ct:.3f}"
    if st is GONE:
        return None
    return f"{_boot()}:{round(st[1] * _TICKS)}"


def same(pid: int | None, m: str | float | None) -> bool:
    """Whether pid still runs (not a zombie) and is the process `m` was taken of (`mark`). A falsy
    `m` asks only whether something runs there; a number is a create time recorded by an older
    healer (psutil's, wall-clock) and is compared as one."""
    if not pid or not alive(pid):
        return False
    if not m:
        return True
    if isinstance(m, str):
        if m.startswith("ct:"):
            ct = start_of(pid)
            return ct is not None and abs(ct - float(m[3:])) < 0.01
        return mark(pid) == m
    try:
        return abs(psutil.Process(pid).create_time() - float(m)) < 0.01
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError, TypeError):
        return False


def processes():
    """Every process now, each as a new psutil object. Never psutil.process_iter: it hands back the
    objects of its earlier calls, and once a pid is reused (pid_max is 32768 on many machines) a kept
    object reads the newcomer's environment and cwd, gives its predecessor's create time, and has its
    signals refused as "pid reused": a marked process found and never killed."""
    for pid in psutil.pids():
        try:
            yield psutil.Process(pid)
        except psutil.Error:
            continue


def _carries(env: dict[str, str], marker: str) -> bool:
    return env.get(MARKER) == marker or marker in env.get(ANCESTORS, "").split(",")


def _marked_pids(marker: str) -> list[int]:
    """Pids whose environment carries the marker (as HEALER_TREE, or among the ancestors'
    markers in HEALER_TREE_ANCESTORS: a tree spawned inside a tree stays part of the outer
    one). Reads /proc directly on Linux (several times faster than psutil); psutil elsewhere."""
    needle = marker.encode()
    me = os.getpid()
    out: list[int] = []
    if os.path.isdir("/proc/self"):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid == me:
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    raw = f.read()
            except OSError:
                continue
            if needle not in raw:
                continue
            env = dict(kv.decode(errors="replace").partition("=")[::2] for kv in raw.split(b"\0") if b"=" in kv)
            if _carries(env, marker):
                out.append(pid)
        return out
    for p in processes():
        if p.pid == me:
            continue
        try:
            if _carries(p.environ(), marker):
                out.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return out


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    st = _stat(pid)  # one read of /proc/PID/stat: asked every tick for leases and agents, psutil costs ~10x
    if st is not None:
        return st is not GONE and st[0] not in ("Z", "X", "x")
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
    start: float  # start_of(pid): its start, to tell it from a later process given the same pid


class ProcessTree:
    """The root process plus everything it ever started."""

    popen: subprocess.Popen | None = None

    def __init__(self, root_pid: int, marker: str | None = None, *, adopt_orphans: bool = False) -> None:
        self.root_pid = root_pid
        self.marker = marker
        # when we spawned the root, reap it through its Popen: a bare waitpid would steal
        # the exit status and Popen would then report 0 for a killed process
        self.popen: subprocess.Popen | None = None
        # When this process is a subreaper and runs one tree at a time (the loop runner),
        # its new direct children that are not the root can only be orphans of this tree.
        self.adopt_orphans = adopt_orphans
        self._members: dict[int, Member] = {}
        self._add(root_pid)
        root = self._members.get(root_pid)
        self.started = root.start if root else 0.0

    @classmethod
    def adopt(cls, marker: str, pid: int | None = None, mark: str | float | None = None) -> ProcessTree:
        """Rebuild the tree of an earlier run (e.g. after the runner was SIGKILLed): its root
        is kept only if it is still the process `mark` was taken of (see `same`); members are found
        by marker."""
        tree = cls.__new__(cls)
        tree.root_pid = 0
        tree.marker = marker
        tree.adopt_orphans = False
        tree._members = {}
        tree.started = 0.0
        if pid and same(pid, mark):
            start = start_of(pid)
            if start is not None:
                tree.root_pid = pid
                tree._members[pid] = Member(pid, start)
        tree.refresh()
        return tree

    def _add(self, pid: int) -> None:
        if pid in self._members:
            return
        start = start_of(pid)
        if start is not None:
            self._members[pid] = Member(pid, start)

    def refresh(self) -> None:
        roots = [p for p in dict.fromkeys([self.root_pid, *list(self._members)]) if p]
        for pid in roots:
            for c in _descendants(pid):
                self._add(c)
        # Under a subreaper that adopts orphans, every process descended from the root stays
        # a descendant of the root or of us, so the (slower) environment scan adds nothing.
        if self.marker and not (self.adopt_orphans and _subreaper):
            for pid in _marked_pids(self.marker):
                if pid not in self._members:
                    self._add(pid)
        if self.adopt_orphans and _subreaper and self.started:
            kids = _children(os.getpid())
            if kids is None:
                kids = [c.pid for c in psutil.Process().children()]
            for k in kids:
                if k in self._members:
                    continue
                start = start_of(k)
                if start is None or start < self.started - 0.01:
                    continue
                self._add(k)
                for d in _descendants(k):
                    self._add(d)

    def living(self) -> list[psutil_types.Process]:
        out = []
        for m in list(self._members.values()):
            st = _stat(m.pid)
            if st is not None:  # most often every member has exited: no psutil object for them
                if st is GONE or abs(st[1] - m.start) > 0.01:
                    continue
                if st[0] in ("Z", "X", "x"):
                    self._reap(m.pid)
                    continue
            try:
                p = psutil.Process(m.pid)
                # asked after the object is made, so the process it signals is the one checked (a pid
                # reused in between has a later start); one clock for both readings, never psutil's
                # wall-clock create time against start_of's
                start = start_of(m.pid)
                if start is None or abs(start - m.start) > 0.01:
                    continue  # pid reused by a stranger
                if p.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                    self._reap(m.pid)
                    continue
                out.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return out

    def pids(self) -> list[int]:
        return sorted(self._members)

    def signal_all(self, sig: int) -> None:
        self.refresh()
        living = self.living()
        # the root's pid names its process group; only signal the group while a known
        # member still holds it, so a reused pid never leads us to a stranger's group
        if self.root_pid and any(_pgid(p.pid) == self.root_pid for p in living):
            try:
                os.killpg(self.root_pid, sig)
            except (ProcessLookupError, PermissionError, OSError):
                pass
        for p in living:
            try:
                if sig == signal.SIGTERM:
                    # a stopped process never handles SIGTERM; wake it so it can die (SIGKILL needs no
                    # waking, and a woken process could fork before it arrives: see _stop_all)
                    p.send_signal(signal.SIGCONT)
                p.send_signal(sig)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass

    def kill(self, grace: float, clock: Clock | None = None, poll: float = 0.05) -> list[int]:
        """SIGTERM the whole tree, SIGKILL what is left after `grace`. Returns the pids that were alive."""
        clock = clock or system()
        try:
            return self._kill(grace, clock, poll)
        finally:
            self._resume_survivors()

    def _resume_survivors(self) -> None:
        """Nothing is left stopped by us: a member that outlived the SIGKILLs (not ours to kill after all: another
        user's; or an exception came between the SIGSTOP and the SIGKILL) gets its SIGCONT back."""
        for m in list(self._members.values()):
            st = _stat(m.pid)
            if st is None or st is GONE or abs(st[1] - m.start) > 0.01 or st[0] not in ("T", "t"):
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(m.pid, signal.SIGCONT)

    def _kill(self, grace: float, clock: Clock, poll: float) -> list[int]:
        victims = self._stop_all()  # a tree that hops pids is caught standing still, SIGTERM then wakes it
        if not victims:
            return []
        self.signal_all(signal.SIGTERM)
        deadline = clock.monotonic() + grace
        while clock.monotonic() < deadline:
            self.refresh()
            if not self.living():
                break
            clock.sleep(poll)
        self._stop_all()
        for _ in range(50):
            self.signal_all(signal.SIGKILL)
            left = self.living()
            if not left:
                break
            psutil.wait_procs(left, timeout=0.1)
        for pid in victims:
            self._reap(pid)
        return victims

    def _stop_all(self, rounds: int = 200) -> list[int]:
        """SIGSTOP every member until a walk finds none running and no new member: a stopped process cannot
        fork, so a tree that hops pids (fork, exit, again) stands still for the SIGKILL that follows (which
        needs no SIGCONT). A member found dead in a walk that found it means its child was reparented before
        it died (the kernel does that first), so the next walk finds the child: the walks end only when one
        adds nobody. Without a cgroup (healer/cgroups.py) this is the sweep's answer to pid hopping.
        Returns the pids found alive."""
        seen: list[int] = []
        for _ in range(rounds):
            before = len(self._members)
            self.refresh()
            grew = len(self._members) != before
            running = []
            for p in self.living():
                if p.pid not in seen:
                    seen.append(p.pid)
                st = _stat(p.pid)
                if st is None or st[0] not in ("T", "t"):
                    running.append(p.pid)
            if not running and not grew:
                break
            for pid in running:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGSTOP)
        return seen

    def _reap(self, pid: int) -> None:
        if self.popen is not None and pid == self.popen.pid:
            self.popen.poll()
        else:
            _reap(pid)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        pass


_environ: list = [None, None]  # [the environment's bytes when last decoded, that decoded copy]


def environ() -> dict[str, str]:
    """A fresh copy of os.environ (str to str). Decoding every variable for every process the loop starts
    (git, the agent, the gates) showed in its CPU; it is done again only when the environment changed
    (os.environ's own bytes compared, which costs a dict comparison)."""
    data = getattr(os.environ, "_data", None)
    if not isinstance(data, dict):
        return dict(os.environ)
    if _environ[0] != data:
        _environ[:] = [dict(data), dict(os.environ)]
    return dict(_environ[1])


def which(cmd: str, path: str | None = None) -> str | None:
    """shutil.which for POSIX, step for step (tests/loop/test_procs.py compares them): `healer loop run`
    asks it several times, and importing shutil (with bz2 and lzma for its archives) costs more than that."""
    if os.path.dirname(cmd):
        return cmd if _runnable(cmd) else None
    if path is None:
        path = os.environ.get("PATH", None)
        if path is None:
            try:
                path = os.confstr("CS_PATH")
            except (AttributeError, ValueError):
                path = os.defpath
    if not path:
        return None
    seen = set()
    for d in os.fsdecode(path).split(os.pathsep):
        norm = os.path.normcase(d)
        if norm not in seen:
            seen.add(norm)
            name = os.path.join(d, cmd)
            if _runnable(name):
                return name
    return None


def _runnable(fn: str) -> bool:
    return os.path.exists(fn) and os.access(fn, os.F_OK | os.X_OK) and not os.path.isdir(fn)


def resolve_python(argv: Sequence[str], path: str | None = None) -> list[str]:
    """argv, with a bare `python`/`python3` that is not on PATH replaced by the interpreter running healer.

    Policies say `python` (the examples of README and docs/loop.md); Debian ships only `python3`, and a venv's
    `python` is on PATH only when the venv is activated.
    """
    argv = list(argv)
    if argv and argv[0] in ("python", "python3") and which(argv[0], path=path) is None and sys.executable:
        argv[0] = sys.executable
    return argv


def spawn(argv: Sequence[str], *, cwd: str | Path, env: Mapping[str, str] | None = None, stdout=None, stderr=None,
          stdin=subprocess.DEVNULL, marker: str | None = None,
          adopt_orphans: bool = False, pass_fds: Sequence[int] = (), group=None) -> tuple[subprocess.Popen, ProcessTree]:
    """Start argv (never through a shell) in its own session, tagged with a tree marker; in `group` (a
    healer.cgroups.Group) from before it execs when one is given."""
    marker = marker or os.urandom(16).hex()  # uuid4's randomness; `import uuid` costs more than a loop iteration's git
    full_env = environ() if env is None else dict(env)
    outer = [m for m in (full_env.get(ANCESTORS, "").split(",") + [full_env.get(MARKER, "")]) if m]
    if outer:
        full_env[ANCESTORS] = ",".join(outer[-8:])
    full_env[MARKER] = marker
    argv = resolve_python(argv, full_env.get("PATH"))
    with group.holding() if group is not None else contextlib.nullcontext():
        proc = subprocess.Popen(argv, cwd=str(cwd), env=full_env, stdout=stdout, stderr=stderr, stdin=stdin,
                                start_new_session=True, close_fds=True, pass_fds=tuple(pass_fds))
    tree = ProcessTree(proc.pid, marker, adopt_orphans=adopt_orphans)
    tree.popen = proc
    return proc, tree


class _Waiter:
    """Wait for a child with a timeout, woken the moment it exits (a pidfd on Linux;
    Popen.wait's sleep-and-retry elsewhere, which adds up to milliseconds per process), or the
    moment `wake_fd` has something to read (its bytes are drained)."""

    def __init__(self, proc: subprocess.Popen, wake_fd: int | None = None) -> None:
        self.proc = proc
        self.fd: int | None = None
        self.wake_fd: int | None = None
        try:
            self.fd = os.pidfd_open(proc.pid)
            self._poll = select.poll()
            self._poll.register(self.fd, select.POLLIN)
            if wake_fd is not None:
                self._poll.register(wake_fd, select.POLLIN)
                self.wake_fd = wake_fd
        except (AttributeError, OSError):
            self.fd = None

    def wait(self, timeout: float) -> tuple[int | None, bool]:
        """(the exit code or None, whether `wake_fd` woke us)."""
        if self.fd is not None:
            events = self._poll.poll(max(1, int(timeout * 1000)))
            woken = False
            for fd, _ev in events:
                if fd == self.wake_fd:
                    woken = True
                    self._drain()
            if not any(fd == self.fd for fd, _ev in events):
                return self.proc.poll(), woken
            try:
                return self.proc.wait(timeout=1), woken
            except subprocess.TimeoutExpired:
                return None, woken
        try:
            return self.proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            return None, False

    def _drain(self) -> None:
        fd = self.wake_fd
        if fd is None:
            return
        try:
            if os.read(fd, 4096) == b"":  # closed: it will never say anything again
                self._poll.unregister(fd)
                self.wake_fd = None
        except BlockingIOError:
            pass
        except OSError:
            self._poll.unregister(fd)
            self.wake_fd = None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@dataclass
class Completed:
    exit_code: int | None  # None when killed at the deadline
    timed_out: bool
    killed: list[int]
    elapsed: float
    pid: int = 0
    stopped: bool = False  # ended early because should_stop() said so


REFRESH = 0.2  # seconds between two walks of a running tree that has to be watched (see run)


def run(argv: Sequence[str], *, cwd: str | Path, timeout: float, grace: float, clock: Clock | None = None,
        env: Mapping[str, str] | None = None, stdout=None, stderr=None, stdin=subprocess.DEVNULL,
        should_stop=None, poll: float = 0.05, marker: str | None = None, on_spawn=None,
        adopt_orphans: bool = False, pass_fds: Sequence[int] = (), wake_fd: int | None = None, group=None,
        watchdog=None) -> Completed:
    """Run argv under a deadline around the whole tree; leave no descendant alive.

    `should_stop()` (e.g. SIGTERM received, kill switch) ends the run early like a deadline;
    it is called every `poll` seconds, so it may also heartbeat, and at once whenever `wake_fd`
    has bytes to read (the loop runner's signal wake-up fd: a SIGTERM is seen the moment it
    arrives, so the runner can poll rarely). `on_spawn(proc, tree)` runs once the root exists
    (e.g. to persist its pid and marker before waiting).

    While the root runs, its tree is walked every REFRESH seconds so that members are remembered
    early; not when this process is a subreaper adopting the tree's orphans: then every process of
    the tree stays a descendant of the root or of this process (an orphan is reparented to the
    nearest subreaper above it), and the walk when the root ends finds them all. Each wake-up
    costs CPU (~3 ms per second of the agent's run at a 50 ms period, measured).

    `group` (healer.cgroups.Group): the program runs in it, and when it ends (or the deadline fires)
    everything in the group is killed first, at once, before the sweep: nothing it forked survives
    the call (tests/security/test_containment.py). `watchdog` (healer.watchdog.Watchdog): told the
    deadline, so that a runner stopped by the agent still ends the program on time.
    """
    clock = clock or system()
    start = clock.monotonic()
    proc, tree = spawn(argv, cwd=cwd, env=env, stdout=stdout, stderr=stderr, stdin=stdin, marker=marker,
                       adopt_orphans=adopt_orphans, pass_fds=pass_fds, group=group)
    deadline = start + timeout
    if watchdog is not None:
        watchdog.arm(proc.pid, timeout + grace, group)
    if on_spawn is not None:
        on_spawn(proc, tree)
    timed_out = False
    stopped_early = False
    code: int | None = None
    watch = not (adopt_orphans and _subreaper)
    next_refresh = start + REFRESH if watch else float("inf")
    next_check = start + poll
    waiter = _Waiter(proc, wake_fd)
    while True:
        now = clock.monotonic()
        code, woken = waiter.wait(max(0.001, min(deadline, next_check, next_refresh) - now))
        if code is not None:
            break
        now = clock.monotonic()
        if now >= next_refresh:
            tree.refresh()
            next_refresh = now + REFRESH
        if now >= deadline:
            timed_out = True
            break
        if woken or now >= next_check:
            next_check = now + poll
            if should_stop is not None and should_stop():
                stopped_early = True
                break
    waiter.close()
    caged = _end_group(group, tree, grace if code is None else 0.0, clock, poll) if group is not None else []
    killed = tree.kill(grace, clock) if (code is None) else tree.kill(min(grace, 1.0), clock)
    killed += [p for p in caged if p not in killed and (code is None or p != proc.pid)]
    if watchdog is not None:
        watchdog.disarm()
    if code is None:
        try:
            proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass
        code = None
    return Completed(code, timed_out, killed, clock.monotonic() - start, proc.pid, stopped_early)


def _end_group(group, tree: ProcessTree, grace: float, clock: Clock, poll: float) -> list[int]:
    """Everything in the program's cgroup, ended: at a deadline SIGTERM first and `grace` to go (as the sweep
    gives), then the group's kill, which nothing in it outruns. Returns the pids that were in it."""
    found = group.pids()
    if not found:
        return []
    if grace > 0:
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGTERM)
        end = clock.monotonic() + grace
        while group.pids() and clock.monotonic() < end:
            clock.sleep(min(poll, 0.05))
    found += [p for p in group.kill(clock) if p not in found]
    return found


def busy_pids(path: str | Path) -> list[int]:
    """Processes whose cwd, or one of whose open files, is inside `path`."""
    from healer import switches  # lazy: healer.switches: 1.2 ms of `loop run`'s start

    if not switches.enabled("busy_check"):  # a game day proving busy-worktree can fail
        return []
    root = str(Path(path).resolve())
    prefix = root.rstrip("/") + "/"
    out = []
    for p in processes():
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
