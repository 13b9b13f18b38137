"""Faults that act on the board only (the store and the product's notify), hence the same in both worlds."""

from __future__ import annotations

from chaos.faults.world import World
from chaos.scenario import match
from chaos.scenario_parts import Fault
from healer.lifecycle import InvalidTransition
from healer.notify import notify


def tickets(e: World, f: Fault) -> list[str]:
    """The board's tickets the fault aims at (`target`, a glob; all without one)."""
    return [t.id for t in e.store.tickets() if match(f.target or "*", t.id)]


def alert_flood(e: World, f: Fault) -> str:
    """`count` alerts over `params.keys` keys through healer's notify: its quotas decide what is sent."""
    keys = int(f.params.get("keys", 5))
    sent = sum(bool(notify(e.store, e.policy, f"flood:{i % keys}", f"external alert {i}", severity="warning"))
               for i in range(f.count))
    return f"{f.count} alerts, {sent} notified"


def stale_labels(e: World, f: Fault) -> str:
    ids = tickets(e, f)
    for tid in ids:
        e.store.label(tid, f.params.get("label", "to-review"), actor="gameday", at=e.now - float(f.seconds or 3 * 3600))
    return f"{len(ids)} stale label(s)"


def move_ticket(e: World, f: Fault) -> str:
    """A human moves the target tickets to `params.to`; the lifecycle table decides (a refused move is the output)."""
    out = []
    for tid in tickets(e, f):
        try:
            e.store.move_ticket(tid, f.params["to"], actor="human", reason="game day: a human moved it")
            out.append(tid)
        except InvalidTransition as ex:
            return f"{tid}: {ex}"
    return f"{', '.join(out) or 'no ticket'} moved to {f.params['to']} by a human"
