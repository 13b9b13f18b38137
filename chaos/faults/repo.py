"""Git and file effects of the faults, on the game day's own temp fleet (a real git repository in real mode;
chaos/faults/checkouts.py applies them in both worlds).

- `init` a fleet root: git repository on branch main with one commit, `.healer/` ignored;
- `add_worktree`: a real linked worktree `.healer/worktrees/<ticket>` on branch `healer/<ticket>`
  (what the dispatcher makes), used for orphan worktrees and in-progress tickets;
- `unknown_files`: untracked files inside a worktree, returned with their sha256 (they must
  end up kept or quarantined, restorable byte for byte);
- `index_lock`: a stale `.git/index.lock` (in the repository or in a worktree's git dir, where the world's Git
  port says it is: the simulated world's repository model keeps its lock files on disk too); its
  removal is journaled BEFORE it is created, and only a file with exactly our content is ever
  removed, so a lock git itself holds is never touched;
- `set_main`: main turns red (a commit adding `RED`) or green again (a commit removing it), for
  main gates such as `python -c "import os,sys; sys.exit(os.path.exists('RED'))"`;
- `delete_worktree`: the worktree folder vanishes under its ticket (moved to the game day's trash
  folder, never deleted: nothing is lost, even on purpose).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from chaos.faults.undo import UndoJournal
from healer import git as hgit
from healer.fleet.ports import Git, RealGit

GIT_ID = {"GIT_AUTHOR_NAME": "gameday", "GIT_AUTHOR_EMAIL": "gameday@healer.invalid",
          "GIT_COMMITTER_NAME": "gameday", "GIT_COMMITTER_EMAIL": "gameday@healer.invalid"}


def git(cwd: str | Path, *args: str) -> str:
    env = {**os.environ, **GIT_ID}
    env.pop("GIT_DIR", None)
    # healer's neutralised argv: no hook or repository-configured program runs in a game day's git either
    r = subprocess.run(hgit.argv(cwd, *args), cwd=str(cwd), capture_output=True, text=True, env=env, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {cwd}: {r.stderr.strip()[-300:]}")
    return r.stdout.strip()


def init(root: Path, files: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", GIT_ID["GIT_AUTHOR_EMAIL"])
    git(root, "config", "user.name", GIT_ID["GIT_AUTHOR_NAME"])
    (root / "README.md").write_text("# game-day fleet\n")
    (root / ".gitignore").write_text(".healer/\nhealer.yaml\n")
    for rel, text in (files or {}).items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    git(root, "add", "README.md", ".gitignore")
    git(root, "commit", "-q", "-m", "game day: initial")
    return root


def head(root: Path, ref: str = "main") -> str:
    return git(root, "rev-parse", ref)


def worktree_path(root: Path, ticket: str) -> Path:
    return root / ".healer" / "worktrees" / ticket


def add_worktree(root: Path, ticket: str) -> Path:
    wt = worktree_path(root, ticket)
    if (wt / ".git").exists():
        return wt
    wt.parent.mkdir(parents=True, exist_ok=True)
    branch = f"healer/{ticket}"
    exists = subprocess.run(hgit.argv(root, "rev-parse", "--verify", "-q", f"refs/heads/{branch}"), cwd=root,
                            capture_output=True).returncode == 0
    if exists:
        git(root, "worktree", "add", "-q", str(wt), branch)
    else:
        git(root, "worktree", "add", "-q", "-b", branch, str(wt), "main")
    return wt


def unknown_files(wt: Path, count: int, tag: str) -> dict[Path, str]:
    """`count` untracked files in the worktree, with bytes no other file has; path -> sha256."""
    out = {}
    for i in range(count):
        p = wt / f"stray-{i}.bin" if i % 2 else wt / f"stray-{i}.txt"
        data = f"unknown file {i} of {tag}\n".encode() + hashlib.sha256(f"{tag}:{i}".encode()).digest()
        p.write_bytes(data)
        out[p] = hashlib.sha256(data).hexdigest()
    return out


def index_lock(journal: UndoJournal, repo: Path, tag: str, port: Git | None = None) -> Path | None:
    """A stale index.lock in the checkout at `repo`, found where the world's Git port says git keeps it (a real
    repository's by default); None when one is already there (someone else's: not ours to make or remove)."""
    lock, = (port or RealGit()).git_paths(repo, "index.lock")
    content = f"stale lock left by game day {tag}\n"
    journal.register("remove_file", path=str(lock), content=content, role="stale index.lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return None
    with os.fdopen(fd, "w") as f:
        f.write(content)
    return lock


def set_main(root: Path, red: bool) -> str:
    marker = root / "RED"
    if red and not marker.exists():
        marker.write_text("main is broken on purpose (game day)\n")
        git(root, "add", "RED")
        git(root, "commit", "-q", "-m", "game day: break main")
    elif not red and marker.exists():
        git(root, "rm", "-q", "RED")
        git(root, "commit", "-q", "-m", "game day: fix main")
    return head(root)


def delete_worktree(wt: Path, trash: Path) -> Path | None:
    if not wt.exists():
        return None
    trash.mkdir(parents=True, exist_ok=True)
    dst = trash / f"{wt.name}-{len(list(trash.iterdir()))}"
    shutil.move(str(wt), str(dst))
    return dst


def worktree_list(root: Path) -> list[str]:
    out = []
    for line in git(root, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            out.append(line.split(" ", 1)[1])
    return out
