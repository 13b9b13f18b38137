"""Proposals: a ticket's branch is merged onto main only if the merge gates pass on the merge result.

The merge is built in a scratch worktree (`.healer/scratch/`), never in the user's
checkout; main then advances to that exact commit by fast-forward (or a
compare-and-swap ref update), never by force. A crash at any point is harmless:
the proposal stays open and is gated again, and a branch already on main is
recognised as merged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from healer import conventions as cv
from healer import failpoints, git
from healer.clock import Clock
from healer.fleet.gates import PASS, gate_checkout
from healer.records import Proposal

FP_BEFORE_MERGE = failpoints.declare("dispatch.before_merge", "healer/fleet/proposals.py: merge gates passed, main not yet advanced")
FP_AFTER_MERGE = failpoints.declare("dispatch.after_merge", "healer/fleet/proposals.py: main advanced, proposal not yet marked merged")

MERGED = "merged"
REJECTED = "rejected"
DEFERRED = "deferred"  # could not decide now (main moved, checkout busy); gated again next tick
WITHHELD = "withheld"  # gates passed, but the ticket left review meanwhile: never merged behind the board's back

LOG_LINES = 200


@dataclass(frozen=True)
class Verdict:
    outcome: str  # merged | rejected | deferred
    log: str
    main_before: str | None = None
    main_after: str | None = None


def scratch_dir(root: Path, name: str) -> Path:
    return root / ".healer" / "scratch" / name


def sweep_scratch(root: Path) -> list[str]:
    """Remove scratch worktrees left by a dispatcher that died mid-proposal (only healer's own folder)."""
    base = root / ".healer" / "scratch"
    left = sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    for p in left:
        clear_scratch(p, root)
    return [str(p) for p in left]


def clear_scratch(p: Path, root: Path) -> None:
    """Remove a scratch worktree (healer's own throwaway checkout). What a `worktree add` killed halfway
    left there (a folder git does not know, an entry locked "initializing") is set aside to
    .healer/scratch-stale/ (kept) by the same repair as a ticket's worktree, or every later merge of that
    proposal would fail on it."""
    git.run(root, "worktree", "unlock", str(p), check=False)
    git.remove_worktree(p, root, check=False)
    if p.exists():
        import uuid

        git.set_aside(root, p, cv.set_aside_dir(root, "scratch") / f"{p.name}.{uuid.uuid4().hex[:8]}")


def merge_message(p: Proposal) -> str:
    """The merge commit names its ticket in the subject and as a trailer (`git log --grep 'Healer-Ticket: T-1'`)."""
    return f"healer: merge {p.branch} ({p.ticket_id})\n\nHealer-Ticket: {p.ticket_id}"


VET_MAX = 500  # commits of a proposal vetted one by one; more is no proposal a loop makes


def foreign(root: Path, main: str, commit: str, patterns) -> str | None:
    """Why the commits `commit` would bring onto main (`main..commit`) are not all the loop's own, or None.
    Every one must be a commit healer's loop made: one parent (the loop never merges), the `Healer-Run:` trailer,
    and no protected path changed from its parent, so a commit an agent made (a "Security Team, Reviewed-by"
    one gutting a test) never reaches main, whatever the tree at the tip holds (issue 31). The trailer can be
    forged by an unsandboxed agent; the protected paths cannot be."""
    from healer.loop.gitops import protected

    r = git.run(root, "rev-list", "--parents", f"--max-count={VET_MAX + 1}", commit, f"^{main}", check=False)
    if r.code != 0:
        return f"cannot list the commits of {commit[:12]}: {r.text[-200:]}"
    rows = [ln.split() for ln in r.stdout.splitlines() if ln.strip()]
    if len(rows) > VET_MAX:
        return f"more than {VET_MAX} commits between {main} and {commit[:12]}"
    for row in rows:
        sha, parents = row[0], row[1:]
        if len(parents) != 1:
            return f"commit {sha[:12]} has {len(parents)} parents: the loop never makes such a commit"
        body = git.run(root, "log", "-1", "--format=%an <%ae>%x00%(trailers:key=Healer-Run,valueonly)", sha).stdout
        who, _, run = body.partition("\0")
        if not run.strip():
            return f"commit {sha[:12]} by {who} was not made by healer's loop (no Healer-Run trailer)"
        d = git.raw(root, "diff-tree", "-r", "-z", "--name-only", "--no-renames", "--no-commit-id", parents[0], sha)
        bad = [x for x in d.decode("utf-8", "surrogateescape").split("\0") if x and protected(x, patterns)]
        if bad:
            return f"commit {sha[:12]} ({who}) changes protected paths: {', '.join(bad[:10])}"
    return None


def gate_proposal(root: Path, policy, p: Proposal, clock: Clock, still_wanted=None) -> Verdict:
    """Merge `p` onto main in a scratch worktree, run the merge gates, advance main on a pass.

    `still_wanted()` is asked right before main advances (compare-and-set on the board): a reason
    it returns (the ticket was escalated or moved while the gates ran) withholds the merge."""
    main = policy.fleet.main_branch
    old = git.rev(root, f"refs/heads/{main}")
    if old is None:
        return Verdict(DEFERRED, f"branch {main} does not exist in {root}")
    if git.rev(root, p.commit) is None:
        return Verdict(REJECTED, f"commit {p.commit} is not in the repository", old)
    if git.is_ancestor(root, p.commit, old):
        return Verdict(MERGED, f"{p.commit[:12]} is already on {main}", old, old)
    why = foreign(root, old, p.commit, policy.loop.protected_paths)
    if why:
        return Verdict(REJECTED, f"not merged: {why}", old)

    scratch = scratch_dir(root, f"{p.ticket_id}-p{p.id}")
    clear_scratch(scratch, root)
    scratch.parent.mkdir(parents=True, exist_ok=True)
    git.run(root, "worktree", "add", "--detach", str(scratch), old)
    try:
        # --no-ff: always a merge commit, so `git log main` names the ticket even when main could fast-forward
        m = git.run(scratch, *git.IDENTITY, "merge", "--no-ff", "--no-edit", "-m", merge_message(p), p.commit,
                    check=False)
        if m.code != 0:
            git.run(scratch, "merge", "--abort", check=False)
            return Verdict(REJECTED, f"$ git merge {p.branch}\n{m.text}\nmerge: conflict with {main}", old)
        new = git.rev(scratch)
        res = gate_checkout(root, scratch, policy.fleet.merge_gates, policy.loop, clock)
        log = "\n".join(res.log.splitlines()[-LOG_LINES:])
        if res.outcome != PASS:
            return Verdict(REJECTED, log or f"merge gate {res.failed}: {res.outcome}", old)
        failpoints.hit(FP_BEFORE_MERGE)
        why = still_wanted() if still_wanted is not None else None
        if why:
            return Verdict(WITHHELD, f"{log}\nnot merged: {why}".strip(), old)
        try:
            git.advance(root, main, old, new)
        except git.GitError as e:
            return Verdict(DEFERRED, f"{log}\n{e}".strip(), old)
        failpoints.hit(FP_AFTER_MERGE)
        return Verdict(MERGED, log, old, new)
    finally:
        git.remove_worktree(scratch, root, check=False)
