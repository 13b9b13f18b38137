"""The humans' unblock attempts read incrementally between ticks (remedy.limiter.HumanLog) are the ones a
fresh read of the whole window finds, whatever is appended between reads and however the window moves."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healer.clock import VirtualClock
from healer.remedy import limiter
from healer.store.sqlite import SqliteStore

EVENT = st.tuples(
    st.sampled_from(["human.action", "ticket.moved", "ticket.labeled", "ticket.unlabeled", "intent.done", "supervisor.tick"]),
    st.sampled_from(["T-1", "T-2", "T-3"]),
    st.sampled_from(["human", "human:ana", "dispatcher", "supervisor", None]),
    st.sampled_from(["move", "add", "label"]),
)
STEP = st.one_of(
    st.tuples(st.just("append"), st.lists(EVENT, max_size=4)),
    st.tuples(st.just("advance"), st.floats(min_value=-600, max_value=3600)),  # the clock may go back
    st.tuples(st.just("read"), st.floats(min_value=0, max_value=7200)),  # window length
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, max_size=25))
def test_incremental_human_attempts_equal_a_fresh_read(tmp_path_factory, steps):
    clock = VirtualClock(1_000_000.0)
    store = SqliteStore(tmp_path_factory.mktemp("h") / "healer.db", clock)
    try:
        log = limiter.HumanLog()
        for op, arg in steps:
            if op == "append":
                for kind, subject, actor, action in arg:
                    payload = {"action": action} if kind == "human.action" else {}
                    if actor is not None:
                        payload["actor"] = actor
                    store.append(kind, subject, payload)
            elif op == "advance":
                clock.jump(arg)
            else:
                since = clock.now() - arg
                assert log.read(store, since) == limiter.HumanLog().read(store, since)
                assert limiter.recent_attempts(store, since, humans=log) == limiter.recent_attempts(store, since)
    finally:
        store.close()
