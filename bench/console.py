"""Benchmark: the operator console (issue 43). Prints JSON lines (README "Benchmarks").

- board_render_ms_10k: GET / (the board page, HTML) of a 10,000-ticket store over a real uvicorn on 127.0.0.1,
  median of repeated requests; each state column shows its first 200 cards and counts the rest (target < 1000 ms).
- transition_to_sse_ms: from a ticket transition written to the store (another connection, as the dispatcher writes)
  to its arrival at a server-sent-events client of /api/events; median and max over repeated moves (target < 1000 ms).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from healer import lifecycle  # noqa: E402
from healer.clock import system  # noqa: E402
from healer.console import security, serve  # noqa: E402
from healer.policy.schema import Policy  # noqa: E402
from healer.store import open_store  # noqa: E402
from tests.console.kit import SSE  # noqa: E402

QUICK = "--quick" in sys.argv
N = 10_000


def emit(metric: str, value: float, unit: str, target: float, better: str = "lower") -> None:
    print(json.dumps({"bench": "console", "metric": metric, "value": round(value, 3), "unit": unit, "target": target,
                      "better": better}), flush=True)


def fill(root: Path) -> None:
    store = open_store(root)
    states = lifecycle.STATES
    now = time.time()
    j = json.dumps
    try:
        with store.tx():  # through the store's bulk loader: no SQL outside the adapters
            store.load_table("tickets", ["id", "title", "body", "state", "priority", "blocked_by", "created_at", "updated_at", "data"],
                             [(f"T-{i}", f"ticket {i} <b>title</b>", "", states[i % len(states)], i % 4,
                               j([f"T-{i - 1}"] if i % 10 == 0 else []), now, now, "{}") for i in range(1, N + 1)])
        store.add_ticket("the one that moves", id="M-1", priority=0)
    finally:
        store.close()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="healer-bench-console-") as tmp:
        root = Path(tmp)
        subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
        (root / ".healer").mkdir()
        fill(root)
        store = open_store(root)
        s = serve.start(root, store, Policy(), system(), security.Access(None, "bench"), port=0)
        try:
            times = []
            for _ in range(3 if QUICK else 7):
                t = time.perf_counter()
                with urllib.request.urlopen(s.url, timeout=30) as r:
                    body = r.read()
                times.append((time.perf_counter() - t) * 1000)
            assert b"M-1" in body and b"&lt;b&gt;title" in body
            emit("board_render_ms_10k", statistics.median(times), "ms", 1000)
            sse = SSE(s.url + "api/events")
            writer = open_store(root)
            lat = []
            try:
                sse.wait(lambda ev, d: ev == "hello")
                state = lifecycle.QUEUED
                for _ in range(5 if QUICK else 15):
                    to = lifecycle.BLOCKED if state == lifecycle.QUEUED else lifecycle.QUEUED
                    t = time.perf_counter()
                    writer.move_ticket("M-1", to, actor="bench", reason="bench")
                    eid = writer.last_event_id()
                    sse.wait(lambda ev, d, eid=eid: ev == "fleet" and json.loads(d)["id"] == eid)
                    lat.append((time.perf_counter() - t) * 1000)
                    state = to
            finally:
                writer.close()
                sse.close()
            emit("transition_to_sse_ms", statistics.median(lat), "ms", 1000)
            emit("transition_to_sse_max_ms", max(lat), "ms", 1000)
        finally:
            s.stop()
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
