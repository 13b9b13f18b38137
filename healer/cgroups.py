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

HEALER_CGROUP=auto|v2|v1|off picks the backend (auto: the v1 freezer where there is one, else v2: on a hybrid
machine a v2 migration costs each program start ~5 ms of wall time under load, v1's ~1 ms, measured); tests use
it to prove each.
"""

from __future__ import annotations

import errno
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

from healer import digest
from healer.clock import Clock, system

ENV = "HEALER_CGROUP"
_warned: set[str] = set()


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


@dataclass
class Group:
    """One run's group: `kind` "v2" or "v1"; `dirs` each folder it made (the first is where kill acts)."""
    kind: str
    dirs: list[Path] = field(default_factory=list)
    made: list[Path] = field(default_factory=list)  # the folders this process created (removed at the end)
    home: list[Path] = field(default_factory=list)  # this process's own group in each hierarchy of `dirs`

    @property
    def top(self) -> Path:
        return self.dirs[0]

    def holding(self) -> _Holding:
        """`with group.holding(): Popen(...)`: this process steps into the group while it starts a program and
        back home right after, so the child is born inside (nothing it runs is ever outside) and the spawn keeps
        its fast path: a preexec_fn that moved the child itself made every program start 15 ms slower (measured,
        Python 3.11: it forces a full fork)."""
        return _Holding(self)

    def pids(self) -> list[int]:
        out: list[int] = []
        for d in self.dirs:
            out += [p for p in _pids(d / "cgroup.procs") if p not in out]
        return out

    def kill(self, clock: Clock | None = None, wait: float = 10.0) -> list[int]:
        """End every process in the group and wait until it is empty (at most `wait` seconds). Returns the pids
        that were in it. Cheap when it is empty already (one read), as after a program that left nothing."""
        clock = clock or system()
        found = self.pids()
        if not found:
            return []
        end = clock.monotonic() + wait
        if self.kind == "v2":
            _write(self.top / "cgroup.kill", "1")
        else:
            self._freeze_kill_thaw(clock, end)
        while clock.monotonic() < end:
            left = self.pids()
            if not left:
                break
            if self.kind == "v2":
                _write(self.top / "cgroup.kill", "1")
            else:
                self._freeze_kill_thaw(clock, end)
            clock.sleep(0.005)
        for p in found:
            _reap(p)
        return found

    def _freeze_kill_thaw(self, clock: Clock, end: float) -> None:
        state = self.top / "freezer.state"
        _write(state, "FROZEN")
        give_up = min(end, clock.monotonic() + 2.0)
        try:
            while _read(state).strip() == "FREEZING" and clock.monotonic() < give_up:
                clock.sleep(0.002)  # a task in uninterruptible sleep freezes when it wakes; kill what froze anyway
            for p in _pids(self.top / "cgroup.procs"):  # frozen: this list cannot grow while we go through it
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        finally:
            _write(state, "THAWED")  # a SIGKILLed frozen task dies once thawed

    def remove(self) -> None:
        """rmdir of the folders this process made, deepest first (an empty group; a group with a process left
        in it stays, and the next run of the same id kills what is in it)."""
        for d in reversed(self.made):
            try:
                os.rmdir(d)
            except OSError:
                pass


class _Holding:
    def __init__(self, group: Group) -> None:
        self.group = group

    def __enter__(self) -> None:
        for d in self.group.dirs:
            try:
                _write(d / "cgroup.procs", "0")
            except FileNotFoundError:  # removed under the run (by hand, by a sweep): made again, limits lost
                os.makedirs(d, exist_ok=True)
                _write(d / "cgroup.procs", "0")

    def __exit__(self, *exc) -> None:
        for d in self.group.home:
            _write(d / "cgroup.procs", "0")


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        pass


def name_for(workdir: Path, run_id: str) -> str:
    """healer-<8 hex of the worktree's path>-<run id>: one group per run and worktree, the same on resume."""
    h = digest.sha256(str(Path(workdir).resolve()).encode()).hexdigest()[:8]
    return f"healer-{h}-{run_id}"[:120]


def _mkdir(path: Path, made: list[Path]) -> None:
    try:
        os.mkdir(path)
        made.append(path)
    except FileExistsError:
        pass  # a group a SIGKILLed runner of this run left: reused, and killed empty first by the caller


def _own_dir(mount: Path, own: str | None) -> Path | None:
    if own is None:
        return None
    d = mount / own.lstrip("/")
    return d if d.is_dir() else None


def make(name: str, limits: dict[str, int | None] | None = None) -> tuple[Group | None, str | None]:
    """The run's group under this process's own group in each hierarchy, or (None, why not). `limits`:
    {"pids": N, "memory": bytes} (None values: no limit); a limit no controller here can enforce is named in
    the second element (a warning) while the group itself still works."""
    want = os.environ.get(ENV, "auto")
    if want == "off":
        return None, f"{ENV}=off"
    limits = {k: v for k, v in (limits or {}).items() if v}
    m = mounts()
    errors_seen: list[str] = []
    made: list[Path] = []
    group: Group | None = None
    if want in ("auto", "v1") and "freezer" in m.v1:
        parent = _own_dir(m.v1["freezer"], m.own.get("freezer"))
        if parent is not None:
            d = parent / name
            try:
                _mkdir(d, made)
                group = Group("v1", [d], made, [parent])
            except OSError as e:
                errors_seen.append(f"{d}: {e.strerror}")
    if group is None and want in ("auto", "v2") and m.v2 is not None:
        parent = _own_dir(m.v2, m.own.get(""))
        if parent is not None:
            d = parent / name
            try:
                _mkdir(d, made)
                if (d / "cgroup.kill").exists():
                    group = Group("v2", [d], made, [parent])
                else:
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


def _limit(group: Group, m: Mounts, name: str, limits: dict[str, int]) -> list[str]:
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
    group, why = make(name_for(workdir, run_id), limits)
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
