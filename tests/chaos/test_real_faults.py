"""Every process, git and store fault of the real engine, on a real fleet with scripted agents
(chaos/agents/fleet_agent.py launched by the real dispatcher): each one is injected, heals or is
rolled back, and the run leaves nothing behind. The recipe is the shipped scenario chaos/scenarios/real-faults.yaml
(`healer gameday run real-faults`); these tests run it and judge what it leaves."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.engine import Result


@pytest.fixture(scope="module")
def faults_run(tmp_path_factory) -> Result:
    from chaos import engine
    from chaos.scenario import SCENARIO_DIR, load

    # the shipped recipe itself (chaos/scenarios/real-faults.yaml, docs/chaos.md "The real-mode recipe")
    d = tmp_path_factory.mktemp("real-faults")
    return engine.run(load(SCENARIO_DIR / "real-faults.yaml"), d / "run")


@pytest.mark.long  # 37 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_every_fault_is_injected(faults_run):
    r = faults_run
    assert r.error is None, r.stats.get("traceback")
    # injections are the `action` activities; the expectations (probes) are judged by the next test
    acts = {a.name: a for a in r.activities if a.type == "action"}
    bad = {n: a.output for n, a in acts.items() if a.status != "succeeded" or "could not" in str(a.output)}
    assert bad == {}
    assert "SIGSTOP" in str(acts["fault stop_agent on A-1"].output)
    assert "SIGKILL pids [" in str(acts["fault kill_agent on A-1"].output)
    assert "wall clock jumped +3600s" in str(acts["fault clock_jump"].output)  # chaos/faults/real_world.py


@pytest.mark.long  # 32 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_the_fleet_heals_and_nothing_is_left(faults_run):
    r = faults_run
    assert r.ok, "\n".join(c.message for c in r.failures)
    kinds = [x.name for x in r.rollbacks]
    assert any("sigcont" in k for k in kinds) and any("remove_file" in k for k in kinds)


@pytest.mark.long  # shares the 32 s real game day of the tests above (2026-12-07)
def test_the_clock_jump_reaches_every_healer_process(faults_run):
    """Real mode: the healer children read the jumped wall clock (healer/clock.py's offset file); the engine does not."""
    from healer.store import open_store

    store = open_store(Path(faults_run.stats["fleet"]))
    try:
        [jump] = [e for e in store.events(kinds=["chaos.fault"]) if e.payload["fault"] == "clock_jump"]
        later = [e.at - jump.at for e in store.events(after=jump.id, kinds=["supervisor.tick"])]
    finally:
        store.close()
    assert later and max(later) > 3500, later
