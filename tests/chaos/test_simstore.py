"""The simulated world's cached store patches its agents answers on a heartbeat: whatever else is written
beside the heartbeats (in their transaction or not, committed or rolled back), every read equals a fresh read
of the file (hypothesis), and a heartbeat alone costs no re-read."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.engine.simstore import CachedStore
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


def test_a_heartbeat_alone_costs_no_re_read(tmp_path):
    clock = VirtualClock(1000.0)
    s = CachedStore(tmp_path / "healer.db", clock, root=tmp_path)
    s.upsert_agent(_agent("a1"))
    s.upsert_agent(_agent("a2", state="exited"))
    _reads(s)
    misses = s.misses
    clock.advance(30)
    with s.tx():
        s.heartbeat("a1", progress=True)
    s.heartbeat("a1")
    assert s.agents(states=["running"])[0].heartbeat_at == 1030.0
    assert _reads(s) == _reads(SqliteStore(tmp_path / "healer.db", clock, root=tmp_path))
    assert s.misses == misses
    s.close()
