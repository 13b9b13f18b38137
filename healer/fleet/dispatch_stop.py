"""The dispatcher's stops: a ticket out of budget (or spinning) goes to needs-human or blocked, with its evidence.

`Stopper` is the Dispatcher's collaborator (healer/fleet/dispatcher.py) for the plan's stops (healer/core/dispatch.py),
carried out with a comment on the ticket giving every attempt, the rejected proposals and the last gate
log lines, and (needs-human) a notification carrying the last run's failure signature.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from healer import conventions as cv
from healer import lifecycle
from healer.clock import iso
from healer.core import dispatch as core
from healer.core import fleet as fleet_rules
from healer.fleet import budget
from healer.fleet.dispatch_board import TicketMover
from healer.fleet.proposals import rejection_reason
from healer.notify import notify
from healer.records import Attempt, Proposal
from healer.store.base import Store

if TYPE_CHECKING:
    from healer.policy.schema import Policy

ACTOR = cv.DISPATCH_ACTOR
NEEDS_HUMAN_LABEL = cv.NEEDS_HUMAN_LABEL
budget_window = budget.window  # one ticket's attempts and proposals since its budget was last reset


class Stopper:
    """Moves a ticket the plan stops to needs-human or blocked, with its evidence (a comment, an event, a page)."""

    def __init__(self, store: Store, policy: Policy, mover: TicketMover) -> None:
        self.store = store
        self.policy = policy
        self.mover = mover

    def stop(self, s: core.Stop) -> None:
        t = self.store.ticket(s.ticket_id)
        atts, props = budget_window(self.store, s.ticket_id)
        body = evidence(s, atts, props, self.policy.fleet.evidence_lines)
        if s.to == lifecycle.NEEDS_HUMAN:
            self.store.label(t.id, NEEDS_HUMAN_LABEL, actor=ACTOR)
        self.store.comment(t.id, body, author="healer")
        self.mover.move(t.id, s.to, f"{s.reason}: {s.detail}", expect=t.state)
        why = rejections(props)
        self.store.append("dispatch.budget_exhausted" if s.to == lifecycle.NEEDS_HUMAN else "dispatch.blocked", t.id,
                          {"reason": s.reason, "detail": s.detail, "attempts": len(atts), "to": s.to,
                           **({"rejections": why} if why else {})})
        if s.to == lifecycle.NEEDS_HUMAN:
            # the page carries what the comment says of the last run (its failure signature and state hash), so the
            # human it reaches (Alertmanager's annotations, a webhook) sees why without opening the board
            last = atts[-1] if atts else None
            notify(self.store, self.policy, f"needs_human:{t.id}", f"{t.id} needs a human: {s.detail}",
                   evidence={"ticket": t.id, "reason": s.reason, "attempts": len(atts),
                             "failure_signature": last.failure_signature if last else None,
                             "state_hash": last.state_hash if last else None, **({"rejections": why} if why else {})})


# -- evidence ----------------------------------------------------------------------

def _exit_text(a: Attempt) -> str:
    if a.ended_at is None:
        return "running"
    if a.exit_code is None:
        return "lost"
    if a.exit_code < 0:
        return f"killed({(fleet_rules.signature(a.exit_code) or '').split(': ')[-1]})"
    return str(a.exit_code)


def rejections(props: list[Proposal]) -> list[str]:
    """`#3 merge: conflict with main in a.py (…)` for each proposal rejected for a merge conflict."""
    return [f"#{p.id} {r}" for p in props if p.state == "rejected" and (r := rejection_reason(p.gate_log or ""))]


def evidence(s: core.Stop, atts: list[Attempt], props: list[Proposal], lines: int) -> str:
    head = {"launch_budget": "launch budget exhausted", "spinning": "resumed agent is spinning",
            "replays_exhausted": "rejected proposal replays exhausted"}.get(s.reason, s.reason)
    why = rejections(props)  # a merge conflict is the reason, whatever the last gate log (often green) says
    out = [f"healer: {head} — {s.detail}. Ticket moved to {s.to}.", *[f"Why: proposal {w}" for w in why[-3:]], "",
           f"Attempts ({len(atts)}):"]
    for i, a in enumerate(atts, 1):
        out.append(f"{i}. {iso(a.at)} {a.kind} run={a.run_id} exit={_exit_text(a)} "
                   f"signature={a.failure_signature or '-'} state={a.state_hash or '-'} head={(a.head or '-')[:12]}")
    rejected = [p for p in props if p.state == "rejected"]
    if rejected:
        out += ["", f"Rejected proposals ({len(rejected)}):"]
        out += [f"- #{p.id} {p.commit[:12]} at {iso(p.decided_at or p.created_at)}"
                + (f": {r}" if (r := rejection_reason(p.gate_log or "")) else "") for p in rejected]
    log = rejected[-1].gate_log if s.reason == "replays_exhausted" and rejected else \
        next((a.gate_log_tail for a in reversed(atts) if a.gate_log_tail), "")
    tail = log.splitlines()[-lines:]
    out += ["", f"Last {len(tail)} gate-log lines:", "```", *tail, "```"]
    return "\n".join(out)
