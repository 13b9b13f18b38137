"""Plain records shared by the store, the core and the adapters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Ticket:
    id: str
    title: str
    state: str
    priority: int = 2  # lower is served first
    body: str = ""
    labels: dict[str, float] = field(default_factory=dict)  # label -> when it was added
    blocked_by: tuple[str, ...] = ()
    created_at: float = 0.0
    updated_at: float = 0.0  # last state change, label, comment or launch
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Comment:
    id: int
    ticket_id: str
    at: float
    author: str
    body: str


@dataclass(frozen=True)
class Agent:
    id: str
    ticket_id: str | None
    state: str  # running | exited | lost | stopped
    kind: str = "process"  # process | container
    pid: int | None = None
    host: str = ""
    container: str | None = None
    run_id: str | None = None
    worktree: str | None = None
    started_at: float = 0.0
    heartbeat_at: float = 0.0
    progress_at: float = 0.0
    ended_at: float | None = None
    exit_code: int | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Adopted:
    """An agent loop healer did not launch, adopted by a policy `adopt:` rule (docs/adopt.md). Its identity is
    (pid, start_ticks): a pid reused by another process has another start time, and is never acted on."""

    id: str
    rule: str
    host: str
    pid: int
    pgid: int
    start_ticks: int  # /proc/PID/stat field 22: clock ticks after boot
    started_at: float  # wall time of that start
    cwd: str
    worktree: str
    cli: str  # claude | codex | command
    session_id: str | None
    state: str  # adopted | gone | stopped
    adopted_at: float
    ended_at: float | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Worktree:
    path: str
    ticket_id: str | None
    branch: str
    created_at: float
    state: str = "active"  # active | removed
    removed_at: float | None = None


@dataclass(frozen=True)
class Proposal:
    id: int
    ticket_id: str
    branch: str
    commit: str
    state: str  # open | merged | rejected
    created_at: float
    decided_at: float | None = None
    gate_log: str = ""


@dataclass(frozen=True)
class Attempt:
    id: int
    ticket_id: str
    kind: str  # launch | resume | replay
    at: float
    run_id: str | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    failure_signature: str | None = None
    state_hash: str | None = None
    head: str | None = None
    gate_log_tail: str = ""


@dataclass(frozen=True)
class Intent:
    id: int
    action: str
    subject: str
    state: str  # planned | begun | done | aborted
    params: dict[str, Any]
    actor: str
    reason: str
    created_at: float
    updated_at: float
    result: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str
    pid: int
    host: str
    acquired_at: float
    expires_at: float
    token: int = 0  # fencing token: grows at every new holder; a holder's writes carry it (store.hold)


@dataclass(frozen=True)
class Event:
    id: int
    at: float
    kind: str
    subject: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class OutboxItem:
    """One notification owed to one remote notifier (`notifier` is its fingerprint, never its URL)."""
    id: int
    key: str
    notifier: str
    idem: str
    payload: dict[str, Any]
    state: str  # pending | delivered | expired | rejected
    created_at: float
    next_at: float
    expires_at: float
    tries: int = 0
    last_error: str = ""
    claimed_by: str | None = None
    claim_until: float | None = None
    delivered_at: float | None = None
