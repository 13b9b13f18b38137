"""The standard suite: every scenario passes, and every scenario can fail (acceptance 1 and 2)."""

from __future__ import annotations

import pytest

from chaos import engine
from chaos.scenario import discover, load

SCENARIOS = discover()


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_passes(path, tmp_path):
    sc = load(path)
    r = engine.run(sc, tmp_path)
    assert r.ok, r.error or "\n".join(c.message for c in r.failures)


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_can_fail(path, tmp_path):
    """With the healer feature it exercises disabled, the scenario fails, naming a broken expectation."""
    sc = load(path)
    assert sc.disable, f"{sc.name}: no `disable:` override, so nothing proves it can fail"
    r = engine.run(sc, tmp_path, disabled=True)
    assert r.status == "failed", f"{sc.name} still {r.status} with {sc.disable}: {r.error}"
    names = [c.name for c in r.failures]
    assert names and all(f"expectation '{n}' broken" in c.message for n, c in zip(names, r.failures, strict=True))


def test_simulation_is_deterministic(tmp_path):
    sc = load(discover(["relaunch-storm"])[0])
    a = engine.run(sc, tmp_path / "a")
    b = engine.run(sc, tmp_path / "b")
    assert [(round(t, 3), k, s) for t, k, s, _ in a.timeline] == [(round(t, 3), k, s) for t, k, s, _ in b.timeline]
