"""What the dispatcher writes about an ending: an exit's signature, the needs-human comment's proposals, a failed
launch's attempt. Small pure pieces whose every branch a mutation can flip unseen by a game day (issue 41)."""

from __future__ import annotations

from healer.core import fleet as fleet_rules
from healer.core.dispatch import Stop
from healer.fleet.dispatch_stop import evidence
from healer.records import Attempt, Proposal
from tests.fleet.conftest import scripted_policy


def test_an_exits_signature_names_what_ended_it_and_a_clean_exit_has_none():
    sig = fleet_rules.signature
    assert sig(0) is None  # a clean exit without a result file is not "killed: signal 0"
    assert sig(None).startswith("lost")
    assert (sig(-9), sig(-15), sig(-64)) == ("killed: SIGKILL", "killed: SIGTERM", "killed: signal 64")
    assert (sig(1), sig(3)) == ("exit 1", "exit 3")
    assert sig(74).startswith("host_trouble: exit 74")
    end = fleet_rules.agent_end_state
    assert (end(0), end(3), end(-9), end(None)) == ("exited", "exited", "lost", "lost")


def _prop(n: int, state: str, log: str = "") -> Proposal:
    return Proposal(id=n, ticket_id="T-1", branch="healer/T-1", commit=f"{n:040d}", state=state, created_at=float(n),
                    decided_at=float(n) + 0.5 if state != "open" else None, gate_log=log)


def test_the_needs_human_comment_lists_every_attempt_and_exactly_the_rejected_proposals():
    atts = [Attempt(1, "T-1", "launch", 0.0, "T-1-01", 1.0, 1, "pytest: 1 failed", "s1", "a" * 40),
            Attempt(2, "T-1", "resume", 2.0, "T-1-01", 3.0, -9, None, "s2", "b" * 40),
            Attempt(3, "T-1", "replay", 4.0, "T-1-02")]
    props = [_prop(4, "rejected", "gate tests: exit 1"), _prop(5, "merged"), _prop(6, "open"), _prop(7, "rejected")]
    body = evidence(Stop("T-1", "needs_human", "launch_budget", "5 launches"), atts, props, 20)
    lines = body.splitlines()
    assert lines[0] == "healer: launch budget exhausted — 5 launches. Ticket moved to needs_human."
    assert "Attempts (3):" in lines
    assert [ln.split(" run=")[0].split(" ", 2)[2] for ln in lines if ln[:2] in ("1.", "2.", "3.")] == \
        ["launch", "resume", "replay"]
    assert "exit=1 signature=pytest: 1 failed" in body and "exit=killed(SIGKILL)" in body and "exit=running" in body
    listed = [ln for ln in lines if ln.startswith("- #")]
    assert [ln.split()[1] for ln in listed] == ["#4", "#7"]  # neither the merged nor the open one
    assert "Rejected proposals (2):" in lines


def test_a_launch_that_cannot_start_is_a_failed_attempt_with_exit_70_and_the_ticket_back_in_the_queue(fleet_factory):
    pol = scripted_policy()
    pol = pol.model_copy(update={"fleet": pol.fleet.model_copy(update={"loop_command": ["/nonexistent/healer-loop"]})})
    f = fleet_factory(pol)
    f.add("T-1")
    f.d.tick()
    [att] = f.store.attempts("T-1")
    assert att.exit_code == 70 and att.failure_signature.startswith("launch_failed"), att
    assert att.ended_at is not None and f.state("T-1") == "queued"
    [ev] = f.events("dispatch.launch_failed", "T-1")
    assert ev.payload["argv"] == ["/nonexistent/healer-loop"] and ev.payload["error"]


def test_a_clean_exit_that_committed_nothing_is_requeued_never_proposed_as_mains_own_commit(fleet_factory):
    """The evidence of work is a commit main does not hold yet, read from git (issue 41): a real agent that exits 0
    without committing leaves its branch at main's commit, and its ticket goes back to the queue with that said; it
    is never proposed and merged as "already on main" (a ticket done with no work)."""
    f = fleet_factory(scripted_policy(max_launches=1))
    f.add("T-1", "noop")
    f.add("T-2", "success")
    base = f.main_head()
    assert sorted(t for t, _kind in f.d.tick().launched) == ["T-1", "T-2"]
    f.settle()
    f.d.tick()  # reaps both
    assert f.state("T-1") != "done" and f.store.proposals("T-1") == []
    moved = [e.payload for e in f.events("ticket.moved", "T-1") if e.payload.get("from") == "in_progress"]
    assert moved and moved[0]["to"] == "queued" and "exited 0 with no new commit" in moved[0]["reason"]
    [att] = f.store.attempts("T-1")
    assert att.exit_code == 0 and att.head == base  # its HEAD recorded as it was: the main it started from
    assert [p.state for p in f.store.proposals("T-2")] in (["open"], ["merged"])  # real work is still proposed
