"""The dispatcher's step decisions, pure (healer/core/dispatch_steps.py): main's status, proposals in review, an ended
agent's attempt and its ticket, orphans. The shell's collaborators (healer/fleet/dispatch_merge.py, dispatch_reap.py)
gather, call these and apply; tests/fleet (main_red, merge_cas, crash, endings) prove the whole."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from healer import conventions as cv
from healer import lifecycle
from healer.core import dispatch_steps as steps
from healer.core import endings, hosts
from healer.core.fleet import GREEN, RED, UNKNOWN
from healer.fleet import gates, proposals, runtime

BRANCH = "main"


def view(prev=GREEN, head="c1", checked="c1", has_gates=True):
    return steps.MainView(prev=prev, head=head, checked=checked, has_gates=has_gates)


def decided(v, verdict, **kw):
    args = dict(now=100.0, branch=BRANCH, paused=False, paused_reason=None, red_since=None, pause_on_red=True)
    return steps.main_decided(v, verdict, "log", **{**args, **kw})


def sets(effects):
    return {e.key: e.value for e in effects if e.op == "set"}


# -- main's status ----------------------------------------------------------------------

def test_the_core_speaks_the_shells_words():
    assert (steps.PASS, steps.FAIL, UNKNOWN) == (gates.PASS, gates.FAIL, gates.UNKNOWN)
    assert (steps.WITHHELD, steps.DEFERRED) == (proposals.WITHHELD, proposals.DEFERRED)


def test_main_gates_run_only_on_a_commit_not_already_green():
    assert steps.main_step(view(has_gates=False), BRANCH) == steps.MainStep(False, verdict=steps.PASS)
    assert steps.main_step(view(), BRANCH) == steps.MainStep(False, status=GREEN)  # green on this very commit
    assert steps.main_step(view(prev=RED), BRANCH).run_gates  # red: every pass
    assert steps.main_step(view(head="c2"), BRANCH).run_gates  # main moved
    gone = steps.main_step(view(head=None, checked="c1"), BRANCH)
    assert not gone.run_gates and gone.verdict == UNKNOWN and gone.log == "branch main does not exist"


def test_a_gate_that_cannot_decide_blocks_only_with_fail_open_switched_off():
    assert steps.gate_verdict(UNKNOWN) == UNKNOWN
    assert steps.gate_verdict(UNKNOWN, fail_open=False) == steps.FAIL
    assert steps.gate_verdict(steps.PASS, fail_open=False) == steps.PASS


def test_red_main_pauses_pages_and_records_the_commit_checked():
    status, effects = decided(view(prev=GREEN, head="c2", checked="c1"), steps.FAIL)
    assert status == RED
    assert effects[0].op == "set" and effects[0].key == cv.MAIN_CHECKED and effects[0].value == "c2"
    s = sets(effects)
    assert s[cv.MAIN_STATUS] == RED and s[cv.DISPATCH_PAUSED] is True and s[cv.MAIN_RED_SINCE] == 100.0
    assert [e.key for e in effects if e.op == "notify"] == [cv.sentinel_key("main_red")]


def test_green_again_lifts_only_its_own_pause():
    _, own = decided(view(prev=RED, head="c3", checked="c2"), steps.PASS, paused=True,
                     paused_reason=cv.PAUSED_BY_MAIN_RED, red_since=40.0)
    assert sets(own)[cv.DISPATCH_PAUSED] is False
    _, other = decided(view(prev=RED, head="c3", checked="c2"), steps.PASS, paused=True, paused_reason="healer")
    assert cv.DISPATCH_PAUSED not in sets(other)


@given(prev=st.sampled_from([GREEN, RED, UNKNOWN]), verdict=st.sampled_from([steps.PASS, steps.FAIL, UNKNOWN]),
       head=st.sampled_from([None, "c1", "c2"]), checked=st.sampled_from([None, "c1", "c2"]), has_gates=st.booleans(),
       paused=st.booleans(), pause_on_red=st.booleans())
def test_main_decided_invariants(prev, verdict, head, checked, has_gates, paused, pause_on_red):
    v = view(prev=prev, head=head, checked=checked, has_gates=has_gates)
    status, effects = decided(v, verdict, paused=paused, pause_on_red=pause_on_red)
    s = sets(effects)
    # the commit checked is written exactly when it changed; main's colour exactly when it changed
    assert (cv.MAIN_CHECKED in s) == (head != checked) and s.get(cv.MAIN_CHECKED, head) == head
    assert (cv.MAIN_STATUS in s) == (status != prev) and s.get(cv.MAIN_STATUS, status) == status
    if verdict == UNKNOWN and has_gates:  # a gate that cannot decide neither starts nor ends a red period
        assert (status == RED) == (prev == RED)
    if not has_gates:
        assert status == GREEN
    if s.get(cv.DISPATCH_PAUSED) is True:  # only a new red pauses, only when it is the dispatcher's to pause
        assert status == RED and prev != RED and not paused and pause_on_red


# -- proposals --------------------------------------------------------------------------

def test_a_ticket_in_review_is_proposed_requeued_finished_gated_or_left():
    assert steps.review_step(None, "abc") == steps.PROPOSE
    assert steps.review_step(None, None) == steps.REQUEUE
    assert steps.review_step("merged") == steps.FINISH
    assert steps.review_step("open") == steps.GATE
    assert steps.review_step("rejected") == steps.NOTHING


def test_a_verdict_names_its_reasons_in_events():
    withheld = steps.verdict_events("T-1", 3, "abc", "withheld", "gates ran\nT-1 moved to needs_human")
    assert [(e.key, e.payload["why"]) for e in withheld] == [("proposal.withheld", ["T-1 moved to needs_human"])]
    assert [e.key for e in steps.verdict_events("T-1", 3, "abc", "deferred", "")] == ["proposal.deferred"]
    ev = steps.verdict_events("T-1", 3, "abc", "rejected", "x", conflict={"files": ["a.py"], "main": "m", "with": []},
                              guarded=".github/workflows")
    assert [e.key for e in ev] == ["proposal.conflict", "proposal.guarded_change"]
    assert ev[0].payload == {"proposal": 3, "main": "m", "files": ["a.py"], "with": []}
    assert ev[1].payload == {"proposal": 3, "commit": "abc", "why": ".github/workflows"}
    assert steps.verdict_events("T-1", 3, "abc", "merged", "ok") == []
    assert steps.verdict_step("merged") == steps.verdict_step("rejected") == steps.DECIDE


def test_only_an_open_proposal_of_a_ticket_still_in_review_is_wanted():
    assert steps.unwanted("T-1", 3, lifecycle.REVIEW, "open") is None
    assert steps.unwanted("T-1", 3, lifecycle.NEEDS_HUMAN, "open") == "T-1 moved to needs_human while its merge gates ran"
    assert steps.unwanted("T-1", 3, lifecycle.REVIEW, "rejected") == "proposal 3 is rejected now"
    assert steps.unwanted("T-1", 3, lifecycle.REVIEW, None) == "proposal 3 is gone now"


# -- reaping ----------------------------------------------------------------------------

def end(code, res=None, log="", **kw):
    return steps.attempt_end(code, res, log, **{"stopped": False, "launcher_died": False, **kw})


def test_an_ended_attempt_is_closed_with_the_best_evidence():
    assert end(0).signature is None and end(0).ending.kind == endings.CLEAN
    assert end(None, {"exit_code": 3, "failure_signature": "pytest: 2 failed"}).exit_code == 3
    assert end(None, {"exit_code": 3, "failure_signature": "pytest: 2 failed"}).signature == "pytest: 2 failed"
    assert end(1, {"gate_log_tail": ["a", "b"]}, "log").tail == "a\nb"
    assert end(1, None, "log").tail == "log"
    assert end(None).signature == "lost: process gone, no exit recorded"
    gone = end(None, launcher_died=True)  # vanished while its dispatcher was down: interrupted, a host event
    assert gone.signature.startswith("interrupted") and gone.ending.cause == endings.HOST_EVENT
    full = end(74, {"reason": "no space left on device"})
    assert full.ending.cause == endings.DISK_FULL and full.signature.startswith("infra: disk_full")
    assert end(74, {"reason": "no space left on device"}, infra_endings=False).ending.kind == endings.AGENT


@given(code=st.one_of(st.none(), st.integers(-15, 80)),
       res=st.one_of(st.none(), st.fixed_dictionaries({}, optional={
           "exit_code": st.one_of(st.none(), st.integers(0, 80)), "failure_signature": st.sampled_from(["", "x: y"]),
           "cause": st.sampled_from([None, endings.DISK_FULL, endings.STORE_UNAVAILABLE, "nonsense"]),
           "reason": st.sampled_from(["", "database is locked"])})),
       log=st.sampled_from(["", "healer: no space left on device"]), stopped=st.booleans(), died=st.booleans(),
       infra_on=st.booleans())
def test_attempt_end_invariants(code, res, log, stopped, died, infra_on):
    e = end(code, res, log, stopped=stopped, launcher_died=died, infra_endings=infra_on)
    assert (e.signature is None) == (e.exit_code == 0)  # a clean run and only a clean run has no failure signature
    if code is not None:
        assert e.exit_code == code  # the process's own exit code beats the result file's
    if not infra_on:
        assert not e.ending.infra
    if e.ending.infra and e.ending.cause != endings.HOST_EVENT:
        assert endings.is_infra(e.signature)  # counted by no budget


def test_the_ticket_moves_only_while_in_progress_under_that_attempt():
    assert steps.close_move(lifecycle.NEEDS_HUMAN, 1, 1, "a", 0, "abc", None) is None  # a human took it
    assert steps.close_move(lifecycle.IN_PROGRESS, 1, 2, "a", 0, "abc", None) is None  # a later attempt owns it
    assert steps.close_move(lifecycle.IN_PROGRESS, 2, 2, "a", 0, "abc", None).to == lifecycle.REVIEW
    assert steps.close_move(lifecycle.IN_PROGRESS, None, None, "a", 1, "abc", "exit 1").to == lifecycle.QUEUED


@given(live=st.booleans(), claim=st.sampled_from([None, "h1", "h2"]), shared=st.booleans())
def test_an_orphan_is_never_one_with_a_live_agent_nor_another_hosts_claim(live, claim, shared):
    ok = steps.orphan_candidate(live, claim, "h1", shared)
    assert not (ok and live)
    assert not (ok and shared and claim != "h1")
    assert ok == (not live and (not shared or claim == "h1"))


def test_only_an_exit_or_a_vanished_process_is_an_ending():
    assert steps.ended_code(runtime.EXITED, 3) == (True, 3)
    assert steps.ended_code(runtime.GONE, 3) == (True, None)  # vanished: no exit code to believe
    for state in (runtime.RUNNING, runtime.PAUSED, runtime.UNKNOWN):  # a runtime that cannot tell: not ended
        assert steps.ended_code(state, None) == (False, None)


def test_an_agent_recorded_ended_elsewhere_is_stopped_once_or_closed_once():
    assert steps.to_reap(False, "sup", False, False) is None  # another host's, or not launched by the dispatcher
    assert steps.to_reap(True, "sup", False, False) == steps.STOP_RECLAIMED
    assert steps.to_reap(True, "sup", True, False) == steps.CLOSE  # stopped already; its attempt still owed
    assert steps.to_reap(True, None, False, False) == steps.CLOSE
    assert steps.to_reap(True, None, False, True) is None  # closed already


def test_a_host_lease_is_held_until_it_expires_or_is_fenced():
    assert steps.lease_held("dispatch@h1:1", 10.0, 9.0, hosts.FENCED)
    assert not steps.lease_held("dispatch@h1:1", 10.0, 10.0, hosts.FENCED)
    assert not steps.lease_held(f"{hosts.FENCED}sup", 10.0, 9.0, hosts.FENCED)


def test_a_lease_left_by_another_unfenced_holder_means_it_died():
    assert steps.died_holding("dispatch@h1:1", "dispatch@h1:2", hosts.FENCED)
    assert not steps.died_holding("dispatch@h1:2", "dispatch@h1:2", hosts.FENCED)  # our own
    assert not steps.died_holding(None, "dispatch@h1:2", hosts.FENCED)  # never taken
    assert not steps.died_holding(f"{hosts.FENCED}sup", "dispatch@h1:2", hosts.FENCED)  # given up by the supervisor
