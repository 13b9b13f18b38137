"""Host identity and the leading supervisor's take-back of a lost host's tickets (rules: healer/core/hosts.py).

A host's id is `$HEALER_HOST_ID`, else its host name: several fleet roots on one machine that stand for
several hosts (tests, game days) each set their own.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from healer import digest, lifecycle
from healer.core import hosts as host_rules
from healer.core.dispatch import INTERRUPTED

ACTOR = "supervisor"


def host_id() -> str:
    return os.environ.get("HEALER_HOST_ID") or socket.gethostname()


def machine_id(root: str | Path) -> str:
    """Who this host is besides its id (which a restart may change: issue 40): this boot of this machine (the
    kernel's boot id: a reboot, or another machine, gives another) and this fleet root. Rows recorded with the
    same machine id name processes of this boot, seen from this root: a new host id takes them back. "" where
    the boot id cannot be read (nothing is taken back then)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        return ""
    if not boot:
        return ""
    return "m-" + digest.sha256(f"{boot}\0{Path(root).resolve()}".encode()).hexdigest()[:16]


def known_hosts(store) -> set[str]:
    """Hosts the board mentions where something could be lost: running agents' hosts, in-progress claims."""
    hosts = {a.host for a in store.agents(states=["running"]) if a.host}
    hosts |= {h for t in store.tickets(states=[lifecycle.IN_PROGRESS]) if (h := (t.data or {}).get("host"))}
    return hosts


def dead_hosts(store, now: float, me: str, seen: dict[str, float], grace: float) -> frozenset[str]:
    """Lost hosts; `seen` (the leader's memory: when it first saw each host expired) is updated in place."""
    gone = host_rules.expired({h: store.lease(host_rules.lease_name(h)) for h in known_hosts(store) if h != me}, now)
    dead, first = host_rules.lost(gone, seen, now, grace)
    seen.clear()
    seen.update(first)
    return dead


def reclaim(store, now: float, me: str, holder: str, seen: dict[str, float] | None = None, grace: float = 0.0) -> list[dict]:
    """Fence each lost host (its lease passes to `fenced-by:<holder>`, expired at once: its late writes are
    refused, and it takes its lease back, with a new token, when it returns), then, per ticket it held and in
    one transaction each: its agents recorded as lost (and reaped: the host is not there to), its open attempts
    ended as interrupted, the ticket moved back to the queue, compare-and-set on in_progress."""
    dead = dead_hosts(store, now, me, {} if seen is None else seen, grace)
    if not dead:
        return []
    for h in sorted(dead):
        name = host_rules.lease_name(h)
        cur = store.lease(name)
        if cur is not None and not cur.holder.startswith(host_rules.FENCED):
            store.acquire_lease(name, f"{host_rules.FENCED}{holder}", 0, me, 0.0)
    tickets = store.tickets(states=[lifecycle.IN_PROGRESS])
    opened = {t.id: [a.id for a in store.attempts(t.id) if a.ended_at is None] for t in tickets}
    done = []
    for r in host_rules.reclaims(dead, tickets, store.agents(states=["running"]), opened, me):
        why = f"{INTERRUPTED}: host {r.host} lost (its lease expired)"
        with store.tx():
            lease = store.lease(host_rules.lease_name(r.host))
            if lease is None or not lease.holder.startswith(host_rules.FENCED):
                continue  # the host came back meanwhile: its agents are its own again
            t = store.ticket(r.ticket)
            if t.state != lifecycle.IN_PROGRESS:
                continue
            for aid in r.agents:
                a = store.agent(aid)
                if a.state == "running":
                    store.update_agent(aid, state="lost", ended_at=now)
                    store.update_agent(aid, data={**(a.data or {}), "reaped": True, "reaped_by": holder})
            live = {x.id for x in store.attempts(r.ticket) if x.ended_at is None}
            for att in r.attempts:
                if att in live:
                    store.finish_attempt(att, ended_at=now, failure_signature=why)
            store.move_ticket(r.ticket, lifecycle.QUEUED, actor=ACTOR, reason=why, expect=lifecycle.IN_PROGRESS)
            store.append("host.reclaimed", r.ticket, {"host": r.host, "agents": list(r.agents), "attempts": list(r.attempts),
                                                      "by": holder})
        done.append({"ticket": r.ticket, "host": r.host})
    return done
