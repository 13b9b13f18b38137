"""A run's files: `WORKDIR/.healer/runs/RUN_ID/` and the state persisted there.

state.json    the whole run state, written atomically (write, then rename) after
              every iteration, so a SIGKILL loses at most the iteration in flight
result.json   written once at the end, read by the dispatcher for retry evidence
checkpoints.md  a human-readable entry every `checkpoint_every` iterations
iter-NNN/     prompt.md, agent.out, agent.err, gates.log (+ one log per gate)
PAUSE         created by `healer loop pause`; the runner stops before the next iteration
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from healer.errors import UsageError
from healer.files import write_atomic
from healer.loop.decide import IterationRecord

RUNS_DIR = Path(".healer") / "runs"
DAILY_FILE = Path(".healer") / "loop-days.log"
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")


def check_run_id(run_id: str) -> str:
    if not RUN_ID_RE.match(run_id or ""):
        raise UsageError(f"--run-id {run_id!r}: expected letters, digits, '.', '_' or '-' (at most 80), got {run_id!r}")
    return run_id


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # dumps, not dump: dump streams through the pure-Python encoder, dumps writes it in C
    write_atomic(path, json.dumps(data, sort_keys=True, default=str, separators=(",", ":")) + "\n")


def read_json(path: Path) -> Any:
    with open(path) as f:
        return json.load(f)


@dataclass(frozen=True)
class RunPaths:
    workdir: Path
    run_id: str

    @property
    def dir(self) -> Path:
        # made once: the runner asks for its files a hundred times a run, and each Path join costs
        d = self.__dict__.get("_dir")
        if d is None:
            d = self.workdir / RUNS_DIR / self.run_id
            object.__setattr__(self, "_dir", d)
        return d

    @property
    def state(self) -> Path:
        return self.dir / "state.json"

    @property
    def result(self) -> Path:
        return self.dir / "result.json"

    @property
    def checkpoints(self) -> Path:
        return self.dir / "checkpoints.md"

    @property
    def pause(self) -> Path:
        return self.dir / "PAUSE"

    @property
    def agent(self) -> Path:
        """The running agent tree (iteration, marker, pid, create time), written as it starts,
        so that a resume after a SIGKILLed runner can end the leftovers."""
        return self.dir / "agent.json"

    def iteration(self, n: int) -> Path:
        return self.dir / f"iter-{n:03d}"

    def quarantine(self, n: int) -> Path:
        q = self.__dict__.get("_quarantine")
        if q is None:
            q = self.workdir / ".healer" / "quarantine" / "loop" / self.run_id
            object.__setattr__(self, "_quarantine", q)
        return q / f"iter-{n:03d}"


@dataclass
class RunState:
    run_id: str
    workdir: str
    task: str
    task_file: str | None
    policy_file: str | None
    loop: dict  # the policy's loop section (model_dump, JSON mode): a resume uses the same rules
    heartbeat_every: float
    agent_argv: list[str]
    preset: str
    max_iterations: int
    started_at: float
    fleet_root: str | None = None
    updated_at: float = 0.0
    status: str = "running"  # running | ended
    pid: int = 0
    pid_started: str | float = ""  # procs.mark of the runner (a create time from an older healer)
    baseline_tree: str | None = None
    start_head: str | None = None
    history: list[IterationRecord] = field(default_factory=list)
    cost_usd: float = 0.0
    outputs: dict[str, int] = field(default_factory=dict)  # output key -> first iteration
    inflight: dict | None = None  # {n, marker, pid, pid_start}: the agent tree to kill on resume
    pending_commit: dict | None = None  # {n, head_before}: gates were green, commit not yet confirmed
    exit_code: int | None = None
    reason: str = ""
    committed: bool = False
    commit: str | None = None
    resumes: int = 0
    allow_dirty: bool = False
    user_staged: list[str] = field(default_factory=list)  # staged by the user before the run (--allow-dirty): left staged
    guarded: list[str] | None = None  # the fleet's configuration in this tree (healer/guarded.py), from the whole policy
    instr_disk: dict | None = None  # the instruction files' top entries on disk at the start (ignored ones too)
    version: int = 1

    def to_json(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "history"}
        d["history"] = [r.to_json() for r in self.history]
        return d

    @classmethod
    def from_json(cls, d: dict) -> RunState:
        d = dict(d)
        hist = [IterationRecord.from_json(r) for r in d.pop("history", [])]
        known = {f.name for f in fields(cls)}
        st = cls(**{k: v for k, v in d.items() if k in known})
        st.history = hist
        return st

    @property
    def active_seconds(self) -> float:
        return sum(r.duration for r in self.history)


def save(paths: RunPaths, st: RunState, now: float) -> None:
    st.updated_at = now
    write_json_atomic(paths.state, st.to_json())


def load(paths: RunPaths) -> RunState:
    try:
        return RunState.from_json(read_json(paths.state))
    except FileNotFoundError:
        raise UsageError(f"no run {paths.run_id!r} in {paths.workdir} (no {paths.state})") from None
    except (ValueError, TypeError, KeyError) as e:
        raise UsageError(f"{paths.state}: unreadable run state ({e})") from None


def daily_count(workdir: Path, day: str) -> int:
    """Iterations run on `day` in this working tree, by any run (an append-only ledger)."""
    try:
        with open(workdir / DAILY_FILE) as f:
            return sum(1 for line in f if line.startswith(day))
    except FileNotFoundError:
        return 0


def daily_spend(workdir: Path, day: str) -> float:
    """Dollars spent on `day` in this working tree, by any run (the ledger's fourth field)."""
    total = 0.0
    try:
        with open(workdir / DAILY_FILE) as f:
            for line in f:
                parts = line.split()
                if line.startswith(day) and len(parts) >= 4:
                    try:
                        total += max(0.0, float(parts[3]))
                    except ValueError:
                        pass
    except FileNotFoundError:
        pass
    return total


def bump_daily(workdir: Path, day: str, run_id: str = "", n: int = 0, cost_usd: float = 0.0) -> None:
    path = workdir / DAILY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(f"{day} {run_id} {n} {cost_usd:.6f}\n")
    if path.stat().st_size > 512 * 1024:  # keep the last days only
        lines = path.read_text().splitlines(keepends=True)[-2000:]
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(lines))
        os.replace(tmp, path)


def run_ids(workdir: Path) -> list[str]:
    d = workdir / RUNS_DIR
    if not d.is_dir():
        return []
    return sorted(p.name for p in d.iterdir() if (p / "state.json").exists())


def describe(workdir: Path, run_id: str, alive) -> dict:
    """One run as data for `loop status` / `loop list`."""
    paths = RunPaths(workdir, run_id)
    st = load(paths)
    result = None
    if paths.result.exists():
        try:
            result = read_json(paths.result)
        except ValueError:
            result = None
    if st.status == "ended":
        status = "ended"
    elif alive(st.pid, st.pid_started):
        status = "running"
    else:
        status = "interrupted"  # the runner died; --resume continues it
    if status != "ended" and paths.pause.exists():
        status += " (pause requested)"
    last = st.history[-1] if st.history else None
    return {
        "run_id": run_id,
        "workdir": str(workdir),
        "status": status,
        "iterations": len(st.history),
        "max_iterations": st.max_iterations,
        "exit_code": st.exit_code,
        "reason": st.reason,
        "cost_usd": round(st.cost_usd, 6),
        "state_hash": last.state_hash if last else None,
        "failure_signature": last.signature if last else None,
        "last_failure": last.signature_text if last and last.signature else "",
        "gates": [{"name": g.name, "outcome": g.outcome()} for g in (last.gates if last else ())],
        "started_at": st.started_at,
        "updated_at": st.updated_at,
        "pid": st.pid,
        "committed": st.committed,
        "commit": st.commit,
        "result": result,
    }
