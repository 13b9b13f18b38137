"""The faults of issue 40 (chaos/faults/registry.py: model_down, store_read_only), one record each: the target's
next `count` runs end as the loop runner ends when its model endpoint or its store is away (exit 69 and the runner's
cause); the dispatcher files each as the infrastructure's (`attempt.infra` with that cause), never the agent's."""

from __future__ import annotations

import pytest

from chaos import engine
from chaos.faults.registry import FAULTS
from chaos.scenario import Scenario


def _scenario(fault: str) -> Scenario:
    return Scenario.model_validate({
        "name": f"toy-{fault}", "description": "an infrastructure fault on one ticket", "mode": "simulated", "seed": 3,
        "duration": "2h", "overrides": {"retry": {"max_launches": 1, "infra_backoff": ["1m"]}},
        "fleet": {"tickets": [{"id": "Z-1", "behaviour": "succeeds", "params": {"duration": "2m"}, "blocked_by": ["Z-2"]},
                              {"id": "Z-2", "behaviour": "succeeds", "params": {"duration": "1m"}}]},
        "faults": [{"at": "0s", "fault": fault, "target": "Z-1", "count": 2}],
        "expect": [{"name": "two infra attempts", "count": {"kind": "attempt.infra", "subject": "Z-1", "equals": 2}},
                   {"name": "done all the same", "tickets": {"match": "Z-1", "state": "done", "equals": 1}}]})


@pytest.mark.parametrize(("fault", "cause"), [("model_down", "model_unavailable"), ("store_read_only", "store_unavailable")])
def test_an_infrastructure_fault_costs_the_ticket_nothing(tmp_path, fault, cause):
    assert FAULTS[fault].uses == ("target", "count")
    r = engine.run(_scenario(fault), tmp_path / "wd")
    assert r.status == "passed", [c.line() for c in r.checks if not c.ok]
    from healer.store import open_store

    s = open_store(tmp_path / "wd" / "fleet")
    try:
        assert {e.payload["cause"] for e in s.events(kinds=["attempt.infra"])} == {cause}
    finally:
        s.close()
