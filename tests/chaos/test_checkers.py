"""Checkers over hand-made histories: each verdict and the message naming the broken expectation."""

from __future__ import annotations

from chaos.checkers import STANDARD, History, run_checks
from chaos.engine.base import Result, finish
from chaos.scenario import Scenario
from chaos.scenario_parts import Checker
from healer.records import Event, Intent, Ticket


def ev(i, at, kind, subject="", **payload):
    return Event(i, at, kind, subject, payload)


def h(events, **kw):
    return History(events, start=0.0, end=100.0, **kw)


def check(spec, hist):
    return run_checks([Checker.model_validate(spec)], hist)[0]


def test_state_path_is_a_subsequence_ending_in_the_last_state():
    evs = [ev(1, 0, "ticket.created", "T-1", state="queued"), ev(2, 1, "ticket.moved", "T-1", **{"from": "queued", "to": "in_progress"}),
           ev(3, 2, "ticket.moved", "T-1", **{"from": "in_progress", "to": "queued"}),
           ev(4, 3, "ticket.moved", "T-1", **{"from": "queued", "to": "needs_human"})]
    tickets = {"T-1": Ticket("T-1", "t", "needs_human")}
    assert check({"ticket_states": {"T-1": ["queued", "in_progress", "needs_human"]}}, h(evs, tickets=tickets)).ok
    bad = check({"name": "done", "ticket_states": {"T-1": ["queued", "done"]}}, h(evs, tickets=tickets))
    assert not bad.ok and "expectation 'done' broken" in bad.message and "final needs_human" in bad.message


def test_count_bounds_and_payload_filter():
    evs = [Event(i, i, "dispatch.launched", "T-1", {"kind": "launch"}) for i in range(1, 7)]
    c = check({"count": {"kind": "dispatch.launched", "subject": "T-1", "max": 5}}, h(evs))
    assert not c.ok and "at most 5, got 6" in c.message
    assert check({"count": {"kind": "dispatch.*", "payload": {"kind": "launch"}, "equals": 6}}, h(evs)).ok


def test_two_live_agents_on_one_ticket_is_caught():
    evs = [ev(1, 0, "chaos.proc.started", "a-1", ticket="T-1"), ev(2, 5, "chaos.proc.started", "a-2", ticket="T-1")]
    c = check({"invariant": "one_live_agent_per_ticket"}, h(evs))
    assert not c.ok and "2 live agents on T-1" in c.message
    evs.insert(1, ev(9, 4, "chaos.proc.ended", "a-1", ticket="T-1"))
    assert check({"invariant": "one_live_agent_per_ticket"}, h(evs)).ok


def test_notifications_per_window():
    evs = [ev(1, 0, "notify.sent", "k"), ev(2, 10, "notify.sent", "k"), ev(3, 20, "notify.sent", "j")]
    c = check({"notifications": {"key": "*", "max_per_window": 1, "window": "1m"}}, h(evs))
    assert not c.ok and "2 notifications for 'k'" in c.message
    assert check({"notifications": {"key": "*", "max_per_window": 1, "window": "5s"}}, h(evs)).ok


def test_intents_and_files_and_leases():
    open_intent = Intent(1, "drop_label", "T-1", "begun", {}, "supervisor", "", 0, 0)
    assert not check({"invariant": "intents_settled"}, h([], intents=[open_intent])).ok
    # killed with it in flight and the run over before a tick came back: not yet judged; a tick after: judged
    crash = [ev(1, 5, "supervisor.tick", "supervisor"), ev(2, 10, "chaos.crash", "supervisor")]
    c = check({"invariant": "intents_settled"}, h(crash, intents=[open_intent]))
    assert c.ok and "not yet judged" in c.message
    assert not check({"invariant": "intents_settled"}, h([*crash, ev(3, 70, "supervisor.tick", "supervisor")],
                                                          intents=[open_intent])).ok
    assert not check({"invariant": "intents_settled"}, h([ev(2, 10, "chaos.crash", "dispatcher")], intents=[open_intent])).ok
    extra = {"files_before": {"a.txt": "x", "b.txt": "y"}, "files_after": {"a.txt": "x"}, "quarantined": {"q/b.txt": "y"}}
    assert check({"invariant": "no_user_file_deleted"}, h([], extra=extra)).ok
    extra["quarantined"] = {}
    c = check({"invariant": "no_user_file_deleted"}, h([], extra=extra))
    assert not c.ok and "b.txt" in c.message
    leases = [ev(1, 0, "lease.acquired", "supervisor", holder="a"), ev(2, 1, "lease.taken_over", "supervisor", to="b", expired=False, holder_dead=False)]
    assert not check({"invariant": "one_lease_holder"}, h(leases)).ok


def test_within_and_never_after():
    evs = [ev(1, 0, "chaos.fault", "x", fault="red_main"), ev(2, 200, "notify.sent", "main_red:main")]
    assert check({"within": {"kind": "notify.sent", "after": {"kind": "chaos.fault"}, "max": "5m"}}, h(evs)).ok
    c = check({"within": {"kind": "notify.sent", "after": {"kind": "chaos.fault"}, "max": "1m"}}, h(evs))
    assert not c.ok and "expected within 60s" in c.message
    evs2 = [ev(1, 0, "main.red"), ev(2, 5, "dispatch.launched", "T-1"), ev(3, 9, "main.green"), ev(4, 10, "dispatch.launched", "T-2")]
    assert not check({"never_after": {"after": {"kind": "main.red"}, "until": {"kind": "main.green"}, "never": {"kind": "dispatch.launched"}}}, h(evs2)).ok


# -- the general promises every simulated run is held to (chaos/invariants.py) --------------------------------------

def mv(i, at, tid, frm, to, actor="dispatch"):
    return ev(i, at, "ticket.moved", tid, **{"from": frm, "to": to, "actor": actor})


def launched(i, at, tid, n):
    return [ev(i, at, "dispatch.launched", tid, attempt=n), ev(i + 1, at, "attempt.started", tid, attempt=n)]


POLICY = {"max_launches": 2, "allowed": ["stop_agent", "requeue_ticket"], "max_actions_per_tick": 2,
          "rate_limits": {"stop_agent": [1, 3600.0]}}


def test_ticket_moves_must_follow_the_lifecycle_from_the_state_before():
    good = [ev(1, 0, "ticket.created", "T-1", state="queued"), mv(2, 1, "T-1", "queued", "in_progress")]
    tickets = {"T-1": Ticket("T-1", "t", "in_progress")}
    assert check({"invariant": "ticket_moves_legal"}, h(good, tickets=tickets)).ok
    skipped = check({"invariant": "ticket_moves_legal"}, h([*good, mv(3, 2, "T-1", "queued", "needs_human")]))
    assert not skipped.ok and "T-1 moved queued -> needs_human" in skipped.message and "but it was in_progress" in skipped.message
    illegal = check({"invariant": "ticket_moves_legal"}, h([*good, mv(3, 2, "T-1", "in_progress", "done")]))
    assert not illegal.ok and "not a transition of the lifecycle" in illegal.message
    drift = check({"invariant": "ticket_moves_legal"}, h(good, tickets={"T-1": Ticket("T-1", "t", "review")}))
    assert not drift.ok and "T-1 is review at the end, but its last move took it to in_progress" in drift.message


def test_a_launch_needs_a_ticket_in_progress_and_no_pause_and_no_red_main():
    start = [ev(1, 0, "ticket.created", "T-1", state="queued"), mv(2, 1, "T-1", "queued", "in_progress")]
    assert check({"invariant": "launch_only_in_progress"}, h([*start, *launched(3, 2, "T-1", 1)])).ok
    escalated = [*start, mv(3, 2, "T-1", "in_progress", "needs_human"), *launched(4, 3, "T-1", 1)]
    c = check({"invariant": "launch_only_in_progress"}, h(escalated))
    assert not c.ok and "dispatch.launched on T-1 at +3s while it was needs_human" in c.message
    paused = [ev(1, 0, "dispatch.paused", "dispatch.paused", value=True), *launched(2, 5, "T-1", 1)]
    c = check({"invariant": "no_launch_while_held"}, h(paused))
    assert not c.ok and "while dispatch was paused" in c.message
    lifted = [ev(1, 0, "dispatch.paused", "dispatch.paused", value=True),
              ev(2, 1, "dispatch.resumed_dispatch", "dispatch.paused", value=False), *launched(3, 5, "T-1", 1)]
    assert check({"invariant": "no_launch_while_held"}, h(lifted)).ok
    red = [ev(1, 0, "main.red", "main"), ev(2, 5, "proposal.merged", "T-1", proposal=1)]
    c = check({"invariant": "no_launch_while_held"}, h(red))
    assert not c.ok and "merged at +5s while main was red" in c.message


def test_launches_within_the_budget_until_a_human_gives_a_fresh_one():
    evs = [*launched(1, 0, "T-1", 1), *launched(3, 10, "T-1", 2), ev(5, 11, "attempt.infra", "T-1", attempt=2),
           *launched(6, 20, "T-1", 3)]
    hist = h(evs, extra={"policy": POLICY})
    assert check({"invariant": "launches_within_budget"}, hist).ok  # the host's failure (attempt 2) costs nothing
    over = h([*evs, *launched(8, 30, "T-1", 4)], extra={"policy": POLICY})
    c = check({"invariant": "launches_within_budget"}, over)
    assert not c.ok and "T-1 got attempt #4 at +30s, the 3th counted (retry.max_launches 2" in c.message
    fresh = [*evs, mv(8, 25, "T-1", "needs_human", "queued", actor="human"), *launched(9, 30, "T-1", 4)]
    assert check({"invariant": "launches_within_budget"}, h(fresh, extra={"policy": POLICY})).ok


def test_a_spent_budget_reaches_needs_human_and_only_a_human_takes_it_out():
    good = [ev(1, 0, "ticket.created", "T-1", state="queued"), mv(2, 1, "T-1", "queued", "needs_human"),
            ev(3, 1, "dispatch.budget_exhausted", "T-1", to="needs_human"), ev(4, 1, "dispatch.tick"),
            mv(5, 9, "T-1", "needs_human", "queued", actor="human")]
    assert check({"invariant": "escalations_reach_needs_human"}, h(good)).ok
    unmoved = [ev(1, 0, "ticket.created", "T-1", state="queued"),
               ev(2, 1, "dispatch.budget_exhausted", "T-1", to="needs_human"), ev(3, 1, "dispatch.tick")]
    c = check({"invariant": "escalations_reach_needs_human"}, h(unmoved))
    assert not c.ok and "T-1's budget ran out at +1s but the pass ended without moving it to needs_human" in c.message
    own = [*good[:4], mv(5, 9, "T-1", "needs_human", "queued", actor="dispatch")]
    c = check({"invariant": "escalations_reach_needs_human"}, h(own))
    assert not c.ok and "T-1 left needs_human for queued at +9s by healer (dispatch)" in c.message


def test_intents_journaled_in_order_on_the_whitelist_within_the_limits():
    def intent(i, at, iid, kind, action="stop_agent", batch="tick-1Z-sup"):
        return ev(i, at, f"intent.{kind}", "T-1", intent=iid, action=action, params={"_batch": batch})

    rows = [Intent(1, "stop_agent", "T-1", "done", {}, "supervisor", "", 0, 0)]
    good = [intent(1, 0, 1, "planned"), intent(2, 0, 1, "begun"), ev(3, 0, "remedy.done", "T-1", intent=1),
            intent(4, 0, 1, "done")]
    hist = h(good, intents=rows, extra={"policy": POLICY})
    assert check({"invariant": "intents_journaled"}, hist).ok and check({"invariant": "remedies_within_limits"}, hist).ok
    late = [intent(1, 0, 1, "begun"), intent(2, 0, 1, "planned"), intent(3, 0, 1, "done")]
    c = check({"invariant": "intents_journaled"}, h(late, intents=rows))
    assert not c.ok and "intent #1 (stop_agent): intent.begun at +0s after nothing" in c.message
    unbegun = [intent(1, 0, 1, "planned"), intent(2, 0, 1, "done")]  # an effect never marked begun: unrecoverable
    c = check({"invariant": "intents_journaled"}, h(unbegun, intents=rows))
    assert not c.ok and "intent #1 (stop_agent): intent.done at +0s after intent.planned" in c.message
    c = check({"invariant": "intents_journaled"}, h(good, intents=[Intent(1, "stop_agent", "T-1", "begun", {}, "s", "", 0, 0)]))
    assert not c.ok and "intent #1 stop_agent is begun in the journal, its last event says done" in c.message
    banned = [intent(1, 0, 1, "planned", action="quarantine_file"), intent(2, 0, 1, "aborted", action="quarantine_file")]
    c = check({"invariant": "intents_journaled"}, h(banned, extra={"policy": POLICY}))
    assert not c.ok and "plans quarantine_file, not in remediation.allowed" in c.message
    wide = [intent(i, 0, i, "planned", action="requeue_ticket") for i in (1, 2, 3)]
    c = check({"invariant": "remedies_within_limits"}, h(wide, extra={"policy": POLICY}))
    assert not c.ok and "3 actions planned in one tick (tick-1Z-sup), max_actions_per_tick 2" in c.message
    again = [*good, intent(5, 600, 2, "planned", batch="tick-2Z-sup"), intent(6, 600, 2, "begun", batch="tick-2Z-sup")]
    rows2 = [*rows, Intent(2, "stop_agent", "T-1", "done", {}, "supervisor", "", 600, 600)]
    c = check({"invariant": "remedies_within_limits"}, h(again, intents=rows2, extra={"policy": POLICY}))
    assert not c.ok and "stop_agent begun at +600s (intent #2) with 1 already begun in the 3600s before" in c.message


def test_a_tick_reports_what_it_did():
    evs = [*launched(1, 0, "T-1", 1), ev(3, 0, "dispatch.tick", launched=1, merged=0, rejected=0),
           ev(4, 30, "dispatch.tick", launched=0, merged=0, rejected=0)]
    assert check({"invariant": "ticks_report_their_work"}, h(evs)).ok
    c = check({"invariant": "ticks_report_their_work"}, h([*evs, ev(5, 60, "dispatch.tick", launched=2)]))
    assert not c.ok and "dispatch.tick at +60s (event #5) says launched 2, its pass recorded 0" in c.message
    planned = ev(6, 90, "intent.planned", "T-1", intent=1, action="stop_agent", params={"_batch": "tick-9Z-sup"})
    said = ev(7, 90, "supervisor.tick", "supervisor", holder="sup", outcomes=[])
    c = check({"invariant": "ticks_report_their_work"}, h([planned, said]))
    assert not c.ok and "reports no action, its tick journaled ['stop_agent']" in c.message


def test_every_simulated_run_is_held_to_the_standard_invariants():
    """The engine adds the standard invariants a scenario does not name (not only `gameday run` or the explorer): a
    launch on an escalated ticket fails a game day whose own expectations never mention launches."""
    sc = Scenario.model_validate({"name": "x", "mode": "simulated", "duration": "1h", "fleet": {"tickets": [{"id": "T-1"}]},
                                  "expect": [{"invariant": "intents_settled"}, {"tickets": {"match": "T-*", "min": 1}}]})
    tickets = {"T-1": Ticket("T-1", "t", "needs_human")}
    bad = h([ev(1, 0, "ticket.created", "T-1", state="queued"), mv(2, 1, "T-1", "queued", "needs_human"),
             *launched(3, 2, "T-1", 1)], tickets=tickets)
    r = finish(Result(sc, "passed"), bad)
    names = [c.name for c in r.checks]
    assert names.count("invariant(intents_settled)") == 1 and len(names) == 2 + len(STANDARD) - 1
    assert r.status == "failed" and [c.name for c in r.failures] == ["invariant(launch_only_in_progress)"]
    assert r.failures[0].message.startswith("expectation 'invariant(launch_only_in_progress)' broken: dispatch.launched on T-1")
    off = finish(Result(sc, "passed", disabled=True), bad)  # a disabled run answers for its disable_breaks: only
    assert off.status == "passed" and len(off.checks) == 2


def test_an_escalation_leaves_its_label_comment_and_page():
    spent = [ev(1, 0, "ticket.created", "T-1", state="queued", labels=[]), ev(2, 1, "ticket.labeled", "T-1", label="needs-human"),
             ev(3, 1, "ticket.commented", "T-1"), mv(4, 1, "T-1", "queued", "needs_human"),
             ev(5, 1, "dispatch.budget_exhausted", "T-1", to="needs_human"), ev(6, 1, "notify.sent", "needs_human:T-1"),
             ev(7, 1, "dispatch.tick")]
    assert check({"invariant": "escalations_leave_evidence"}, h(spent)).ok
    silent = [e for e in spent if e.kind != "notify.sent"]
    c = check({"invariant": "escalations_leave_evidence"}, h(silent))
    assert not c.ok and "dispatch.budget_exhausted on T-1 at +1s: its pass left no page" in c.message
    esc = [ev(1, 0, "ticket.created", "T-2", state="in_progress", labels=[]),
           ev(2, 5, "intent.begun", "T-2", intent=4, action="escalate"), ev(3, 5, "ticket.labeled", "T-2", label="needs-human"),
           ev(4, 5, "intent.done", "T-2", intent=4, action="escalate")]
    c = check({"invariant": "escalations_leave_evidence"}, h(esc, intents=[Intent(4, "escalate", "T-2", "done", {}, "s", "", 5, 5)]))
    assert not c.ok and "escalate (intent #4) of T-2 done at +5s without its comment" in c.message


def test_a_pass_that_failed_on_healers_own_code_fails_every_game_day():
    """The daemons journal a failed pass and go on (healer/fleet/failed_pass.py); a game day must not pass over a
    supervisor whose every tick raised TypeError. A failure of the world (OSError, git) is a fault's story."""
    world = [ev(1, 5, "dispatch.error", "dispatch", error="OSError: [Errno 28] No space left on device")]
    assert check({"invariant": "no_internal_error"}, h(world)).ok
    ours = world + [ev(2, 30, "supervisor.error", "supervisor", error="TypeError: 'NoneType' object is not iterable")]
    c = check({"invariant": "no_internal_error"}, h(ours))
    assert not c.ok and "1 pass(es) failed on healer's own code" in c.message and "TypeError" in c.message


def test_within_and_never_say_the_payload_filter_they_counted_with():
    """Issue 41 item 4: 'expected at least 1, got 0' beside seven such events in the timeline is a riddle; every
    selecting checker names the subject and the payload filter, and `within` says how many the filter left out."""
    evs = [ev(i, i * 10, "ticket.moved", "S-1", to="queued") for i in range(1, 8)]
    c = check({"within": {"kind": "ticket.moved", "subject": "S-1", "payload": {"to": "needs_human"}, "max": "1h"}}, h(evs))
    assert not c.ok and "no ticket.moved about S-1 with payload {to: needs_human} event" in c.message
    assert "7 without the payload filter" in c.message
    n = check({"never": {"kind": "ticket.moved", "subject": "S-1", "payload": {"to": "queued"}}}, h(evs))
    assert not n.ok and "7 ticket.moved about S-1 with payload {to: queued} event(s)" in n.message
