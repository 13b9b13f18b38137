"""The dispatcher's merge path: main's status (its gates), then each open proposal gated and merged or rejected.

`Merger` is the Dispatcher's collaborator (healer/fleet/dispatcher.py) for both. main's gates run on main (again whenever main moves,
every pass while red); red pauses dispatch. A proposal is gated on its merge result (several hosts: pushed to the
shared repository) and merged or rejected; the verdict, the merged commit and the ticket's move to done are one
store transaction. Git's lock files a dispatcher killed mid-merge left are moved aside, never deleted.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from healer import conventions as cv
from healer import failpoints, git, lifecycle, procs, switches
from healer.clock import Clock
from healer.core import dispatch_steps as steps
from healer.fleet import shared_main
from healer.fleet.dispatch_board import EffectApplier, MainRef, TicketMover
from healer.fleet.gates import PASS
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

    def check_main(self) -> str:
        """Gather main's view, let the core say whether its gates run (healer/core/dispatch_steps.py), run them, and
        record what their verdict does: main's colour, the pause on red, the page."""
        fleet = self.policy.fleet
        prev = self.store.get_setting(keys.MAIN_STATUS, "unknown")
        view = steps.MainView(prev=prev, head=self.git.rev(self.root, self.main_ref()),
                              checked=self.store.get_setting(keys.MAIN_CHECKED), has_gates=bool(fleet.main_gates))
        step = steps.main_step(view, fleet.main_branch)
        if step.status is not None:
            return step.status
        verdict, log = step.verdict or PASS, step.log
        if step.run_gates and view.head is not None:
            res = self.gates.main(self.root, self.policy, view.head, self.real)
            verdict = steps.gate_verdict(res.outcome, fail_open=switches.enabled("fail_open"))  # a game day's --disable
            log = res.tail(fleet.evidence_lines)
        status, effects = steps.main_decided(
            view, verdict, log, now=self.clock.now(), branch=fleet.main_branch,
            paused=bool(self.store.get_setting(keys.DISPATCH_PAUSED, False)),
            paused_reason=self.store.get_setting(keys.DISPATCH_PAUSED_REASON),
            red_since=self.store.get_setting(keys.MAIN_RED_SINCE), pause_on_red=fleet.pause_on_red_main)
        self.effects.apply(effects)
        return status

    def review(self) -> tuple[list[str], list[str]]:
        """Gate each open proposal and merge or reject it: the tickets merged and the tickets rejected."""
        merged: list[str] = []
        rejected: list[str] = []
        reviewing = self.store.tickets(states=[lifecycle.REVIEW])
        if reviewing:
            self._stale_main_locks()
        for t in reviewing:
            props = self.store.proposals(t.id)
            last = props[-1] if props else None
            head = None if last else self._branch_head(t.id)
            step = steps.review_step(last.state if last else None, head)
            if step == steps.REQUEUE:
                self.mover.move(t.id, lifecycle.QUEUED, "in review without a proposal or a branch", expect=lifecycle.REVIEW)
                continue
            if step == steps.PROPOSE and head:  # from the branch's head, then gated like any open proposal
                last = self.store.add_proposal(t.id, branch_for(t.id), head)
                step = steps.review_step(last.state)
            if last is None:
                continue
            if step == steps.FINISH:
                self._done(t, last, last.commit)
                continue
            if step != steps.GATE:
                continue
            held = self._gate(t, last)
            if held is None:
                continue
            if held == MERGED:
                merged.append(t.id)
            else:
                rejected.append(t.id)
        return merged, rejected

    def _branch_head(self, tid: str) -> str | None:
        """The commit of a ticket's work: its worktree's HEAD, else its branch's."""
        return self.git.rev(worktree_for(self.root, tid)) or self.git.rev(self.root, f"refs/heads/{branch_for(tid)}")

    def _gate(self, t: Ticket, last: Proposal) -> str | None:
        """Gate an open proposal on its merge result and record the verdict: the proposal's state after it, None when
        there is none this pass (deferred, or withheld: decided elsewhere while the gates ran)."""
        wanted = lambda t=t, p=last: self.unwanted(t, p)  # noqa: E731
        v = (shared_main.gate_shared(self.root, self.policy, last, self.real, self.shared, still_wanted=wanted) if self.shared
             else self.gates.proposal(self.root, self.policy, last, self.real, still_wanted=wanted))
        events = steps.verdict_events(t.id, last.id, last.commit, v.outcome, v.log, conflict=v.conflict, guarded=v.guarded)
        step = steps.verdict_step(v.outcome)
        if step == steps.WITHHELD:
            # decided elsewhere while the gates ran (another host's dispatcher, a human): that first verdict stands
            self.store.decide_proposal(last.id, "rejected", v.log)
            self.effects.apply(events)
            return None
        if step == steps.DEFERRED:
            self.effects.apply(events)
            return None
        # the proposal's verdict and, when merged, the ticket's merged_commit and its move to done in ONE store
        # transaction: a store lost between them (a PostgreSQL restart) left a review ticket whose work was on main
        # and whose proposal was no longer open, which the supervisor judged a zombie and closed (pg-restarts-real)
        with self.store.tx() if switches.enabled("merge_tx") else contextlib.nullcontext():
            held = self.store.decide_proposal(last.id, v.outcome, v.log)  # a retried pass: its first decision
            self.effects.apply(events)  # a conflict's reason and a guarded change named in events, not only in the log
            if held == MERGED:
                self._done(t, last, v.main_after)
        return held

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
