"""A lost host, on both stores: the leading supervisor fences it (a new token on its `host:` lease) and takes
its tickets back in one compare-and-set; the host's late writes are refused and recorded; a host that renews
in time, or one the leader has not watched expired for the grace, keeps its tickets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from healer import lifecycle
from healer.core import hosts as rules
from healer.errors import StaleLease
from healer.fleet import lost_hosts
from healer.records import Agent, Ticket
from healer.store import open_url

TTL = 10.0


def _host_claims(s, host: str, tid: str) -> Agent:
    """What a host's dispatcher does (healer/fleet/dispatch_launch.py: _claim, _launch), under its fenced host lease."""
    lease = s.acquire_lease(rules.lease_name(host), f"dispatch@{host}:1", 1, host, TTL)
    s.hold(lease)
    s.add_ticket("work", id=tid)
    with s.tx():
        assert s.claim_ticket(actor="dispatch", among=[tid]) is not None
        s.set_ticket_data(tid, host=host)
        att = s.add_attempt(tid, "launch", run_id=f"{tid}-01", host=host)
    now = s.now()
    a = Agent(id=f"agent-{tid}-{att.id}", ticket_id=tid, state="running", pid=4242, host=host, started_at=now,
              heartbeat_at=now, data={"launched_by": "dispatch", "attempt": att.id})
    s.upsert_agent(a)
    return a


@pytest.fixture
def two(store_url, vclock, tmp_path):
    """Two connections to one board: the host's dispatcher and the leading supervisor (another host)."""
    host = open_url(store_url, vclock, root=tmp_path / "fleet")
    leader = open_url(store_url, vclock, root=tmp_path / "fleet")
    leader.hold(leader.acquire_lease("supervisor", "supervisor@h2", 2, "h2", 90.0))
    yield host, leader
    host.close()
    leader.close()


def test_a_lost_host_is_fenced_and_its_ticket_requeued_once(two, vclock):
    host, leader = two
    a = _host_claims(host, "h1", "T-1")
    assert lost_hosts.reclaim(leader, leader.now(), "h2", "supervisor@h2") == []  # its lease is fresh
    vclock.advance(TTL + 1)
    assert lost_hosts.reclaim(leader, leader.now(), "h2", "supervisor@h2") == [{"ticket": "T-1", "host": "h1"}]

    t = leader.ticket("T-1")
    assert t.state == lifecycle.QUEUED
    (att,) = leader.attempts("T-1")
    assert att.ended_at is not None and att.failure_signature.startswith("interrupted: host h1 lost")
    ag = leader.agent(a.id)
    assert ag.state == "lost" and ag.data["reaped"] and ag.data["reaped_by"] == "supervisor@h2"
    lease = leader.lease(rules.lease_name("h1"))
    assert lease.holder == f"{rules.FENCED}supervisor@h2"
    # the host comes back: its late write (a heartbeat of the agent it thinks it runs) is refused and recorded
    with pytest.raises(StaleLease):
        host.heartbeat(a.id)
    assert leader.count_events("lease.stale_write_refused") == 1
    # nothing more to take back; the host takes its lease back with a new token
    assert lost_hosts.reclaim(leader, leader.now(), "h2", "supervisor@h2") == []
    back = host.acquire_lease(rules.lease_name("h1"), "dispatch@h1:7", 7, "h1", TTL)
    assert back is not None and back.token > lease.token
    assert leader.count_events("host.reclaimed") == 1


def test_a_host_that_renews_in_time_keeps_its_tickets(two, vclock):
    host, leader = two
    _host_claims(host, "h1", "T-1")
    vclock.advance(TTL - 1)
    host.acquire_lease(rules.lease_name("h1"), "dispatch@h1:1", 1, "h1", TTL)  # renewed: same token
    vclock.advance(TTL - 1)
    assert lost_hosts.reclaim(leader, leader.now(), "h2", "supervisor@h2") == []
    assert leader.ticket("T-1").state == lifecycle.IN_PROGRESS


def test_the_leader_waits_its_grace_before_giving_a_host_up(two, vclock):
    """After a database pause every lease looks expired at once: the leader gives a host up only after watching
    it expired for the grace itself; a host that renews meanwhile keeps its tickets."""
    host, leader = two
    _host_claims(host, "h1", "T-1")
    seen: dict[str, float] = {}
    vclock.advance(TTL + 1)
    assert lost_hosts.reclaim(leader, leader.now(), "h2", "supervisor@h2", seen, grace=3.0) == []
    assert set(seen) == {"h1"}
    vclock.advance(1)
    host.acquire_lease(rules.lease_name("h1"), "dispatch@h1:1", 1, "h1", TTL)  # it was only the pause
    vclock.advance(3)
    assert lost_hosts.reclaim(leader, leader.now(), "h2", "supervisor@h2", seen, grace=3.0) == []
    assert seen == {} and leader.ticket("T-1").state == lifecycle.IN_PROGRESS


# -- the pure rule ----------------------------------------------------------------------------------------

HOSTS = ["h1", "h2", "h3"]


@st.composite
def boards(draw):
    tickets, agents = [], []
    for i in range(draw(st.integers(0, 6))):
        tid = f"T-{i}"
        state = draw(st.sampled_from([lifecycle.QUEUED, lifecycle.IN_PROGRESS, lifecycle.REVIEW, lifecycle.DONE]))
        tickets.append(Ticket(tid, "t", state, data={"host": draw(st.sampled_from([*HOSTS, None]))}))
        for j in range(draw(st.integers(0, 2))):
            agents.append(Agent(f"a-{i}-{j}", tid, draw(st.sampled_from(["running", "lost", "exited"])),
                                host=draw(st.sampled_from(HOSTS))))
    return tickets, agents


@given(boards(), st.frozensets(st.sampled_from(HOSTS)), st.sampled_from(HOSTS))
def test_only_a_lost_hosts_in_progress_tickets_are_taken_back(board, dead, me):
    tickets, agents = board
    out = rules.reclaims(dead, tickets, agents, {}, me)
    by_id = {t.id: t for t in tickets}
    for r in out:
        assert by_id[r.ticket].state == lifecycle.IN_PROGRESS
        assert r.host in dead and r.host != me
        # never a ticket that a running agent on a live host (or on the leader's own host) holds
        assert all(a.host in dead - {me} for a in agents if a.ticket_id == r.ticket and a.state == "running")
        assert set(r.agents) == {a.id for a in agents if a.ticket_id == r.ticket and a.state == "running"}
    assert len({r.ticket for r in out}) == len(out)
