"""Faults that act on the board only (the store and the product's notify), hence the same in both worlds."""

from __future__ import annotations

from typing import Any

from chaos.scenario import Fault


def alert_flood(e: Any, f: Fault) -> str:
    """`count` alerts over `params.keys` keys through healer's notify: its quotas decide what is sent."""
    from healer.notify import notify

    keys = int(f.params.get("keys", 5))
    sent = sum(bool(notify(e.store, e.policy, f"flood:{i % keys}", f"external alert {i}", severity="warning"))
               for i in range(f.count))
    return f"{f.count} alerts, {sent} notified"
