"""Path confinement: every path a remediation touches must live inside the fleet root.

The MCP repair server hands us paths that a model wrote, so this is a security
boundary, not a convenience: `../`, absolute paths elsewhere, and symlinks (in a
parent folder or the file itself) that lead outside the root are refused. The
store, the quarantine and the main repository's `.git` are never targets.
"""

from __future__ import annotations

from pathlib import Path

from healer.errors import HealerError


class UnsafePath(HealerError):
    exit_code = 65


# relative to the fleet root; never a remediation target (the worktrees folder is)
_PROTECTED = (".git", ".healer/healer.db", ".healer/healer.db-wal", ".healer/healer.db-shm", ".healer/quarantine")


def confine(root: str | Path, path: str | Path, *, link_anywhere: bool = False) -> Path:
    """The absolute path of `path` (relative to `root` or absolute), proven to stay inside `root`.

    The parent folder is resolved (symlinks followed) and must be inside the root; the
    last component is kept as is, so a symlink is handled as a link, not as its target,
    and must itself point inside the root, unless `link_anywhere`: the caller only moves the
    link itself (the quarantine), so where it points does not matter (an agent's link to /etc
    must not pin its worktree forever).
    """
    root_r = Path(root).resolve()
    raw = str(path)
    if not raw or "\x00" in raw:
        raise UnsafePath(f"{raw!r}: expected a path inside the fleet root, got an empty or invalid path")
    p = Path(raw)
    if not p.is_absolute():
        p = root_r / p
    if p.name in ("", ".", ".."):
        raise UnsafePath(f"{raw}: expected a file or folder inside the fleet root, got a path ending in '{p.name or '/'}'")
    parent = p.parent.resolve()
    full = parent / p.name
    if not _inside(full, root_r) or full == root_r:
        raise UnsafePath(f"{raw}: expected a path inside the fleet root {root_r}, got one outside it")
    if full.is_symlink() and not link_anywhere:
        target = full.resolve()
        if not _inside(target, root_r):
            raise UnsafePath(f"{raw}: expected a path inside the fleet root, got a symlink pointing outside ({target})")
    rel = full.relative_to(root_r).as_posix()
    for prot in _PROTECTED:
        if rel == prot or rel.startswith(prot + "/"):
            raise UnsafePath(f"{raw}: expected a fleet path, got healer's own data or the main repository's {prot}")
    return full


def _inside(p: Path, root: Path) -> bool:
    try:
        p.relative_to(root)
        return True
    except ValueError:
        return False


def relative(root: str | Path, path: Path) -> str:
    return path.relative_to(Path(root).resolve()).as_posix()


