"""Each of the dispatcher's collaborators (docs/fleet.md "How it is built") is built and used alone, given only what
its __init__ declares: a real git repository and a real store, no Dispatcher around it."""

from __future__ import annotations

from healer import conventions as cv
from healer import lifecycle
from healer.clock import VirtualClock, system
from healer.core import dispatch as core
from healer.core import dispatch_pass as P
from healer.fleet.dispatch_board import EffectApplier, MainRef, TicketMover, answerer
from healer.fleet.dispatch_merge import Merger
from healer.fleet.dispatch_stop import Stopper
from healer.fleet.gates import GateResult
from healer.fleet.ports import RealGit
from healer.store import keys, open_store
from tests.conftest import git, make_repo
from tests.fleet.conftest import gate, scripted_policy


class RedGates:
    """main's gates fail; a proposal is never gated here."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def main(self, root, policy, head, clock):
        self.ran.append(head)
        return GateResult("fail", "tests", "1 failed")

    def proposal(self, root, policy, p, clock, *, still_wanted=None):
        raise AssertionError("no proposal in this test")


def _store(tmp_path):
    root = make_repo(tmp_path / "fleet")
    (root / ".healer").mkdir(exist_ok=True)
    clock = VirtualClock()
    return root, clock, open_store(root, clock)


def test_the_ticket_mover_is_a_compare_and_set(tmp_path):
    _, _, store = _store(tmp_path)
    try:
        store.add_ticket("t", id="T-1")
        mover = TicketMover(store)
        assert not mover.move("T-1", lifecycle.IN_PROGRESS, "launch", expect=lifecycle.REVIEW)  # someone moved it
        assert store.ticket("T-1").state == lifecycle.QUEUED
        assert store.events(kinds=["dispatch.move_refused"], subject="T-1")
        assert mover.move("T-1", lifecycle.IN_PROGRESS, "launch", expect=lifecycle.QUEUED)
        assert store.ticket("T-1").state == lifecycle.IN_PROGRESS
    finally:
        store.close()


def test_the_merger_alone_turns_main_red_pauses_and_checks_each_commit_once_while_green(tmp_path):
    root, clock, store = _store(tmp_path)
    try:
        policy = scripted_policy(main_gates=[gate("tests", "pass")])
        gates = RedGates()
        merger = Merger(store, RealGit(), gates, policy, root, clock=clock, real=system(),
                        main_ref=MainRef(store, root, "main", None), mover=TicketMover(store),
                        effects=EffectApplier(store, policy), shared=None)
        head = git(root, "rev-parse", "main")
        assert merger.check_main() == "red"
        assert store.get_setting(keys.MAIN_STATUS) == "red" and store.get_setting(keys.DISPATCH_PAUSED) is True
        assert store.get_setting(keys.MAIN_CHECKED) == head
        assert merger.check_main() == "red" and gates.ran == [head, head]  # red: the gates run every pass
        assert merger.review() == ([], [])  # nothing in review
    finally:
        store.close()


def test_the_stopper_alone_moves_labels_comments_and_pages(tmp_path):
    _, _, store = _store(tmp_path)
    try:
        policy = scripted_policy()
        store.add_ticket("t", id="T-1")
        Stopper(store, policy, TicketMover(store)).stop(core.Stop("T-1", lifecycle.NEEDS_HUMAN, "launch_budget", "5 launches"))
        t = store.ticket("T-1")
        assert t.state == lifecycle.NEEDS_HUMAN and cv.NEEDS_HUMAN_LABEL in t.labels
        assert "launch budget exhausted" in store.comments("T-1")[0].body
        assert store.events(kinds=["dispatch.budget_exhausted"], subject="T-1")
    finally:
        store.close()


def test_every_step_of_the_pure_pass_has_a_collaborator_that_carries_it_out(fleet_factory):
    """A step the core yields that no collaborator answers would end every pass: each read and each effect of
    healer/core/dispatch_pass.py is routed (the reaper's lock is the Dispatcher's own, taken by `_drive`)."""
    f = fleet_factory(scripted_policy())
    routed = set(f.d.reaper.answers()) | set(f.d.merger.answers()) | set(f.d._answers())
    assert set(P.READS) | set(P.EFFECTS) <= routed, set(P.READS) | set(P.EFFECTS) - routed
    try:
        answerer({})(P.Reclaim())
    except TypeError as e:
        assert "Reclaim" in str(e)
    else:
        raise AssertionError("a step nobody answers was skipped")
