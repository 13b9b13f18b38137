"""snapshot_worktree: commit an adopted loop's uncommitted work (untracked files included) to a recovery ref,
refs/healer/recovery/<adopted>/<n>, without touching its worktree, index or HEAD (a temporary index, write-tree,
commit-tree, update-ref). The same work twice is one ref. Nothing is deleted, nothing is signalled."""

from healer.actions.spec import ActionSpec, Step
from healer.conventions import ADOPTED_FINDINGS as KINDS


def plan(s: Step):
    ev = s.evidence
    if not (ev.get("adopted") and ev.get("worktree")):
        return []
    if ev.get("state") and ev.get("state") == ev.get("snapshotted"):
        return []  # this very work is in a recovery ref already: no intent, no event, every tick it stays so
    return [s.action(ev["adopted"], adopted=ev["adopted"], worktree=ev["worktree"])]


SPEC = ActionSpec(
    name="snapshot_worktree",
    summary="commit an adopted loop's uncommitted work to refs/healer/recovery/<agent>/<n> (worktree untouched)",
    lease=None,  # writes a ref only: no unblock attempt, and the stop that may follow must not wait on it
    answers=frozenset(KINDS),
    plan=plan,
    handler="healer.remedy.handlers.adopted:SNAPSHOT_WORKTREE",
)
