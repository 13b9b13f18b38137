"""The dispatcher's merge path: main's status (its gates), then each open proposal gated and merged or rejected.

`Merger` is the Dispatcher's collaborator (healer/fleet/dispatcher.py) for both: it gathers what the pure pass asks
(healer/core/dispatch_pass.py `check_main`, `review`) and carries out what it decides. main's gates run on main
(again whenever main moves, every pass while red); red pauses dispatch. A proposal is gated on its merge result (several hosts: pushed to the
shared repository) and merged or rejected; the verdict, the merged commit and the ticket's move to done are one
store transaction. Git's lock files a dispatcher killed mid-merge left are moved aside, never deleted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from healer import conventions as cv
from healer import failpoints, git, lifecycle, procs, switches
from healer.clock import Clock
from healer.core import dispatch_pass as P
from healer.core import dispatch_steps as steps
from healer.fleet import shared_main
from healer.fleet.dispatch_board import EffectApplier, MainRef, TicketMover, answerer, switches_now
from healer.fleet.ports import Gates, Git
from healer.fleet.proposals import MERGED
from healer.records import Proposal, Ticket
from healer.store import keys
from healer.store.base import Store

if TYPE_CHECKING:
    from healer.policy.schema import Policy

FP_MERGE_RECORDED = failpoints.declare("dispatch.merge_recorded", "healer/fleet/dispatch_merge.py: proposal marked merged and its "
                                       "commit on the ticket, ticket not yet done (one transaction: a crash here "
                                       "records none of it)")

branch_for, worktree_for = cv.branch_for, cv.worktree_for


class Merger:
    """main's status and the proposals: `check_main` (its gates, the pause on red) and `review` (each open proposal
    gated on its merge result, merged or rejected)."""

    def __init__(self, store: Store, git: Git, gates: Gates, policy: Policy, root: Path, *, clock: Clock, real: Clock,
                 main_ref: MainRef, mover: TicketMover, effects: EffectApplier, shared: str | None) -> None:
        self.store = store
        self.git = git
        self.gates = gates
        self.policy = policy
        self.root = root
        self.clock = clock  # decisions (main's red period) on the dispatcher's clock, virtual in tests
        self.real = real  # real processes (the gates) are waited for in real time
        self.main_ref = main_ref
        self.mover = mover
        self.effects = effects
        self.shared = shared

    def answers(self) -> dict[type, Callable[[Any], Any]]:
        """The pass's steps this collaborator answers (healer/fleet/dispatcher.py routes them)."""
        return {P.ReadMain: lambda _s: self.read_main(), P.RunMainGates: self.run_main_gates,
                P.ReadReviewing: lambda _s: tuple(self.store.tickets(states=[lifecycle.REVIEW])),
                P.ReadReview: lambda s: self.read_review(s.ticket), P.MoveStaleLocks: lambda _s: self._stale_main_locks(),
                P.Move: lambda s: self.mover.move(s.ticket, s.to, s.reason, expect=s.expect),
                P.Propose: lambda s: self.store.add_proposal(s.ticket, branch_for(s.ticket), s.head),
                P.GateProposal: self.gate, P.Withheld: self.withheld, P.Verdict: self.verdict,
                P.Finish: lambda s: self._done(s.ticket, s.proposal, s.merged_as),
                P.Apply: lambda s: self.effects.apply(s.effects)}

    def check_main(self) -> str:
        """main's status alone (the pass's `check_main`, healer/core/dispatch_pass.py): its gates, the pause on red."""
        return P.drive(P.check_main(self._snapshot(), self.policy), answerer(self.answers()))

    def review(self) -> tuple[list[str], list[str]]:
        """Each open proposal alone (the pass's `review`): the tickets merged and the tickets rejected."""
        merged, rejected = P.drive(P.review(), answerer(self.answers()))
        return list(merged), list(rejected)

    def _snapshot(self) -> P.PassSnapshot:
        return P.PassSnapshot(now=self.clock.now(), host="", machine=None, board=True, shared=bool(self.shared),
                              switches=switches_now())

    # -- reads --------------------------------------------------------------------------------------------------------
    def read_main(self) -> P.MainSeen:
        fleet = self.policy.fleet
        view = steps.MainView(prev=self.store.get_setting(keys.MAIN_STATUS, "unknown"),
                              head=self.git.rev(self.root, self.main_ref()),
                              checked=self.store.get_setting(keys.MAIN_CHECKED), has_gates=bool(fleet.main_gates))
        return P.MainSeen(view, self.clock.now(), bool(self.store.get_setting(keys.DISPATCH_PAUSED, False)),
                          self.store.get_setting(keys.DISPATCH_PAUSED_REASON), self.store.get_setting(keys.MAIN_RED_SINCE))

    def read_review(self, tid: str) -> P.ReviewSeen:
        props = self.store.proposals(tid)
        last = props[-1] if props else None
        return P.ReviewSeen(last, None if last else self._branch_head(tid))

    # -- effects ------------------------------------------------------------------------------------------------------
    def run_main_gates(self, step: P.RunMainGates) -> P.GateOutcome:
        res = self.gates.main(self.root, self.policy, step.head, self.real)
        return P.GateOutcome(res.outcome, res.tail(self.policy.fleet.evidence_lines), self.clock.now())

    def gate(self, step: P.GateProposal) -> P.GateOutcome:
        """Gate an open proposal on its merge result (several hosts: pushed to the shared repository); main advances
        on a pass, after the compare-and-set `unwanted` re-read right before it does."""
        t, last = step.ticket, step.proposal
        wanted = lambda t=t, p=last: self.unwanted(t, p)  # noqa: E731
        v = (shared_main.gate_shared(self.root, self.policy, last, self.real, self.shared, still_wanted=wanted) if self.shared
             else self.gates.proposal(self.root, self.policy, last, self.real, still_wanted=wanted))
        return P.GateOutcome(v.outcome, v.log, self.clock.now(), conflict=v.conflict, guarded=v.guarded,
                             main_after=v.main_after)

    def withheld(self, step: P.Withheld) -> None:
        # decided elsewhere while the gates ran (another host's dispatcher, a human): that first verdict stands
        self.store.decide_proposal(step.proposal.id, "rejected", step.log)
        self.effects.apply(step.events)

    def verdict(self, step: P.Verdict) -> str | None:
        """Record a verdict: the proposal's state after it."""
        # the proposal's verdict and, when merged, the ticket's merged_commit and its move to done in ONE store
        # transaction: a store lost between them (a PostgreSQL restart) left a review ticket whose work was on main
        # and whose proposal was no longer open, which the supervisor judged a zombie and closed (pg-restarts-real)
        with self.store.tx() if switches.enabled("merge_tx") else contextlib.nullcontext():
            # the state after is the store's, re-read as it records: a retried pass keeps its first decision
            held = self.store.decide_proposal(step.proposal.id, step.outcome, step.log)
            self.effects.apply(step.events)  # a conflict's reason and a guarded change named in events, not only in the log
            if held == MERGED:
                self._done(step.ticket, step.proposal, step.merged_as)
        return held

    def _branch_head(self, tid: str) -> str | None:
        """The commit of a ticket's work: its worktree's HEAD, else its branch's."""
        return self.git.rev(worktree_for(self.root, tid)) or self.git.rev(self.root, f"refs/heads/{branch_for(tid)}")

    def unwanted(self, t: Ticket, p: Proposal) -> str | None:
        """Compare-and-set before main advances: the ticket must still be in review with this proposal open."""
        if not switches.enabled("move_cas"):  # a game day proving the compare-and-set can fail
            return None
        now = self.store.ticket(t.id)
        if now.state != lifecycle.REVIEW:  # the proposal's state is read only for a ticket still in review
            return steps.unwanted(t.id, p.id, now.state, None)
        return steps.unwanted(t.id, p.id, now.state, self._proposal_state(t.id, p.id))

    def _proposal_state(self, tid: str, pid: int) -> str | None:
        return next((x.state for x in self.store.proposals(tid) if x.id == pid), None)

    def _done(self, t: Ticket, p: Proposal, merged_as: str | None) -> None:
        # the merged commit and the move to done together (inside review's transaction when the verdict is new): a
        # store lost between them left a review ticket whose work was on main, a zombie to the supervisor
        with self.store.tx() if switches.enabled("merge_tx") else contextlib.nullcontext():
            self.store.set_ticket_data(t.id, merged_commit=p.commit, merged_as=merged_as, proposal=p.id)
            failpoints.hit(FP_MERGE_RECORDED)
            self.mover.move(t.id, lifecycle.DONE, f"proposal {p.id} merged", expect=lifecycle.REVIEW)

    def _stale_main_locks(self) -> None:
        """A dispatcher killed mid-merge (a fast-forward of the checked-out main, a ref update) leaves git's lock
        files in the fleet root, and every later merge would be deferred on them for good. A lock no process
        has open is stale: renamed aside (kept, restorable), never deleted. A git command that runs holds its
        lock file open, so a human's git at work is never touched."""

        try:
            locks = self.git.git_paths(self.root, "index.lock", f"refs/heads/{self.policy.fleet.main_branch}.lock")
        except git.GitError:
            return
        for lock in locks:
            if not lock.exists() or procs.busy_pids(lock):
                continue
            aside = lock.with_name(f"{lock.name}.stale-{int(self.real.now())}")
            lock.rename(aside)
            self.store.append("dispatch.stale_lock_moved", "main", {"path": str(lock), "to": str(aside),
                                                                    "why": "left by a dispatcher killed mid-merge"})
