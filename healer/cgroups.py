"""A control group for the programs of one loop run: every process they start is in it, whatever it forks.

A process-tree sweep can be outrun (a setsid'd child that forks and exits in a loop has a new pid every
time it is looked for); a cgroup cannot: a child is born in its parent's group, and only a writer of
`cgroup.procs` of a common ancestor can move it out (the sandbox's /sys is read-only; a same-user agent
under `sandbox: none` is no such writer unless it runs as root). So the loop puts each program it starts
(the agent, each gate) into the run's group from its birth (`holding`: the runner steps in to start it and
back out), and ends whatever is in the group after each program (`kill`), before anything else happens:

- cgroup v2 (`cgroup.kill`, Linux 5.14): one write, the kernel kills every process of the group at once.
- cgroup v1 (preferred where it is mounted: see HEALER_CGROUP below), the freezer: freeze the group (a frozen process cannot fork), SIGKILL every task it lists,
  thaw so they die: what container runtimes do (runc's signalAllProcesses).
- neither writable (not root and no delegated v2 subtree, or no cgroup file system): `unavailable` says why
  once; the run relies on bwrap's pid namespace and on procs.ProcessTree's sweep.

`loop.limits` (`pids`, `memory`) go to the same group: v2's `pids.max`/`memory.max` when those controllers
are enabled for it, else v1's `pids`/`memory` hierarchies (these machines: v1 controllers, v2 mounted
beside them with none). A group is named after the worktree and the run, so a resumed run finds what a
SIGKILLed runner left in it; it is removed (rmdir of an empty group) when the run ends. Nothing a process
wrote is ever deleted by this module.

Nothing freezes itself (issue 40: a resumed runner stayed FROZEN in its own group for 55 minutes). Two flocks,
which the kernel drops when their holder dies, however it dies:

- the *run lock* (LOCK_SH on the group's folder, held by the process that made it for as long as it lives): a
  group nobody holds it on has lost its runner, and `sweep` (every healer start) thaws, empties and removes it;
- the *step lock* (LOCK_EX on the group's cgroup.procs): `holding` takes it while the runner is inside, every
  kill takes it around its freeze, so no kill ever freezes (or cgroup.kills) a group while the runner is in it.
  Whoever takes it finds any FROZEN state stale (its freezer died between freeze and thaw) and thaws it first.
  A kill never freezes a group its own process, its parent (the watchdog's runner) or `protect` is in: it
  SIGKILLs the others one by one instead; and every freeze is thawed in a `finally`.

HEALER_CGROUP=auto|v2|v1|off picks the backend (auto: the v1 freezer where there is one, else v2: on a hybrid
machine a v2 migration costs each program start ~5 ms of wall time under load, v1's ~1 ms, measured); tests use
it to prove each.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

from healer import digest
from healer.clock import Clock, system

ENV = "HEALER_CGROUP"
PREFIX = "healer-run-"  # a run's group (name_for); only these are ever swept, and only when their run lock is free
_warned: set[str] = set()
STEP_WAIT = 5.0  # seconds `holding` waits for a kill under way; a killer stopped longer is stepped past


@dataclass(frozen=True)
class Mounts:
    v2: Path | None  # the cgroup2 mount
    v1: dict[str, Path]  # controller -> its v1 hierarchy's mount
    own: dict[str, str]  # "" (v2) or controller -> this process's path in that hierarchy


def _unescape(p: str) -> str:
    return p.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mounts() -> Mounts:
    """Where the cgroup file systems are mounted and where this process sits in each (mountinfo, /proc/self/cgroup)."""
    v2: Path | None = None
    v1: dict[str, Path] = {}
    own: dict[str, str] = {}
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                parts, rparts = left.split(), right.split()
                if len(parts) < 5 or len(rparts) < 3:
                    continue
                where = Path(_unescape(parts[4]))
                if rparts[0] == "cgroup2" and v2 is None:
                    v2 = where
                elif rparts[0] == "cgroup":
                    for opt in rparts[2].split(","):
                        if opt in ("freezer", "pids", "memory"):
                            v1.setdefault(opt, where)
        with open("/proc/self/cgroup") as f:
            for line in f:
                _id, ctrls, path = line.rstrip("\n").split(":", 2)
                if ctrls == "":
                    own[""] = path
                for c in ctrls.split(","):
                    if c in ("freezer", "pids", "memory"):
                        own[c] = path
    except (OSError, ValueError):
        pass
    return Mounts(v2, v1, own)


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _pids(path: Path) -> list[int]:
    return [int(x) for x in _read(path).split() if x.isdigit()]


def _lock(path: Path, how: int, wait: float, clock: Clock) -> int | None:
    """A descriptor of `path` holding the flock `how`, got within `wait` seconds (0: one try), or None: held
    elsewhere all that time, or `path` is gone. Closing it (or the holder's death) releases the lock."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    end = clock.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if clock.monotonic() >= end:
                os.close(fd)
                return None
            clock.sleep(0.002)
        except OSError:
            os.close(fd)
            return None


def run_lock(top: Path, clock: Clock | None = None, wait: float = 0.0) -> int:
    """The run lock of a group taken exclusively within `wait` seconds: a descriptor, or -1 when a runner (or a
    sweep) holds it or the folder is gone. For whoever cleans up after a dead runner (its watchdog, `sweep`)."""
    fd = _lock(top, fcntl.LOCK_EX, wait, clock or system())
    return -1 if fd is None else fd


def _close(fd: int | None) -> None:
    if fd is not None and fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


@dataclass
class Group:
    """One run's group: `kind` "v2" or "v1"; `dirs` each folder it made (the first is where kill acts)."""
    kind: str
    dirs: list[Path] = field(default_factory=list)
    made: list[Path] = field(default_factory=list)  # the folders this process created (removed at the end)
    home: list[Path] = field(default_factory=list)  # this process's own group in each hierarchy of `dirs`
    alive: int = -1  # the run lock (LOCK_SH on `top`) while this process owns the group: see the module's doc

    @property
    def top(self) -> Path:
        return self.dirs[0]

    def holding(self) -> _Holding:
        """`with group.holding(): Popen(...)`: this process steps into the group while it starts a program and
        back home right after, so the child is born inside (nothing it runs is ever outside) and the spawn keeps
        its fast path: a preexec_fn that moved the child itself made every program start 15 ms slower (measured,
        Python 3.11: it forces a full fork). It holds the step lock meanwhile: no kill freezes it in there."""
        return _Holding(self)

    def pids(self) -> list[int]:
        out: list[int] = []
        for d in self.dirs:
            out += [p for p in _pids(d / "cgroup.procs") if p not in out]
        return out

    def frozen(self) -> bool:
        """Whether the group is frozen (or freezing) now: v1's freezer.state, v2's cgroup.freeze."""
        if self.kind == "v1":
            return _read(self.top / "freezer.state").strip() in ("FROZEN", "FREEZING")
        return _read(self.top / "cgroup.freeze").strip() == "1"

    def _thaw(self) -> None:
        if self.kind == "v1":
            _write(self.top / "freezer.state", "THAWED")
        else:
            _write(self.top / "cgroup.freeze", "0")

    def thaw_stale(self, clock: Clock | None = None) -> bool:
        """Thaw a group left frozen by a killer that died between its freeze and its thaw (SIGKILLed): only when
        no kill is under way (the step lock is free), whose own `finally` thaws. True when it thawed."""
        if not self.frozen():
            return False
        step = _lock(self.top / "cgroup.procs", fcntl.LOCK_EX, 0, clock or system())
        if step is None:
            return False
        try:
            if self.frozen():
                self._thaw()
                return True
            return False
        finally:
            _close(step)

    def kill(self, clock: Clock | None = None, wait: float = 10.0, protect: tuple[int, ...] = ()) -> list[int]:
        """End every process in the group and wait until it is empty (at most `wait` seconds). Returns the pids
        that were in it. Cheap when it is empty already (one read, one more for a stale freeze), as after a program
        that left nothing. This process, its parent and `protect` are never frozen nor killed (module doc)."""
        clock = clock or system()
        keep = {os.getpid(), os.getppid(), *protect}
        found = [p for p in self.pids() if p not in keep]
        if not found:
            with contextlib.suppress(OSError):
                self.thaw_stale(clock)
            return []
        end = clock.monotonic() + wait
        killed = self._kill_once(clock, end, keep)
        while clock.monotonic() < end:
            if not [p for p in self.pids() if p not in keep]:
                break
            killed += [p for p in self._kill_once(clock, end, keep) if p not in killed]
            clock.sleep(0.005)
        for p in found:
            _reap(p)
        return killed

    def _kill_once(self, clock: Clock, end: float, keep: set[int]) -> list[int]:
        """One round; returns the pids it killed."""
        procs = self.top / "cgroup.procs"
        if keep & set(_pids(procs)):
            return _kill_each(_pids(procs), keep)  # we (or our parent) are in it, in `holding`: never freeze it
        step = _lock(procs, fcntl.LOCK_EX, max(0.0, min(STEP_WAIT, end - clock.monotonic())), clock)
        try:
            inside = _pids(procs)
            if step is None or keep & set(inside):
                # a runner in `holding` past STEP_WAIT, or one of `keep` inside: no freeze, no cgroup.kill (they
                # would take it along); every other process gets its SIGKILL
                return _kill_each(inside, keep)
            if self.kind == "v2":
                _write(self.top / "cgroup.kill", "1")
                if self.frozen():
                    self._thaw()  # stale: a frozen v2 task dies of SIGKILL anyway; leave the group usable
                return inside
            return self._freeze_kill_thaw(clock, end, keep)
        finally:
            _close(step)

    def _freeze_kill_thaw(self, clock: Clock, end: float, keep: set[int]) -> list[int]:
        state = self.top / "freezer.state"
        _write(state, "FROZEN")
        give_up = min(end, clock.monotonic() + 2.0)
        try:
            while _read(state).strip() == "FREEZING" and clock.monotonic() < give_up:
                clock.sleep(0.002)  # a task in uninterruptible sleep freezes when it wakes; kill what froze anyway
            listed = _pids(self.top / "cgroup.procs")  # frozen: this list cannot grow while we go through it
            if keep & set(listed):
                return []  # (cannot happen under the step lock; if it does, thawed at once below, killed by the next round)
            for p in listed:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return listed
        finally:
            _write(state, "THAWED")  # a SIGKILLed frozen task dies once thawed; on every path, an exception's too

    def remove(self) -> None:
        """rmdir of the folders this process made, deepest first (an empty group; a group with a process left
        in it stays, and the next run of the same id, or the next healer start's sweep, kills what is in it);
        then the run lock is let go."""
        for d in reversed(self.made):
            try:
                os.rmdir(d)
            except OSError:
                pass
        _close(self.alive)
        self.alive = -1


def _kill_each(pids: list[int], keep: set[int]) -> list[int]:
    out = []
    for p in pids:
        if p not in keep:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
                out.append(p)
    return out


class _Holding:
    def __init__(self, group: Group) -> None:
        self.group = group
        self.step: int | None = None

    def __enter__(self) -> None:
        g, clock = self.group, system()
        self.step = _lock(g.top / "cgroup.procs", fcntl.LOCK_EX, STEP_WAIT, clock)
        # None: the folder is gone (made again below), or a killer held the lock past STEP_WAIT (stopped by
        # someone): step in anyway, as before the lock
        try:
            if g.frozen():
                g._thaw()  # we hold the step lock (or waited it out): this freeze is a dead killer's
            for d in g.dirs:
                try:
                    _write(d / "cgroup.procs", "0")
                except FileNotFoundError:  # removed under the run (by hand, by a sweep): made again, limits lost
                    os.makedirs(d, exist_ok=True)
                    if d == g.top and g.alive >= 0:  # the run lock on the new folder: no sweep takes it for stale
                        _close(g.alive)
                        g.alive = _lock(d, fcntl.LOCK_SH, 0, clock) or -1
                    _write(d / "cgroup.procs", "0")
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc) -> None:
        try:
            for d in self.group.home:
                _write(d / "cgroup.procs", "0")
        finally:
            _close(self.step)
            self.step = None


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        pass


def name_for(workdir: Path, run_id: str) -> str:
    """healer-run-<8 hex of the worktree's path>-<run id>: one group per run and worktree, the same on resume.
    (Before issue 40 groups were named healer-<8 hex>-<id> and held no run lock: `sweep` never touches those.)"""
    h = digest.sha256(str(Path(workdir).resolve()).encode()).hexdigest()[:8]
    return f"{PREFIX}{h}-{run_id}"[:120]


def _mkdir(path: Path, made: list[Path]) -> None:
    try:
        os.mkdir(path)
    except FileExistsError:
        pass  # a group a SIGKILLed runner of this run left: reused, killed empty first by the caller, ours to remove
    if path not in made:
        made.append(path)


def _claim(d: Path, made: list[Path], clock: Clock) -> int:
    """Make (or reuse) the group's folder and take its run lock (shared); a sweep that removed it in between
    (it took the lock first) gets it made again. Raises OSError."""
    for _ in range(3):
        _mkdir(d, made)
        fd = _lock(d, fcntl.LOCK_SH, 15.0, clock)
        if fd is None:
            if not d.exists():
                continue
            raise OSError(errno.EBUSY, "its run lock is held by a sweep that has not ended in 15 s")
        try:
            if os.stat(d).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
        if d in made:
            made.remove(d)
    raise OSError(errno.EBUSY, "removed under us three times")


def _own_dir(mount: Path, own: str | None) -> Path | None:
    if own is None:
        return None
    d = mount / own.lstrip("/")
    return d if d.is_dir() else None


def make(name: str, limits: dict[str, int | None] | None = None,
         clock: Clock | None = None) -> tuple[Group | None, str | None]:
    """The run's group under this process's own group in each hierarchy, or (None, why not). `limits`:
    {"pids": N, "memory": bytes} (None values: no limit); a limit no controller here can enforce is named in
    the second element (a warning) while the group itself still works."""
    want = os.environ.get(ENV, "auto")
    if want == "off":
        return None, f"{ENV}=off"
    limits = {k: v for k, v in (limits or {}).items() if v}
    clock = clock or system()
    m = mounts()
    errors_seen: list[str] = []
    made: list[Path] = []
    group: Group | None = None
    if want in ("auto", "v1") and "freezer" in m.v1:
        parent = _own_dir(m.v1["freezer"], m.own.get("freezer"))
        if parent is not None:
            d = parent / name
            try:
                group = Group("v1", [d], made, [parent], _claim(d, made, clock))
            except OSError as e:
                errors_seen.append(f"{d}: {e.strerror}")
    if group is None and want in ("auto", "v2") and m.v2 is not None:
        parent = _own_dir(m.v2, m.own.get(""))
        if parent is not None:
            d = parent / name
            try:
                fd = _claim(d, made, clock)
                if (d / "cgroup.kill").exists():
                    group = Group("v2", [d], made, [parent], fd)
                else:
                    _close(fd)
                    errors_seen.append(f"{d}: no cgroup.kill (Linux < 5.14)")
            except OSError as e:
                errors_seen.append(f"{d}: {e.strerror}")
    if group is None:
        for d in reversed(made):
            try:
                os.rmdir(d)
            except OSError:
                pass
        why = "; ".join(errors_seen) or "no cgroup file system (v2 or a v1 freezer) found"
        if want != "auto":
            why = f"{ENV}={want}: {why}"
        return None, why
    missing = _limit(group, m, name, limits)
    return group, ("loop.limits: " + "; ".join(missing)) if missing else None


_V2_FILES = {"pids": "pids.max", "memory": "memory.max"}
_V1_FILES = {"pids": "pids.max", "memory": "memory.limit_in_bytes"}


def _limit(group: Group, m: Mounts, name: str, limits: dict[str, int | None]) -> list[str]:
    missing: list[str] = []
    for ctrl, value in limits.items():
        if group.kind == "v2" and ctrl in _read(group.top / "cgroup.controllers").split():
            try:
                _write(group.top / _V2_FILES[ctrl], str(value))
                continue
            except OSError as e:
                missing.append(f"{ctrl}: {group.top / _V2_FILES[ctrl]}: {e.strerror}")
                continue
        parent = _own_dir(m.v1[ctrl], m.own.get(ctrl)) if ctrl in m.v1 else None
        if parent is None:
            missing.append(f"{ctrl}: no {ctrl} controller here (cgroup v2 or v1)")
            continue
        d = parent / name
        try:
            _mkdir(d, group.made)
            _write(d / _V1_FILES[ctrl], str(value))
            group.dirs.append(d)
            group.home.append(parent)
        except OSError as e:
            missing.append(f"{ctrl}: {d}: {e.strerror}")
    return missing


def open_run(workdir: Path, run_id: str, limits: dict[str, int | None] | None = None,
             clock: Clock | None = None) -> tuple[Group | None, list[int], str | None]:
    """The run's group, emptied of what a SIGKILLed runner of the same run left in it: (group or None, the
    pids killed, a line to say once: why there is none, or which limit cannot be enforced)."""
    group, why = make(name_for(workdir, run_id), limits, clock)
    if why is not None:
        key = why if group is not None else "none"
        if key in _warned:
            why = None
        _warned.add(key)
    if group is None:
        return None, [], why and f"healer: note: no writable cgroup for the loop's programs ({why}); relying on " \
                             "bwrap's pid namespace and the process-tree sweep"
    try:
        left = group.kill(clock)
    except OSError as e:
        if e.errno not in (errno.ENOENT, errno.EACCES, errno.EPERM):
            raise
        left = []
    return group, left, why and f"healer: warning: {why}"


@dataclass(frozen=True)
class Swept:
    name: str  # the group's name (healer-run-...)
    killed: list[int]  # the pids that were left in it
    thawed: bool  # it was left frozen (a killer SIGKILLed between its freeze and its thaw)


def sweep(clock: Clock | None = None) -> list[Swept]:
    """Every healer start: end the run groups (named healer-run-*, beside this process's own group in each
    hierarchy) whose runner is gone, i.e. nobody holds their run lock: thaw, kill what is left, rmdir the empty
    folders (an empty cgroup's rmdir deletes nothing anyone wrote). A group whose run lock is held (its runner
    lives, or another sweep is at it) is left alone; a group of another name is never looked at. Best effort: a
    folder it cannot read or write is passed over."""
    if os.environ.get(ENV, "auto") == "off":
        return []
    clock = clock or system()
    m = mounts()
    places = [("freezer", m.v1.get("freezer")), ("", m.v2), ("pids", m.v1.get("pids")), ("memory", m.v1.get("memory"))]
    found: dict[str, dict[str, Path]] = {}
    for key, mount in places:
        parent = _own_dir(mount, m.own.get(key)) if mount is not None else None
        if parent is None:
            continue
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for n in names:
            if n.startswith(PREFIX):
                found.setdefault(n, {})[key] = parent / n
    out: list[Swept] = []
    for name, where in sorted(found.items()):
        tops = [("v1" if k == "freezer" else "v2", d) for k, d in where.items() if k in ("freezer", "")]
        if not tops:
            continue  # only limit folders here: their top may sit elsewhere (our own groups differ per hierarchy)
        locks: list[int] = []
        try:
            for _kind, d in tops:
                fd = _lock(d, fcntl.LOCK_EX, 0, clock)
                if fd is None:
                    break
                locks.append(fd)
            if len(locks) != len(tops):
                continue  # its runner lives (or the folder just went)
            killed: list[int] = []
            thawed = False
            for kind, d in tops:
                g = Group(kind, [d])
                with contextlib.suppress(OSError):
                    thawed = g.frozen() or thawed
                    killed += g.kill(clock)
            for d in [d for _k, d in tops] + [d for k, d in where.items() if k not in ("freezer", "")]:
                with contextlib.suppress(OSError):
                    os.rmdir(d)
            out.append(Swept(name, killed, thawed))
        finally:
            for fd in locks:
                _close(fd)
    return out
