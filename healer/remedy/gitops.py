"""The few git questions remediation asks of a worktree. Read-only except `remove_worktree`."""

from __future__ import annotations

import subprocess
from pathlib import Path

from healer.errors import HealerError

TIMEOUT = 60


def _git(cwd: str | Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        r = subprocess.run(["git", *args], cwd=str(cwd), capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        raise HealerError(f"{cwd}: git {' '.join(args)} took longer than {TIMEOUT}s") from e
    if check and r.returncode != 0:
        raise HealerError(f"{cwd}: git {' '.join(args)} failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    return r


def toplevel(path: str | Path) -> Path | None:
    """The working tree that `path` is the top of, or None when it is not a git working tree top."""
    p = Path(path)
    if not p.is_dir():
        return None
    r = _git(p, "rev-parse", "--show-toplevel", check=False)
    if r.returncode != 0:
        return None
    top = Path(r.stdout.strip()).resolve()
    return top if top == p.resolve() else None


def main_repo(worktree: str | Path) -> Path:
    """The repository that owns a linked worktree (where `git worktree remove` must run)."""
    r = _git(worktree, "rev-parse", "--path-format=absolute", "--git-common-dir")
    common = Path(r.stdout.strip())
    return common.parent if common.name == ".git" else common


def untracked(path: str | Path) -> list[str]:
    """Untracked, not ignored files (relative to the worktree): the 'unknown files'."""
    r = _git(path, "status", "--porcelain=v1", "-z", "--ignored=no", "--untracked-files=all")
    out = []
    for item in r.stdout.split("\0"):
        if item.startswith("?? "):
            out.append(item[3:])
    return out


def dirty(path: str | Path) -> list[str]:
    """Every file whose content exists only in this worktree: untracked, modified, added, renamed (not deleted)."""
    r = _git(path, "status", "--porcelain=v1", "-z", "--ignored=no", "--untracked-files=all")
    items = r.stdout.split("\0")
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
    r = _git(p.parent, "ls-files", "--error-unmatch", "--", p.name, check=False)
    return r.returncode == 0


def remove_worktree(path: str | Path) -> None:
    """`git worktree remove --force` (only after every dirty file was quarantined), then prune."""
    repo = main_repo(path)
    _git(repo, "worktree", "remove", "--force", str(path))
    _git(repo, "worktree", "prune", check=False)
