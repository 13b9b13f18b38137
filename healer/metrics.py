"""Prometheus metrics for the supervisor, in the text exposition format, served on 127.0.0.1.

No client library: a handful of counters and gauges rendered by hand, served by
`http.server` in a daemon thread (`GET /metrics`).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SENTINELS = ("dispatch_frozen", "pool_saturated", "no_closes", "main_red", "supervisor_silent")
SENTINEL_STATES = ("ok", "firing", "unknown")


def _labels(d: dict[str, str]) -> str:
    if not d:
        return ""
    inner = ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(d.items()))
    return "{" + inner + "}"


def _esc(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ticks = 0
        self.skipped = 0
        self.tick_seconds = 0.0
        self.last_tick_at = 0.0
        self.findings: dict[str, int] = {}
        self.actions: dict[tuple[str, str], int] = {}  # (action, outcome) -> count
        self.sentinels: dict[str, str] = {k: "ok" for k in SENTINELS}
        self.alerts = 0
        self.failed_sources: set[str] = set()

    def observe(self, rep) -> None:
        with self._lock:
            if rep.skipped:
                self.skipped += 1
                return
            self.ticks += 1
            self.tick_seconds = rep.duration
            self.last_tick_at = rep.at
            d = rep.decision
            if d is None:
                return
            counts: dict[str, int] = {}
            for f in d.findings:
                if f.status != "unknown":
                    counts[f.kind] = counts.get(f.kind, 0) + 1
            self.findings = counts
            states = {k: "ok" for k in SENTINELS}
            for f in d.findings:
                if f.kind in states:
                    states[f.kind] = "unknown" if f.status == "unknown" else "firing"
            self.sentinels = states
            for a, o in rep.outcomes:
                key = (a.action, o.status)
                self.actions[key] = self.actions.get(key, 0) + 1
            self.alerts += rep.alerts_sent
            self.failed_sources = set(rep.snapshot.failed_sources) if rep.snapshot else set()

    def render(self) -> str:
        with self._lock:
            out: list[str] = []

            def metric(name: str, kind: str, help_: str, samples: list[tuple[dict[str, str], float]]) -> None:
                out.append(f"# HELP {name} {help_}")
                out.append(f"# TYPE {name} {kind}")
                for labels, v in samples:
                    out.append(f"{name}{_labels(labels)} {v:g}")

            from healer.policy.schema import FINDINGS

            metric("healer_findings", "gauge", "Findings firing at the last tick, by kind.",
                   [({"kind": k}, self.findings.get(k, 0)) for k in FINDINGS])
            metric("healer_actions_total", "counter", "Remediation actions executed, by action and outcome.",
                   [({"action": a, "outcome": o}, n) for (a, o), n in sorted(self.actions.items())])
            metric("healer_sentinel_state", "gauge", "Sentinel state at the last tick (1 for the current state).",
                   [({"sentinel": s, "state": st}, 1 if self.sentinels.get(s) == st else 0)
                    for s in SENTINELS for st in SENTINEL_STATES])
            metric("healer_tick_duration_seconds", "gauge", "Duration of the last supervisor tick.", [({}, self.tick_seconds)])
            metric("healer_ticks_total", "counter", "Supervisor ticks run.", [({}, self.ticks)])
            metric("healer_ticks_skipped_total", "counter", "Ticks skipped because another supervisor holds the lease.",
                   [({}, self.skipped)])
            metric("healer_alerts_sent_total", "counter", "Notifications sent (after cooldowns).", [({}, self.alerts)])
            metric("healer_last_tick_timestamp_seconds", "gauge", "When the last tick ran (epoch seconds).",
                   [({}, self.last_tick_at)])
            metric("healer_failed_sources", "gauge", "Snapshot data sources that failed at the last tick (fail-open).",
                   [({"source": s}, 1) for s in sorted(self.failed_sources)])
            return "\n".join(out) + "\n"


def serve(metrics: Metrics, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve `metrics` on http://127.0.0.1:PORT/metrics in a daemon thread; port 0 picks a free one."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
