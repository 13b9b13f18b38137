"""The incremental snapshot equals a full read after any sequence of store writes (property)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healer import lifecycle
from healer.clock import VirtualClock
from healer.fleet.snapshot import Gatherer, gather
from healer.policy.schema import Policy
from healer.store import open_store

OPS = st.lists(st.tuples(st.sampled_from(["add", "move", "label", "unlabel", "comment", "attempt", "finish", "propose",
                                          "decide", "data", "tick"]),
                         st.integers(0, 7), st.sampled_from(lifecycle.STATES)), min_size=1, max_size=40)


def _view(s):
    return (s.tickets, s.proposals, {k: v for k, v in s.attempts.items() if v})


def _apply(store, clock, op, i, state) -> None:
    tid = f"T-{i}"
    try:
        if op == "add":
            store.add_ticket(f"t{i}", id=tid, priority=i % 3)
        elif op == "move":
            store.move_ticket(tid, state, actor="human")
        elif op == "label":
            store.label(tid, "needs-human", actor="test")
        elif op == "unlabel":
            store.unlabel(tid, "needs-human", actor="test")
        elif op == "comment":
            store.comment(tid, "hello", author="test")
        elif op == "attempt":
            store.ticket(tid)
            store.add_attempt(tid, "launch", run_id=f"r{i}")
        elif op == "finish":
            for a in store.attempts(tid):
                if a.ended_at is None:
                    store.finish_attempt(a.id, exit_code=1, failure_signature="exit 1")
        elif op == "propose":
            store.ticket(tid)
            store.add_proposal(tid, f"healer/{tid}", "abc")
        elif op == "decide":
            for p in store.proposals(tid):
                if p.state == "open":
                    store.decide_proposal(p.id, "rejected", "log")
        elif op == "data":  # as the dispatcher does: data, then an event naming the ticket
            store.set_ticket_data(tid, run_id=f"r{i}")
            store.append("dispatch.launched", tid, {})
    except Exception:  # noqa: BLE001 - illegal moves and missing tickets are part of the exploration
        pass
    clock.advance(1)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=OPS, after=OPS)
def test_incremental_equals_full_read(before, after):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / ".healer").mkdir()
        clock = VirtualClock()
        store = open_store(root, clock)
        pol = Policy()
        g = Gatherer()
        try:
            for op, i, state in before:
                _apply(store, clock, op, i, state)
            g.gather(root, store, pol, clock)
            for op, i, state in after:
                _apply(store, clock, op, i, state)
                if op == "tick":
                    g.gather(root, store, pol, clock)
            inc = g.gather(root, store, pol, clock)
            assert g.board.last != "full"
            assert _view(inc) == _view(gather(root, store, pol, clock))
        finally:
            store.close()


def test_a_full_read_on_schedule_catches_a_write_that_bypassed_the_event_log(tmp_path):
    root = tmp_path
    (root / ".healer").mkdir()
    clock = VirtualClock()
    store = open_store(root, clock)
    pol = Policy()
    store.add_ticket("a", id="T-1")
    g = Gatherer(full_every=60)
    g.gather(root, store, pol, clock)
    with store.tx() as db:  # by hand, no event
        db.execute("UPDATE tickets SET title='edited' WHERE id='T-1'")
    clock.advance(10)
    assert g.gather(root, store, pol, clock).tickets[0].title == "a"
    clock.advance(60)
    assert g.gather(root, store, pol, clock).tickets[0].title == "edited"
    assert g.board.last == "full"
    store.close()
