"""stop_adopted: stop an adopted loop, only where its rule says `allow_stop: true`: its worktree snapshotted first,
then SIGTERM to its process group and SIGKILL after the rule's kill_grace, the identity (pid + start time) checked
again before each signal; a process that is no longer the adopted one is never signalled (adopt.identity_changed)."""

from healer.actions.spec import ActionSpec, Step


def plan(s: Step):
    ev = s.evidence
    if not (ev.get("adopted") and ev.get("allow_stop") and ev.get("identity_known")):
        return []
    return [s.action(ev["adopted"], adopted=ev["adopted"], pid=ev.get("pid"), start_ticks=ev.get("start_ticks"))]


SPEC = ActionSpec(
    name="stop_adopted",
    summary="stop an adopted loop where its rule allows it (snapshot first; SIGTERM, then SIGKILL; identity checked)",
    lease="subject",
    answers=frozenset({"adopted_idle", "adopted_stuck", "adopted_cost", "adopted_iterations", "adopted_no_progress",
                       "adopted_cycle", "adopted_procs", "adopted_memory", "adopted_same_failure"}),
    plan=plan,
    handler="healer.remedy.handlers.adopted:STOP_ADOPTED",
    rate_limit=(20, "1h"),
)
