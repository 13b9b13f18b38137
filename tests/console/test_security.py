"""The console's security model: CSRF double submit, read-only, the token, the bind refusal, escaping and the
Content-Security-Policy, confined file reads (docs/console.md "Security")."""

from __future__ import annotations

import os

import pytest

from healer import lifecycle
from healer.console import security
from healer.errors import USAGE, UsageError
from healer.records import Agent
from healer.store import keys
from tests.conftest import healer
from tests.console.kit import client, csrf, make_fleet

XSS = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'


@pytest.fixture
def fleet(tmp_path):
    root, store, policy = make_fleet(tmp_path)
    yield root, store, policy
    store.close()


def test_a_steer_without_or_with_a_wrong_csrf_token_is_403_and_changes_nothing(fleet):
    root, store, policy = fleet
    tc, _ = client(root, store, policy)
    tok = csrf(tc)
    assert tc.post("/steer/pause", data={"subject": "dispatch"}).status_code == 403
    assert tc.post("/steer/pause", data={"subject": "dispatch", "csrf": "forged"}).status_code == 403
    tc.cookies.clear()  # a cross-site form has the field (copied) but not the SameSite=Strict cookie
    assert tc.post("/steer/pause", data={"subject": "dispatch", "csrf": tok}).status_code == 403
    assert store.get_setting(keys.DISPATCH_PAUSED, False) is False and store.intents() == []


def test_a_post_from_another_origin_is_403(fleet):
    root, store, policy = fleet
    tc, _ = client(root, store, policy)
    tok = csrf(tc)
    r = tc.post("/steer/pause", data={"subject": "dispatch", "csrf": tok}, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and store.intents() == []


def test_read_only_draws_no_form_and_refuses_every_post_with_403(fleet):
    root, store, policy = fleet
    store.add_ticket("x", id="T-1", state=lifecycle.IN_PROGRESS)
    tc, _ = client(root, store, policy, read_only=True)
    page = tc.get("/tickets/T-1").text
    assert "<form method=\"post\"" not in page and "read-only" in page
    for name in ("pause", "requeue", "stop", "escalate", "release", "ack", "gameday"):
        assert tc.post(f"/steer/{name}", data={"subject": "T-1", "csrf": "x"}).status_code == 403
    assert store.ticket("T-1").state == lifecycle.IN_PROGRESS and store.intents() == []


def test_with_a_token_every_request_needs_it_bearer_or_the_login_cookie(fleet):
    root, store, policy = fleet
    tc, _ = client(root, store, policy, token="s3cret")
    assert tc.get("/", headers={"Accept": "application/json"}).status_code == 401
    assert tc.get("/api/events").status_code == 401
    r = tc.get("/", headers={"Accept": "text/html"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login"
    assert tc.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert tc.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert tc.post("/login", data={"token": "nope"}).status_code == 401
    r = tc.post("/login", data={"token": "s3cret"}, follow_redirects=False)
    assert r.status_code == 303 and "HttpOnly" in r.headers["set-cookie"] and "SameSite=strict" in r.headers["set-cookie"]
    assert tc.get("/").status_code == 200  # the cookie carries it now
    assert tc.get("/static/console.js").status_code == 200


def test_a_non_loopback_bind_without_a_token_is_refused_in_one_line_exit_64(fleet):
    root, _, _ = fleet
    env = {k: v for k, v in os.environ.items() if k != security.TOKEN_ENV}
    r = healer("console", "--host", "0.0.0.0", "-C", str(root), env={**env, security.TOKEN_ENV: ""})
    assert r.returncode == USAGE, r.stderr
    assert r.stderr.strip().splitlines() == ["healer: console: --host 0.0.0.0 is not loopback: refused without a token "
                                             "(--token or $HEALER_CONSOLE_TOKEN)"]
    with pytest.raises(UsageError):
        security.access("::", None, None, False, env={})
    assert security.access("0.0.0.0", "ops=abc", "someone", False, env={}).actor == "operator:ops"  # the holder wins
    assert security.access("127.0.0.1", None, "eve", False, env={}).token is None
    assert security.access("::1", None, None, False, env={"USER": "root"}).operator == "root"


def test_attacker_written_titles_bodies_and_reasons_are_escaped_under_a_strict_csp(fleet):
    root, store, policy = fleet
    store.add_ticket(XSS, id="T-1", body=XSS, state=lifecycle.IN_PROGRESS)
    store.move_ticket("T-1", lifecycle.QUEUED, actor="agent", reason=XSS)
    store.comment("T-1", XSS, author=XSS)
    tc, _ = client(root, store, policy)
    for path in ("/", "/tickets/T-1", f"/?q={XSS}"):
        r = tc.get(path)
        assert r.status_code == 200
        assert "<script>alert" not in r.text and "<img src=x" not in r.text, path
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "default-src 'none'" in csp
        assert r.headers["x-content-type-options"] == "nosniff"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in tc.get("/tickets/T-1").text


def test_agent_logs_are_read_from_the_agents_folder_only_never_through_a_symlink(fleet, tmp_path):
    root, store, policy = fleet
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET\n")
    logs = root / ".healer" / "logs" / "agents"
    logs.mkdir(parents=True)
    (logs / "A-1.log").symlink_to(secret)
    (logs / "A-2.log").write_text("hello from the agent\n")
    for aid in ("A-1", "A-2"):
        store.upsert_agent(Agent(aid, None, "exited", started_at=store.now()))
    tc, _ = client(root, store, policy)
    assert "TOP SECRET" not in tc.get("/agents/A-1/log").text
    assert tc.get("/agents/A-2/log").text == "hello from the agent\n"
    assert tc.get("/agents/..%2F..%2Fhealer.yaml/log").status_code == 404


def test_game_day_reports_serve_known_files_only_and_their_html_runs_no_script(fleet):
    root, store, policy = fleet
    d = root / ".healer" / "gamedays" / "20261207T000000-stray-file"
    d.mkdir(parents=True)
    (d / "report.html").write_text("<html><body><p>ok</p></body></html>")
    (d / "secret.txt").write_text("no")
    tc, _ = client(root, store, policy)
    page = tc.get("/gamedays").text
    assert "20261207T000000-stray-file" in page and "report.html" in page and "stray-file" in page
    r = tc.get("/gamedays/20261207T000000-stray-file/report.html")
    assert r.status_code == 200 and "sandbox" in r.headers["content-security-policy"]
    assert tc.get("/gamedays/20261207T000000-stray-file/secret.txt").status_code == 404
    assert tc.get("/gamedays/..%2F..%2F/healer.yaml").status_code == 404
