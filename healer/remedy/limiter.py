"""Limits on remediation, read from the shared store so every actor sees the same ones.

Two small limiters (client-go style: each alone, composed by the executor):

- `rate_limited`: at most `count` begun actions of one kind per `per` seconds (policy
  `remediation.rate_limits`), counted over the intent journal of every actor.
- `quiet_period`: the per-ticket remediation lease. An unblock attempt on a ticket
  (by the supervisor, the repair agent or a human) holds the ticket for
  `remediation.quiet_period`; nobody else may try another one inside it. Attempts
  are: intents of an attempt action that reached `begun` (so an intent rolled back
  before it acted does not count), `human.action` events (but `add`: creating a
  ticket is no attempt to unblock it, and would hold a new ticket for the whole quiet
  period), and board changes whose actor is a human (`ticket.moved|labeled|unlabeled`);
  one board command records both, so human attempts on a ticket less than a second
  apart count once. Actions of the same batch
  (one supervisor tick, one repair run) are one attempt, so `stop_agent` then
  `requeue_ticket` on one ticket in one tick is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass

from healer.core.limits import quiet_reason, rate_reason  # the arithmetic the planner applies to its memory
from healer.core.rules import TICKET_LEASE as ATTEMPT_ACTIONS  # actions that take the ticket's lease (one table)

HUMAN_KINDS = ("human.action", "ticket.moved", "ticket.labeled", "ticket.unlabeled")


@dataclass(frozen=True)
class Attempt:
    at: float
    actor: str
    what: str  # action or event kind
    intent: int | None = None


def is_human(actor: str | None) -> bool:
    return actor is not None and (actor == "human" or actor.startswith("human:") or actor.startswith("human-"))


def rate_limited(store, policy, action: str, now: float) -> str | None:
    """The reason `action` may not run now, or None."""
    lim = policy.remediation.rate_limits.get(action)
    if lim is None:
        return None
    n = store.count_intents(action=action, since=now - lim.per, states=("begun", "done"))
    return rate_reason(action, n, lim.count, lim.per)


def attempts(store, ticket: str, since: float, *, exclude_batch: str | None = None) -> list[Attempt]:
    """Unblock attempts on `ticket` since `since`, by anyone."""
    out: list[Attempt] = []
    for it in store.intents(subject=ticket, since=since):
        if it.action not in ATTEMPT_ACTIONS or it.state not in ("begun", "done"):
            continue
        if exclude_batch is not None and it.params.get("_batch") == exclude_batch:
            continue
        out.append(Attempt(it.created_at, it.actor, it.action, it.id))
    human = [Attempt(ev.at, ev.payload.get("actor") or "human", ev.payload.get("action", ev.kind))
             for ev in store.events(subject=ticket, since=since, kinds=HUMAN_KINDS) if _human_attempt(ev)]
    kept = set(_one_per_command([a.at for a in human]))
    out += [a for a in human if a.at in kept]
    return sorted(out, key=lambda a: a.at)


# one board command records a store change (actor human) and a `human.action`: one attempt, not two
_SAME_COMMAND = 1.0


def _human_attempt(ev) -> bool:
    if ev.kind == "human.action":
        return ev.payload.get("action") != "add"  # creating a ticket is no attempt to unblock it
    return is_human(ev.payload.get("actor"))


def _one_per_command(times: list[float]) -> list[float]:
    """Human attempt times with those of one command (within `_SAME_COMMAND` s) merged, keeping the last."""
    out: list[float] = []
    for t in sorted(times):
        if out and t - out[-1] <= _SAME_COMMAND:
            out[-1] = t
        else:
            out.append(t)
    return out


def quiet_period(store, policy, ticket: str, now: float, *, batch: str | None = None) -> str | None:
    """The reason a new unblock attempt on `ticket` must wait, or None."""
    window = policy.remediation.quiet_period
    if window <= 0:
        return None
    recent = attempts(store, ticket, now - window, exclude_batch=batch)
    if not recent:
        return None
    last = recent[-1]
    return quiet_reason(ticket, last.at, now, window, f"{last.what} by {last.actor}")


def record_human(store, ticket: str, action: str, detail: dict | None = None) -> int:
    """Note that a human acted on a ticket outside the board commands (counts as an attempt)."""
    return store.append("human.action", ticket, {"action": action, "actor": "human", **(detail or {})})


class HumanLog:
    """The human attempts of the event log, read incrementally: a long-lived caller (the supervisor, every
    tick) reads only the events appended since its last look, as the log is append-only. The first read,
    and any read for a window that starts before what it kept (the clock went back), is a full one."""

    def __init__(self) -> None:
        self.seen: int | None = None  # the newest event id of the human kinds looked at
        self.floor = float("inf")  # what is kept covers every attempt at or after this time
        self.times: dict[str, list[float]] = {}

    def read(self, store, since: float) -> dict[str, list[float]]:
        if self.seen is None or since < self.floor:
            self.seen = store.last_event_id()  # before reading: an event appended meanwhile is read next time
            # the payload filter keeps this to the (few) human events, not every ticket move of the window
            evs = store.events(kinds=["human.action"], since=since, until_id=self.seen) + store.events(
                kinds=HUMAN_KINDS[1:], since=since, contains='"actor":"human', until_id=self.seen)
            self.times = {}
        else:
            evs = store.events(after=self.seen, kinds=HUMAN_KINDS)
            if evs:
                self.seen = max(self.seen, evs[-1].id)
        for ev in evs:
            if ev.at >= since and _human_attempt(ev):
                self.times.setdefault(ev.subject, []).append(ev.at)
        self.floor = since
        out: dict[str, list[float]] = {}
        for subject in list(self.times):
            kept = sorted(t for t in self.times[subject] if t >= since)
            if kept:
                self.times[subject] = kept
                out[subject] = kept
            else:
                del self.times[subject]
        return out


def recent_attempts(store, since: float, *, exclude_actor: str | None = None,
                    humans: HumanLog | None = None) -> dict[str, list[float]]:
    """Unblock attempts on every ticket since `since`, by anyone but `exclude_actor` (a few small queries;
    `humans` keeps the human part between calls)."""
    out: dict[str, list[float]] = {}
    for it in store.intents(states=("begun", "done"), since=since, actions=ATTEMPT_ACTIONS, exclude_actor=exclude_actor):
        out.setdefault(it.subject, []).append(it.created_at)
    human = (humans or HumanLog()).read(store, since)
    for subject, times in human.items():
        out.setdefault(subject, []).extend(_one_per_command(times))
    return {k: sorted(v) for k, v in out.items()}
