"""Several hosts, one shared bare repository: each host works in its own clone and worktrees, and a
proposal lands on the shared main with a compare-and-swap on the branch.

The CAS is git's own: a plain (never forced) push of `new` to the shared main succeeds only when the
shared main is still an ancestor of `new`, i.e. when nobody moved it since we fetched. A refused push
means "main moved": fetch, rebuild the merge on the new main, try again. Exactly once: every merge
carries a `Healer-Ticket: ID` trailer, and a host first looks for it on the shared main, so a ticket
whose work another host (or a host we thought dead) already merged is never merged twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from healer import git
from healer.fleet import proposals as pr
from healer.fleet.gates import PASS, gate_checkout

TRAILER = "Healer-Ticket"


@dataclass
class Landed:
    status: str  # merged | already_merged | gave_up
    commit: str | None
    tries: int


def merged_on_main(clone: str | Path, ticket: str, main: str = "main", remote: str = "origin") -> str | None:
    """The commit on the shared main (as last fetched) that carries `ticket`'s trailer, if any."""
    out = git.run(clone, "log", "--format=%H", f"--grep=^{TRAILER}: {ticket}$", f"refs/remotes/{remote}/{main}", check=False)
    return out.stdout.splitlines()[0] if out.code == 0 and out.stdout else None


def fetch(clone: str | Path, main: str = "main", remote: str = "origin") -> str:
    git.run(clone, "fetch", "-q", remote, f"+refs/heads/{main}:refs/remotes/{remote}/{main}")
    return git.rev(clone, f"refs/remotes/{remote}/{main}") or ""


def land(worktree: str | Path, ticket: str, branch: str, *, main: str = "main", remote: str = "origin",
         tries: int = 20, still_ours=lambda: True) -> Landed:
    """Merge `branch` (checked out in `worktree`) onto the shared main, once. `still_ours()` is asked
    right before each push: a host that lost its claim (its heartbeat went stale) must not publish."""
    for n in range(1, tries + 1):
        base = fetch(worktree, main, remote)
        done = merged_on_main(worktree, ticket, main, remote)
        if done:
            return Landed("already_merged", done, n)
        git.run(worktree, "checkout", "-q", "--detach", base)
        git.run(worktree, *git.IDENTITY, "merge", "--no-ff", "-q", "-m", f"Merge {branch}\n\n{TRAILER}: {ticket}", branch)
        new = git.rev(worktree)
        if not still_ours():
            return Landed("gave_up", None, n)
        if git.run(worktree, "push", "-q", remote, f"{new}:refs/heads/{main}", check=False).code == 0:
            return Landed("merged", new, n)
    return Landed("gave_up", None, tries)


# -- the real dispatcher's merge path when the fleet has a shared repository (fleet.shared_remote) --------


def check_remote(root: str | Path, remote: str) -> str | None:
    """Why `remote` cannot serve as the shared repository of the fleet root, or None."""
    if git.run(root, "remote", "get-url", remote, check=False).code != 0:
        return f"fleet.shared_remote: expected a git remote of {root} (see `git remote -v`), got {remote!r}"
    return None


def main_ref(main: str, remote: str) -> str:
    return f"refs/remotes/{remote}/{main}"


def publish(worktree: str | Path, branch: str, head: str, remote: str) -> bool:
    """Push a proposal's commit to the shared repository under its ticket branch, so that any host can gate and
    merge it (the host that ran the agent may be dead by then). The branch is the ticket's scratch: a forced push
    there is harmless because the proposal pins the commit; the shared main is never forced."""
    return git.run(worktree, "push", "-q", remote, f"+{head}:refs/heads/{branch}", check=False).code == 0


def gate_shared(root: Path, policy, p, clock, remote: str, tries: int = 10, still_wanted=None):
    """`proposals.gate_proposal` for a shared repository: build the merge on the freshly fetched shared main, run the
    merge gates on that tree, push it without force. A refused push means another host moved main: fetch, re-merge,
    re-gate. `still_wanted()` is asked before each push (as in gate_proposal). A ticket whose trailer is already on the shared main is merged (once), never again."""
    main = policy.fleet.main_branch
    log = ""
    for _ in range(tries):
        try:
            old = fetch(root, main, remote)
        except git.GitError as e:
            return pr.Verdict(pr.DEFERRED, f"fetch {remote}: {e}")
        if not old:
            return pr.Verdict(pr.DEFERRED, f"branch {main} does not exist on {remote}")
        done = merged_on_main(root, p.ticket_id, main, remote)
        if done:
            return pr.Verdict(pr.MERGED, f"{p.ticket_id} is already merged on {remote}/{main} as {done[:12]}", old, done)
        if git.rev(root, p.commit) is None:  # the agent ran on another host: its commit was published to the branch
            git.run(root, "fetch", "-q", remote, f"+refs/heads/{p.branch}:refs/remotes/{remote}/{p.branch}", check=False)
        if git.rev(root, p.commit) is None:
            return pr.Verdict(pr.REJECTED, f"commit {p.commit} is neither in {root} nor on {remote}/{p.branch}", old)
        if git.is_ancestor(root, p.commit, old):
            return pr.Verdict(pr.MERGED, f"{p.commit[:12]} is already on {remote}/{main}", old, old)
        why = pr.foreign(root, old, p.commit, policy.loop.protected_paths, pr.guard_of(policy, root))
        if why:
            return pr.Verdict(pr.REJECTED, f"not merged: {why}", old, guarded=why)
        scratch = pr.scratch_dir(root, f"{p.ticket_id}-p{p.id}")
        git.remove_worktree(scratch, root, check=False)
        scratch.parent.mkdir(parents=True, exist_ok=True)
        git.run(root, "worktree", "add", "--detach", str(scratch), old)
        try:
            m = git.run(scratch, *git.IDENTITY, "merge", "--no-ff", "--no-edit", "-m", pr.merge_message(p), p.commit,
                        check=False)
            if m.code != 0:
                c = pr.conflict_of(scratch, f"{remote}/{main}", old, p.commit)
                git.run(scratch, "merge", "--abort", check=False)
                return pr.Verdict(pr.REJECTED, f"$ git merge {p.branch}\n{m.text}\n{pr.conflict_text(c)}", old, conflict=c)
            new = git.rev(scratch)
            if new is None:  # a merge that succeeded has a HEAD: never push an empty name (it would delete main)
                raise git.GitError(f"{scratch}: no HEAD after the merge of {p.commit}")
            res = gate_checkout(root, scratch, policy.fleet.merge_gates, policy.loop, clock, base=old)
            log = "\n".join(res.log.splitlines()[-pr.LOG_LINES:])
            if res.outcome != PASS:
                return pr.Verdict(pr.REJECTED, log or f"merge gate {res.failed}: {res.outcome}", old)
            pr.failpoints.hit(pr.FP_BEFORE_MERGE)
            why = still_wanted() if still_wanted is not None else None
            if why:
                return pr.Verdict(pr.WITHHELD, f"{log}\nnot merged: {why}".strip(), old)
            # the compare-and-swap: a plain push is accepted only if the shared main is still `old` (an ancestor of new)
            if git.run(scratch, "push", "-q", remote, f"{new}:refs/heads/{main}", check=False).code == 0:
                git.run(root, "update-ref", main_ref(main, remote), new, check=False)
                pr.failpoints.hit(pr.FP_AFTER_MERGE)
                return pr.Verdict(pr.MERGED, log, old, new)
        finally:
            git.remove_worktree(scratch, root, check=False)
    return pr.Verdict(pr.DEFERRED, f"{log}\n{remote}/{main} kept moving: {tries} pushes refused".strip())
