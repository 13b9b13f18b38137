"""The standard suite: every scenario passes, and each fails for the right reason, and only then.

Each scenario's `disable:` switches off the one feature it exercises; `disable_breaks:` names the
expectations that must then break — exactly those, no more, no fewer — and `incident:` what the disabled
run must show (the incident at its own scale). Scenarios that exist in both worlds (`X` and `X-real`)
are each checked in their own world.
"""

from __future__ import annotations

import pytest
import yaml

from chaos import engine
from chaos.scenario import discover, load, seconds

SCENARIOS = discover()

# `make test` keeps under 10 minutes on two cores (`make test-long`, which .ci/run runs right after it, holds the
# rest and must pass too): every simulated scenario passes there, and the real-mode ones are represented by one; a
# real game day costs its wall-clock seconds, and a disabled run of a long story, or of one whose incident grows at
# scale (measured: 15-80 s each), doubles a long simulation
REAL_IN_MAKE_TEST = {"busy-worktree-real"}
LONG = 6 * 3600  # simulated seconds from which a scenario's disabled run is `long`
DISABLED_AT_SCALE = {"zombie-ticket", "alert-flood", "relaunch-storm-budget"}


def _mode(path) -> str:
    """The scenario's mode, read from its YAML alone: collection must not pay for validating every scenario."""
    return (yaml.safe_load(path.read_text()) or {}).get("mode", "simulated")


def _passes(path):
    slow = _mode(path) == "real" and path.stem not in REAL_IN_MAKE_TEST
    return pytest.param(path, id=path.stem, marks=[pytest.mark.long] if slow else [])


def _fails(path):
    raw = yaml.safe_load(path.read_text()) or {}
    real = raw.get("mode", "simulated") == "real"
    slow = (real and path.stem not in REAL_IN_MAKE_TEST) or (not real and seconds(raw.get("duration", "1h")) >= LONG) \
        or path.stem in DISABLED_AT_SCALE
    return pytest.param(path, id=path.stem, marks=[pytest.mark.long] if slow else [])


@pytest.mark.parametrize("path", [_passes(p) for p in SCENARIOS])
def test_scenario_passes(path, tmp_path):
    sc = load(path)
    assert not sc.warnings, sc.warnings
    r = engine.run(sc, tmp_path)
    assert r.ok, r.error or "\n".join(c.message for c in r.failures)


@pytest.mark.parametrize("path", [_fails(p) for p in SCENARIOS])
def test_scenario_fails_for_the_right_reason(path, tmp_path):
    """Disabled, exactly the declared expectations break, each naming itself; the incident checks hold."""
    sc = load(path)
    assert sc.disable, f"{sc.name}: no `disable:`, so nothing proves it can fail"
    assert sc.disable_breaks, f"{sc.name}: `disable:` names no expectation it must break (disable_breaks:)"
    r = engine.run(sc, tmp_path, disabled=True)
    assert r.status == "failed", f"{sc.name} {r.status} with {sc.disable}: {r.error}"
    broken = {c.name for c in r.failures}
    assert sc.broke_as_declared(broken), (
        f"{sc.name} disabled broke {sorted(broken)}, declared {sorted(sc.disable_breaks)}"
        f" (may break: {sorted(sc.disable_may_break)}):\n" + "\n".join(c.message for c in r.failures))
    assert all(c.message.startswith(f"expectation '{c.name}' broken: ") for c in r.failures)
    bad = [c.message for c in r.incident if not c.ok]
    assert not bad and len(r.incident) == len(sc.incident), bad


def test_disable_switches_off_one_feature_only():
    """No shipped `disable:` switches all remediation off: each names a product switch, an action, a rule
    or a policy key of its own feature."""
    for p in SCENARIOS:
        sc = load(p)
        allowed = sc.disable.get("remediation", {}).get("allowed")
        assert allowed is None, f"{sc.name}: disable replaces the whole whitelist with {allowed}"


def test_relaunch_storm_budget_is_exact():
    """Only the budget and backoff hold: 5 launches, gaps of 5/10/20/40 min after each 20 s run (+ a dispatch tick)."""
    sc = load(discover(["relaunch-storm-budget"])[0])
    r = engine.run(sc)
    launches = [t for t, k, s, _ in r.timeline if k == "dispatch.launched"]
    assert len(launches) == 5 and not r.kept
    gaps = [b - a for a, b in zip(launches, launches[1:], strict=False)]
    for gap, backoff in zip(gaps, (300, 600, 1200, 2400), strict=True):
        assert backoff + 20 <= gap <= backoff + 20 + 30, gaps


def test_simulation_is_deterministic(tmp_path):
    sc = load(discover(["relaunch-storm"])[0])
    a = engine.run(sc, tmp_path / "a")
    b = engine.run(sc, tmp_path / "b")
    assert [(round(t, 3), k, s) for t, k, s, _ in a.timeline] == [(round(t, 3), k, s) for t, k, s, _ in b.timeline]
