"""requeue_ticket: put an in-progress ticket with no live agent back in the queue."""

from healer.actions.spec import ActionSpec, Step, Tool


def plan(s: Step):
    ev = s.evidence
    if not s.ticket or ev.get("expect") != "in_progress":
        return []
    if s.finding.kind == "wait_cycle" and ev.get("break_action") != s.name:
        return []  # a wait cycle is broken by one action only: the one its finding names
    stale = ev.get("stale_agents") or ([ev["agent"]] if ev.get("agent") else [])
    return [s.action(s.ticket, ticket=s.ticket, expect="in_progress", stale_agents=list(stale))]


SPEC = ActionSpec(
    name="requeue_ticket",
    summary="put an in-progress ticket with no live agent back in the queue",
    lease="ticket",
    answers=frozenset({"agent_dead", "agent_stuck", "frozen_in_progress", "wait_cycle"}),
    plan=plan,
    handler="healer.remedy.handlers.tickets:REQUEUE_TICKET",
    tool=Tool("Put in-progress tickets with no live agent and no worktree back in the queue. Each id is checked and "
              "journaled separately.",
              fixes=frozenset({"frozen_in_progress"}), rank=20, hint="in-progress tickets with no live agent and no worktree"),
)
