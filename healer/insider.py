"""Whether this process runs inside a loop run (an agent, a gate, or anything they started), from what the kernel
keeps and the process cannot rewrite: the board's write commands refuse then (issue 39: an agent read the store URL
from ROOT/.healer/config.yaml, ran `healer board move`, and the event log said `actor=human`).

Evidence, first found wins (an environment variable is none: the agent sets and unsets its own):

- its cgroup: the loop puts every program it starts in `healer-<8 hex>-<run>` (healer/cgroups.py), and a process
  leaves a cgroup only by a write to a common ancestor's `cgroup.procs` (read-only in the sandbox; root's under
  `none`);
- its pid namespace's init is bubblewrap: a healer sandbox (the agent's, a gate's, the fleet's merge gates);
  nothing inside can leave the namespace, and pid 1 is not the agent's to rewrite;
- an ancestor is a healer loop runner (`healer loop run`): the runner is a child subreaper (healer/procs.py), so
  a double fork does not shake it off. What an unprivileged unsandboxed agent started is found this way.

This is the honest path (healer's own CLI). A program of the agent's own can write a store it can reach with
any actor: what keeps it out is the kernel (the sandbox mounts the SQLite store read-only; network off, the
default, leaves the PostgreSQL server's 127.0.0.1 out of reach and seccomp closes its Unix socket) (docs/security.md).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_GROUP = re.compile(r"/healer-[0-9a-f]{8}-([^/\s]+)$")
MAX_ANCESTORS = 64


def _read(path: str) -> str:
    try:
        return Path(path).read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""


def _cgroup_run(proc: str) -> str | None:
    for line in _read(f"{proc}/self/cgroup").splitlines():
        m = _GROUP.search(line.split(":", 2)[-1])
        if m:
            return m.group(1)
    return None


def _argv(proc: str, pid: int | str) -> list[str]:
    return [a for a in _read(f"{proc}/{pid}/cmdline").split("\0") if a]


def is_runner(argv: list[str]) -> bool:
    """`healer loop run …` or `python -m healer loop run …` (a fleet's loop_command runs the same)."""
    for i, a in enumerate(argv):
        if (a == "healer" and i and argv[i - 1] == "-m") or Path(a).name == "healer":
            rest = argv[i + 1:]
            return any(rest[j:j + 2] == ["loop", "run"] for j in range(len(rest)))
    return False


def _ppid(proc: str, pid: int) -> int | None:
    stat = _read(f"{proc}/{pid}/stat")
    try:  # the name in parentheses may hold spaces and ')'; ppid is the second field after its last ')'
        return int(stat[stat.rindex(")") + 2:].split()[1])
    except (ValueError, IndexError):
        return None


def evidence(proc: str = "/proc") -> str | None:
    """Why this process is inside a loop run (one phrase), or None."""
    run = _cgroup_run(proc)
    if run is not None:
        return f"its cgroup is loop run {run}'s"
    init = _argv(proc, 1)
    if init and Path(init[0]).name == "bwrap":
        return "it runs in a healer sandbox (its pid namespace's init is bwrap)"
    pid: int | None = os.getppid()
    for _ in range(MAX_ANCESTORS):
        if pid is None or pid <= 1:
            break
        if is_runner(_argv(proc, pid)):
            return f"a loop runner (pid {pid}) is its ancestor"
        pid = _ppid(proc, pid)
    return None
