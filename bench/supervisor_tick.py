"""Benchmark: the supervisor's decision (issue 5, acceptance 7). Prints JSON lines (README "Benchmarks").

- core_eval_ms_{1k,10k}: `healer.core.decide` alone on a synthetic fleet (tests.synth.fleet):
  1,000 / 10,000 tickets, 100 / 1,000 agents, 100 / 1,000 worktrees, about 1% of every finding kind.
- growth_ratio_10x: core_eval_ms_10k / core_eval_ms_1k (target <= 12 for 10x the fleet).
- *_cpu_*: the same, in CPU time of this process (the machine is shared; wall time includes waiting for a core).
- tick_with_store_ms_{1k,10k}: a full tick's read and decision on the same fleet held in a real SQLite
  store (WAL, on disk): `healer.fleet.snapshot.gather(...)` (the shell's own snapshot: store reads,
  agent liveness by pid, worktree folders on disk) followed by `decide`. The store is filled with bulk
  inserts (setup only; the timed part uses only the shell's code).

Medians over repeated runs; `--quick` runs fewer repetitions.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from healer.clock import VirtualClock  # noqa: E402
from healer.core import decide  # noqa: E402
from healer.core import incremental as inc  # noqa: E402
from healer.core.model import Memory  # noqa: E402
from healer.fleet.snapshot import Gatherer, gather  # noqa: E402
from healer.policy.schema import Policy  # noqa: E402
from healer.store import (
    keys,  # noqa: E402
    open_store,  # noqa: E402
)
from tests.synth import fleet  # noqa: E402

QUICK = "--quick" in sys.argv


def emit(metric: str, value: float, unit: str, target: float, better: str = "lower") -> None:
    print(json.dumps({"bench": "supervisor_tick", "metric": metric, "value": round(value, 3), "unit": unit,
                      "target": target, "better": better}), flush=True)


def median_ms(fn, runs: int) -> tuple[float, float]:
    """(median wall ms, median CPU ms of this process): the machine is shared, CPU time shows the work itself."""
    fn()  # warm-up
    wall, cpu = [], []
    for _ in range(runs):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def populate(root: Path, snap, clock) -> object:
    """Write the synthetic fleet into a real store (bulk, one transaction) and its live worktrees on disk."""
    store = open_store(root, clock)
    host, pid = socket.gethostname(), os.getpid()
    j = json.dumps
    with store.tx():  # through the store's bulk loader (`healer store copy` uses it): no SQL outside the adapters
        store.load_table("tickets", ["id", "title", "body", "state", "priority", "blocked_by", "created_at", "updated_at", "data"],
                         [(t.id, t.title, "", t.state, t.priority, j(list(t.blocked_by)), t.created_at, t.updated_at, j(t.data))
                          for t in snap.tickets])
        store.load_table("labels", ["ticket_id", "label", "added_at"],
                         [(t.id, lb, at) for t in snap.tickets for lb, at in t.labels.items()])
        rows = []
        for v in snap.agents:
            a = v.agent
            # the live ones point at this very process, so liveness is a real pid check
            rows.append((a.id, a.ticket_id, a.state, "process", pid if v.alive else 2 ** 22 + 7, host, None, None,
                         str(root / a.worktree) if a.worktree else None, a.started_at, a.heartbeat_at, a.progress_at,
                         None, None, "{}"))
        store.load_table("agents", ["id", "ticket_id", "state", "kind", "pid", "host", "container", "run_id", "worktree",
                                    "started_at", "heartbeat_at", "progress_at", "ended_at", "exit_code", "data"], rows)
        store.load_table("worktrees", ["path", "ticket_id", "branch", "created_at", "state", "removed_at"],
                         [(str(root / w.worktree.path), w.worktree.ticket_id, w.worktree.branch, w.worktree.created_at, "active", None)
                          for w in snap.worktrees])
        store.load_table("attempts", ["ticket_id", "kind", "at", "head", "state_hash"],
                         [(tid, a.kind, a.at, a.head, a.state_hash) for tid, atts in snap.attempts.items() for a in atts])
        store.load_table("proposals", ["ticket_id", "branch", "commit", "state", "created_at"],
                         [(p.ticket_id, p.branch, p.commit, p.state, p.created_at) for p in snap.proposals])
        store.load_table("events", ["at", "kind", "subject", "payload"],
                         [(t.created_at, "ticket.created", t.id, j({"title": t.title})) for t in snap.tickets]
                         + [(t.updated_at, "ticket.moved", t.id, j({"from": "queued", "to": t.state, "actor": "dispatch"}))
                            for t in snap.tickets])
    for v in snap.agents:
        if v.agent.worktree and v.alive:
            (root / v.agent.worktree).mkdir(parents=True, exist_ok=True)
    store.set_setting(keys.MAIN_STATUS, "green")
    store.set_setting(keys.DISPATCH_LAST_LAUNCH, snap.last_launch_at)
    store.set_setting("supervisor.last_tick_at", snap.last_supervisor_tick)
    return store


def main() -> int:
    policy = Policy()
    runs = {1: 5 if QUICK else 21, 10: 3 if QUICK else 9}
    core = {}
    snaps = {}
    for k in (1, 10):
        snaps[k] = fleet(1000 * k, 100 * k, 100 * k)
        core[k] = median_ms(lambda s=snaps[k]: decide(s, policy, Memory()), runs[k])
        emit(f"core_eval_ms_{k}k", core[k][0], "ms", 100)
        emit(f"core_eval_cpu_ms_{k}k", core[k][1], "ms", 100)
    emit("growth_ratio_10x", core[10][0] / core[1][0], "ratio", 12)
    emit("growth_ratio_cpu_10x", core[10][1] / core[1][1], "ratio", 12)

    for k in (1, 10):
        with tempfile.TemporaryDirectory(prefix="healer-bench-") as tmp:
            root = Path(tmp)
            (root / ".healer").mkdir()
            clock = VirtualClock(snaps[k].now)
            store = populate(root, snaps[k], clock)
            pol = policy.model_copy(update={"fleet": policy.fleet.model_copy(update={"pool_size": 100 * k})})
            try:
                ms, cpu = median_ms(lambda r=root, st=store, p=pol, c=clock: decide(gather(r, st, p, c), p, Memory()), runs[k])
            finally:
                store.close()
        emit(f"tick_with_store_ms_{k}k", ms, "ms", 500)
        emit(f"tick_with_store_cpu_ms_{k}k", cpu, "ms", 500)
    incremental(policy)
    return 0


BARE = ["SELECT * FROM tickets", "SELECT * FROM labels", "SELECT * FROM agents", "SELECT * FROM worktrees",
        "SELECT * FROM proposals", "SELECT * FROM attempts"]


def incremental(policy) -> None:
    """Issue 15: the supervisor's steady-state tick (incremental snapshot + decide) beside a bare read.

    As the supervisor ticks: the Gatherer's snapshot, then `healer.core.incremental.decide` with the previous
    tick's carry and memory (only changed tickets and passed deadlines are judged again; property-tested
    equal to `decide`). Between ticks 20 tickets change (a comment each: an event, a re-read); the bare read is a `SELECT *`
    of every table the snapshot reads (tickets, labels, agents, worktrees, proposals, attempts), rows
    fetched, nothing decoded. CPU time of this process, medians; runs alternated."""
    sizes = (10,) if QUICK else (10, 100)
    for k in sizes:
        snap = fleet(1000 * k, 100 * k, 100 * k)
        with tempfile.TemporaryDirectory(prefix="healer-bench-") as tmp:
            root = Path(tmp)
            (root / ".healer").mkdir()
            clock = VirtualClock(snap.now)
            store = populate(root, snap, clock)
            pol = policy.model_copy(update={"fleet": policy.fleet.model_copy(update={"pool_size": 100 * k})})
            g = Gatherer()
            memory = Memory()
            d, carry = inc.decide(g.gather(root, store, pol, clock), pol, memory)  # the full read and decision at start
            ids = [t.id for t in snap.tickets[:20]]
            tick, bare = [], []
            try:
                for _ in range(3 if QUICK or k == 100 else 7):
                    for tid in ids:
                        store.comment(tid, "progress", author="bench")
                    clock.advance(30)
                    c = time.process_time()
                    d, carry = inc.decide(g.gather(root, store, pol, clock), pol, memory, carry)
                    tick.append(time.process_time() - c)
                    memory = d.memory
                    assert g.board.last.startswith("incremental") and carry.mode.startswith("incremental")
                    c = time.process_time()
                    for q in BARE:
                        store._db.execute(q).fetchall()
                    bare.append(time.process_time() - c)
            finally:
                store.close()
        t, b = statistics.median(tick), statistics.median(bare)
        emit(f"tick_incremental_cpu_ms_{k}k", t * 1000, "ms", 1000)
        emit(f"bare_read_cpu_ms_{k}k", b * 1000, "ms", 1000)
        emit(f"tick_over_bare_read_{k}k", t / b, "ratio", 3)


if __name__ == "__main__":
    sys.exit(main())
