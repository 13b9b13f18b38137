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
