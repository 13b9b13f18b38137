"""A ticket's budget window, read from the store: its attempts and proposals since it was last
handed back to the queue (healer/core/fleet.py says what a reset is). The dispatcher counts
launches with it and the supervisor's snapshot shows the same window: one definition, two
queries plus one for the resets, whatever the fleet's size."""

from __future__ import annotations

from collections.abc import Iterable

from healer import lifecycle
from healer.core import fleet as rules
from healer.records import Attempt, Proposal

RESET_QUERY = '"to":"queued"'  # the payload text every reset move carries (keys sorted, no spaces)


def cuts(store, ticket_id: str | None = None) -> dict[str, float]:
    return rules.budget_cuts(store.events(kinds=["ticket.moved"], subject=ticket_id, contains=RESET_QUERY))


def windows(store, ticket_ids: Iterable[str] | None = None, *, proposals: bool = True
            ) -> tuple[dict[str, list[Attempt]], dict[str, list[Proposal]]]:
    """ticket -> attempts and proposals within its budget window (tickets done or closed left out)."""
    want = None if ticket_ids is None else set(ticket_ids)
    cut = cuts(store)
    atts: dict[str, list[Attempt]] = {}
    for tid, xs in store.all_attempts(skip_ticket_states=sorted(lifecycle.TERMINAL)).items():
        if want is None or tid in want:
            atts[tid] = rules.in_window(xs, cut.get(tid))
    props: dict[str, list[Proposal]] = {}
    if proposals:
        by: dict[str, list[Proposal]] = {}
        for p in store.proposals():
            if want is None or p.ticket_id in want:
                by.setdefault(p.ticket_id, []).append(p)
        props = {tid: rules.in_window(ps, cut.get(tid), at="created_at") for tid, ps in by.items()}
    return atts, props


def window(store, ticket_id: str) -> tuple[list[Attempt], list[Proposal]]:
    """One ticket's window (evidence for a stop)."""
    cut = cuts(store, ticket_id).get(ticket_id)
    return (rules.in_window(store.attempts(ticket_id), cut),
            rules.in_window(store.proposals(ticket_id), cut, at="created_at"))
