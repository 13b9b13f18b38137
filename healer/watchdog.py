"""The loop runner's watchdog: a deadline the agent cannot freeze, and an agent that cannot outlive the runner.

The runner enforces each program's deadline itself (procs.run); an agent that stops the runner (SIGSTOP,
under `sandbox: none` or a non-root runner without a pid namespace) would stop the deadline with it. So the
runner forks this small process once per run, before any program: it holds no lock, no store and no
descriptor of the runner's but its two pipes, and is told each program's pid and deadline (`arm`) and its end
(`disarm`). While a program runs it looks every WATCH seconds:

- the runner stopped (state T or t): SIGCONT to it, reported (`loop.runner_stopped`, a finding for the
  fleet's supervisor);
- the program past its deadline plus its grace plus MARGIN (the runner had its chance and did not take it):
  SIGKILL to the program's root through a pidfd opened when it was armed (never a reused pid), its process
  group, and the run's cgroup's kill; reported;
- the runner gone (its pipe closed: SIGKILLed): the same kill at once, then it exits. What the agent started
  never outlives the runner.

Under bwrap's pid namespace the agent sees neither the runner nor the watchdog; under `sandbox: none` a
same-user agent can stop both at once (`kill(-1, SIGSTOP)`): nothing but a different user or a namespace
is out of its reach there (docs/security.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
from pathlib import Path

from healer import cgroups
from healer.clock import system

WATCH = 0.2
MARGIN = 1.0


class Watchdog:
    def __init__(self) -> None:
        self.pid = 0
        self._w = self._r = -1
        self._buf = b""

    def start(self) -> Watchdog:
        cmd_r, cmd_w = os.pipe()
        rep_r, rep_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; proven by tests/security/test_containment.py
            code = 0
            try:
                _keep_only(cmd_r, rep_w)
                _main(cmd_r, rep_w)
            except BaseException:  # noqa: BLE001 - never back into the runner's code
                code = 70
            os._exit(code)
        os.close(cmd_r)
        os.close(rep_w)
        os.set_blocking(rep_r, False)
        self.pid, self._w, self._r = pid, cmd_w, rep_r
        return self

    def _say(self, line: str) -> None:
        if self._w < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self._w, line.encode() + b"\n")

    def arm(self, pid: int, seconds: float, group=None) -> None:
        """A program started: `pid` its root, `seconds` its timeout plus grace, `group` the run's cgroup."""
        g = f" {group.kind} {os.fsencode(str(group.top)).hex()}" if group is not None else ""
        self._say(f"arm {pid} {seconds:.3f}{g}")

    def disarm(self) -> None:
        self._say("disarm")

    def own(self, group) -> None:
        """The run's cgroup: if the runner dies (SIGKILL), the watchdog empties it and removes its folders, which
        the runner would have done at its end."""
        if group is not None:
            self._say("group " + group.kind + " " + " ".join(os.fsencode(str(d)).hex() for d in group.dirs))

    def reports(self) -> list[str]:
        """What it did since the last call: "stopped" (it resumed a stopped runner), "killed PID"."""
        if self._r < 0:
            return []
        while True:
            try:
                chunk = os.read(self._r, 4096)
            except BlockingIOError:
                break
            except OSError:
                break
            if not chunk:
                break
            self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        return [ln.decode(errors="replace") for ln in lines if ln]

    def close(self) -> None:
        """The runner's own end: it ends its group itself, so the watchdog just goes (without "done" it would take
        the closed pipe for the runner's death, and wait on the run lock the runner still holds)."""
        self._say("done")
        for fd in (self._w, self._r):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._w = self._r = -1
        if self.pid:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(self.pid, 0)
            self.pid = 0


def start() -> Watchdog | None:
    try:
        return Watchdog().start()
    except OSError:
        return None


def _keep_only(*fds: int) -> None:
    keep = sorted(fds)
    lo = 3
    for fd in keep:
        os.closerange(lo, fd)
        lo = fd + 1
    os.closerange(lo, 1 << 20)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2:][:1].decode()
    except (OSError, ValueError):
        return ""


def _unlike_the_runner() -> None:
    """A fork carries the runner's command line, cwd and environment block: whatever finds runs by them (the
    dispatcher's find_agent by HEALER_AGENT_ID and the tree marker, busy_pids by cwd) must not take the watchdog
    for the runner. Its copy of the environment block is wiped (copy-on-write: the runner's stays), its cwd is
    /, and it is named healer-watchdog."""
    with contextlib.suppress(OSError):
        os.chdir("/")
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, b"healer-watchdog", 0, 0, 0)  # PR_SET_NAME
        with open("/proc/self/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end
        if 0 < start < end:
            ctypes.memset(start, 0, end - start)
    except (OSError, ValueError, IndexError, AttributeError):
        pass


def _remove_group(spec: str, clock) -> None:
    """The runner is gone: empty its group and remove it, under the group's run lock (taken, never waited for): a
    group whose lock is held again belongs to a new runner of the same run (a resume), whose programs are not
    ours to end; it emptied the group of our runner's leftovers when it took it."""
    kind, *hexdirs = spec.split()
    dirs = [Path(os.fsdecode(bytes.fromhex(h))) for h in hexdirs]
    if not dirs:
        return
    g = cgroups.Group(kind, dirs, list(dirs))
    # waited for a little: the runner's pipe may close before its lock does, both in its exit
    g.alive = cgroups.run_lock(dirs[0], clock, wait=3.0) if dirs[0].exists() else -1
    if g.alive < 0:
        return
    with contextlib.suppress(OSError):
        g.kill(clock)
    g.remove()  # lets the lock go too


def _main(cmd: int, rep: int) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    _unlike_the_runner()
    runner = os.getppid()
    clock = system()
    armed: tuple[int, int, float, str] | None = None  # (pid, pidfd, deadline, group "kind hexdir" or "")
    owned: list[str] = []  # "kind hexdir..." of the run's cgroup
    buf = b""

    def report(line: str) -> None:
        with contextlib.suppress(OSError):
            os.write(rep, line.encode() + b"\n")

    def kill(a: tuple[int, int, float, str], group: bool = True) -> None:
        pid, pidfd, _deadline, grp = a
        if grp and group:  # (the runner lives: Group.kill spares it, our parent, and waits out its `holding`)
            kind, hexdir = grp.split()
            with contextlib.suppress(OSError):
                cgroups.Group(kind, [Path(os.fsdecode(bytes.fromhex(hexdir)))]).kill(clock)
        alive = True
        if pidfd >= 0:
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except ProcessLookupError:
                alive = False
            except OSError:
                pass
        if alive:  # its process group (its session: procs.spawn starts each program in a new one)
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        report(f"killed {pid}")

    def drop(a) -> None:
        if a is not None and a[1] >= 0:
            with contextlib.suppress(OSError):
                os.close(a[1])

    while True:
        timeout = WATCH if armed is not None else None
        ready, _, _ = select.select([cmd], [], [], timeout)
        if ready:
            data = os.read(cmd, 4096)
            if not data:  # the runner is gone (or done): what it started goes with it, and so does its cgroup
                if armed is not None:
                    kill(armed, group=False)
                spec = owned[0] if owned else (armed[3] if armed is not None else "")
                if spec:
                    _remove_group(spec, clock)
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            for ln in lines:
                parts = ln.decode(errors="replace").split(" ", 3)
                if parts[0] == "arm" and len(parts) >= 3:
                    drop(armed)
                    pid = int(parts[1])
                    try:
                        pidfd = os.pidfd_open(pid)
                    except OSError:
                        pidfd = -1
                    armed = (pid, pidfd, clock.monotonic() + float(parts[2]) + MARGIN,
                             parts[3] if len(parts) > 3 else "")
                elif parts[0] == "group" and len(parts) >= 3:
                    owned[:] = [ln.decode(errors="replace")[len("group "):]]
                elif parts[0] == "disarm":
                    drop(armed)
                    armed = None
                elif parts[0] == "done":  # the runner ends and empties its group itself
                    if armed is not None:  # (ended by an exception mid-program: that program goes now)
                        kill(armed, group=False)
                    return
        if armed is None:
            continue
        if _state(runner) in ("T", "t"):
            with contextlib.suppress(OSError):
                os.kill(runner, signal.SIGCONT)
            report("stopped")
        if clock.monotonic() >= armed[2]:
            kill(armed)
            drop(armed)
            armed = None
