"""remove_worktree: remove an orphan worktree (its ticket done, closed or missing); unknown files quarantined first."""

from healer.actions.spec import ActionSpec, Step, Tool


def plan(s: Step):
    wt = s.evidence.get("worktree")
    return [s.action(wt, worktree=wt, ticket=s.ticket, branch=s.evidence.get("branch"))] if wt else []


SPEC = ActionSpec(
    name="remove_worktree",
    summary="remove an orphan worktree (its unknown files quarantined first)",
    lease="subject",
    answers=frozenset({"orphan_worktree"}),
    plan=plan,
    handler="healer.remedy.handlers.files:REMOVE_WORKTREE",
    tool=Tool("Remove orphan worktrees (their ticket done, closed or missing; nobody working inside). Unknown files are "
              "quarantined first.", subjects="paths",
              fixes=frozenset({"orphan_worktree"}), rank=60, hint="orphan worktrees"),
)
