"""escalate: hand a ticket to a human (needs-human label, an evidence comment, a critical alert)."""

from healer.actions.spec import ActionSpec, Step


def plan(s: Step):
    if not s.ticket:
        return []
    brk = s.evidence.get("break_action")
    if s.finding.kind == "wait_cycle" and brk != "escalate" and brk in s.do:
        return []  # the cycle's own break action comes first
    return [s.action(s.ticket, ticket=s.ticket, finding=s.finding.kind, why=s.why, evidence=s.evidence)]


SPEC = ActionSpec(
    name="escalate",
    summary="hand a ticket to a human (needs-human, evidence comment, critical alert)",
    lease=None,
    answers=frozenset({"agent_dead", "agent_idle", "agent_stuck", "frozen_in_progress", "stale_label", "stale_block",
                       "zombie_ticket", "wait_cycle", "same_commit_repush"}),
    plan=plan,
    handler="healer.remedy.handlers.tickets:ESCALATE",
)
