"""The speed-ups keep behaviour: the simulated world's cached store answers exactly as a fresh read of
the same file at every point of a run, and the dispatch order's no-dependency shortcut equals the
topological sort."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos import explore
from chaos.engine.sim import HOST, SimEngine
from healer import lifecycle
from healer.core import dispatch
from healer.records import Ticket
from healer.store import SqliteStore, db_path


def _reads(st_) -> tuple:
    return (st_.tickets(), st_.tickets([lifecycle.IN_PROGRESS]), st_.agents(), st_.agents(states=["running"]),
            st_.agents_to_reap(HOST), st_.agents_to_reap(), st_.worktrees(), st_.proposals(), st_.all_attempts(skip_ticket_states=sorted(lifecycle.TERMINAL)),
            st_.get_setting("dispatch.paused"), st_.get_setting("supervisor.memory"))


@pytest.mark.long  # 16 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@settings(max_examples=6, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), step=st.sampled_from([90.0, 600.0, 1800.0]))
def test_cached_store_equals_a_fresh_read(tmp_path_factory, seed, step):
    eng = SimEngine(explore.scenario_for_seed(seed), tmp_path_factory.mktemp("view"))
    eng.begin()
    fresh = SqliteStore(db_path(eng.root), eng.clock, root=eng.root)
    try:
        t = 0.0
        while t < eng.sc.duration:
            t += step
            eng.advance(t)
            assert _reads(eng.store) == _reads(fresh), f"seed {seed}: stale read at +{t:.0f}s"
    finally:
        fresh.close()
    eng.end()


tickets = st.lists(st.tuples(st.integers(1, 3), st.integers(0, 5), st.sampled_from(["queued", "review", "done", "in_progress"])),
                   max_size=15)


@settings(max_examples=200, deadline=None)
@given(tickets)
def test_order_without_dependencies_is_the_topological_order(rows):
    ts = [Ticket(id=f"T-{i}", title="", state=s, priority=p, body="", labels={}, blocked_by=(), created_at=float(c),
                 updated_at=0.0, data={}) for i, (p, c, s) in enumerate(rows)]
    by_id = {t.id: t for t in ts}

    def key(n: str) -> tuple:
        return (by_id[n].priority, by_id[n].priority, by_id[n].created_at, n)

    assert dispatch.order(ts) == list(nx.lexicographical_topological_sort(dispatch.graph(ts), key=key))
    assert dispatch.cycles(ts) == []
