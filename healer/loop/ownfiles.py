"""The loop's own files at the top of the worktree (progress.md, lessons.md), opened so that what an agent put
there instead cannot redirect healer.

The agent may write the worktree, so it may replace progress.md with a symbolic link to any file, with a hard
link to another file of the tree, a FIFO or a folder. healer runs outside the sandbox: appending through such
a link would write wherever it points (a crontab, a shell profile), reading through one would copy a file
the sandbox hides into the next prompt. Here the last component is never followed, only a plain regular file
with one name is used, and nothing blocks (a FIFO without a reader is refused, not waited on).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_REFUSED = (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EAGAIN, errno.ENOTDIR, errno.EACCES, errno.EPERM)
_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _plain(fd: int) -> bool:
    st = os.fstat(fd)
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


def open_append(path: Path) -> int | None:
    """A descriptor to append to `path` (created when absent), or None when something else stands there
    (the caller sets it aside and tries again)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _FLAGS, 0o644)
    except OSError as e:
        if e.errno in _REFUSED:
            return None
        raise
    if not _plain(fd):
        os.close(fd)
        return None
    return fd


def what_is(path: Path) -> str | None:
    """What stands at `path` when it is not a plain file (for the event that says it was set aside)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        try:
            return f"a symbolic link to {os.readlink(path)}"
        except OSError:
            return "a symbolic link"
    if stat.S_ISDIR(st.st_mode):
        return "a folder"
    if stat.S_ISFIFO(st.st_mode):
        return "a FIFO"
    if stat.S_ISSOCK(st.st_mode):
        return "a socket"
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        return f"a file with {st.st_nlink} names (a hard link)"
    if not stat.S_ISREG(st.st_mode):
        return "a special file"
    return None


def read_tail(path: Path, cap: int) -> str:
    """The last `cap` bytes of a plain file at `path`, decoded; "" for anything else (or nothing)."""
    try:
        fd = os.open(path, os.O_RDONLY | _FLAGS)
    except OSError:
        return ""
    try:
        if not _plain(fd):
            return ""
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - cap), os.SEEK_SET)
        chunks, left = [], cap
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)
