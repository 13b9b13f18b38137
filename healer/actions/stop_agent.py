"""stop_agent: stop a live agent (SIGTERM, then SIGKILL after the grace), its ticket marked for resume when stuck
(not when the same sequence escalates: the ticket goes to a human, not back to an agent)."""

from healer.actions.spec import ActionSpec, Step


def plan(s: Step):
    ev = s.evidence
    if not (ev.get("agent") and ev.get("agent_live")):
        return []
    return [s.action(ev["agent"], ticket=s.ticket, agent=ev["agent"], pid=ev.get("pid"),
                     mark_for_resume=s.finding.kind == "agent_stuck" and "escalate" not in s.do)]


SPEC = ActionSpec(
    name="stop_agent",
    summary="stop a live agent",
    lease="ticket",
    answers=frozenset({"agent_idle", "agent_stuck", "zombie_ticket", "same_commit_repush"}),
    plan=plan,
    handler="healer.remedy.handlers.agents:STOP_AGENT",
)
