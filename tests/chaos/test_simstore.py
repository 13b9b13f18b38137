"""The simulated world's store (chaos/engine/simstore.py) answers as the plain SQLite store does, whatever the
writes before a read (heartbeats or not, inside or outside transactions that commit or roll back): its caches
are an adapter's, never a second definition of what the store holds (hypothesis); and a heartbeat costs the
re-read of one row, not of every agent."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.engine.simstore import CachedStore
from healer import lifecycle
from healer.clock import VirtualClock
from healer.records import Agent
from healer.store import SqliteStore

IDS = ["a1", "a2", "a3", "a4"]


def _agent(i: str, state: str = "running") -> Agent:
    return Agent(id=i, ticket_id=f"T-{i[-1]}", state=state, kind="process", pid=100 + int(i[-1]), host="h",
                 started_at=float(i[-1]), heartbeat_at=0.0, progress_at=0.0, data={"launched_by": "dispatch"})


def _reads(s) -> tuple:
    return (s.agents(), s.agents(states=["running"]), s.agents(ticket_id="T-1"), s.agents(states=("running",), ticket_id="T-2"),
            s.agents_to_reap("h"), s.agents_to_reap())


op = st.one_of(
    st.tuples(st.just("beat"), st.sampled_from([*IDS, "nobody"]), st.booleans()),
    st.tuples(st.just("data"), st.sampled_from(IDS), st.sampled_from([{"launched_by": "dispatch", "reaped": True},
                                                                       {"launched_by": "dispatch", "head": "x"}])),
    st.tuples(st.just("end"), st.sampled_from(IDS)),
    st.tuples(st.just("add"), st.sampled_from(IDS)),
    st.tuples(st.just("hb"), st.sampled_from(IDS)),  # heartbeat columns written some other way
    st.tuples(st.just("tick"), st.floats(0.1, 100.0)),
)
script = st.lists(st.tuples(st.sampled_from(["alone", "tx", "rollback"]), st.lists(op, min_size=1, max_size=4)), max_size=12)


class Boom(Exception):
    pass


def _do(s: CachedStore, clock: VirtualClock, o: tuple) -> None:
    kind = o[0]
    if kind == "beat":
        s.heartbeat(o[1], progress=o[2])
    elif kind == "data":
        s.update_agent(o[1], data=o[2])
    elif kind == "end" and any(a.id == o[1] for a in s.agents(states=["running"])):
        s.update_agent(o[1], state="exited", ended_at=clock.now(), exit_code=0)
    elif kind == "add":
        s.upsert_agent(_agent(o[1]))
    elif kind == "hb":
        s.update_agent(o[1], heartbeat_at=clock.now() + 1)
    elif kind == "tick":
        clock.advance(o[1])


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script)
def test_cached_agents_equal_a_fresh_read_around_heartbeats(tmp_path_factory, steps):
    d = tmp_path_factory.mktemp("simstore")
    clock = VirtualClock(1000.0)
    s = CachedStore(d / "healer.db", clock, root=d)
    fresh = SqliteStore(d / "healer.db", clock, root=d)
    try:
        for i in IDS[:3]:
            s.upsert_agent(_agent(i))
        _reads(s)
        for how, ops in steps:
            if how == "alone":
                for o in ops:
                    _do(s, clock, o)
            else:
                try:
                    with s.tx():
                        for o in ops:
                            _do(s, clock, o)
                        if how == "rollback":
                            raise Boom
                except Boom:
                    pass
            assert _reads(s) == _reads(fresh), (how, ops)
    finally:
        fresh.close()
        s.close()


def test_a_heartbeat_re_reads_its_row_only(tmp_path):
    clock = VirtualClock(1000.0)
    s = CachedStore(tmp_path / "healer.db", clock, root=tmp_path)
    s.upsert_agent(_agent("a1"))
    s.upsert_agent(_agent("a2", state="exited"))
    _reads(s)
    before = dict(s._agent_table.rows)
    clock.advance(30)
    with s.tx():
        s.heartbeat("a1", progress=True)
    s.heartbeat("a1")
    assert s.agents(states=["running"])[0].heartbeat_at == 1030.0
    assert _reads(s) == _reads(SqliteStore(tmp_path / "healer.db", clock, root=tmp_path))
    assert s._agent_table.rows["a2"] is before["a2"] and s._agent_table.rows["a1"] is not before["a1"]  # one row read again
    s.close()


AIDS = st.sampled_from(["A-1", "A-2", "A-3", "A-4"])
STATES = st.sampled_from(["running", *lifecycle.AGENT_ENDED])
DATA = st.sampled_from([{}, {"reaped": True}, {"reaped": True, "reaped_by": "h2"}, {"reaped": True, "reaped_by": "h2",
                                                                                    "stopped_here": True}])
WRITE = st.one_of(
    st.tuples(st.just("upsert"), AIDS, STATES, st.sampled_from(["T-1", "T-2"]), st.sampled_from(["h1", "h2"]), DATA,
              st.floats(0, 100)),
    st.tuples(st.just("heartbeat"), AIDS, st.booleans()),
    st.tuples(st.just("update"), AIDS, STATES, DATA),
    st.tuples(st.just("delete"), AIDS),
)
STEP = st.one_of(
    st.tuples(st.just("write"), st.lists(WRITE, min_size=1, max_size=3), st.sampled_from(["plain", "tx", "rollback"])),
    st.tuples(st.just("read")),
    st.tuples(st.just("advance"), st.floats(0.1, 60)),
)


def _apply(store, w, db=None) -> None:
    if w[0] == "upsert":
        _, aid, state, tid, host, data, started = w
        store.upsert_agent(Agent(aid, tid, state, host=host, started_at=started, data=data))
    elif w[0] == "heartbeat":
        store.heartbeat(w[1], progress=w[2])
    elif w[0] == "update":
        try:
            store.update_agent(w[1], state=w[2], data=w[3])
        except lifecycle.InvalidTransition:
            pass
    else:
        with store.tx() as d:  # nothing in healer deletes an agent; a hand edit of the file might
            d.execute("DELETE FROM agents WHERE id=?", (w[1],))


def _all_reads(store) -> tuple:
    return (store.agents(), store.agents(states=["running"]), store.agents(states=list(lifecycle.AGENT_ENDED)),
            store.agents(ticket_id="T-1"), store.agents(states=["exited"], ticket_id="T-2"),
            store.agents_to_reap(), store.agents_to_reap("h1"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, max_size=30))
def test_the_cached_store_reads_what_the_plain_store_reads(tmp_path_factory, steps):
    d = tmp_path_factory.mktemp("s")
    stores = [SqliteStore(d / "plain.db", VirtualClock(1000.0)), CachedStore(d / "cached.db", VirtualClock(1000.0))]
    try:
        for step in steps:
            for s in stores:
                if step[0] == "advance":
                    s.clock.advance(step[1])
                elif step[0] == "write":
                    _, writes, how = step
                    if how == "plain":
                        for w in writes:
                            _apply(s, w)
                    else:
                        try:
                            with s.tx():
                                for w in writes:
                                    _apply(s, w)
                                    s.agents()  # a read inside the transaction must not be cached past a rollback
                                if how == "rollback":
                                    raise Boom
                        except Boom:
                            pass
            if step[0] == "read":
                assert _all_reads(stores[1]) == _all_reads(stores[0])
        assert _all_reads(stores[1]) == _all_reads(stores[0])
    finally:
        for s in stores:
            s.close()


TIDS = st.sampled_from(["T-1", "T-2", "T-3", "OPS-9"])
TICKET_WRITE = st.one_of(
    st.tuples(st.just("add"), TIDS, st.integers(1, 3), st.sampled_from([[], ["to-review"]])),
    st.tuples(st.just("move"), TIDS, st.sampled_from(list(lifecycle.STATES))),
    st.tuples(st.just("label"), TIDS, st.sampled_from(["to-review", "needs-human", "x"])),
    st.tuples(st.just("unlabel"), TIDS, st.sampled_from(["to-review", "needs-human", "x"])),
    st.tuples(st.just("data"), TIDS, st.sampled_from([{"merged_commit": "abc"}, {"reviews": "T-1"}, {}])),
    st.tuples(st.just("touch"), TIDS),
    st.tuples(st.just("backdate"), TIDS, st.floats(0, 900)),
    st.tuples(st.just("delete"), TIDS),
    st.tuples(st.just("advance"), st.floats(0.5, 60)),
)


def _ticket_write(s, clock, w) -> None:
    from healer.errors import HealerError, NotFound

    try:
        if w[0] == "add":
            s.add_ticket("t", id=w[1], priority=w[2], labels=w[3])
        elif w[0] == "move":
            s.move_ticket(w[1], w[2], actor="human")
        elif w[0] == "label":
            s.label(w[1], w[2], actor="human")
        elif w[0] == "unlabel":
            s.unlabel(w[1], w[2], actor="human")
        elif w[0] == "data":
            s.set_ticket_data(w[1], **w[2])
        elif w[0] == "touch":
            s.touch_ticket(w[1])
        elif w[0] == "backdate":
            s.backdate_ticket(w[1], 1000.0 - w[2], actor="gameday")
        elif w[0] == "delete":
            with s.tx() as d:  # nothing in healer deletes a ticket; a hand edit of the file might
                d.execute("DELETE FROM labels WHERE ticket_id=?", (w[1],))
                d.execute("DELETE FROM tickets WHERE id=?", (w[1],))
        else:
            clock.advance(w[1])
    except (HealerError, NotFound, lifecycle.InvalidTransition):
        pass


def _ticket_reads(s) -> tuple:
    from healer.errors import NotFound

    one = []
    for tid in ("T-1", "T-2", "T-3", "OPS-9"):
        try:
            one.append(s.ticket(tid))
        except NotFound:
            one.append(None)
    return (s.tickets(), s.tickets([lifecycle.QUEUED]), s.tickets([lifecycle.IN_PROGRESS, lifecycle.REVIEW]), one)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(["alone", "tx", "rollback"]), st.lists(TICKET_WRITE, min_size=1, max_size=4)),
                      max_size=15))
def test_cached_tickets_equal_a_fresh_read(tmp_path_factory, steps):
    d = tmp_path_factory.mktemp("tickets")
    clock = VirtualClock(1000.0)
    s = CachedStore(d / "healer.db", clock, root=d)
    fresh = SqliteStore(d / "healer.db", clock, root=d)
    try:
        _ticket_reads(s)
        for how, writes in steps:
            if how == "alone":
                for w in writes:
                    _ticket_write(s, clock, w)
            else:
                try:
                    with s.tx():
                        for w in writes:
                            _ticket_write(s, clock, w)
                            _ticket_reads(s)  # read inside the transaction: never cached past a rollback
                        if how == "rollback":
                            raise Boom
                except Boom:
                    pass
            assert _ticket_reads(s) == _ticket_reads(fresh), (how, writes)
    finally:
        fresh.close()
        s.close()
