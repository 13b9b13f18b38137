"""Small git plumbing for the fleet: worktrees, heads, state hashes, merges.

Never a `reset --hard`, never a force push, never a forced ref move: main only
advances by fast-forward to a commit that descends from it (compare-and-swap).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from healer.errors import HealerError

IDENTITY = {"GIT_AUTHOR_NAME": "healer", "GIT_AUTHOR_EMAIL": "healer@localhost",
            "GIT_COMMITTER_NAME": "healer", "GIT_COMMITTER_EMAIL": "healer@localhost"}


class GitError(HealerError):
    pass


@dataclass(frozen=True)
class Out:
    code: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).strip()


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    for k, v in IDENTITY.items():
        env.setdefault(k, v)  # only when the user has none; a repo's config still wins for name/email
    env.setdefault("GIT_TERMINAL_PROMPT", "0")
    env.update(extra or {})
    return env


def run(cwd: str | Path, *args: str, check: bool = True, env: dict[str, str] | None = None, timeout: float = 120) -> Out:
    try:
        p = subprocess.run(["git", *args], cwd=str(cwd), capture_output=True, text=True, env=_env(env), timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise GitError(f"{cwd}: git {' '.join(args)} took more than {timeout:.0f}s") from e
    except FileNotFoundError as e:
        raise GitError(f"{cwd}: cannot run git ({e})") from e
    out = Out(p.returncode, p.stdout.strip(), p.stderr.strip())
    if check and p.returncode != 0:
        raise GitError(f"{cwd}: git {' '.join(args)} failed ({p.returncode}): {out.text.splitlines()[-1] if out.text else ''}")
    return out


def is_repo(path: str | Path) -> bool:
    return Path(path).is_dir() and run(path, "rev-parse", "--git-dir", check=False).code == 0


def rev(cwd: str | Path, ref: str = "HEAD") -> str | None:
    o = run(cwd, "rev-parse", "--verify", "-q", ref + "^{commit}", check=False)
    return o.stdout or None


def is_ancestor(cwd: str | Path, a: str, b: str) -> bool:
    return run(cwd, "merge-base", "--is-ancestor", a, b, check=False).code == 0


def current_branch(cwd: str | Path) -> str | None:
    o = run(cwd, "symbolic-ref", "-q", "--short", "HEAD", check=False)
    return o.stdout or None


def tree_hash(cwd: str | Path) -> str:
    """The tree of the working directory as it is (tracked and untracked, not ignored), without touching the index.

    The loop's own memory files (progress.md, lessons.md) are left out, exactly as in the
    loop's progress test: a resumed loop rewrites progress.md every time, and that must not
    pass for progress when the dispatcher counts resumes on the same state.
    """
    from healer.loop import gitops as loopgit

    try:
        return loopgit.snapshot(cwd)
    except loopgit.GitError as e:
        raise GitError(str(e)) from None


def state(cwd: str | Path) -> tuple[str | None, str | None]:
    """(HEAD, state hash of HEAD + working tree); (None, None) when the worktree is gone."""
    if not Path(cwd).is_dir():
        return None, None
    try:
        head = rev(cwd)
        tree = tree_hash(cwd)
    except GitError:
        return None, None
    return head, hashlib.sha256(f"{head}:{tree}".encode()).hexdigest()[:16]


def ensure_excluded(root: str | Path, pattern: str = ".healer/") -> None:
    """Keep healer's own folder out of every worktree's status, even if .gitignore is not committed."""
    common = Path(run(root, "rev-parse", "--git-common-dir").stdout)
    if not common.is_absolute():
        common = Path(root) / common
    ex = common / "info" / "exclude"
    ex.parent.mkdir(parents=True, exist_ok=True)
    lines = ex.read_text().splitlines() if ex.exists() else []
    if pattern not in lines:
        with ex.open("a") as f:
            f.write(("\n" if lines and lines[-1] else "") + pattern + "\n")


def worktree_paths(root: str | Path) -> set[str]:
    out = set()
    for line in run(root, "worktree", "list", "--porcelain").stdout.splitlines():
        if line.startswith("worktree "):
            out.add(str(Path(line[len("worktree "):]).resolve()))
    return out


def add_worktree(root: str | Path, path: str | Path, branch: str, base: str) -> bool:
    """Check out `branch` at `path`, creating the branch from `base` if new. Returns True if created anew.

    An existing branch is reused (its commits kept); a registered worktree whose folder
    vanished is pruned from git's records first.
    """
    path = Path(path)
    if path.is_dir() and str(path.resolve()) in worktree_paths(root):
        return False
    run(root, "worktree", "prune")
    path.parent.mkdir(parents=True, exist_ok=True)
    if rev(root, f"refs/heads/{branch}"):
        run(root, "worktree", "add", str(path), branch)
    else:
        run(root, "worktree", "add", "-b", branch, str(path), base)
    return True


def remove_worktree(root: str | Path, path: str | Path) -> None:
    """Remove one of healer's own scratch worktrees (never a user's)."""
    if Path(path).exists():
        run(root, "worktree", "remove", "--force", str(path), check=False)
    run(root, "worktree", "prune", check=False)


def advance(root: str | Path, branch: str, old: str, new: str) -> None:
    """Move `branch` from `old` to `new`, a descendant of `old`; never a force.

    When the branch is checked out in `root`, a fast-forward merge updates the files too;
    otherwise a compare-and-swap ref update (fails if someone moved it meanwhile).
    """
    if not is_ancestor(root, old, new):
        raise GitError(f"{branch}: {new[:12]} does not descend from {old[:12]}; refusing to move {branch}")
    if current_branch(root) == branch:
        if rev(root) != old:
            raise GitError(f"{branch} moved while the proposal was gated")
        run(root, "merge", "--ff-only", "-q", new)
    else:
        run(root, "update-ref", "-m", "healer: merge proposal", f"refs/heads/{branch}", new, old)
