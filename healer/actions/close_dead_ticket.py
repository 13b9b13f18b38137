"""close_dead_ticket: close a ticket whose work is already merged (a zombie). Terminal: nothing leaves `closed`."""

from healer.actions.spec import ActionSpec, Step, Tool


def plan(s: Step):
    if not s.ticket:
        return []
    return [s.action(s.ticket, ticket=s.ticket, expect=s.evidence.get("expect"), merged_commit=s.evidence.get("merged_commit"))]


SPEC = ActionSpec(
    name="close_dead_ticket",
    summary="close a ticket whose work is already merged",
    lease="ticket",
    answers=frozenset({"zombie_ticket"}),
    plan=plan,
    handler="healer.remedy.handlers.tickets:CLOSE_DEAD_TICKET",
    tool=Tool("Close tickets whose work is already merged or that nobody can finish. Takes a list; each id is checked "
              "and journaled separately.",
              # closing is terminal, so the agent's word is not enough: the core must see the ticket as a zombie now
              requires_finding="zombie_ticket",
              unfound="{subject} is not a dead ticket: no zombie_ticket finding (its work is not known to be merged); "
                      "closing live work is a human's decision",
              fixes=frozenset({"zombie_ticket"}), rank=10, hint="tickets already merged"),
)
