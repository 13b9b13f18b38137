"""Restart storms: `healer up` SIGKILLed again and again (half the time with its loop runners), then left to finish.

The full campaign (30 tickets, 20 kills, 3 seeds, and the host-crash variant where every kill takes the
runners) is marked `campaign` (`make campaigns`, CI); a short storm runs in `make test`.
"""

from __future__ import annotations

import pytest

from chaos import engine
from chaos.scenario import discover, load
from chaos.storm import StormConfig, StormRun, problems, schedule


def test_the_schedule_is_a_function_of_the_seed():
    a, b = schedule(7, 20, 0.5), schedule(7, 20, 0.5)
    assert a == b and a != schedule(8, 20, 0.5)
    assert sum(k.runners for k in a) == 10
    assert all(0.2 <= k.uptime <= 3.0 for k in a)
    assert all(k.runners for k in schedule(3, 20, 1.0))


def test_the_campaign_scenarios_load():
    for name in ("restart-storm", "restart-storm-host-crash"):
        sc = load(discover([name])[0])
        assert sc.storm is not None and sc.storm.tickets == 30 and sc.storm.kills == 20


@pytest.mark.long  # 10 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_short_storm_loses_nothing(tmp_path):
    run = StormRun(StormConfig(seed=5, tickets=5, kills=3, with_runners=0.67, pool_size=3, agent_delay=0.5,
                               uptime=(0.5, 2.0), finish_timeout=240), tmp_path)
    facts = run.run()
    assert problems(facts) == [], facts
    assert facts["runner_kills"] == 2


@pytest.mark.campaign
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("name", ["restart-storm", "restart-storm-host-crash"])
def test_restart_storm_campaign(name, seed, tmp_path):
    r = engine.run(load(discover([name])[0]), tmp_path, seed=seed)
    assert r.ok, r.error or "\n".join(c.message for c in r.failures)
    assert r.stats["kills"] == 20
