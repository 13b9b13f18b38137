"""No pass of the dispatcher or the supervisor waits on a receiver; slow receivers de-duplicate by
idempotency key; an alert nobody could take reaches its receiver once it is back, across a restart of `up`."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import yaml

from healer.clock import VirtualClock, system
from healer.notify import notify
from healer.notify.outbox import Courier
from healer.policy.schema import Policy
from healer.store import open_store
from healer.supervisor import Supervisor
from tests.conftest import make_repo, wait_until
from tests.fleet.conftest import NO_FILE, gate, make_fleet, scripted_policy
from tests.notify.receiver import Receiver, free_port

REAL = system()
MODES = ["hang", 500, ("slow", 20)]


def _with_webhook(pol: Policy, url: str, timeout: str = "30s") -> Policy:
    data = pol.model_dump(mode="json", by_alias=True)
    data["notify"] = {"notifiers": [{"kind": "jsonl", "path": ".healer/notifications.jsonl"},
                                    {"kind": "webhook", "url": url, "timeout": timeout}]}
    return Policy.model_validate(data)


# serial: a wall-clock budget (a tick under 10 s against a 30 s webhook timeout): a neighbour's CPU is not its fault
@pytest.mark.serial
@pytest.mark.parametrize("mode", MODES, ids=["hang", "500", "slow"])
def test_a_supervisor_tick_never_waits_on_the_receiver(tmp_path, receiver, mode):
    r = receiver(then=mode)
    root = make_repo(tmp_path / "fleet")
    clock = VirtualClock()
    store = open_store(root, clock)
    pol = _with_webhook(Policy(), r.url)
    store.add_ticket("ready", id="T-1")
    store.set_setting("dispatch.last_launch_at", clock.now())
    store.set_setting("main.status", "green")
    clock.advance(pol.sentinels.dispatch_frozen + 1)
    sup = Supervisor(root, pol, store, clock)
    courier = Courier(open_store(root, clock), pol).start()  # the daemon's worker, sending meanwhile
    try:
        t0 = REAL.monotonic()
        rep = sup.tick()
        took = REAL.monotonic() - t0
        assert rep.alerts_sent == 1
        wait_until(lambda: r.hits >= 1, timeout=30, what="the courier reaching the receiver")
        t1 = REAL.monotonic()
        clock.advance(60)
        sup.tick()  # a second tick while the receiver is still busy with the first
        took2 = REAL.monotonic() - t1
    finally:
        courier.stop()
        courier.store.close()
        store.close()
    assert took < 10 and took2 < 10, (took, took2)  # the webhook's timeout is 30 s: a waiting tick would show it


# serial: a wall-clock budget (a pass under 20 s against a 30 s webhook timeout)
@pytest.mark.serial
@pytest.mark.parametrize("mode", MODES, ids=["hang", "500", "slow"])
def test_a_dispatcher_pass_never_waits_on_the_receiver(tmp_path, receiver, mode):
    r = receiver(then=mode)
    pol = _with_webhook(scripted_policy(main_gates=[gate("main-ok", NO_FILE.format("README.md"))]), r.url)
    f = make_fleet(tmp_path / "f", pol)
    try:
        t0 = REAL.monotonic()
        rep = f.d.tick()  # main is red: main_red is notified inside this pass
        took = REAL.monotonic() - t0
        assert rep.main == "red" and [e.subject.split(":")[0] for e in f.events("notify.sent")] == ["main_red"]
        c = Courier(f.store, pol)
        c.drain_once(0.5)  # the courier's try is under way (or done); the dispatcher is not part of it
        c.stop()
    finally:
        f.store.close()
    assert took < 20, took  # 30 s webhook timeout: a pass that waited on it could not be this fast


def test_a_slow_receiver_gets_each_alert_exactly_once_by_idempotency_key(tmp_path, receiver):
    # the first two answers come after the 0.5 s timeout (the receiver did take them): the courier retries
    r = receiver([("slow", 1.5), ("slow", 1.5)], then=200)
    root = tmp_path / "fleet"
    (root / ".healer").mkdir(parents=True)
    store = open_store(root)
    pol = _with_webhook(Policy(), r.url, timeout="500ms")
    for k in ("a", "b", "c"):
        assert notify(store, pol, k, f"alert {k}")
    courier = Courier(open_store(root), pol).start()
    try:
        wait_until(lambda: not store.outbox(["pending"]), timeout=60, what="all three delivered")
        wait_until(lambda: len(r.got) >= 5, timeout=30, what="the slow answers recorded by the receiver")
    finally:
        courier.stop()
        courier.store.close()
    sent = {e.subject: e.payload["idem"] for e in store.events(kinds=["notify.sent"])}
    by_key: dict[str, set[str]] = {}
    for body, headers in r.got:
        assert headers["Idempotency-Key"] == body["idempotency_key"]
        by_key.setdefault(body["key"], set()).add(body["idempotency_key"])
    assert len(r.got) > 3  # the receiver saw repeats ...
    assert by_key == {k: {v} for k, v in sent.items()}  # ... and de-duplicates them to exactly one per alert
    assert sorted(e.subject for e in store.events(kinds=["notify.delivered"])) == ["a", "b", "c"]
    store.close()


def test_a_receiver_within_its_timeout_gets_one_request_per_alert(tmp_path, receiver):
    r = receiver(then=("slow", 1.0))
    root = tmp_path / "fleet"
    (root / ".healer").mkdir(parents=True)
    store = open_store(root)
    pol = _with_webhook(Policy(), r.url, timeout="10s")
    for k in ("a", "b"):
        notify(store, pol, k, k)
    c = Courier(store, pol)
    c.drain_once(30)
    c.stop()
    assert r.hits == 2 and len(set(r.keys())) == 2
    store.close()


def _up(root):
    return subprocess.Popen([sys.executable, "-m", "healer", "up", "-C", str(root)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    return p.returncode, err


def _events(root, kind):
    s = open_store(root)
    try:
        return s.events(kinds=[kind])
    finally:
        s.close()


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_an_undelivered_alert_reaches_the_receiver_after_it_comes_back_across_a_restart_of_up(tmp_path):
    port = free_port()  # nobody listens there yet: the receiver is down
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir()
    pol = _with_webhook(scripted_policy(main_gates=[gate("main-ok", NO_FILE.format("README.md"))]),
                        f"http://127.0.0.1:{port}/hook", timeout="2s")
    (root / "healer.yaml").write_text(yaml.safe_dump(pol.model_dump(mode="json", by_alias=True), sort_keys=False))
    p = _up(root)
    try:
        wait_until(lambda: _events(root, "notify.failed"), timeout=90, what="a failed delivery while the receiver is down")
    finally:
        code, err = _stop(p)
    assert code == 0, err
    [sent] = [e for e in _events(root, "notify.sent") if e.subject.startswith("main_red")]
    r = Receiver(port=port)
    p = _up(root)
    try:
        wait_until(lambda: r.got, timeout=90, what="the owed alert delivered after the restart")
    finally:
        code, err = _stop(p)
        r.close()
    assert code == 0, err
    got = [(b, h) for b, h in r.got if b["key"].startswith("main_red")]
    assert len(got) == 1, [b["key"] for b, _ in r.got]
    [(body, headers)] = got
    assert headers["Idempotency-Key"] == sent.payload["idem"]
    assert len([e for e in _events(root, "notify.sent") if e.subject.startswith("main_red")]) == 1  # the same alert, not a new one
    assert _events(root, "notify.delivered")


def test_dispatch_once_delivers_its_own_page_after_the_pass(tmp_path, receiver):
    from tests.conftest import healer

    r = receiver()
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir()
    pol = _with_webhook(scripted_policy(main_gates=[gate("main-ok", NO_FILE.format("README.md"))]), r.url, timeout="5s")
    (root / "healer.yaml").write_text(yaml.safe_dump(pol.model_dump(mode="json", by_alias=True), sort_keys=False))
    cp = healer("dispatch", "--once", "-C", str(root), timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert [b["key"].split(":")[0] for b, _ in r.got] == ["main_red"]
    assert [e.subject.split(":")[0] for e in _events(root, "notify.delivered")] == ["main_red"]


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.parametrize("point", ["notify.after_claim", "notify.after_send"])
def test_up_killed_mid_delivery_delivers_the_alert_after_a_restart_by_one_key(tmp_path, point):
    """`healer up` SIGKILLed with an alert claimed and not yet sent, or sent (the receiver answered 2xx) and not yet
    marked delivered: the restarted `up` delivers it at once (a dead courier's claim on this host does not wait out
    its lease), under the same idempotency key, and records one delivery. After `after_send` the receiver sees
    the repeat it can drop by key; after `after_claim`, exactly one request."""
    r = Receiver()
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir()
    pol = _with_webhook(scripted_policy(main_gates=[gate("main-ok", NO_FILE.format("README.md"))]), r.url, timeout="5s")
    (root / "healer.yaml").write_text(yaml.safe_dump(pol.model_dump(mode="json", by_alias=True), sort_keys=False))
    killed = subprocess.Popen([sys.executable, "-m", "healer", "up", "-C", str(root)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={**__import__("os").environ, "HEALER_FAILPOINTS": f"{point}=kill@1"})
    try:
        _, err = killed.communicate(timeout=120)
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.communicate()
    assert killed.returncode == -signal.SIGKILL, err[-2000:]
    sent_before = len([b for b, _ in r.got if b["key"].startswith("main_red")])
    assert sent_before == (1 if point == "notify.after_send" else 0)
    [sent] = [e for e in _events(root, "notify.sent") if e.subject.startswith("main_red")]
    s = open_store(root)
    [row] = [it for it in s.outbox() if it.key.startswith("main_red") and it.notifier != "jsonl"]
    s.close()
    assert row.state == "pending" and row.claimed_by and row.claim_until  # the dead courier's claim
    p = _up(root)
    try:
        wait_until(lambda: [e for e in _events(root, "notify.delivered") if e.subject.startswith("main_red")], timeout=90,
                   what="the alert delivered by the restarted up")
    finally:
        code, err = _stop(p)
        r.close()
    assert code == 0, err
    got = [(b, h) for b, h in r.got if b["key"].startswith("main_red")]
    assert len(got) == sent_before + 1
    assert {h["Idempotency-Key"] for _, h in got} == {sent.payload["idem"]}  # one alert, one key
    assert len([e for e in _events(root, "notify.delivered") if e.subject.startswith("main_red")]) == 1
    assert len([e for e in _events(root, "notify.sent") if e.subject.startswith("main_red")]) == 1
    s = open_store(root)
    [done] = [it for it in s.outbox() if it.id == row.id]
    s.close()
    assert done.state == "delivered" and done.delivered_at < row.claim_until  # never waited out the dead claim
