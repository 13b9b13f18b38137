"""Ticket lifecycle: the one table of allowed transitions.

Theory of operation (after h11's _state.py): everything that changes a ticket's
state goes through `check()`; nothing else may write a state. The table also draws
the diagram in the README (`healer board states` prints it as Mermaid).

    queued -> in_progress -> review -> done
    plus blocked, needs_human, closed
"""

from __future__ import annotations

from healer.errors import HealerError

QUEUED = "queued"
IN_PROGRESS = "in_progress"
REVIEW = "review"
DONE = "done"
BLOCKED = "blocked"
NEEDS_HUMAN = "needs_human"
CLOSED = "closed"

STATES = (QUEUED, IN_PROGRESS, REVIEW, DONE, BLOCKED, NEEDS_HUMAN, CLOSED)
TERMINAL = frozenset({DONE, CLOSED})

# (from, to) -> the event that causes it
TRANSITIONS: dict[tuple[str, str], str] = {
    (QUEUED, IN_PROGRESS): "launch",
    (IN_PROGRESS, REVIEW): "proposal_opened",
    (IN_PROGRESS, QUEUED): "requeue",
    (IN_PROGRESS, NEEDS_HUMAN): "budget_exhausted",
    (IN_PROGRESS, BLOCKED): "blocked",
    (REVIEW, DONE): "merged",
    (REVIEW, IN_PROGRESS): "replay",
    (REVIEW, QUEUED): "proposal_rejected",
    (REVIEW, BLOCKED): "replays_exhausted",
    (REVIEW, NEEDS_HUMAN): "budget_exhausted",
    (QUEUED, NEEDS_HUMAN): "budget_exhausted",
    (QUEUED, BLOCKED): "blocked",
    (BLOCKED, QUEUED): "unblocked",
    (NEEDS_HUMAN, QUEUED): "human_requeue",
    (DONE, QUEUED): "reopened",
    # a ticket whose work is already merged, or that nobody can finish, is closed
    (QUEUED, CLOSED): "close",
    (IN_PROGRESS, CLOSED): "close",
    (REVIEW, CLOSED): "close",
    (BLOCKED, CLOSED): "close",
    (NEEDS_HUMAN, CLOSED): "close",
    (DONE, CLOSED): "close",
}


class InvalidTransition(HealerError):
    exit_code = 65


def check(ticket_id: str, frm: str, to: str) -> str:
    """Return the event name of frm -> to, or raise with what is allowed."""
    if to not in STATES:
        raise InvalidTransition(f"{ticket_id}: unknown state {to!r}; states are {', '.join(STATES)}")
    ev = TRANSITIONS.get((frm, to))
    if ev is None:
        allowed = sorted(t for (f, t) in TRANSITIONS if f == frm)
        raise InvalidTransition(
            f"{ticket_id}: cannot move {frm} -> {to}; from {frm} a ticket may go to {', '.join(allowed) or 'nothing'}"
        )
    return ev


def table() -> list[tuple[str, str, str]]:
    """Every allowed move as (from, to, event), in the table's order."""
    return [(f, t, ev) for (f, t), ev in TRANSITIONS.items()]


def mermaid() -> str:
    lines = ["stateDiagram-v2", f"    [*] --> {QUEUED}"]
    for (f, t), ev in TRANSITIONS.items():
        lines.append(f"    {f} --> {t}: {ev}")
    return "\n".join(lines)
