"""Path confinement: every path a remediation touches must live inside the fleet root.

The MCP repair server hands us paths that a model wrote, so this is a security
boundary, not a convenience: `../`, absolute paths elsewhere, and symlinks (in a
parent folder or the file itself) that lead outside the root are refused. The
store, the quarantine and the main repository's `.git` are never targets.
"""

from __future__ import annotations

import os
from pathlib import Path

from healer.errors import HealerError


class UnsafePath(HealerError):
    exit_code = 65


# relative to the fleet root; never a remediation target (the worktrees folder is)
_PROTECTED = (".git", ".healer/healer.db", ".healer/healer.db-wal", ".healer/healer.db-shm", ".healer/quarantine")


def confine(root: str | Path, path: str | Path) -> Path:
    """The absolute path of `path` (relative to `root` or absolute), proven to stay inside `root`.

    The parent folder is resolved (symlinks followed) and must be inside the root; the
    last component is kept as is, so a symlink is handled as a link, not as its target,
    and must itself point inside the root.
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
    if full.is_symlink():
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


class Resolver:
    """`Path.resolve()` for many paths at one moment (the registered worktrees, searched for one folder).

    realpath costs an lstat per component of every path; the worktrees share their folders, so a folder is
    resolved once per Resolver and each path costs one lstat of its last component (a symlink there is
    followed in full). Same answers as `resolve()` while the folders do not change under it: keep one for
    one search, not longer."""

    def __init__(self) -> None:
        self._dirs: dict[str, str] = {}

    def __call__(self, path: str | Path) -> Path:
        raw = str(path)
        folder, name = os.path.split(raw)
        if not os.path.isabs(raw) or os.path.normpath(raw) != raw or name in ("", ".", ".."):
            return Path(raw).resolve()  # relative, or '..' after a symlink means what realpath says: ask it
        real = self._dirs.get(folder)
        if real is None:
            real = self._dirs[folder] = os.path.realpath(folder)
        full = os.path.join(real, name)
        return Path(os.path.realpath(full) if os.path.islink(full) else full)
