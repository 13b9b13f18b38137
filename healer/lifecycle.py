"""Lifecycles: the one table of allowed transitions for each thing with a state.

Theory of operation (after h11's _state.py): everything that changes the state of a
ticket, an agent, an intent, a proposal or the dispatch pause goes through `check()`
of its table; nothing else may write a state, and the store refuses a move the table
does not list. The tables also draw the diagrams (`healer board states` prints the
ticket's as Mermaid).

    ticket    queued -> in_progress -> review -> done, plus blocked, needs_human, closed
    agent     running -> exited | lost | stopped
    intent    planned -> begun -> done | aborted (planned -> aborted)
    proposal  open -> merged | rejected
    dispatch  running <-> paused
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


class Machine:
    """One lifecycle: its states and its (from, to) -> event table."""

    def __init__(self, thing: str, states: tuple[str, ...], transitions: dict[tuple[str, str], str]) -> None:
        self.thing, self.states, self.transitions = thing, states, transitions

    def check(self, subject: object, frm: str, to: str) -> str:
        if to not in self.states:
            raise InvalidTransition(f"{self.thing} {subject}: unknown state {to!r}; states are {', '.join(self.states)}")
        ev = self.transitions.get((frm, to))
        if ev is None:
            allowed = sorted(t for (f, t) in self.transitions if f == frm)
            raise InvalidTransition(f"{self.thing} {subject}: cannot go {frm} -> {to}; from {frm} it may go to "
                                    f"{', '.join(allowed) or 'nothing'}")
        return ev

    def allowed(self, frm: str, to: str) -> bool:
        return (frm, to) in self.transitions

    def mermaid(self) -> str:
        lines = ["stateDiagram-v2", f"    [*] --> {self.states[0]}"]
        lines += [f"    {f} --> {t}: {ev}" for (f, t), ev in self.transitions.items()]
        return "\n".join(lines)


TICKET = Machine("ticket", STATES, TRANSITIONS)


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
    return TICKET.mermaid()


# -- agents: a registered agent process or container ------------------------------------
AGENT_RUNNING, AGENT_EXITED, AGENT_LOST, AGENT_STOPPED = "running", "exited", "lost", "stopped"
AGENT_ENDED = (AGENT_LOST, AGENT_STOPPED, AGENT_EXITED)  # every state an agent ends in
AGENT = Machine("agent", (AGENT_RUNNING, AGENT_EXITED, AGENT_LOST, AGENT_STOPPED), {
    (AGENT_RUNNING, AGENT_EXITED): "exited",  # ended, exit code known
    (AGENT_RUNNING, AGENT_LOST): "lost",  # gone, no exit recorded (killed, vanished)
    (AGENT_RUNNING, AGENT_STOPPED): "stopped",  # stopped by healer (stop_agent) or by a watch deadline
    # an exit code learnt later (the loop's result file) settles a lost or stopped agent
    (AGENT_LOST, AGENT_EXITED): "exit_recorded",
    (AGENT_STOPPED, AGENT_EXITED): "exit_recorded",
    (AGENT_STOPPED, AGENT_LOST): "lost",
})

# -- intents: the remediation journal -----------------------------------------------------
PLANNED, BEGUN, INTENT_DONE, ABORTED = "planned", "begun", "done", "aborted"
INTENT = Machine("intent", (PLANNED, BEGUN, INTENT_DONE, ABORTED), {
    (PLANNED, BEGUN): "begin",
    (PLANNED, ABORTED): "abort",  # preconditions failed on fresh state, or rolled back before acting
    (BEGUN, INTENT_DONE): "done",
    (BEGUN, ABORTED): "abort",
})

# -- proposals: a ticket's branch offered to main ---------------------------------------
OPEN, MERGED, REJECTED = "open", "merged", "rejected"
PROPOSAL = Machine("proposal", (OPEN, MERGED, REJECTED), {
    (OPEN, MERGED): "merge_gates_passed",
    (OPEN, REJECTED): "merge_gates_failed",
})

# -- the dispatch pause -----------------------------------------------------------------
DISPATCHING, PAUSED = "running", "paused"
DISPATCH = Machine("dispatch", (DISPATCHING, PAUSED), {
    (DISPATCHING, PAUSED): "pause",  # main went red (the dispatcher) or pause_dispatch (the healer)
    (PAUSED, DISPATCHING): "resume",  # only by whoever paused it (or forced)
})

MACHINES = {m.thing: m for m in (TICKET, AGENT, INTENT, PROPOSAL, DISPATCH)}
