"""Several hosts on one board (fleet.shared_remote): which hosts are lost, and what of theirs to take back.

Each host's dispatcher renews a lease of its own (`host:<id>`, ttl `fleet.host_ttl`); the lease is the
host's heartbeat. A host whose lease expired is lost: nobody else can see its processes, so its agents
are lost with it and its in-progress tickets go back to the queue. A host that stopped cleanly released
its lease: it is not lost, its agents keep running and it adopts them when it comes back.

Pure: the shell (healer/fleet/lost_hosts.py) gathers the leases and the board, applies the plan with
compare-and-sets, and fences the lost host (a new token on its lease) first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from healer import lifecycle
from healer.records import Lease

LEASE_PREFIX = "host:"
FENCED = "fenced-by:"  # holder of a lost host's lease once the supervisor has fenced it


def lease_name(host: str) -> str:
    return f"{LEASE_PREFIX}{host}"


def expired(leases: Mapping[str, Lease | None], now: float) -> frozenset[str]:
    """Hosts (by id) whose host lease exists and has expired; `leases` maps a host id to its Lease or None."""
    return frozenset(h for h, lease in leases.items() if lease is not None and lease.expires_at <= now)


def lost(expired_now: frozenset[str], seen: Mapping[str, float], now: float, grace: float) -> tuple[frozenset[str], dict[str, float]]:
    """Hosts the leader has itself watched expired for `grace` seconds (a new `seen`: when each was first seen
    expired). The grace spares a herd: after the database was paused (or the leader itself was cut off) every
    lease looks expired at once, and every live host renews its own within a second or two."""
    first = {h: seen.get(h, now) for h in expired_now}
    return frozenset(h for h, t in first.items() if now - t >= grace), first


@dataclass(frozen=True)
class Reclaim:
    ticket: str
    host: str
    agents: tuple[str, ...]  # running agents of the lost host on this ticket: recorded as lost
    attempts: tuple[int, ...]  # its open attempts on this ticket: ended (interrupted: the host was lost)


def reclaims(dead: frozenset[str], tickets: Iterable, agents: Iterable, open_attempts: Mapping[str, Iterable[int]],
             me: str) -> list[Reclaim]:
    """The in-progress tickets a lost host held (its agents, or its claim with no agent yet), and only those:
    a ticket with a running agent on a host that is not lost is that host's business."""
    dead = frozenset(dead) - {me}
    if not dead:
        return []
    running: dict[str, list] = {}
    for a in agents:
        if a.state == "running" and a.ticket_id:
            running.setdefault(a.ticket_id, []).append(a)
    out = []
    for t in tickets:
        if t.state != lifecycle.IN_PROGRESS:
            continue
        ags = running.get(t.id, [])
        if any(a.host not in dead for a in ags):
            continue
        holder = (t.data or {}).get("host")
        hosts = {a.host for a in ags} | ({holder} if holder in dead else set())
        if not hosts:
            continue
        out.append(Reclaim(t.id, sorted(hosts)[0], tuple(sorted(a.id for a in ags)),
                           tuple(sorted(open_attempts.get(t.id, ())))))
    return out


@dataclass(frozen=True)
class TakeBack:
    agents: tuple[str, ...]  # agents (running, or ended and still owed their attempt) recorded under an earlier id
    tickets: tuple[str, ...]  # in-progress claims made under an earlier id


def taken_back(agents: Iterable, tickets: Iterable, me: str, machine: str | None, live_hosts: Iterable[str] = ()) -> TakeBack:
    """This host under a new id (HEALER_HOST_ID changed across a restart, issue 40): what its earlier id recorded on
    this very machine is its own again, adopted or ended like anything it ran before a restart. `machine` is the
    identity healer can trust for that (healer/fleet/lost_hosts.py machine_id: this boot and this fleet root, so a
    recorded pid means the same process here); a row without one, or of another machine, is the lost-host rule's.
    A host id in `live_hosts` (another dispatcher holds its lease now, alive) keeps its rows."""
    if not machine:
        return TakeBack((), ())
    keep = set(live_hosts) | {me}

    def ours(data: dict | None, host: str | None) -> bool:
        return bool(host) and host not in keep and (data or {}).get("machine") == machine

    return TakeBack(tuple(sorted({a.id for a in agents if ours(a.data, a.host)})),
                    tuple(sorted(t.id for t in tickets if t.state == lifecycle.IN_PROGRESS
                                 and ours(t.data, (t.data or {}).get("host")))))
