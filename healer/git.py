"""The one git runner, and the git questions every part of healer asks: worktrees, heads,
merges, untracked and dirty files.

Never a `reset --hard`, never a force push, never a forced ref move: main only
advances by fast-forward to a commit that descends from it (compare-and-swap).
Read-only commands run with --no-optional-locks, so asking about a worktree an agent is
using never takes its index lock.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from healer.errors import HealerError

TIMEOUT = 120.0
# for commits healer makes itself (merge commits): `-c` beats the repository's config but
# not GIT_AUTHOR_*/GIT_COMMITTER_* set by the user
IDENTITY = ("-c", "user.name=healer", "-c", "user.email=healer@localhost")


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


def _exec(cwd: str | Path, args: tuple[str, ...], env: dict[str, str] | None, timeout: float,
          text: bool) -> subprocess.CompletedProcess:
    full = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    try:
        return subprocess.run(["git", "--no-optional-locks", *args], cwd=str(cwd), capture_output=True, text=text,
                              env=full, stdin=subprocess.DEVNULL, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise GitError(f"{cwd}: git {' '.join(args)} took more than {timeout:.0f}s") from e
    except (FileNotFoundError, NotADirectoryError) as e:
        raise GitError(f"{cwd}: cannot run git ({e})") from e


def _failed(cwd: str | Path, args: tuple[str, ...], code: int, text: str) -> GitError:
    last = text.strip().splitlines()[-1] if text.strip() else ""
    return GitError(f"{cwd}: git {' '.join(args)} failed ({code}): {last}")


def run(cwd: str | Path, *args: str, check: bool = True, env: dict[str, str] | None = None,
        timeout: float = TIMEOUT) -> Out:
    """Run git in `cwd`; `env` adds to the environment. Raises GitError on failure unless check=False."""
    p = _exec(cwd, args, env, timeout, text=True)
    out = Out(p.returncode, p.stdout.strip(), p.stderr.strip())
    if check and p.returncode != 0:
        raise _failed(cwd, args, p.returncode, out.text)
    return out


def raw(cwd: str | Path, *args: str, timeout: float = TIMEOUT) -> bytes:
    """Git's stdout as bytes, untouched (blobs, -z listings); raises GitError on failure."""
    p = _exec(cwd, args, None, timeout, text=False)
    if p.returncode != 0:
        raise _failed(cwd, args, p.returncode, p.stderr.decode(errors="replace"))
    return p.stdout


def is_repo(path: str | Path) -> bool:
    return Path(path).is_dir() and run(path, "rev-parse", "--git-dir", check=False).code == 0


def toplevel(path: str | Path) -> Path | None:
    """The top of the working tree that holds `path`, or None outside any."""
    if not Path(path).is_dir():
        return None
    o = run(path, "rev-parse", "--show-toplevel", check=False)
    return Path(o.stdout) if o.code == 0 and o.stdout else None


def is_toplevel(path: str | Path) -> bool:
    """Is `path` itself the top of a git working tree (not merely a folder inside one)?"""
    top = toplevel(path)
    return top is not None and top.resolve() == Path(path).resolve()


def main_repo(worktree: str | Path) -> Path:
    """The repository that owns a linked worktree (where `git worktree remove` must run)."""
    common = Path(run(worktree, "rev-parse", "--path-format=absolute", "--git-common-dir").stdout)
    return common.parent if common.name == ".git" else common


def rev(cwd: str | Path, ref: str = "HEAD") -> str | None:
    o = run(cwd, "rev-parse", "--verify", "-q", ref + "^{commit}", check=False)
    return o.stdout or None


def is_ancestor(cwd: str | Path, a: str, b: str) -> bool:
    return run(cwd, "merge-base", "--is-ancestor", a, b, check=False).code == 0


def current_branch(cwd: str | Path) -> str | None:
    o = run(cwd, "symbolic-ref", "-q", "--short", "HEAD", check=False)
    return o.stdout or None


def _status(path: str | Path) -> list[str]:
    # raw: a status line may start with a space (" M name"), which a stripped output loses
    out = raw(path, "status", "--porcelain=v1", "-z", "--ignored=no", "--untracked-files=all")
    return out.decode("utf-8", "surrogateescape").split("\0")


def untracked(path: str | Path) -> list[str]:
    """Untracked, not ignored files (relative to the worktree): the 'unknown files'."""
    return [item[3:] for item in _status(path) if item.startswith("?? ")]


def dirty(path: str | Path) -> list[str]:
    """Every file whose content exists only in this worktree: untracked, modified, added, renamed (not deleted)."""
    items = _status(path)
    out: list[str] = []
    i = 0
    while i < len(items):
        item = items[i]
        i += 1
        if len(item) < 4:
            continue
        code, name = item[:2], item[3:]
        if code[0] in "RC":
            i += 1  # -z puts the rename source in the next field
        if code == "??" or (code[1] != "D" and code[0] != "D"):
            if (Path(path) / name).is_file() or (Path(path) / name).is_symlink():
                out.append(name)
    return out


def tracked(path: str | Path) -> bool:
    """Is this file tracked by the git repository it sits in? False outside any repository."""
    p = Path(path)
    return p.parent.is_dir() and run(p.parent, "ls-files", "--error-unmatch", "--", p.name, check=False).code == 0


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


def remove_worktree(path: str | Path, root: str | Path | None = None, *, check: bool = True) -> None:
    """`git worktree remove --force`, then prune. Callers first quarantine every dirty file
    (remediation) or own the worktree outright (the fleet's scratch worktrees, check=False:
    nothing to remove is fine). `root` defaults to the repository that owns `path`."""
    if Path(path).exists():
        root = root if root is not None else main_repo(path)
        run(root, "worktree", "remove", "--force", str(path), check=check)
    if root is not None:
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
