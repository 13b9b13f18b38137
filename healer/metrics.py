"""Prometheus metrics for the supervisor, the dispatcher and the notification courier, served on 127.0.0.1.

`prometheus_client` keeps the samples and renders the exposition format (one registry per
`Metrics`, so tests and several daemons in one process never share counters); `serve` answers
`GET /metrics` from a daemon thread.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from healer import spend
from healer.errors import UsageError
from healer.policy.schema import FINDINGS
from healer.store.outage import register_metrics

SENTINELS = ("dispatch_frozen", "pool_saturated", "no_closes", "main_red", "supervisor_silent")
SENTINEL_STATES = ("ok", "firing", "unknown")
SPEND_DAYS = 7  # healer_spend_day_usd keeps this many days
SPEND_TOP = 10  # healer_ticket_spend_usd keeps this many tickets


class Metrics:
    def __init__(self, daemon: str = "supervise") -> None:
        self._lock = threading.Lock()
        self.registry = r = CollectorRegistry(auto_describe=True)
        Gauge("healer_daemon_info", "The healer daemon serving these metrics (1).", ["daemon"], registry=r).labels(daemon).set(1)
        # each daemon exports only its own metrics (issue 41): `dispatch` no supervisor gauges at their defaults (a
        # main_red 0 beside supervise's 1), `supervise` no dispatcher counters; `up` runs both. A metric of the other
        # daemon is still made (its hooks stay callable) but registered nowhere.
        sr = r if daemon in ("supervise", "up") else None
        dr = r if daemon in ("dispatch", "up") else None
        self.findings = Gauge("healer_findings", "Findings firing at the last tick, by kind.", ["kind"], registry=sr)
        for k in FINDINGS:
            self.findings.labels(k).set(0)
        self.actions = Counter("healer_actions", "Remediation actions executed, by action and outcome.",
                               ["action", "outcome"], registry=sr)
        self.sentinels = Gauge("healer_sentinel_state", "Sentinel state at the last tick (1 for the current state).",
                               ["sentinel", "state"], registry=sr)
        for s in SENTINELS:
            for st in SENTINEL_STATES:
                self.sentinels.labels(s, st).set(1 if st == "ok" else 0)
        self.tick_seconds = Gauge("healer_tick_duration_seconds", "Duration of the last supervisor tick.", registry=sr)
        self.tick_hist = Histogram("healer_tick_seconds", "Supervisor tick durations.", registry=sr,
                                   buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.ticks = Counter("healer_ticks", "Supervisor ticks run.", registry=sr)
        self.skipped = Counter("healer_ticks_skipped", "Ticks skipped because another supervisor holds the lease.", registry=sr)
        self.alerts = Counter("healer_alerts_sent", "Notifications decided (after cooldowns); delivery is counted apart.",
                              registry=sr)
        self.last_tick = Gauge("healer_last_tick_timestamp_seconds", "When the last tick ran (epoch seconds).", registry=sr)
        self.failed_sources = Gauge("healer_failed_sources",
                                    "Snapshot data sources that failed at the last tick (fail-open).", ["source"], registry=sr)
        self.adopted = Gauge("healer_adopted_loops", "Adopted loops (docs/adopt.md) seen running at the last tick.",
                             registry=sr)
        self.adopted_spend = Gauge("healer_adopted_spend_usd", "USD the adopted loops seen running at the last tick "
                                   "spent, read from their own CLI transcripts (the loops' own evidence).", registry=sr)
        self.deliveries = Counter("healer_notifications_delivered", "Notifications a receiver accepted, by notifier kind.",
                                  ["notifier"], registry=r)
        self.delivery_failures = Counter("healer_notification_failures", "Delivery tries that failed, by notifier kind.",
                                         ["notifier"], registry=r)
        self.rejections = Counter("healer_notification_rejections", "Notifications a receiver refused (a 4xx other than "
                                  "408/429: not retried), by notifier kind.", ["notifier"], registry=r)
        self.resolved = Counter("healer_alerts_resolved", "Open alerts whose condition cleared (a resolve owed to "
                                "Alertmanager).", registry=sr)
        self.dispatch_passes = Counter("healer_dispatch_passes", "Dispatcher passes run.", registry=dr)
        self.dispatch_skipped = Counter("healer_dispatch_passes_skipped", "Dispatcher passes skipped (lease held "
                                        "elsewhere).", registry=dr)
        self.launched = Counter("healer_dispatch_launched", "Agents launched by the dispatcher.", registry=dr)
        self.merged = Counter("healer_dispatch_merged", "Proposals merged by the dispatcher.", registry=dr)
        self.last_dispatch = Gauge("healer_last_dispatch_timestamp_seconds", "When the last dispatcher pass ran.",
                                   registry=dr)
        for kind in ("webhook", "command", "alertmanager"):  # a scrape sees 0, not nothing, before the first failure
            self.delivery_failures.labels(kind)
            self.rejections.labels(kind)
            self.deliveries.labels(kind)
        self.delivery_latency = Histogram("healer_notification_delivery_seconds",
                                          "From the decision to notify to the receiver's acceptance.", registry=r,
                                          buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800))
        self._sources: set[str] = set()
        # spend, the dispatcher's (it launches the loops that spend; one daemon exports it, so a sum over the fleet's
        # daemons never counts a dollar twice). Bounded label sets: the agent CLI (claude, codex, command, other), the
        # last SPEND_DAYS UTC days, the SPEND_TOP tickets that spent most (a ticket id is an unbounded label: a top-N
        # keeps the series few; `healer board list` has every ticket's)
        self.spend_total = Counter("healer_spend_usd", "USD the fleet's loops reported spending (streamed per API "
                                   "turn), over the whole event log, by agent CLI.", ["cli"], registry=dr)
        for c in (*spend.CLIS, spend.OTHER):
            self.spend_total.labels(c)
        self.spend_day = Gauge("healer_spend_day_usd", f"USD spent per UTC day, the last {SPEND_DAYS} days that spent.",
                               ["day"], registry=dr)
        self.ticket_spend = Gauge("healer_ticket_spend_usd", f"USD spent on a ticket, for the {SPEND_TOP} tickets that "
                                  "spent most (a top-N: ticket ids are not a bounded label set).", ["ticket"], registry=dr)
        self._days: set[str] = set()
        self._top: set[str] = set()

        register_metrics(r)  # healer_store_up, healer_store_outages, healer_store_unavailable_seconds

    def observe(self, rep) -> None:
        with self._lock:
            if rep.skipped:
                self.skipped.inc()
                return
            self.ticks.inc()
            self.tick_seconds.set(rep.duration)
            self.tick_hist.observe(rep.duration)
            self.last_tick.set(rep.at)
            d = rep.decision
            if d is None:
                return
            counts: dict[str, int] = {}
            for f in d.findings:
                if f.status != "unknown":
                    counts[f.kind] = counts.get(f.kind, 0) + 1

            for k in FINDINGS:
                self.findings.labels(k).set(counts.get(k, 0))
            states = {k: "ok" for k in SENTINELS}
            for f in d.findings:
                if f.kind in states:
                    states[f.kind] = "unknown" if f.status == "unknown" else "firing"
            for s, cur in states.items():
                for st in SENTINEL_STATES:
                    self.sentinels.labels(s, st).set(1 if st == cur else 0)
            for a, o in rep.outcomes:
                self.actions.labels(a.action, o.status).inc()
            self.alerts.inc(rep.alerts_sent)
            self.resolved.inc(len(getattr(rep, "resolved", ()) or ()))
            running = [v for v in (rep.snapshot.adopted if rep.snapshot else ()) if v.same]
            self.adopted.set(len(running))
            self.adopted_spend.set(sum(v.cost_usd or 0.0 for v in running))
            now = set(rep.snapshot.failed_sources) if rep.snapshot else set()
            for s in self._sources - now:
                self.failed_sources.remove(s)
            for s in now:
                self.failed_sources.labels(s).set(1)
            self._sources = now

    # the courier's hooks
    def delivered(self, item, latency: float) -> None:
        self.deliveries.labels(item.notifier.split(":")[0]).inc()
        self.delivery_latency.observe(max(0.0, latency))

    def failed(self, item) -> None:
        self.delivery_failures.labels(item.notifier.split(":")[0]).inc()

    def rejected(self, item) -> None:
        self.rejections.labels(item.notifier.split(":")[0]).inc()

    # the dispatcher's hook
    def dispatched(self, rep) -> None:
        with self._lock:
            if getattr(rep, "skipped", None):
                self.dispatch_skipped.inc()
                return
            self.dispatch_passes.inc()
            self.launched.inc(len(getattr(rep, "launched", ()) or ()))
            self.merged.inc(len(getattr(rep, "merged", ()) or ()))
            if getattr(rep, "at", None) is not None:
                self.last_dispatch.set(rep.at)

    # the spend feed's hook (healer/cli/watching.py Narrator, `healer dispatch`'s pass)
    def spent(self, ledger: spend.Ledger, charged) -> None:
        """`charged`: the (cli, usd) the ledger took in since the last call; the gauges are set from the ledger."""
        with self._lock:
            for cli, usd in charged:
                self.spend_total.labels(spend.cli_label(cli)).inc(usd)
            self._days = _replace(self.spend_day, self._days, ledger.last_days(SPEND_DAYS))
            self._top = _replace(self.ticket_spend, self._top, ledger.top_tickets(SPEND_TOP))

    def render(self) -> str:
        return generate_latest(self.registry).decode()


def _replace(gauge: Gauge, had: set[str], rows: list[tuple[str, float]]) -> set[str]:
    """Set `gauge` to exactly `rows` (label, value): the labels that left are removed, so the series stay bounded."""
    now = {k for k, _ in rows}
    for k in had - now:
        gauge.remove(k)
    for k, v in rows:
        gauge.labels(k).set(round(v, 6))
    return now


class SpendFeed:
    """The spend metrics of a daemon whose store is read in one thread (`healer dispatch`'s pass): the whole log at
    the first call, then what is new by cursor."""

    def __init__(self) -> None:
        self.ledger = spend.Ledger()
        self.seen = 0

    def update(self, store, metrics: Metrics | None) -> None:
        if metrics is None:
            return
        last = store.last_event_id()
        if last <= self.seen:
            return
        new = [c for e in store.events(after=self.seen, kinds=spend.KINDS, until_id=last) if (c := self.ledger.add(e))]
        self.seen = last
        metrics.spent(self.ledger, new)


def start(port: int | None, daemon: str) -> tuple[Metrics | None, ThreadingHTTPServer | None]:
    """`--metrics-port`: the daemon's metrics and their server (None, None without a port); a port that cannot
    be listened on is a usage error (exit 64), before anything starts."""
    if port is None:
        return None, None
    m = Metrics(daemon)
    try:
        return m, serve(m, port)
    except OSError as e:
        raise UsageError(f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}: {e.strerror or e}") from e


def serve(metrics: Metrics, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve `metrics` on http://127.0.0.1:PORT/metrics in a daemon thread; port 0 picks a free one."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
