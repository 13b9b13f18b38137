"""The `operator` fault steers through the console's own entry point (healer/console/steer.py Steering.run), so the
real executor judges each click; and it refuses what it cannot do, as every fault does."""

from __future__ import annotations

import pytest

from chaos.engine.sim import SimEngine
from chaos.faults import NotApplied
from chaos.faults.registry import SIM
from chaos.faults.worlds import inject
from chaos.scenario import discover, load
from chaos.scenario_parts import Fault


@pytest.fixture
def world(tmp_path):
    e = SimEngine(load(discover(["operator-releases-ticket"])[0]), tmp_path)
    e.begin()
    try:
        yield e
    finally:
        e.abort()


def test_a_release_of_a_ticket_no_human_holds_is_the_executors_abort(world):
    out = inject(SIM, world, Fault(fault="operator", at=0, target="R-1", params={"action": "release"}))
    assert out.startswith("operator release R-1: aborted") and "not needs_human" in out
    [ev] = world.store.events(kinds=["remedy.aborted"])
    assert ev.payload["actor"] == "operator:gameday" and ev.payload["action"] == "release_ticket"


def test_an_operator_fault_it_cannot_do_is_not_applied(world):
    with pytest.raises(NotApplied, match="no steering action 'reboot'"):
        inject(SIM, world, Fault(fault="operator", at=0, target="R-1", params={"action": "reboot"}))
    with pytest.raises(NotApplied, match="names its ticket"):
        inject(SIM, world, Fault(fault="operator", at=0, params={"action": "release"}))
    with pytest.raises(NotApplied, match="no page sent"):
        inject(SIM, world, Fault(fault="operator", at=0, params={"action": "ack", "page": "needs_human:*"}))
