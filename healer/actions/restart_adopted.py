"""restart_adopted: start an adopted loop's rule's `restart_command` in its worktree, only once the adopted process is
gone (never over a live one) and only the argv the policy declares (never a shell)."""

from healer.actions.spec import ActionSpec, Step


def plan(s: Step):
    ev = s.evidence
    if not (ev.get("adopted") and ev.get("restart")):
        return []
    return [s.action(ev["adopted"], adopted=ev["adopted"])]


SPEC = ActionSpec(
    name="restart_adopted",
    summary="start an adopted loop's declared restart_command in its worktree once the loop is gone",
    lease="subject",
    answers=frozenset({"adopted_idle", "adopted_stuck", "adopted_cost", "adopted_iterations", "adopted_no_progress",
                       "adopted_cycle", "adopted_procs", "adopted_memory", "adopted_same_failure",
                       "adopted_gone"}),  # a killed session restarted, where a rule says so (none by default)
    plan=plan,
    handler="healer.remedy.handlers.adopted:RESTART_ADOPTED",
    rate_limit=(10, "1h"),
)
