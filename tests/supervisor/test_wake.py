"""The supervisor wakes on what others write to the store; its tick is only the safety net."""

from __future__ import annotations

import threading

import pytest

from healer.clock import system
from healer.policy.schema import Policy
from healer.store import open_store
from healer.supervisor import Supervisor
from tests.conftest import make_repo, wait_until


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_store_change_wakes_the_supervisor_within_a_second_its_own_writes_do_not(tmp_path):
    root = make_repo(tmp_path / "fleet")
    pol = Policy.model_validate({"supervisor": {"tick": "10m"},
                                 "notify": {"notifiers": [{"kind": "jsonl", "path": ".healer/n.jsonl"}]}})
    store, other = open_store(root, system()), open_store(root, system())
    sup = Supervisor(root, pol, store, system())
    t = threading.Thread(target=sup.run_forever, daemon=True)
    t.start()
    try:
        wait_until(lambda: sup.ticks == 1, 120, "the first tick")
        system().sleep(1.5)
        assert sup.ticks == 1  # its own tick events (and nothing else) did not wake it
        other.add_ticket("new work", id="T-1")  # another process writes: ticket.created
        # woken, not ticked: the next scheduled tick is 10 min away, so any second tick before then is a wake-up
        # (the budget is generous: a loaded CI machine stretches the wake-up latency, never the 10 min)
        wait_until(lambda: sup.ticks == 2, 120, "a woken tick (the scheduled one is 10 min away)")
        other.append("notify.delivered", "k", {})  # courier bookkeeping never changes a finding
        system().sleep(1.5)
        assert sup.ticks == 2
    finally:
        sup.stop()
        t.join(30)
        store.close()
        other.close()


def test_a_store_that_is_away_is_waited_out_for_the_pause_and_its_polls_wake_nobody():
    """StoreChanges over a store that does not answer: each wait rides the outage out for the whole pause on the
    store's clock (never a hot loop of retries), and a poll says there is nothing to be woken by; a bug is raised."""
    from healer.clock import VirtualClock
    from healer.errors import StoreUnavailable
    from healer.supervisor import StoreChanges

    class Away:
        clock = VirtualClock()

        def last_event_id(self):
            raise StoreUnavailable("the store is away")

    store = Away()
    ch = StoreChanges.__new__(StoreChanges)  # absorb() would ask the store that is away
    ch.store, ch.seen = store, 0
    t0 = store.clock.monotonic()

    def away(seen, pause):
        raise StoreUnavailable("the store is away")

    ch.wait(away, 2.5)
    ch.wait(away, 2.5)
    assert store.clock.monotonic() - t0 == 5.0
    assert ch.poll() is False

    def bug(seen, pause):
        raise ValueError("a bug, not an outage")

    try:
        ch.wait(bug, 2.5)
    except ValueError:
        pass
    else:
        raise AssertionError("a bug was ridden out as an outage")
    assert store.clock.monotonic() - t0 == 5.0
