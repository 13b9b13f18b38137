"""Benchmark: SQLite beside PostgreSQL (issue 17). Prints JSON lines (README "Benchmarks").

- tick_ms_{10k,100k}_{sqlite,postgresql}: one supervisor tick's read and decision (the shell's own
  `snapshot.gather` then `core.decide`) on a synthetic fleet of 10,000 / 100,000 tickets (1,000 /
  10,000 agents and worktrees) held in each store; `pg_over_sqlite_{10k,100k}` the ratio.
- claims_per_s_3_dispatchers_{sqlite,postgresql}: three processes claiming tickets off one board
  (`claim_ticket`: BEGIN IMMEDIATE on SQLite, FOR UPDATE SKIP LOCKED on PostgreSQL) until it is empty.

PostgreSQL: $HEALER_TEST_PG_URL, else a throwaway cluster (chaos/pgcluster.py); without either the
PostgreSQL lines are left out (said on stderr). `--quick`: 10k only, fewer runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402

from bench.supervisor_tick import median_ms, populate  # noqa: E402
from chaos import pgcluster  # noqa: E402
from healer.clock import VirtualClock  # noqa: E402
from healer.core import decide  # noqa: E402
from healer.core.model import Memory  # noqa: E402
from healer.fleet.snapshot import gather  # noqa: E402
from healer.policy.schema import Policy  # noqa: E402
from healer.store import ENV_URL, open_url  # noqa: E402
from tests.synth import fleet  # noqa: E402

QUICK = "--quick" in sys.argv
BENCH = "store_backends"


def emit(metric: str, value: float, unit: str, target: float, better: str = "lower") -> None:
    print(json.dumps({"bench": BENCH, "metric": metric, "value": round(value, 3), "unit": unit,
                      "target": target, "better": better}), flush=True)


def schema(server: str) -> tuple[str, str]:
    name = "bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {name}")
    sep = "&" if "?" in server else "?"
    return name, f"{server}{sep}options=-csearch_path%3D{name}"


def drop(server: str, name: str) -> None:
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(f"DROP SCHEMA {name} CASCADE")


def tick_ms(k: int, backend: str, server: str | None, snap, runs: int) -> float:
    policy = Policy()
    pol = policy.model_copy(update={"fleet": policy.fleet.model_copy(update={"pool_size": 100 * k})})
    name = None
    with tempfile.TemporaryDirectory(prefix="healer-bench-") as tmp:
        root = Path(tmp)
        (root / ".healer").mkdir()
        if backend == "postgresql":
            name, os.environ[ENV_URL] = schema(server)
        try:
            clock = VirtualClock(snap.now)
            store = populate(root, snap, clock)
            try:
                ms, _ = median_ms(lambda: decide(gather(root, store, pol, clock), pol, Memory()), runs)
            finally:
                store.close()
        finally:
            os.environ.pop(ENV_URL, None)
            if name:
                drop(server, name)
    return ms


CLAIMER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from healer.store import open_url
    s = open_url(sys.argv[1])
    go = Path(sys.argv[2])
    Path(sys.argv[2] + "." + sys.argv[3]).touch()
    while not go.exists():
        time.sleep(0.002)
    n = 0
    while s.claim_ticket(actor="d" + sys.argv[3]) is not None:
        n += 1
    print(n)
""")


def claims_per_s(url: str, tickets: int) -> float:
    s = open_url(url)
    s.load_table("tickets", ["id", "title", "body", "state", "priority", "blocked_by", "created_at", "updated_at", "data"],
                 [(f"T-{i}", "t", "", "queued", i % 3, "[]", float(i), float(i), "{}") for i in range(tickets)])
    s.close()
    with tempfile.TemporaryDirectory(prefix="healer-bench-") as tmp:
        go = str(Path(tmp) / "go")
        procs = [subprocess.Popen([sys.executable, "-c", CLAIMER, url, go, str(i)], stdout=subprocess.PIPE, text=True,
                                  cwd=Path(__file__).resolve().parents[1]) for i in range(3)]
        while not all(Path(f"{go}.{i}").exists() for i in range(3)):
            time.sleep(0.01)
        t = time.perf_counter()
        Path(go).touch()
        total = sum(int(p.communicate(timeout=600)[0].strip() or 0) for p in procs)
        wall = time.perf_counter() - t
    assert total == tickets, (total, tickets)
    return total / wall


def main() -> int:
    server = os.environ.get("HEALER_TEST_PG_URL")
    cluster = None
    if not server:
        if pgcluster.available():
            cluster = pgcluster.Cluster().start()
            server = cluster.url
        else:
            print(f"{BENCH}: no PostgreSQL (set HEALER_TEST_PG_URL or install postgresql-15): SQLite lines only", file=sys.stderr)
    try:
        sizes = (10,) if QUICK else (10, 100)
        for k in sizes:
            snap = fleet(1000 * k, 100 * k, 100 * k)
            runs = (3 if QUICK else 5) if k == 10 else (1 if QUICK else 3)
            got = {}
            for backend in ("sqlite", "postgresql"):
                if backend == "postgresql" and not server:
                    continue
                got[backend] = tick_ms(k, backend, server, snap, runs)
                emit(f"tick_ms_{k}k_{backend}", got[backend], "ms", 500 * k // 10)
            if len(got) == 2:
                emit(f"pg_over_sqlite_{k}k", got["postgresql"] / got["sqlite"], "ratio", 3)
        n = 600 if QUICK else 3000
        with tempfile.TemporaryDirectory(prefix="healer-bench-") as tmp:
            emit("claims_per_s_3_dispatchers_sqlite", claims_per_s(f"sqlite:{tmp}/.healer/healer.db", n), "claims/s", 100, "higher")
        if server:
            name, url = schema(server)
            try:
                emit("claims_per_s_3_dispatchers_postgresql", claims_per_s(url, n), "claims/s", 100, "higher")
            finally:
                drop(server, name)
    finally:
        if cluster is not None:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
