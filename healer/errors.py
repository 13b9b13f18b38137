"""Exit codes (SPEC §5) and the errors that carry them.

A `HealerError` is a user-facing problem: the CLI prints its message as one line on
stderr and exits with its code, never a traceback (unless --debug).
"""

from __future__ import annotations

OK = 0
FAILED = 1  # a game day whose expectations did not all hold
BUDGET_EXHAUSTED = 2
STALLED = 3
STOPPED = 4
USAGE = 64
INVALID_INPUT = 65
UNAVAILABLE = 69  # sysexits EX_UNAVAILABLE: a service healer needs does not answer (no Docker engine)
INTERNAL = 70


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


def transient(e: BaseException) -> bool:
    """A failure worth retrying next tick (a full disk, a busy lock, a git call that failed), not a lost store."""
    import sqlite3

    from healer.git import GitError

    if isinstance(e, StoreLost):
        return False
    if isinstance(e, (GitError, OSError, sqlite3.OperationalError)):
        return "readonly" not in str(e) and "read-only" not in str(e)
    return False
