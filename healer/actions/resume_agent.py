"""resume_agent: relaunch a dead agent in its worktree (or requeue its ticket when there is none to resume in)."""

from healer.actions.spec import ActionSpec, Step


def plan(s: Step):
    ev = s.evidence
    if not ev.get("agent"):
        return []
    if ev.get("worktree_exists"):
        return [s.action(ev["agent"], ticket=s.ticket, agent=ev["agent"], worktree=ev.get("worktree"))]
    if s.ticket and ev.get("expect") == "in_progress":  # nothing to resume in: start over
        return [s.action(s.ticket, "requeue_ticket", ticket=s.ticket, expect="in_progress", stale_agents=[ev["agent"]])]
    return []


SPEC = ActionSpec(
    name="resume_agent",
    summary="relaunch a dead agent in its worktree",
    lease="ticket",
    answers=frozenset({"agent_dead"}),
    plan=plan,
    handler="healer.remedy.handlers.agents:RESUME_AGENT",
)
