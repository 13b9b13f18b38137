"""The simulated world's store (chaos/engine/simstore.py) answers as the plain SQLite store does, whatever
the writes before a read, inside or outside transactions that commit or roll back: its caches are an
adapter's, never a second definition of what the store holds."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.engine.simstore import CachedStore
from healer import lifecycle
from healer.clock import VirtualClock
from healer.records import Agent
from healer.store.sqlite import SqliteStore

IDS = st.sampled_from(["A-1", "A-2", "A-3", "A-4"])
STATES = st.sampled_from(["running", *lifecycle.AGENT_ENDED])
DATA = st.sampled_from([{}, {"reaped": True}, {"reaped": True, "reaped_by": "h2"}, {"reaped": True, "reaped_by": "h2",
                                                                                    "stopped_here": True}])
WRITE = st.one_of(
    st.tuples(st.just("upsert"), IDS, STATES, st.sampled_from(["T-1", "T-2"]), st.sampled_from(["h1", "h2"]), DATA,
              st.floats(0, 100)),
    st.tuples(st.just("heartbeat"), IDS, st.booleans()),
    st.tuples(st.just("update"), IDS, STATES, DATA),
    st.tuples(st.just("delete"), IDS),
)
STEP = st.one_of(
    st.tuples(st.just("write"), st.lists(WRITE, min_size=1, max_size=3), st.sampled_from(["plain", "tx", "rollback"])),
    st.tuples(st.just("read")),
    st.tuples(st.just("advance"), st.floats(0.1, 60)),
)


class _Rollback(Exception):
    pass


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


def _reads(store) -> tuple:
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
                                    raise _Rollback
                        except _Rollback:
                            pass
            if step[0] == "read":
                assert _reads(stores[1]) == _reads(stores[0])
        assert _reads(stores[1]) == _reads(stores[0])
    finally:
        for s in stores:
            s.close()
