"""Benchmark: notifications never slow a tick, and a flood stays one message per key (issue 15).

- tick_hanging_webhook_ratio: median `Supervisor.tick()` with a webhook whose receiver (127.0.0.1)
  never answers, over the median with no webhook at all; runs alternated; every tick notifies
  (cooldown 0: the hanging side stays owed, the other sends each time). Target <= 1.10.
- flood_core_alerts_per_s: `healer.core.notices.admit` on 10,000 alerts over 100 keys (target >= 50,000/s).
- flood_deliveries_per_key_max: the same 10,000 alerts through `notify_all` into the outbox and the courier
  to a real receiver: deliveries per key in the cooldown window (target <= 1).

Prints JSON lines (README "Benchmarks").
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from healer.clock import VirtualClock, system  # noqa: E402
from healer.core.model import Alert  # noqa: E402
from healer.core.notices import admit  # noqa: E402
from healer.notify import notify_all  # noqa: E402
from healer.notify.outbox import Courier  # noqa: E402
from healer.policy.schema import Policy  # noqa: E402
from healer.store import open_store  # noqa: E402
from healer.supervisor import Supervisor  # noqa: E402
from tests.conftest import make_repo  # noqa: E402
from tests.notify.receiver import Receiver  # noqa: E402

REAL = system()
QUICK = "--quick" in sys.argv


def emit(metric: str, value: float, unit: str, target: float, better: str = "lower") -> None:
    print(json.dumps({"bench": "notify", "metric": metric, "value": round(value, 3), "unit": unit, "target": target,
                      "better": better}), flush=True)


def policy(url: str | None) -> Policy:
    notifiers = [{"kind": "jsonl", "path": ".healer/notifications.jsonl"}]
    if url:
        notifiers.append({"kind": "webhook", "url": url, "timeout": "10s"})
    return Policy.model_validate({"sentinels": {"cooldown": "0s"}, "notify": {"notifiers": notifiers}})


def setup(d: Path, url: str | None):
    root = make_repo(d)
    clock = VirtualClock()
    store = open_store(root, clock)
    for i in range(300):
        store.add_ticket(f"t{i}", id=f"T-{i}")
    store.set_setting("dispatch.last_launch_at", clock.now())
    store.set_setting("main.status", "green")
    pol = policy(url)
    clock.advance(pol.sentinels.dispatch_frozen + 1)
    return Supervisor(root, pol, store, clock), store, clock


def bench_hanging() -> None:
    hang = Receiver(then="hang")
    runs = 5 if QUICK else 15
    times: dict[str, list[float]] = {"none": [], "hang": []}
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        sides = {"none": setup(Path(a) / "f", None), "hang": setup(Path(b) / "f", hang.url)}
        couriers = {"hang": Courier(open_store(sides["hang"][0].root, sides["hang"][2]), sides["hang"][0].policy).start()}
        for sup, _, _ in sides.values():
            sup.tick()  # warm-up
        for i in range(runs):
            for side in (("none", "hang") if i % 2 else ("hang", "none")):
                sup, _, clock = sides[side]
                clock.advance(30)
                t = REAL.monotonic()
                rep = sup.tick()
                times[side].append(REAL.monotonic() - t)
                assert rep.decision is not None
        for c in couriers.values():
            c.stop()
            c.store.close()
        for _, store, _ in sides.values():
            store.close()
    hang.close()
    none, hung = statistics.median(times["none"]), statistics.median(times["hang"])
    emit("tick_no_webhook_ms", none * 1000, "ms", 1000)
    emit("tick_hanging_webhook_ms", hung * 1000, "ms", 1000)
    emit("tick_hanging_webhook_ratio", hung / none, "ratio", 1.10)


def flood_alerts(n: int = 10_000, keys: int = 100) -> list[Alert]:
    return [Alert(f"flood:{i % keys}", f"alert {i}", "warning", {"i": i}) for i in range(n)]


def bench_flood() -> None:
    alerts = flood_alerts()
    rates = []
    for _ in range(5 if QUICK else 15):
        t = time.perf_counter()
        adm = admit(alerts, {}, set(), 3600.0, 1000.0)
        rates.append(len(alerts) / (time.perf_counter() - t))
        assert len(adm.send) == 100
    emit("flood_core_alerts_per_s", statistics.median(rates), "alerts/s", 50_000, "higher")

    r = Receiver()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "f"
        (root / ".healer").mkdir(parents=True)
        store = open_store(root)
        pol = Policy.model_validate({"notify": {"notifiers": [{"kind": "webhook", "url": r.url, "timeout": "10s"}]}})
        t = REAL.monotonic()
        for i in range(0, len(alerts), 1000):  # ten ticks' worth of firings, 1,000 each
            notify_all(store, pol, alerts[i:i + 1000])
        shell = REAL.monotonic() - t
        c = Courier(store, pol)
        deadline = REAL.monotonic() + 60
        while store.outbox(["pending"]) and REAL.monotonic() < deadline:
            c.step(0.1)
        c.stop()
        store.close()
    r.close()
    per_key: dict[str, int] = {}
    for body, _ in r.got:
        per_key[body["key"]] = per_key.get(body["key"], 0) + 1
    emit("flood_shell_alerts_per_s", len(alerts) / shell, "alerts/s", 5_000, "higher")
    emit("flood_deliveries_per_key_max", max(per_key.values()), "count", 1)
    emit("flood_keys_delivered", len(per_key), "count", 100, "higher")


if __name__ == "__main__":
    bench_flood()
    bench_hanging()
