"""The console's pure views and its HTML rendering: records in, page data out; every attacker-written value escaped."""

from __future__ import annotations

import json

from healer.console import render, views
from healer.records import Agent, Event, Intent
from tests.synth import T0, ticket

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def ev(i: int, kind: str, subject: str, at: float = T0, **payload) -> Event:
    return Event(i, at, kind, subject, payload)


def test_board_groups_by_state_sorts_by_priority_filters_searches_and_limits_each_column():
    ts = [ticket(f"T-{i}", "queued" if i % 2 else "done") for i in range(1, 11)]
    ts[0] = ticket("T-1", "queued", blocked_by=("T-2",))
    b = views.board(ts)
    cols = {c["state"]: c for c in b["columns"]}
    assert cols["queued"]["count"] == 5 and cols["done"]["count"] == 5 and cols["blocked"]["count"] == 0
    assert b["total"] == 10 and ("T-1", "T-2") in b["edges"]
    assert [c["state"] for c in views.board(ts, state="done")["columns"]] == ["done"]
    found = views.board(ts, q="t-3")
    assert [c["id"] for col in found["columns"] for c in col["tickets"]] == ["T-3"]
    page = views.board(ts, state="queued", limit=2, offset=2)
    [col] = page["columns"]
    assert len(col["tickets"]) == 2 and col["more"] == 1 and col["count"] == 5


def test_ticket_page_has_each_transition_with_reason_and_actor_iterations_gates_and_spend():
    t = ticket("T-1", "in_progress")
    events = [ev(1, "ticket.moved", "T-1", **{"from": "queued", "to": "in_progress", "actor": "dispatch", "reason": "launch"}),
              ev(2, "ticket.moved", "T-1", **{"from": "in_progress", "to": "queued", "actor": "operator:bob", "reason": XSS})]
    run = [ev(3, "loop.iteration", "R-1", n=1, cost_usd=0.25, ticket="T-1", gates=[{"name": "tests", "outcome": "pass", "exit_code": 0}],
              verdict={"reason": "gates passed"}),
           ev(4, "loop.spend_counted", "R-1", usd=0.05)]
    d = views.ticket_page(t, attempts=[], proposals=[], comments=[], events=events, run_events=run, intents=[], agents=[])
    assert [(x["to"], x["actor"]) for x in d["transitions"]] == [("in_progress", "dispatch"), ("queued", "operator:bob")]
    assert d["spend_usd"] == 0.3 and d["iterations"][0]["gates"] == [{"name": "tests", "outcome": "pass", "exit_code": 0}]
    html = render.ticket(d, {"csrf": "c", "operator": "bob"})
    assert XSS not in html and render.e(XSS) in html


def test_agents_page_shows_loop_iteration_age_idle_and_spend():
    a = Agent("A-1", "T-1", "running", pid=1, run_id="R-1", started_at=T0, progress_at=T0 + 50)
    done = Agent("A-0", "T-2", "exited", run_id="R-0", started_at=T0, ended_at=T0 + 10, exit_code=0)
    rows = views.agents_page([done, a], [ev(1, "loop.iteration", "R-1", n=3, cost_usd=1.5), ev(2, "loop.spend_counted", "R-1", usd=0.5)],
                             T0 + 100)
    assert rows[0] == {"id": "A-1", "ticket": "T-1", "state": "running", "run": "R-1", "pid": 1, "iteration": 3, "age": 100.0,
                       "idle": 50.0, "spend_usd": 2.0, "exit_code": None}
    assert rows[1]["age"] == 10.0 and rows[1]["idle"] is None


def test_pages_track_send_resolve_and_acknowledgement_a_new_send_reopens():
    evs = [ev(1, "notify.sent", "main_red:main", severity="critical", text="main is red"),
           ev(2, "notify.acked", "main_red:main", actor="operator:bob"),
           ev(3, "notify.sent", "escalate:T-1", severity="critical", text=XSS),
           ev(4, "notify.resolved", "escalate:T-1")]
    p = {r["key"]: r for r in views.pages(evs)}
    assert p["main_red:main"]["acked_by"] == "operator:bob" and p["escalate:T-1"]["resolved_at"] == T0
    again = {r["key"]: r for r in views.pages([*evs, ev(5, "notify.sent", "main_red:main", at=T0 + 1, severity="critical")])}
    assert again["main_red:main"]["acked_at"] is None and again["main_red:main"]["sends"] == 2
    html = render.supervisor(None, "no store", [], views.pages(evs), {"csrf": "c"})
    assert XSS not in html and "acknowledged by operator:bob" in html


def test_cost_per_ticket_per_day_and_per_agent_cli_from_the_spend_events():
    started = [ev(1, "loop.started", "R-1", preset="claude", agent=["claude"]),
               ev(2, "loop.started", "R-2", preset="command", agent=["/usr/bin/python3", "/x/fake_agent.py"])]
    spend = [ev(3, "loop.iteration", "R-1", at=T0, cost_usd=1.0, ticket="T-1"),
             ev(4, "loop.iteration", "R-2", at=T0 + 86400, cost_usd=0.5),
             ev(5, "loop.spend_counted", "R-1", at=T0 + 86400, usd=0.25),
             ev(6, "loop.iteration", "R-2", at=T0, cost_usd=True)]  # not a number of dollars: not counted
    c = views.cost(spend, started, {"R-2": "T-2"})
    assert c["total_usd"] == 1.75
    assert c["per_cli"] == [{"name": "claude", "usd": 1.25}, {"name": "fake_agent.py", "usd": 0.5}]
    assert c["per_ticket"] == [{"name": "T-1", "usd": 1.25}, {"name": "T-2", "usd": 0.5}]
    assert [r["name"] for r in c["per_day"]] == [views.day_of(T0 + 86400), views.day_of(T0)]


def test_sentinels_are_ok_firing_or_unknown_from_the_plan_findings():
    fs = [{"kind": "main_red", "status": "firing", "since": T0}, {"kind": "spend_rate", "status": "unknown", "since": T0}]
    s = {r["name"]: r["state"] for r in views.sentinels(fs)}
    assert s == {"dispatch_frozen": "ok", "pool_saturated": "ok", "no_closes": "ok", "main_red": "firing",
                 "supervisor_silent": "ok", "spend_rate": "unknown"}


def test_the_live_feed_sends_small_json_of_plain_values_only():
    e = ev(9, "ticket.moved", "T-1", **{"from": "queued", "to": "done", "actor": "x", "reason": "r" * 1000, "evidence": {"big": 1}})
    out = views.live_event(e)
    assert out["to"] == "done" and len(out["reason"]) == 300 and "evidence" not in out
    json.dumps(out)


def test_board_and_cards_escape_titles_labels_and_ids():
    t = ticket("T-1", "queued", labels={XSS: T0}, blocked_by=("T-2",))
    t = type(t)(**{**t.__dict__, "title": XSS})
    html = render.board(views.board([t]), {"csrf": "c"})
    assert "<script>" not in html and "onerror=alert" not in html.replace("onerror=alert(1)&gt;", "")
    assert render.e(XSS) in html


def test_intent_rows_carry_the_verification_and_the_operator():
    i = Intent(7, "requeue_ticket", "T-1", "done", {"params": {"why": "operator:bob from the console"}}, "operator:bob", "console",
               T0, T0, {"status": "done", "reason": "ok"})
    row = views.intent_row(i)
    assert (row["actor"], row["status"], row["verification"], row["why"]) == ("operator:bob", "done", "ok",
                                                                              "operator:bob from the console")
