"""`healer watch -- CMD...`: supervise an agent command that healer did not launch.

The command runs in its own session under a deadline around its whole process tree;
it is registered as an agent (so the supervisor sees it, its heartbeats and its end),
heart-beaten while it runs, and its exit is recorded. The exit code is the command's;
at the deadline the tree is killed and the exit code is 2 (time budget exhausted);
SIGTERM/SIGINT to healer stop the tree and give 4.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path

from healer import errors, procs
from healer.clock import Clock, system
from healer.fleet.lost_hosts import host_id
from healer.records import Agent


def watch(store, argv: Sequence[str], *, ticket: str | None = None, timeout: float | None = None,
          heartbeat: float = 30.0, grace: float = 10.0, cwd: str | Path | None = None, clock: Clock | None = None) -> int:
    clock = clock or system()
    if not argv:
        raise errors.UsageError("watch: give the command after --, e.g. healer watch -- python agent.py")
    if ticket is not None:
        store.ticket(ticket)  # NotFound: one clear line, exit 64
    agent_id = f"watch-{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "HEALER_AGENT_ID": agent_id, "HEALER_ROOT": str(store.root)}
    if ticket:
        env["HEALER_TICKET"] = ticket
    cwd = Path(cwd or os.getcwd()).resolve()
    try:
        proc, tree = procs.spawn(list(argv), cwd=cwd, env=env, stdin=None)
    except OSError as e:
        raise errors.UsageError(f"watch: cannot run {argv[0]!r}: {e.strerror or e}") from e
    now = clock.now()
    store.upsert_agent(Agent(id=agent_id, ticket_id=ticket, state="running", kind="process", pid=proc.pid,
                             host=host_id(), worktree=str(cwd), started_at=now, heartbeat_at=now, progress_at=now,
                             data={"launched_by": "watch", "argv": list(argv), "marker": tree.marker, "timeout": timeout}))
    store.append("watch.started", agent_id, {"ticket": ticket, "pid": proc.pid, "argv": list(argv), "timeout": timeout})

    stop = {"sig": None}

    def on_signal(sig, _frame) -> None:
        stop["sig"] = sig

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    start = clock.monotonic()
    next_beat = start + heartbeat
    code: int | None = None
    reason = "exited"
    try:
        while True:
            try:
                code = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            t = clock.monotonic()
            if t >= next_beat:
                store.heartbeat(agent_id)
                next_beat = t + heartbeat
            if timeout is not None and t - start >= timeout:
                reason = "deadline"
                break
            if stop["sig"] is not None:
                reason = "stopped"
                break
        tree.kill(grace if code is None else min(grace, 1.0), clock)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if code is None:
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
    if reason == "deadline":
        result = errors.BUDGET_EXHAUSTED
    elif reason == "stopped":
        result = errors.STOPPED
    else:
        result = code if code is not None and code >= 0 else 128 + (-(code or 0) or signal.SIGKILL)
    end = clock.now()
    store.update_agent(agent_id, state="exited" if reason == "exited" else "stopped", ended_at=end, exit_code=code,
                       heartbeat_at=end)
    store.append("watch.ended", agent_id, {"ticket": ticket, "reason": reason, "exit_code": code, "result": result,
                                          "elapsed": clock.monotonic() - start})
    return result
