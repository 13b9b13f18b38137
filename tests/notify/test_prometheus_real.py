"""healer's alerts and metrics in the operators' own tools: the REAL Alertmanager 0.25 and Prometheus (Debian)
on 127.0.0.1, in a tmp dir. Skipped locally without the binaries; failed under CI=true (.ci/run installs them)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.parse

import pytest

from healer.clock import VirtualClock
from healer.conventions import MAIN_RED_SINCE, MAIN_STATUS
from healer.metrics import Metrics
from healer.notify import notify, resolve_cleared
from healer.notify.outbox import Courier
from healer.policy.schema import Policy
from healer.store import open_store
from tests.conftest import healer, make_repo, wait_until
from tests.notify import promkit


def _pol(*notifiers) -> Policy:
    return Policy.model_validate({"notify": {"notifiers": [{"kind": "log"}, *notifiers]}})


def _groups(receiver, status: str, alertname: str) -> list[dict]:
    return [b for b, _ in list(receiver.got) if b.get("status") == status and b.get("groupLabels", {}).get("alertname") == alertname]


def _drain(store, pol, metrics=None):
    c = Courier(store, pol, metrics=metrics)
    try:
        return c.drain_once(15)
    finally:
        c.stop()


@pytest.fixture
def am(tmp_path, receiver):
    hook = receiver()
    srv = promkit.alertmanager(tmp_path, hook.url)
    yield srv, hook
    srv.stop()


@pytest.mark.long  # 10 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_supervisor_alert_reaches_alertmanager_grouped_forwarded_then_resolved_when_main_turns_green(tmp_path, am):
    """`healer supervise --once` on a red main: Alertmanager accepts the PostableAlert, forwards it to its webhook
    receiver with healer's labels and evidence; main green, the next tick resolves it (endsAt) and Alertmanager
    forwards the resolve."""
    srv, hook = am
    root = make_repo(tmp_path / "fleet")
    assert healer("init", "--root", str(root)).returncode == 0
    (root / "healer.yaml").write_text(
        "notify:\n  notifiers:\n    - {kind: log}\n"
        f"    - {{kind: alertmanager, url: '{srv.base}', labels: {{team: fleet}}, generator_url: 'http://healer.example/board'}}\n")
    store = open_store(root)
    store.set_setting(MAIN_STATUS, "red")
    store.set_setting(MAIN_RED_SINCE, store.now() - 600)
    r = healer("supervise", "--once", "--root", str(root))
    assert r.returncode == 0, r.stderr
    assert store.count_events("notify.delivered", subject="main_red:main") == 1, store.events(prefix="notify.")
    wait_until(lambda: _groups(hook, "firing", "main_red"), timeout=30, what="Alertmanager forwards the firing alert")
    [alert] = _groups(hook, "firing", "main_red")[0]["alerts"]
    assert alert["labels"] == {"alertname": "main_red", "key": "main_red:main", "subject": "main", "severity": "critical",
                               "source": "healer", "team": "fleet"}
    assert "main is red" in alert["annotations"]["summary"]
    assert json.loads(alert["annotations"]["description"])  # the evidence, whole
    assert alert["generatorURL"] == "http://healer.example/board"
    [live] = promkit.get(srv.base + "/api/v2/alerts")
    assert live["status"]["state"] == "active" and live["labels"]["key"] == "main_red:main"

    store.set_setting(MAIN_STATUS, "green")
    store.set_setting(MAIN_RED_SINCE, None)
    r = healer("supervise", "--once", "--root", str(root))
    assert r.returncode == 0, r.stderr
    assert store.count_events("notify.resolved", subject="main_red:main") == 1
    wait_until(lambda: _groups(hook, "resolved", "main_red"), timeout=30, what="Alertmanager forwards the resolve")
    [done] = _groups(hook, "resolved", "main_red")[0]["alerts"]
    assert done["status"] == "resolved" and done["labels"]["key"] == "main_red:main"
    assert promkit.get(srv.base + "/api/v2/alerts?active=true") == []
    # a third tick on a green main resolves nothing twice
    assert healer("supervise", "--once", "--root", str(root)).returncode == 0
    assert store.count_events("notify.resolved") == 1
    store.close()


def test_alertmanager_groups_two_findings_of_one_kind_and_a_legacy_webhook_toward_the_api_is_accepted(tmp_path, am):
    srv, hook = am
    (tmp_path / "f" / ".healer").mkdir(parents=True)
    store = open_store(tmp_path / "f")
    pol = _pol({"kind": "alertmanager", "url": srv.base + "/"},
               # before 0.34 `format: alertmanager` posted the receiver payload here and got 400: now what the API takes
               {"kind": "webhook", "url": srv.base + "/api/v2/alerts", "format": "alertmanager"})
    for t in ("T-1", "T-2"):
        assert notify(store, pol, f"agent_stuck:{t}", f"agent on {t} stuck", evidence={"minutes": 95, "ticket": t})
    out = _drain(store, pol)
    assert out.delivered == 4 and not out.errors, out.errors
    wait_until(lambda: any(len(g["alerts"]) == 2 for g in _groups(hook, "firing", "agent_stuck")), timeout=30,
               what="one group with both alerts")
    g = next(g for g in _groups(hook, "firing", "agent_stuck") if len(g["alerts"]) == 2)
    assert sorted(a["labels"]["subject"] for a in g["alerts"]) == ["T-1", "T-2"]
    assert {a["annotations"]["evidence_minutes"] for a in g["alerts"]} == {"95"}
    # T-1 clears (T-2 still firing): only T-1 is resolved
    from healer.core.model import Finding

    still = [Finding("agent_stuck", "T-2", store.now() - 6000)]
    assert resolve_cleared(store, pol, still, main_green=True) == ["agent_stuck:T-1"]
    assert _drain(store, pol).delivered == 2
    wait_until(lambda: _groups(hook, "resolved", "agent_stuck") or any(
        a["status"] == "resolved" for g in _groups(hook, "firing", "agent_stuck") for a in g["alerts"]),
        timeout=30, what="the resolve of T-1 forwarded")
    active = promkit.get(srv.base + "/api/v2/alerts?active=true")
    assert [a["labels"]["subject"] for a in active] == ["T-2"]
    store.close()


def test_a_payload_alertmanager_refuses_is_rejected_once_and_counted(tmp_path, am):
    srv, hook = am
    (tmp_path / "f" / ".healer").mkdir(parents=True)
    store = open_store(tmp_path / "f", VirtualClock())
    # the receiver payload (what healer sent before 0.34) posted to the API: Alertmanager answers 400
    pol = _pol({"kind": "webhook", "url": srv.base + "/api/v2/alerts", "format": "alertmanager_webhook"})
    m = Metrics("supervise")
    notify(store, pol, "main_red:main", "main is red", severity="critical")
    out = _drain(store, pol, m)
    assert out.given_up == 1 and "HTTP 400" in out.errors[0]
    assert store.count_events("notify.rejected") == 1 and not store.outbox(["pending"])
    text = m.render()
    assert 'healer_notification_rejections_total{notifier="webhook"} 1.0' in text
    assert 'healer_notification_failures_total{notifier="webhook"} 1.0' in text
    store.close()


@pytest.mark.long  # 8 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_prometheus_scrapes_healer_up_and_a_query_returns_a_healer_metric(tmp_path):
    root = make_repo(tmp_path / "fleet")
    assert healer("init", "--root", str(root)).returncode == 0
    (root / "healer.yaml").write_text("loop:\n  agent: {command: [python3, -c, pass]}\n"
                                      "  gates: [{name: ok, run: [python3, -c, pass]}]\n")
    port = promkit.free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    up = subprocess.Popen([sys.executable, "-m", "healer", "up", "--root", str(root), "--metrics-port", str(port)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    prom = None
    try:
        wait_until(lambda: "healer_daemon_info" in _try(f"http://127.0.0.1:{port}/metrics"), timeout=60,
                   what="healer up's metrics port")
        prom = promkit.prometheus(tmp_path, f"127.0.0.1:{port}")
        q = urllib.parse.quote('healer_daemon_info{daemon="up",job="healer"}')

        def scraped():
            r = promkit.get(f"{prom.base}/api/v1/query?query={q}")
            return r["status"] == "success" and r["data"]["result"]

        wait_until(scraped, timeout=60, what=lambda: f"Prometheus scraped healer up: {promkit.get(prom.base + '/api/v1/targets')}")
        [sample] = scraped()
        assert sample["value"][1] == "1" and sample["metric"]["instance"] == f"127.0.0.1:{port}"
        q2 = urllib.parse.quote("healer_dispatch_passes_total")
        wait_until(lambda: promkit.get(f"{prom.base}/api/v1/query?query={q2}")["data"]["result"], timeout=60,
                   what="the dispatcher's passes counted")
        q3 = urllib.parse.quote('up{job="healer"}')
        assert promkit.get(f"{prom.base}/api/v1/query?query={q3}")["data"]["result"][0]["value"][1] == "1"
    finally:
        if prom is not None:
            prom.stop()
        up.send_signal(signal.SIGTERM)
        try:
            out, err = up.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
            out, err = up.communicate()
    assert up.returncode == 0, err.decode()[-2000:]


def _try(url: str) -> str:
    try:
        r = promkit.get(url, timeout=2)
        return r if isinstance(r, str) else json.dumps(r)
    except OSError:
        return ""


@pytest.mark.long  # 5 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_dispatch_serves_metrics_and_a_taken_port_is_a_usage_error(tmp_path):
    root = make_repo(tmp_path / "fleet")
    assert healer("init", "--root", str(root)).returncode == 0
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        for cmd in (["dispatch", "--once"], ["up"], ["supervise", "--once"]):
            r = healer(*cmd, "--root", str(root), "--metrics-port", str(taken))
            assert r.returncode == 64, (cmd, r.stderr)
            assert f"--metrics-port {taken}: cannot listen on 127.0.0.1:{taken}" in r.stderr
