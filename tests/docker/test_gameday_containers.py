"""Issue 8, acceptance 1 and 2 as a REAL game day: chaos/scenarios/docker/containers-game-day.yaml
run by the real engine (real dispatcher, real `supervise --once` ticks, agents in containers,
container faults through the SDK), its `disable:` variant failing by name, and a SIGKILLed
`healer gameday run` whose paused container `healer gameday clean` thaws and removes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from chaos import engine
from chaos.engine.real import RealEngine
from chaos.scenario import SCENARIO_DIR, Scenario, load
from chaos.scenario_parts import Fault
from healer.fleet.runtime import LaunchSpec
from tests.conftest import wait_until
from tests.docker.conftest import require_engine, state_of

pytestmark = pytest.mark.docker
require_engine()
SCENARIO = SCENARIO_DIR / "docker" / "containers-game-day.yaml"


def fleet_containers(client, fleet: Path, status: str | None = None) -> list:
    filters = {"label": f"healer.fleet={fleet}", **({"status": status} if status else {})}
    return client.containers.list(all=True, filters=filters)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private game-day home: undo journals of this test only (and `gameday clean` sees only them)."""
    h = tmp_path / "home"
    monkeypatch.setenv("HEALER_GAMEDAY_HOME", str(h))
    return h


@pytest.fixture
def sweep(dclient):
    """Whatever a failing test leaves in its fleets is removed (the engine's own sweep is under test)."""
    fleets: list[Path] = []
    yield fleets
    for f in fleets:
        for c in fleet_containers(dclient, f):
            c.remove(force=True)


@pytest.mark.long  # 27 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_container_game_day_passes(dclient, tmp_path, home, sweep):
    sc = load(SCENARIO)
    sweep.append(tmp_path / "fleet")
    r = engine.run(sc, tmp_path)
    assert r.ok, r.error or "\n".join(c.message for c in r.failures)
    faults = {a.name: a.output for a in r.activities}
    assert "running->exited" in faults["fault container_kill on K-1"]
    assert faults["fault container_pause on P-*"].count("running->paused") == 1  # count: 1 of the two
    assert not fleet_containers(dclient, tmp_path / "fleet")  # none paused, none at all
    assert not home.exists() or not any(home.iterdir()), "a clean run leaves no undo journal behind"


@pytest.mark.long  # 33 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_container_game_day_disabled_fails_by_name(dclient, tmp_path, home, sweep):
    sc = load(SCENARIO)
    # with the feature off the stop never comes: the run waits out the scenario's `disabled_within` (30 s), not the
    # pass run's margin for a loaded machine (`until_within`, 90 s)
    assert sc.real.disabled_within == 30.0
    sweep.append(tmp_path / "fleet")
    r = engine.run(sc, tmp_path, disabled=True)
    assert r.status == "failed", r.error
    names = [c.name for c in r.failures]
    assert "the paused agent was stopped at its threshold" in names
    assert all(f"expectation '{c.name}' broken" in c.message for c in r.failures)
    # the feature was off, yet the game day still thawed and removed what it paused
    assert "no paused container left" not in names and "no container of the fleet left" not in names
    assert not fleet_containers(dclient, tmp_path / "fleet")


@pytest.mark.long  # 17 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_sigkilled_container_game_day_is_cleaned(dclient, tmp_path, home):
    wd = tmp_path / "wd"
    fleet = wd / sc_name() / "fleet"
    env = {**os.environ, "HEALER_GAMEDAY_HOME": str(home)}
    # --disable (agent_idle: 1h): nothing stops the paused agent, so it is still paused whenever this test, however
    # slow a loaded machine makes it, gets to SIGKILL the run (enabled, a supervisor tick could stop it first)
    runner = subprocess.Popen([sys.executable, "-m", "healer", "gameday", "run", str(SCENARIO), "--quiet", "--disable",
                               "--workdir", str(wd)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        [paused] = wait_until(lambda: fleet_containers(dclient, fleet, "paused"), timeout=120, what="a paused container")
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=10)
        # nothing thawed it: the engine died with its rollback undone, its dispatcher lives on (own session)
        paused.reload()
        assert paused.status == "paused"
        r = subprocess.run([sys.executable, "-m", "healer", "gameday", "clean"], env=env, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "unpause_container: unpaused container" in r.stdout, r.stdout
        assert "containers_cleanup" in r.stdout, r.stdout
        assert not fleet_containers(dclient, fleet, "paused")
        assert not fleet_containers(dclient, fleet)  # the killed game day's dispatcher launches no more either
        again = subprocess.run([sys.executable, "-m", "healer", "gameday", "clean"], env=env, capture_output=True,
                               text=True, timeout=60)
        assert again.stdout.strip() == "nothing left behind"
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait(timeout=10)
        subprocess.run([sys.executable, "-m", "healer", "gameday", "clean"], env=env, capture_output=True, timeout=60)
        for c in fleet_containers(dclient, fleet):
            c.remove(force=True)


HANG = "import signal, time; signal.signal(signal.SIGTERM, lambda *a: exit(0)); time.sleep(300)"


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_every_container_fault_kind_through_the_engine(dclient, runtime, tmp_path, home):
    """Each scenario kind acts on the engine's fleet only, within its count, states read before and after;
    the rollback thaws every pause and removes the fleet's containers."""
    sc = Scenario.model_validate({"name": "container-faults", "mode": "real", "expect": [{"invariant": "no_leftovers"}],
                                  "overrides": {"fleet": {"runtime": "container"}}})
    eng = RealEngine(sc, tmp_path / "gd")
    eng.first_undos()
    eng.setup()
    hs = {f"T{i}": runtime.launch(LaunchSpec(argv=[sys.executable, "-c", HANG], cwd=str(tmp_path),
                                             labels={"fleet": str(eng.root), "ticket": f"T{i}", "run": f"T{i}-01"}))
          for i in range(1, 5)}
    outsider = runtime.launch(LaunchSpec(argv=[sys.executable, "-c", HANG], cwd=str(tmp_path),
                                         labels={"fleet": str(tmp_path / "other"), "ticket": "T1", "run": "T1-01"}))

    def fault(kind, **kw):
        eng.fault(Fault(fault=kind, at="0s", **kw))
        return eng.activities[-1]

    a = fault("container_pause", target="T*", count=2)
    assert a.status == "succeeded" and a.output.count("running->paused") == 2
    paused = sorted(c.labels["healer.ticket"] for c in fleet_containers(dclient, eng.root, "paused"))
    assert len(paused) == 2 and state_of(dclient, outsider.container) == "running"
    assert [u.kind for u in eng.undo.pending()][:2] == ["unpause_container"] * 2  # journaled before acting
    assert "paused->running" in fault("container_unpause", target=paused[0]).output
    fault("container_kill", params={"label": "healer.run=T4-01", "signal": "KILL"})
    assert state_of(dclient, hs["T4"].container) == "exited"
    fault("container_stop", params={"name": hs["T3"].container, "timeout": 1})
    assert state_of(dclient, hs["T3"].container) == "exited"
    assert "exited->running" in fault("container_restart", target="T3", params={"timeout": 1}).output
    assert "no container to act on" in fault("container_unpause", target="T9").output
    evs = eng.store.events(prefix="chaos.container.")
    assert [e.kind.rsplit(".", 1)[1] for e in evs] == ["pause", "pause", "unpause", "kill", "stop", "restart"]
    assert all(e.payload["before"] and e.payload["after"] for e in evs)

    eng.wind_down()
    assert not fleet_containers(dclient, eng.root)  # thawed, then removed with the game day
    assert state_of(dclient, outsider.container) == "running"  # never another fleet's
    assert eng.leftovers() == []
    eng.store.close()


def sc_name() -> str:
    return load(SCENARIO).name
