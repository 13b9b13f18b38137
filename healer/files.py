"""Files written whole or not at all: the new text goes to a temp file beside the target and is renamed over
it, so a crash or a full disk mid-write leaves the old file as it was (and no half copy: a write that fails
removes its own temp file)."""

from __future__ import annotations

import os
from pathlib import Path

from healer.errors import HostTrouble, UsageError, host_trouble


def write_atomic(path: Path, data: str | bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_only_mount(path: str | Path) -> bool:
    """Whether `path` sits on a file system mounted read-only (False when it cannot be asked)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def ensure_folder(path: Path, where: str) -> Path:
    """`path` as a folder healer may write into, made (with its parents) when missing. Otherwise one line naming
    `where` (the option or argument it came from): a UsageError (64) for a path that is no folder or cannot be
    one, HostTrouble (74) when the host takes no writes there (a read-only file system, a full disk)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"{where}: expected a folder, {path} is a file") from None
    except OSError as e:
        if host_trouble(e):
            raise HostTrouble(f"{where}: {path}: {e.strerror}; the host took no more writes") from None
        raise UsageError(f"{where}: cannot make the folder {path}: {e.strerror or e}") from None
    if read_only_mount(path):
        raise HostTrouble(f"{where}: {path}: read-only file system; the host took no more writes")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: cannot write into the folder {path}: permission denied")
    return path
