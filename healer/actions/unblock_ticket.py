"""unblock_ticket: queue a blocked ticket that nothing blocks any more (its blockers done, no wait label)."""

from healer.actions.spec import ActionSpec, Step, Tool


def plan(s: Step):
    if not s.ticket or s.evidence.get("expect") != "blocked":
        return []
    return [s.action(s.ticket, ticket=s.ticket, expect="blocked")]


SPEC = ActionSpec(
    name="unblock_ticket",
    summary="queue a blocked ticket that nothing blocks any more",
    lease="ticket",
    answers=frozenset({"stale_block"}),
    plan=plan,
    handler="healer.remedy.handlers.tickets:UNBLOCK_TICKET",
    tool=Tool("Queue blocked tickets that nothing blocks any more (every blocker done or closed, no wait label, no "
              "rejected proposal, no live agent). Each id is checked again and journaled separately.",
              fixes=frozenset({"stale_block"}), rank=40, hint="blocked tickets nothing blocks any more (stale_block)"),
)
