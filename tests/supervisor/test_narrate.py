"""The controller's lines (healer/narrate.py) and the spend fold (healer/spend.py): pure functions of events, and
`healer journal` without its ticks unless asked (issue 43 item 3)."""

from __future__ import annotations

import json
import math

import pytest

from healer import narrate, spend
from healer.records import Event
from healer.store import open_store
from tests.conftest import healer, make_repo

AT = 1_796_627_412.0  # 2026-12-07T07:10:12+00:00
STAMP = "2026-12-07T07:10:12+00:00 "


def ev(kind: str, subject: str = "", payload: dict | None = None, id: int = 1, at: float = AT) -> Event:
    return Event(id, at, kind, subject, payload or {})


@pytest.mark.parametrize("kind,subject,payload,line", [
    ("ticket.moved", "W-1", {"from": "queued", "to": "in_progress", "event": "launch", "reason": "launch",
                             "actor": "dispatch"}, "ticket W-1: queued -> in_progress (launch) by dispatch"),
    ("ticket.moved", "W-1", {"from": "in_progress", "to": "queued", "event": "requeue", "actor": "supervisor"},
     "ticket W-1: in_progress -> queued (requeue) by supervisor"),  # no reason: the lifecycle event says why
    ("ticket.created", "T-9", {"title": "Fix\nthe parser", "state": "queued", "actor": "human"},
     "ticket T-9: created queued: Fix the parser by human"),
    ("remedy.done", "T-1", {"action": "requeue_ticket", "intent": 7, "reason": "ok", "actor": "supervisor",
                            "params": {"why": "frozen_in_progress:T-1 (rule requeue-frozen)"}},
     "action requeue_ticket T-1: intent 7, done, verified (frozen_in_progress:T-1 (rule requeue-frozen)) by supervisor"),
    ("remedy.failed", "T-1", {"action": "stop_agent", "intent": 8, "reason": "verification failed: the effect is not "
                              "in place", "actor": "supervisor", "params": {}},
     "action stop_agent T-1: intent 8, failed: verification failed: the effect is not in place by supervisor"),
    ("remedy.refused", "T-1", {"action": "drop_label", "intent": None, "reason": "HALT file present", "actor": "repair"},
     "action drop_label T-1: no intent, refused: HALT file present by repair"),
    ("remedy.done", "T-3", {"action": "escalate", "intent": 9, "reason": "ok", "actor": "supervisor",
                            "params": {"why": "agent_stuck:T-3"}},
     "ESCALATED escalate T-3: intent 9, done, verified (agent_stuck:T-3) by supervisor"),
    ("notify.sent", "escalate:T-3", {"text": "escalated T-3: agent_stuck", "severity": "critical",
                                     "local": ["jsonl"], "owed": ["webhook:hooks.example"]},
     "page sent escalate:T-3 [critical]: escalated T-3: agent_stuck (to jsonl, webhook:hooks.example)"),
    ("notify.resolved", "main_red", {"owed": ["alertmanager:127.0.0.1:9093"]},
     "page resolved main_red (to alertmanager:127.0.0.1:9093)"),
    ("notify.expired", "main_red", {"notifier": "webhook:x", "reason": "undelivered at its expiry"},
     "page expired main_red: webhook:x (undelivered at its expiry)"),
    ("main.red", "main", {"commit": "0123456789abcdef"}, "main main red at 0123456789ab: dispatch pauses"),
    ("dispatch.paused", "dispatch.paused", {"value": True}, "dispatch paused"),
    ("adopt.registered", "A4242-99", {"pid": 4242, "cli": "claude", "rule": "loop-sh", "worktree": "/w/x"},
     "adopted loop A4242-99: pid 4242 (claude, rule loop-sh) in /w/x"),
    ("adopt.gone", "A4242-99", {"pid": 4242}, "adopted loop A4242-99: gone (pid 4242 ended or now another process)"),
])
def test_each_news_event_is_one_controller_line(kind, subject, payload, line):
    assert kind in narrate.KINDS
    assert narrate.line(ev(kind, subject, payload)) == STAMP + line


@pytest.mark.parametrize("kind", ["supervisor.tick", "dispatch.tick", "supervisor.skipped", "intent.planned",
                                  "lease.acquired", "loop.iteration", "agent.registered", "notify.delivered"])
def test_ticks_and_bookkeeping_say_nothing(kind):
    assert narrate.line(ev(kind, "x", {"a": 1})) is None
    assert kind not in narrate.KINDS


def test_a_resolve_owed_to_alertmanager_is_said_once_not_as_a_page_sent():
    assert narrate.line(ev("notify.sent", "resolved:main_red", {"resolved": "main_red", "severity": "info"})) is None


def test_a_long_reason_stays_one_short_line():
    text = narrate.line(ev("ticket.moved", "T-1", {"from": "review", "to": "queued", "actor": "dispatch",
                                                    "reason": "gate failed:\n" + "x" * 5000}))
    assert text is not None and "\n" not in text and len(text) < 300


def test_the_spend_fold_per_ticket_day_and_cli():
    evs = [ev("loop.started", "T-1-01", {"preset": "claude", "ticket": "T-1"}, 1),
           ev("loop.iteration", "T-1-01", {"cost_usd": 0.25, "ticket": "T-1", "day": "2026-12-06"}, 2),
           ev("loop.iteration", "T-1-01", {"cost_usd": 1.5, "ticket": "T-1", "day": "2026-12-07"}, 3),
           ev("loop.spend_counted", "T-1-01", {"usd": 0.01}, 4),  # no ticket in it: the run's
           ev("loop.started", "R-2", {"preset": "codex"}, 5),  # an older healer: no ticket in loop.started
           ev("loop.spend_counted", "R-2", {"usd": 0.5}, 6),  # before the run named its ticket: no ticket's
           ev("loop.iteration", "R-2", {"cost_usd": 0.002, "ticket": "T-2", "day": "2026-12-07"}, 7),
           ev("loop.spend_counted", "R-2", {"usd": 0.003}, 8),  # now it is T-2's
           ev("loop.started", "R-3", {"preset": "made-up"}, 9),
           ev("loop.iteration", "R-3", {"cost_usd": 2.0, "day": "2026-12-07"}, 10)]
    led = spend.fold(evs)
    assert led.by_ticket == pytest.approx({"T-1": 1.76, "T-2": 0.005})
    assert led.by_cli == pytest.approx({"claude": 1.76, "codex": 0.505, "other": 2.0})  # a bounded label set
    assert led.by_day["2026-12-06"] == pytest.approx(0.25)
    assert led.total == pytest.approx(4.265)
    assert led.iterations == {"T-1": 2, "T-2": 1} and led.clis == {"T-1": {"claude"}, "T-2": {"codex"}}
    assert led.top_tickets(1) == [("T-1", pytest.approx(1.76))]
    out = spend.summary(led)
    assert out["by_day"][-1]["by_cli"] == pytest.approx({"claude": 1.51, "codex": 0.505, "other": 2.0})


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, True, "3", None])
def test_a_spend_that_is_no_positive_number_counts_as_nothing(bad):
    led = spend.fold([ev("loop.iteration", "R", {"cost_usd": bad, "ticket": "T-1"})])
    assert led.total == 0 and led.by_ticket == {}


def test_journal_hides_ticks_unless_asked(tmp_path):
    root = make_repo(tmp_path / "fleet")
    assert healer("init", "--root", str(root)).returncode == 0
    s = open_store(root)
    try:
        s.add_ticket("one", id="T-1")
        for _ in range(300):  # a log that is mostly ticks, as a day of `healer up` leaves it
            s.append("supervisor.tick", "", {"findings": 0})
            s.append("dispatch.tick", "", {"launched": 0})
        s.move_ticket("T-1", "closed", actor="human")
    finally:
        s.close()

    def kinds(*args: str) -> list[str]:
        r = healer("journal", "--json", "-C", str(root), *args)
        assert r.returncode == 0, r.stderr
        return [json.loads(x)["kind"] for x in r.stdout.splitlines()]

    default = kinds("-n", "3")  # the last 3 events that are not ticks, read past the 600 ticks
    assert default == ["fleet.init", "ticket.created", "ticket.moved"]
    assert not [k for k in kinds("-n", "-1") if k.endswith(".tick")]
    assert kinds("-n", "2", "--ticks") == ["dispatch.tick", "ticket.moved"]
    assert set(kinds("--kind", "supervisor.tick", "-n", "-1")) == {"supervisor.tick"}  # asked for by name
    human = healer("journal", "-C", str(root), "-n", "5")
    assert human.returncode == 0 and ".tick " not in human.stdout and "ticket.moved" in human.stdout
