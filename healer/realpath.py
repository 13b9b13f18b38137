"""Many paths resolved at one moment, each folder once."""

from __future__ import annotations

import os
from pathlib import Path


class Resolver:
    """`Path.resolve()` for many paths at one moment (the registered worktrees, searched for one folder).

    realpath costs an lstat per component of every path; the worktrees share their folders, so a folder is
    resolved once per Resolver and each path costs one lstat of its last component (a symlink there is
    followed in full). Same answers as `resolve()` while the folders do not change under it: keep one for
    one search, not longer."""

    def __init__(self) -> None:
        self._dirs: dict[str, str] = {}

    def __call__(self, path: str | Path) -> Path:
        return Path(self.text(path))

    def text(self, path: str | Path) -> str:
        """The resolved path as text (`str(resolver(path))`): a search comparing many paths to one skips
        building a Path for each."""
        raw = str(path)
        folder, name = os.path.split(raw)
        if not os.path.isabs(raw) or os.path.normpath(raw) != raw or name in ("", ".", ".."):
            return str(Path(raw).resolve())  # relative, or '..' after a symlink means what realpath says: ask it
        real = self._dirs.get(folder)
        if real is None:
            real = self._dirs[folder] = os.path.realpath(folder)
        full = os.path.join(real, name)
        return os.path.realpath(full) if os.path.islink(full) else full
