"""The outbox against a real HTTP server on 127.0.0.1 and a real command (virtual clock: backoff is exact)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from healer.clock import VirtualClock
from healer.notify import notify
from healer.notify.outbox import Courier
from healer.policy.schema import Notifier, Policy
from healer.store import open_store
from tests.conftest import wait_until

PY = sys.executable
SECRET = "s3cr3t-hunter2-token"


@pytest.fixture
def fleet(tmp_path):
    root = tmp_path / "fleet"
    (root / ".healer").mkdir(parents=True)
    clock = VirtualClock()
    store = open_store(root, clock)
    yield root, store, clock
    store.close()


def _policy(notifiers, **notify):
    return Policy.model_validate({"notify": {"notifiers": [n.model_dump(mode="json") for n in notifiers], **notify}})


def drain(store, pol, clock, rounds=20):
    """Run courier passes, moving the virtual clock to each retry, until nothing is owed."""
    c = Courier(store, pol)
    try:
        for _ in range(rounds):
            c.drain_once(10)
            owed = store.outbox(["pending"])
            if not owed:
                return
            clock.set(max(clock.now(), min(o.next_at for o in owed)))
    finally:
        c.stop()


def test_webhook_500_twice_then_delivered_once_with_backoff_and_no_secret_anywhere(fleet, receiver, logs, monkeypatch):
    root, store, clock = fleet
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    r = receiver([500, 500])
    jsonl = root / ".healer" / "notifications.jsonl"
    pol = _policy([Notifier(kind="log"), Notifier(kind="jsonl", path=str(jsonl)),
                   Notifier(kind="webhook", url=r.url, secret_env="HOOK_SECRET")])
    assert notify(store, pol, "main_red", "main is red", severity="critical", evidence={"since": 1}) is True
    assert r.hits == 0  # deciding never sends: the courier does
    assert json.loads(jsonl.read_text())["text"] == "main is red"  # local notifiers at once
    drain(store, pol, clock)
    assert r.hits == 3
    [(body, headers)] = r.got
    assert body["text"].endswith("main is red") and body["key"] == "main_red" and body["severity"] == "critical"
    assert body["evidence"] == {"since": 1}
    assert headers["Authorization"] == f"Bearer {SECRET}"
    assert headers["Idempotency-Key"] == body["idempotency_key"] == store.events(kinds=["notify.sent"])[0].payload["idem"]
    failed = store.events(kinds=["notify.failed"])
    assert [e.payload["tries"] for e in failed] == [1, 2] and all("HTTP 500" in e.payload["reason"] for e in failed)
    gaps = [failed[0].payload["retry_at"] - failed[0].at, failed[1].payload["retry_at"] - failed[1].at]
    assert 0.25 <= gaps[0] <= 0.5 and 0.5 <= gaps[1] <= 1.0  # exponential backoff with jitter
    [d] = store.events(kinds=["notify.delivered"])
    assert d.payload["tries"] == 3
    everything = json.dumps([e.payload for e in store.events()]) + jsonl.read_text() + "".join(logs)
    assert SECRET not in everything
    assert SECRET.encode() not in (root / ".healer" / "healer.db").read_bytes()


def test_a_receiver_that_stays_down_keeps_the_alert_owed_until_it_expires_then_the_key_is_free(fleet, receiver, logs,
                                                                                             monkeypatch):
    root, store, clock = fleet
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    r = receiver(then=500)
    url = r.url + "/" + SECRET  # Slack-style: a token in the URL path must not leak either
    pol = _policy([Notifier(kind="webhook", url=url, secret_env="HOOK_SECRET")], expire="1h")
    assert notify(store, pol, "k", "hello") is True
    drain(store, pol, clock, rounds=6)
    assert r.hits == 6 and store.outbox(["pending"])  # still owed
    assert notify(store, pol, "k", "again") is False  # owed: no second copy queued behind it
    clock.advance(3600)
    drain(store, pol, clock)
    [ev] = store.events(kinds=["notify.expired"])
    assert ev.payload["tries"] >= 6 and "HTTP 500" in ev.payload["reason"]
    assert notify(store, pol, "k", "after expiry") is True  # cooldowns count delivered notifications
    everything = json.dumps([e.payload for e in store.events()]) + "".join(logs)
    assert SECRET not in everything


def test_a_4xx_rejection_is_final_and_not_retried(fleet, receiver):
    root, store, clock = fleet
    r = receiver(then=400)
    pol = _policy([Notifier(kind="webhook", url=r.url)])
    notify(store, pol, "k", "x")
    drain(store, pol, clock)
    assert r.hits == 1
    [ev] = store.events(kinds=["notify.rejected"])
    assert "HTTP 400" in ev.payload["reason"]


def test_a_broken_notifier_does_not_stop_the_others(fleet, tmp_path):
    root, store, clock = fleet
    jsonl = tmp_path / "n.jsonl"
    pol = _policy([Notifier(kind="webhook", url="http://127.0.0.1:9/nothing", timeout="1s"),
                   Notifier(kind="jsonl", path=str(jsonl))])
    assert notify(store, pol, "k", "hello") is True
    drain(store, pol, clock, rounds=1)
    assert store.count_events("notify.failed") == 1
    assert json.loads(jsonl.read_text())["text"] == "hello"


def test_command_notifier_gets_json_on_stdin_and_the_idempotency_key(fleet, tmp_path):
    root, store, clock = fleet
    out = tmp_path / "got.json"
    script = tmp_path / "hook.py"
    script.write_text(f"import os, sys, json, pathlib; d = json.load(sys.stdin); d['env'] = os.environ['HEALER_IDEMPOTENCY_KEY']; "
                      f"pathlib.Path({str(out)!r}).write_text(json.dumps(d))\n")
    pol = _policy([Notifier(kind="command", command=[PY, str(script)])])
    assert notify(store, pol, "dispatch_frozen", "nothing launched for 1h", evidence={"last": 5}) is True
    drain(store, pol, clock)
    got = json.loads(out.read_text())
    assert got["key"] == "dispatch_frozen" and got["evidence"] == {"last": 5} and "nothing launched" in got["text"]
    assert got["env"] == got["idempotency_key"]


def test_failing_command_is_recorded_and_retried(fleet):
    root, store, clock = fleet
    pol = _policy([Notifier(kind="command", command=[PY, "-c", "import sys; sys.exit(3)"])])
    notify(store, pol, "k", "x")
    drain(store, pol, clock, rounds=2)
    evs = store.events(kinds=["notify.failed"])
    assert len(evs) == 2 and "exited 3" in evs[0].payload["reason"]


def test_thousand_firings_in_one_cooldown_window_deliver_once(fleet, receiver):
    root, store, clock = fleet
    r = receiver()
    pol = _policy([Notifier(kind="webhook", url=r.url)])
    sent = 0
    for _ in range(1000):
        sent += notify(store, pol, "dispatch_frozen", "dispatch frozen")
        drain(store, pol, clock, rounds=1)
        clock.advance(1)  # 1000 s, well inside the 4 h cooldown
    assert sent == 1 and r.hits == 1
    assert store.count_events("notify.sent") == 1
    assert store.count_events("notify.suppressed") == 999
    clock.advance(pol.sentinels.cooldown)
    assert notify(store, pol, "dispatch_frozen", "dispatch frozen") is True
    drain(store, pol, clock)
    assert r.hits == 2 and len(set(r.keys())) == 2


def test_alertmanager_payload(fleet, receiver):
    root, store, clock = fleet
    r = receiver()
    pol = _policy([Notifier(kind="webhook", url=r.url, format="alertmanager")])
    notify(store, pol, "main_red:main", "main is red", severity="critical", evidence={"commit": "abc"})
    drain(store, pol, clock)
    [(body, headers)] = r.got
    assert body["version"] == "4" and body["status"] == "firing" and len(body["alerts"]) == 1
    a = body["alerts"][0]
    assert a["labels"]["alertname"] == "main_red" and a["labels"]["severity"] == "critical"
    assert a["annotations"]["summary"] == "main is red" and a["startsAt"].endswith("Z")
    assert body["idempotency_key"] == headers["Idempotency-Key"]


def test_a_notifier_removed_from_the_policy_expires_its_rows(fleet, receiver):
    root, store, clock = fleet
    r = receiver()
    notify(store, _policy([Notifier(kind="webhook", url=r.url)]), "k", "x")
    drain(store, _policy([Notifier(kind="webhook", url=r.url + "/other")]), clock)
    assert r.hits == 0
    [ev] = store.events(kinds=["notify.expired"])
    assert "no longer configured" in ev.payload["reason"]


def test_two_couriers_never_send_one_row_twice(tmp_path, receiver):
    root = tmp_path / "fleet"
    (root / ".healer").mkdir(parents=True)
    r = receiver(then=("slow", 0.3))
    pol = _policy([Notifier(kind="webhook", url=r.url)])
    a, b = open_store(root), open_store(root)
    for i in range(20):
        notify(a, pol, f"k{i}", "x")
    ca, cb = Courier(a, pol).start(), Courier(b, pol).start()
    try:
        wait_until(lambda: not a.outbox(["pending"]), timeout=60, what="every row delivered")
    finally:
        ca.stop()
        cb.stop()
        a.close()
        b.close()
    assert r.hits == 20 and len(set(r.keys())) == 20
    assert Path(root / ".healer" / "healer.db").exists()
