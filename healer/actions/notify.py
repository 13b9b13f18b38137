"""notify: an alert through the policy's notifiers. A rule's `notify` step becomes an Alert of the decision
(deduplicated by key, sent even when halted), so it is never planned as an action by itself."""

from healer.actions.spec import ActionSpec
from healer.conventions import ADOPTED_FINDINGS as KINDS

SPEC = ActionSpec(
    name="notify",
    summary="send an alert through the notifiers",
    lease=None,
    answers=frozenset({"agent_dead", "agent_idle", "agent_stuck", "frozen_in_progress", "stale_label", "stale_block",
                       "orphan_worktree", "unknown_file", "zombie_ticket", "wait_cycle", "same_commit_repush",
                       "dispatch_frozen", "pool_saturated", "no_closes", "main_red", "supervisor_silent", "spend_rate",
                       *KINDS}),
    plan=None,
    handler="healer.remedy.handlers.fleet:NOTIFY",
)
