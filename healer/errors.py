"""Exit codes (README "Exit codes") and the errors that carry them.

A `HealerError` is a user-facing problem: the CLI prints its message as one line on
stderr and exits with its code, never a traceback (unless --debug).
"""

from __future__ import annotations

import errno
import sqlite3

OK = 0
FAILED = 1  # a game day whose expectations did not all hold
BUDGET_EXHAUSTED = 2
STALLED = 3
STOPPED = 4
USAGE = 64
INVALID_INPUT = 65
UNAVAILABLE = 69  # sysexits EX_UNAVAILABLE: a service healer needs does not answer (no Docker engine)
INTERNAL = 70
HOST_TROUBLE = 74  # sysexits EX_IOERR: the disk healer writes to is full, over quota or read-only


class HealerError(Exception):
    exit_code = INTERNAL

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(HealerError):
    exit_code = USAGE


class InvalidInput(HealerError):
    """Bad policy, scenario, runbook or data: exit 65. May carry several located lines."""

    exit_code = INVALID_INPUT

    def __init__(self, message: str, lines: list[str] | None = None) -> None:
        super().__init__(message)
        self.lines = lines or [message]


class Unavailable(HealerError):
    """A service healer needs (the Docker engine) does not answer: exit 69, not an internal error."""

    exit_code = UNAVAILABLE


class NotFound(HealerError):
    exit_code = USAGE


class StaleLease(HealerError):
    """A write by a lease holder whose fencing token is no longer the lease's: refused (and recorded)."""


class StoreUnavailable(Unavailable):
    """The store's server (PostgreSQL) cannot be reached (connection refused, lost, or timed out): exit 69."""


class StoreLost(HealerError):
    """The store under a running process was deleted, replaced or made read-only: carrying on would
    split the fleet's brain (this process on the unlinked file, the others on a fresh one). Exit 70, one line."""

    exit_code = INTERNAL


# GitError and StoreCorrupt live here, not in healer.git and healer.store.corrupt (which re-export them), so that
# classifying an error (transient, unexpected) imports neither git's runner nor the store: no import cycle
# (tests/spine/test_import_cycles.py) and the pure core, which imports this module, stays free of both.
class GitError(HealerError):
    """A git command failed (healer/git.py runs them all)."""


_CORRUPT_SIGNS = ("malformed", "file is not a database", "file is encrypted or is not a database", "database corrupt")


class StoreCorrupt(StoreLost):
    """The store's SQLite pages do not parse (healer/store/corrupt.py): exit 74, one line, how to recover."""

    exit_code = HOST_TROUBLE


def corrupt(e: BaseException) -> bool:
    """The store's file is damaged: not an outage to ride out and not healer's bug."""
    if isinstance(e, StoreCorrupt):
        return True
    return isinstance(e, sqlite3.DatabaseError) and any(s in str(e).lower() for s in _CORRUPT_SIGNS)


def transient(e: BaseException) -> bool:
    """A failure worth retrying next tick (a full disk, a busy lock, a git call that failed), not a lost store."""
    if isinstance(e, StoreLost):
        return False
    if isinstance(e, (GitError, OSError, sqlite3.OperationalError)):
        return "readonly" not in str(e) and "read-only" not in str(e)
    return False


class HostTrouble(HealerError):
    """The host cannot take a write (a full disk, a quota, a read-only file system): exit 74, one line,
    what was saved stays saved. Not the work's fault and not healer's: free space, then run it again."""

    exit_code = HOST_TROUBLE


def host_trouble(e: BaseException) -> bool:
    """A failure of the host (a full disk, a quota, a read-only file system), not of the work or of healer:
    the OSError itself, or a message that carries one (git's, SQLite's)."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        return True
    text = str(e)
    return any(s in text for s in ("No space left on device", "Disk quota exceeded", "Read-only file system",
                                   "database or disk is full"))


def unexpected(e: BaseException) -> tuple[int, str]:
    """The exit code and one line for an exception no handler expected: the host's trouble (74), said as
    such, or an internal error (70). Both entry points (healer.cli and the `loop run` fast path) use it."""
    if host_trouble(e):
        return HOST_TROUBLE, f"healer: the host took no more writes: {e}; what was saved stays saved: free space, then run it again"
    if corrupt(e):  # damaged pages: not healer's bug, and retrying will not mend them
        return HOST_TROUBLE, f"healer: the store is damaged ({e}); `healer doctor` says how to recover it"
    return INTERNAL, f"healer: internal error: {type(e).__name__}: {e}"
