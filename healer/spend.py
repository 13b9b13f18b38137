"""What the fleet's loops spent, folded from the event log: per ticket, per UTC day, per agent CLI. Pure: events in,
sums out; `healer status`, `healer board list|show` and the daemons' metrics read the same fold.

The events are the loop runner's (healer/loop/): `loop.started` names the run's agent CLI (`preset`) and its ticket
(the fleet's HEALER_TICKET), `loop.iteration` carries each iteration's streamed spend (`cost_usd`, with its ticket
and day), and `loop.spend_counted` the spend of an iteration discarded mid-stream (`usd`). A run started by a
healer that did not record its ticket in `loop.started` gets it from its first `loop.iteration`; spend of such a
run counted before that stays unattributed to a ticket (still in the day and CLI sums). A value that is not a
positive finite number counts as nothing (as the spend-rate sentinel reads them, healer/fleet/snapshot.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from healer.clock import day_of

KINDS = ("loop.started", "loop.iteration", "loop.spend_counted")

# the label values a metric may carry: the agent presets (healer/loop/agents.py), anything else is "other"
CLIS = ("claude", "codex", "command")
OTHER = "other"


def _usd(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return 0.0
    f = float(v)
    return f if math.isfinite(f) and f > 0 else 0.0


def cli_label(preset: object) -> str:
    return preset if isinstance(preset, str) and preset in CLIS else OTHER


@dataclass
class Ledger:
    """Sums over every spend event folded in so far; `add` one event at a time, in id order (a cursor reader)."""

    by_ticket: dict[str, float] = field(default_factory=dict)
    by_day: dict[str, float] = field(default_factory=dict)
    by_cli: dict[str, float] = field(default_factory=dict)
    by_day_cli: dict[tuple[str, str], float] = field(default_factory=dict)
    iterations: dict[str, int] = field(default_factory=dict)  # per ticket
    clis: dict[str, set[str]] = field(default_factory=dict)  # per ticket: the agent CLIs its runs used
    total: float = 0.0
    runs: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # run id -> (ticket, cli)

    def add(self, e) -> tuple[str, float] | None:
        """Fold one event in; (cli, usd) when it spent something, else None."""
        p = e.payload if isinstance(e.payload, dict) else {}
        if e.kind == "loop.started":
            ticket = p.get("ticket") if isinstance(p.get("ticket"), str) and p.get("ticket") else None
            old = self.runs.get(e.subject)
            self.runs[e.subject] = (ticket or (old[0] if old else None), cli_label(p.get("preset")))
            return None
        if e.kind == "loop.iteration":
            usd = _usd(p.get("cost_usd"))
            ticket = p.get("ticket") if isinstance(p.get("ticket"), str) and p.get("ticket") else None
            given = p.get("day")
            day = given if isinstance(given, str) else day_of(e.at)
        elif e.kind == "loop.spend_counted":
            usd, ticket, day = _usd(p.get("usd")), None, day_of(e.at)
        else:
            return None
        known_ticket, cli = self.runs.get(e.subject, (None, OTHER))
        ticket = ticket or known_ticket
        if ticket and not known_ticket:
            self.runs[e.subject] = (ticket, cli)
        if ticket and e.kind == "loop.iteration":
            self.iterations[ticket] = self.iterations.get(ticket, 0) + 1
            self.clis.setdefault(ticket, set()).add(cli)
        if usd <= 0:
            return None
        if ticket:
            self.by_ticket[ticket] = self.by_ticket.get(ticket, 0.0) + usd
        self.by_day[day] = self.by_day.get(day, 0.0) + usd
        self.by_cli[cli] = self.by_cli.get(cli, 0.0) + usd
        self.by_day_cli[day, cli] = self.by_day_cli.get((day, cli), 0.0) + usd
        self.total += usd
        return cli, usd

    def top_tickets(self, n: int) -> list[tuple[str, float]]:
        """The `n` tickets that spent most, most first (ties by id): a bounded view of an unbounded set."""
        return sorted(self.by_ticket.items(), key=lambda kv: (-kv[1], kv[0]))[:n]

    def last_days(self, n: int) -> list[tuple[str, float]]:
        """The `n` latest days that spent anything, oldest first."""
        return sorted(self.by_day.items())[-n:]


def fold(events) -> Ledger:
    led = Ledger()
    for e in events:
        led.add(e)
    return led


def summary(led: Ledger, days: int = 7, top: int = 10) -> dict:
    """What `healer status --json` prints under `spend`."""
    return {"total_usd": round(led.total, 6),
            "by_day": [{"day": d, "usd": round(v, 6),
                        "by_cli": {c: round(u, 6) for (dd, c), u in sorted(led.by_day_cli.items()) if dd == d}}
                       for d, v in led.last_days(days)],
            "by_cli": {c: round(v, 6) for c, v in sorted(led.by_cli.items())},
            "top_tickets": [{"ticket": t, "usd": round(v, 6)} for t, v in led.top_tickets(top)]}


def usd(v: float) -> str:
    """Dollars for tables: $0 as "-", cents below a dollar kept to four places ($0.0123)."""
    if v <= 0:
        return "-"
    return f"${v:.4f}" if v < 1 else f"${v:,.2f}"


# -- reading the store (a port: the SQLite or PostgreSQL adapter, or a cached one) -------------------------------------

def ledger_of(store) -> Ledger:
    """The whole fleet's spend: every spend event of the log, folded."""
    return fold(store.events(kinds=KINDS))


def ticket_ledger(store, ticket_id: str, run_ids=()) -> Ledger:
    """One ticket's spend: its runs (`run_ids`, from its attempts, and every run whose events name the ticket) folded
    alone, without reading the rest of the log."""
    named = store.events(kinds=["loop.started", "loop.iteration"], contains=f'"ticket":{json.dumps(ticket_id)}')
    runs = dict.fromkeys([*(r for r in run_ids if r), *(e.subject for e in named)])
    led = Ledger()
    for r in runs:
        led.runs[r] = (ticket_id, OTHER)  # loop.started, when there, names the CLI and keeps the ticket
    evs = {e.id: e for r in runs for e in store.events(kinds=KINDS, subject=r)}
    for i in sorted(evs):
        led.add(evs[i])
    return led
