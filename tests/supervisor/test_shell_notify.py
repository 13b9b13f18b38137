"""Notifiers against a real HTTP server on 127.0.0.1 and a real command."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from loguru import logger

from healer.notify import notify
from healer.policy.schema import Notifier

PY = sys.executable
SECRET = "s3cr3t-hunter2-token"


class Receiver:
    def __init__(self, codes):
        self.codes = list(codes)
        self.got: list[tuple[dict, dict]] = []
        self.hits = 0
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.hits += 1
                code = outer.codes.pop(0) if outer.codes else 200
                if code == 200:
                    outer.got.append((json.loads(body), dict(self.headers)))
                self.send_response(code)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made = []

    def make(codes):
        r = Receiver(codes)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


@pytest.fixture
def logs():
    lines: list[str] = []
    hid = logger.add(lambda m: lines.append(str(m)), level="DEBUG", serialize=True)
    yield lines
    logger.remove(hid)


def _policy(f, notifiers):
    return f.policy.model_copy(update={"notify": f.policy.notify.model_copy(update={"notifiers": notifiers})})


def test_webhook_retries_500_twice_then_delivers_once_and_never_leaks_the_secret(shell_fleet, receiver, logs, monkeypatch):
    f = shell_fleet
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    r = receiver([500, 500, 200])
    jsonl = f.root / ".healer" / "notifications.jsonl"
    pol = _policy(f, [Notifier(kind="log"), Notifier(kind="jsonl", path=str(jsonl)),
                      Notifier(kind="webhook", url=r.url, secret_env="HOOK_SECRET", retries=3)])
    t0 = f.clock.now()
    assert notify(f.store, pol, "main_red", "main is red", severity="critical", evidence={"since": 1}) is True
    assert r.hits == 3
    [(body, headers)] = r.got
    assert body["text"].endswith("main is red") and body["key"] == "main_red" and body["severity"] == "critical"
    assert body["evidence"] == {"since": 1}
    assert headers["Authorization"] == f"Bearer {SECRET}"
    assert f.clock.now() - t0 == pytest.approx(0.5 + 1.0)  # exponential backoff, on the injected clock
    # the secret is nowhere: events, JSONL, logs, the store file
    everything = json.dumps([e.payload for e in f.store.events()]) + jsonl.read_text() + "".join(logs)
    assert SECRET not in everything
    assert SECRET.encode() not in (f.root / ".healer" / "healer.db").read_bytes()


def test_webhook_that_keeps_failing_records_notify_failed_without_the_secret(shell_fleet, receiver, logs, monkeypatch):
    f = shell_fleet
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    r = receiver([500] * 10)
    url = r.url + "/" + SECRET  # Slack-style: a token in the URL path must not leak either
    pol = _policy(f, [Notifier(kind="webhook", url=url, secret_env="HOOK_SECRET", retries=2)])
    assert notify(f.store, pol, "k", "hello") is True  # sent = attempted; the failure is its own event
    assert r.hits == 3
    [ev] = f.store.events(kinds=["notify.failed"])
    assert "HTTP 500" in ev.payload["reason"] and "3 tries" in ev.payload["reason"]
    everything = json.dumps([e.payload for e in f.store.events()]) + "".join(logs)
    assert SECRET not in everything


def test_a_broken_notifier_does_not_stop_the_others(shell_fleet, tmp_path):
    f = shell_fleet
    jsonl = tmp_path / "n.jsonl"
    pol = _policy(f, [Notifier(kind="webhook", url="http://127.0.0.1:9/nothing", retries=0, timeout="1s"),
                      Notifier(kind="jsonl", path=str(jsonl))])
    assert notify(f.store, pol, "k", "hello") is True
    assert f.store.count_events("notify.failed") == 1
    assert json.loads(jsonl.read_text())["text"] == "hello"


def test_command_notifier_gets_json_on_stdin(shell_fleet, tmp_path):
    f = shell_fleet
    out = tmp_path / "got.json"
    script = tmp_path / "hook.py"
    script.write_text(f"import sys, pathlib; pathlib.Path({str(out)!r}).write_text(sys.stdin.read())\n")
    pol = _policy(f, [Notifier(kind="command", command=[PY, str(script)])])
    assert notify(f.store, pol, "dispatch_frozen", "nothing launched for 1h", evidence={"last": 5}) is True
    got = json.loads(out.read_text())
    assert got["key"] == "dispatch_frozen" and got["evidence"] == {"last": 5} and "nothing launched" in got["text"]


def test_failing_command_is_recorded(shell_fleet):
    f = shell_fleet
    pol = _policy(f, [Notifier(kind="command", command=[PY, "-c", "import sys; sys.exit(3)"])])
    notify(f.store, pol, "k", "x")
    [ev] = f.store.events(kinds=["notify.failed"])
    assert "exited 3" in ev.payload["reason"]


def test_thousand_firings_in_one_cooldown_window_notify_once(shell_fleet, receiver):
    f = shell_fleet
    r = receiver([])
    pol = _policy(f, [Notifier(kind="webhook", url=r.url)])
    sent = 0
    for _ in range(1000):
        sent += notify(f.store, pol, "dispatch_frozen", "dispatch frozen")
        f.clock.advance(1)  # 1000 s, well inside the 4 h cooldown
    assert sent == 1 and r.hits == 1
    assert f.store.count_events("notify.sent") == 1
    assert f.store.count_events("notify.suppressed") == 999
    f.clock.advance(f.policy.sentinels.cooldown)
    assert notify(f.store, pol, "dispatch_frozen", "dispatch frozen") is True
    assert r.hits == 2
