"""Steering from the console: each button runs a registered action through the executor's one path, recorded with
actor operator:<name>, seen in `healer journal` under that name; refusals and aborted preconditions are shown."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from healer import lifecycle
from healer.fleet.snapshot import HOST
from healer.notify import notify
from healer.records import Agent
from healer.store import keys
from tests.conftest import healer
from tests.console.kit import client, csrf, make_fleet


@pytest.fixture
def fleet(tmp_path):
    root, store, policy = make_fleet(tmp_path)
    yield root, store, policy
    store.close()


def _steer(tc, name: str, subject: str, token: str):
    return tc.post(f"/steer/{name}", data={"csrf": token, "subject": subject}, headers={"Accept": "application/json"})


def test_pause_and_resume_dispatch_are_intents_of_the_operator_shown_in_healer_journal(fleet):
    root, store, policy = fleet
    tc, _ = client(root, store, policy, operator="alice")
    tok = csrf(tc)
    r = _steer(tc, "pause", "anything", tok)
    assert r.status_code == 200 and r.json()["status"] == "done", r.text
    assert store.get_setting(keys.DISPATCH_PAUSED) is True
    assert "dispatch <b class=bad>paused</b>" in tc.get("/").text
    assert _steer(tc, "resume", "dispatch", tok).json()["status"] == "done"
    assert store.get_setting(keys.DISPATCH_PAUSED) is False
    assert {(i.action, i.actor) for i in store.intents(states=["done"])} == {("pause_dispatch", "operator:alice"),
                                                                            ("resume_dispatch", "operator:alice")}
    out = healer("journal", "--json", "--kind", "remedy.", "-C", str(root))
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(x["payload"]["action"], x["payload"]["actor"]) for x in rows] == [("pause_dispatch", "operator:alice"),
                                                                             ("resume_dispatch", "operator:alice")]


def test_requeue_escalate_release_move_the_ticket_with_the_operator_as_actor(fleet):
    root, store, policy = fleet
    store.add_ticket("stuck one", id="T-1", state=lifecycle.IN_PROGRESS)
    tc, _ = client(root, store, policy, operator="bob")
    tok = csrf(tc, "/tickets/T-1")
    assert _steer(tc, "requeue", "T-1", tok).json()["status"] == "done"
    assert store.ticket("T-1").state == lifecycle.QUEUED
    assert _steer(tc, "escalate", "T-1", tok).json()["status"] == "done"
    t = store.ticket("T-1")
    assert t.state == lifecycle.NEEDS_HUMAN and "needs-human" in t.labels
    assert _steer(tc, "release", "T-1", tok).json()["status"] == "done"
    t = store.ticket("T-1")
    assert t.state == lifecycle.QUEUED and "needs-human" not in t.labels
    moves = [(e.payload["to"], e.payload["actor"]) for e in store.events(kinds=["ticket.moved"], subject="T-1")]
    assert moves == [("queued", "operator:bob"), ("needs_human", "operator:bob"), ("queued", "operator:bob")]
    page = tc.get("/tickets/T-1").text
    assert page.count("operator:bob") >= 3 and "release_ticket" in page


def test_a_precondition_that_no_longer_holds_aborts_and_the_page_says_why(fleet):
    root, store, policy = fleet
    store.add_ticket("queued one", id="T-1")
    tc, _ = client(root, store, policy)
    tok = csrf(tc)
    r = tc.post("/steer/requeue", data={"csrf": tok, "subject": "T-1"})
    assert r.status_code == 409 and "aborted: T-1 is queued, not in_progress" in r.text
    assert _steer(tc, "release", "T-1", tok).json()["reason"] == "T-1 is queued, not needs_human"
    assert _steer(tc, "requeue", "T-404", tok).json() == {"action": "requeue_ticket", "subject": "T-404", "status": "refused",
                                                          "reason": "no ticket 'T-404'", "intent": None, "actor": "operator:alice"}
    assert store.ticket("T-1").state == lifecycle.QUEUED


def test_stop_agent_stops_a_live_process_and_requeues_its_ticket(fleet):
    root, store, policy = fleet
    store.add_ticket("hangs", id="T-1", state=lifecycle.IN_PROGRESS)
    p = subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait(120)"])
    try:
        store.upsert_agent(Agent("A-1", "T-1", "running", pid=p.pid, host=HOST, started_at=store.now(), heartbeat_at=store.now()))
        tc, _ = client(root, store, policy, operator="carol")
        tok = csrf(tc, "/agents/A-1")
        out = _steer(tc, "stop", "A-1", tok).json()
        assert out["status"] == "done", out
        assert p.wait(timeout=30) is not None
        assert store.agent("A-1").state == "stopped" and store.ticket("T-1").state == lifecycle.QUEUED
        [it] = store.intents(states=["done"])
        assert (it.action, it.actor) == ("stop_agent", "operator:carol")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_acknowledging_a_page_records_who_and_a_second_ack_is_aborted(fleet):
    root, store, policy = fleet
    assert notify(store, policy, "main_red:main", "main is red", severity="critical")
    tc, _ = client(root, store, policy, operator="dana")
    tok = csrf(tc, "/supervisor")
    assert _steer(tc, "ack", "main_red:main", tok).json()["status"] == "done"
    [acked] = store.events(kinds=["notify.acked"])
    assert acked.subject == "main_red:main" and acked.payload["actor"] == "operator:dana"
    assert "acknowledged by operator:dana" in tc.get("/supervisor").text
    again = _steer(tc, "ack", "main_red:main", tok).json()
    assert (again["status"], again["reason"]) == ("aborted", "the page main_red:main is already acknowledged")
    assert _steer(tc, "ack", "never:sent", tok).json()["status"] == "refused"


def test_halt_refuses_every_steer_as_it_refuses_the_supervisor(fleet):
    root, store, policy = fleet
    (root / ".healer" / "HALT").write_text("")
    tc, _ = client(root, store, policy)
    out = _steer(tc, "pause", "dispatch", csrf(tc)).json()
    assert out["status"] == "refused" and "HALT" in out["reason"]
    assert store.get_setting(keys.DISPATCH_PAUSED, False) is False


@pytest.mark.long  # 14 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.slow  # a real game day against the fleet: `healer gameday run stray-file --root` (20-80 s)
def test_a_shipped_root_game_day_starts_from_the_console_as_a_child_and_its_report_is_listed(fleet):
    from tests.conftest import wait_until

    root, store, policy = fleet
    tc, c = client(root, store, policy, operator="gd")
    tok = csrf(tc, "/gamedays")
    assert tc.post("/steer/gameday", data={"csrf": tok, "subject": "../../etc/passwd"}).status_code == 404
    r = tc.post("/steer/gameday", data={"csrf": tok, "subject": "stray-file"}, headers={"Accept": "application/json"})
    assert r.status_code == 200 and r.json()["status"] == "started", r.text
    try:
        [row] = c.runner.started
        wait_until(lambda: row["state"] != "running", timeout=240, what="the game day's child to end")
    finally:
        c.close()
    assert row["state"] == "exit 0", (root / ".healer" / "gamedays" / row["name"] / "output.log").read_text()[-2000:]
    [ev] = store.events(kinds=["console.gameday_started"])
    assert ev.payload["actor"] == "operator:gd" and ev.payload["scenario"] == "stray-file"
    listed = tc.get("/gamedays", headers={"Accept": "application/json"}).json()["reports"]
    assert listed[0]["name"] == row["name"] and "report.html" in listed[0]["files"] and listed[0]["status"].startswith("completed")
