"""release_ticket: hand a ticket a human holds (needs_human) back to the queue, its needs-human label dropped.

An operator's step (the console's "release"), never a rule's: nothing in the fleet decides a human is done."""

from healer.actions.spec import ActionSpec

SPEC = ActionSpec(
    name="release_ticket",
    summary="hand a needs_human ticket back to the queue (its needs-human label dropped)",
    lease=None,  # no unblock attempt of the fleet's: a human's decision, held by no quiet period
    answers=frozenset(),
    plan=None,
    handler="healer.remedy.handlers.operator:RELEASE_TICKET",
)
