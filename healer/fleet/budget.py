"""A ticket's budget window, read from the store: its attempts and proposals since it was last
handed back to the queue (healer/core/fleet.py says what a reset is). The dispatcher counts
launches with it and the supervisor's snapshot shows the same window: one definition, two
queries plus one for the resets, whatever the fleet's size."""

from __future__ import annotations

from collections.abc import Iterable

from healer import lifecycle
from healer.core import fleet as fleet_rules
from healer.records import Attempt, Proposal

RESET_QUERY = '"to":"queued"'  # the payload text every reset move carries (keys sorted, no spaces)


def cuts(store, ticket_id: str | None = None) -> dict[str, float]:
    return fleet_rules.budget_cuts(store.events(kinds=["ticket.moved"], subject=ticket_id, contains=RESET_QUERY))


class Resets:
    """`cuts(store)` kept between a long-lived caller's passes (the dispatcher's): only the moves logged since
    the last pass are read and folded in. A ticket's cut is its latest reset, so folding new moves into the
    old answer gives the answer of a full read; event ids only grow (the store's contract)."""

    def __init__(self) -> None:
        self.seen = 0
        self.cut: dict[str, float] = {}

    def cuts(self, store) -> dict[str, float]:
        last = store.last_event_id()  # first: whatever is logged up to it is in the read below
        if last < self.seen:  # the log went back (a store restored from a copy): read it all again
            self.seen, self.cut = 0, {}
        # every move, not only those matching RESET_QUERY: budget_cuts picks the resets, and a bound LIKE pattern makes
        # SQLite prepare the statement anew each time (3x the cost of the whole read of a pass's few new moves)
        for tid, at in fleet_rules.budget_cuts(store.events(after=self.seen, kinds=["ticket.moved"])).items():
            self.cut[tid] = max(self.cut.get(tid, at), at)
        self.seen = last
        return dict(self.cut)


def windows(store, ticket_ids: Iterable[str] | None = None, *, proposals: bool | Iterable[str] = True,
            resets: Resets | None = None) -> tuple[dict[str, list[Attempt]], dict[str, list[Proposal]]]:
    """ticket -> attempts and proposals within its budget window (tickets done or closed left out).

    `proposals`: every wanted ticket's (one query), none, or only these tickets' (one query each: the dispatcher
    reads those of the tickets in review, the only ones its plan looks at)."""
    want = None if ticket_ids is None else set(ticket_ids)
    cut = resets.cuts(store) if resets is not None else cuts(store)
    atts: dict[str, list[Attempt]] = {}
    for tid, xs in store.all_attempts(skip_ticket_states=sorted(lifecycle.TERMINAL)).items():
        if want is None or tid in want:
            atts[tid] = fleet_rules.in_window(xs, cut.get(tid))
    if proposals is not True:
        return atts, {tid: fleet_rules.in_window(store.proposals(tid), cut.get(tid), at="created_at") for tid in proposals or ()}
    by: dict[str, list[Proposal]] = {}
    for p in store.proposals():
        if want is None or p.ticket_id in want:
            by.setdefault(p.ticket_id, []).append(p)
    return atts, {tid: fleet_rules.in_window(ps, cut.get(tid), at="created_at") for tid, ps in by.items()}


def window(store, ticket_id: str) -> tuple[list[Attempt], list[Proposal]]:
    """One ticket's window (evidence for a stop)."""
    cut = cuts(store, ticket_id).get(ticket_id)
    return (fleet_rules.in_window(store.attempts(ticket_id), cut),
            fleet_rules.in_window(store.proposals(ticket_id), cut, at="created_at"))
