"""The Alertmanager notifier's payload and the pure rule that says which open alerts cleared."""

from __future__ import annotations

import pytest

from healer.core.notices import cleared
from healer.notify import alertmanager, webhook
from healer.policy.schema import FINDINGS, Notifier


def test_cleared_resolves_only_what_the_tick_judged_clear():
    open_keys = ["agent_stuck:T-1", "agent_stuck:T-2", "main_red:main", "escalate:T-3", "supervisor_silent",
                 "dispatch_frozen:dispatch"]
    firing = {"agent_stuck:T-2"}
    unknown = {"dispatch_frozen:dispatch"}  # fail-open: no data is no all-clear
    assert cleared(open_keys, firing, unknown, FINDINGS, main_green=False) == ["agent_stuck:T-1", "supervisor_silent"]
    # main_red clears on a green main only (the dispatcher pages before the sentinel's threshold)
    assert "main_red:main" in cleared(open_keys, firing, unknown, FINDINGS, main_green=True)
    # an escalation is a one-off: never resolved by the supervisor
    assert all(not k.startswith("escalate") for k in cleared(open_keys, set(), set(), FINDINGS, main_green=True))


def test_postable_alert_firing_then_resolved():
    p = {"key": "agent_stuck:T-1", "text": "stuck", "severity": "warning", "evidence": {"minutes": 95, "nested": {"a": 1}},
         "at": 1_800_000_000.0, "hold": 7200}
    [a] = alertmanager.alerts(p, {"team": "x", "key": "spoofed"}, "http://g/")
    assert a["labels"] == {"team": "x", "alertname": "agent_stuck", "key": "agent_stuck:T-1", "subject": "T-1",
                           "severity": "warning", "source": "healer"}
    assert a["annotations"]["evidence_minutes"] == "95" and "evidence_nested" not in a["annotations"]
    assert a["startsAt"] == "2027-01-15T08:00:00Z" and a["endsAt"] == "2027-01-15T10:00:00Z"
    assert a["generatorURL"] == "http://g/"
    [r] = alertmanager.alerts({**p, "resolved": True, "ends_at": p["at"] + 60})
    assert r["endsAt"] == "2027-01-15T08:01:00Z" and "generatorURL" not in r


def test_endpoint_and_the_legacy_format():
    assert alertmanager.endpoint("http://am:9093") == "http://am:9093/api/v2/alerts"
    assert alertmanager.endpoint("http://am:9093/api/v2/alerts") == "http://am:9093/api/v2/alerts"
    p = {"key": "main_red:main", "text": "red", "severity": "critical", "at": 1.0}
    # `format: alertmanager` toward a bridge keeps its meaning: Alertmanager's receiver payload
    assert webhook.body(p, "i" * 32, "alertmanager", "http://bridge/hook")["version"] == "4"
    assert webhook.body(p, "i" * 32, "alertmanager_webhook", "http://am/api/v2/alerts")["version"] == "4"
    # toward Alertmanager's API (which answered it 400) it is what the API takes
    assert isinstance(webhook.body(p, "i" * 32, "alertmanager", "http://am/api/v2/alerts"), list)
    assert alertmanager.takes_resolves(Notifier(kind="webhook", url="http://am/api/v2/alerts", format="alertmanager"))
    assert not alertmanager.takes_resolves(Notifier(kind="webhook", url="http://bridge/", format="alertmanager"))


def test_notifier_needs_url_and_sane_label_names():
    with pytest.raises(ValueError, match="expected 'url'"):
        Notifier(kind="alertmanager")
    with pytest.raises(ValueError, match="Prometheus label name"):
        Notifier(kind="alertmanager", url="http://am", labels={"bad-name": "x"})
