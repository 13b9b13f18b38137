"""The restart storm in the simulated world (chaos/engine/simstorm.py): the real dispatcher and supervisor,
dropped at seeded moments (half of them inside a step, at a random store commit) and rebuilt from the store.

A short storm runs in `make test`; the full one (200 tickets x 100 restarts, seeds 1-3) is a campaign.
"""

from __future__ import annotations

import os

import pytest

from chaos import engine
from chaos.scenario import discover, load
from healer import failpoints
from healer.store import open_store


def storm(tickets: int, kills: int):
    sc = load(discover(["restart-storm-sim"])[0])
    st = sc.storm.model_copy(update={"tickets": tickets, "kills": kills})
    expect = [c if c.title != "every ticket done" else c.model_copy(update={"tickets": {"state": "done", "equals": tickets}})
              for c in sc.expect]
    return sc.model_copy(update={"storm": st, "expect": expect})


def test_the_scenario_loads_at_full_size():
    sc = load(discover(["restart-storm-sim"])[0])
    assert sc.mode == "simulated" and sc.storm is not None
    assert (sc.storm.tickets, sc.storm.kills, sc.storm.with_runners, sc.storm.mid_step) == (200, 100, 0.5, 0.5)


def test_a_short_simulated_storm_loses_nothing(tmp_path):
    r = engine.run(storm(30, 15), tmp_path, seed=5)
    assert r.ok, r.error or "\n".join(c.message for c in r.failures)
    s = r.stats
    assert (s["kills"], s["runner_kills"], s["mid_step_kills"]) == (15, 8, 8)
    assert s["runners_killed"] > 0 and s["interrupted"] > 0  # the kills landed on work in flight
    assert not os.environ.get(failpoints.ENV)  # the crash point is disarmed after the run


def test_a_simulated_storm_is_a_function_of_its_seed(tmp_path):
    a, b = (engine.run(storm(8, 6), tmp_path / n, seed=3) for n in ("a", "b"))
    assert a.ok and b.ok
    assert a.stats == b.stats and a.span == b.span
    assert [(k, s) for _, k, s, _ in a.timeline] == [(k, s) for _, k, s, _ in b.timeline]


def test_the_crash_failpoint_passes_every_except_exception_and_rolls_the_transaction_back(tmp_path, monkeypatch):
    (tmp_path / ".healer").mkdir()
    s = open_store(tmp_path)
    try:
        before = s.last_event_id()
        monkeypatch.setenv(failpoints.ENV, "store.before_commit=crash@1")
        failpoints.reset()
        with pytest.raises(failpoints.FailpointCrash):
            try:
                s.append("x.written", "T-1", {})
            except Exception:  # noqa: BLE001 - what the shell's handlers do: a crash must not stop here
                pytest.fail("a crash was caught as an error")
        monkeypatch.delenv(failpoints.ENV)
        failpoints.reset()
        assert s.last_event_id() == before  # rolled back, as a SIGKILL before COMMIT leaves it
    finally:
        s.close()


@pytest.mark.campaign
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_restart_storm_sim_campaign(seed, tmp_path):
    r = engine.run(load(discover(["restart-storm-sim"])[0]), tmp_path, seed=seed)
    assert r.ok, r.error or "\n".join(c.message for c in r.failures)
    assert (r.stats["kills"], r.stats["mid_step_kills"], r.stats["runner_kills"]) == (100, 50, 50)
