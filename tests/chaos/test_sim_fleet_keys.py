"""The simulated world honours every key of a scenario's `fleet:`: each is listed (chaos.scenario.FLEET_KEYS),
its policy keys exist in the policy schema, and each one changes the simulated world."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from chaos import engine
from chaos.scenario import FLEET_KEYS, Scenario
from chaos.scenario_parts import FleetSpec
from healer.policy.schema import Fleet
from healer.store import open_store

BASE = """\
name: fleet-keys
description: one key of fleet at a time
mode: simulated
seed: 1
duration: 40m
fleet:
  tickets:
    - {id: T-, count: 4, behaviour: succeeds, params: {duration: 10m}}
expect:
  - invariant: one_live_agent_per_ticket
"""


def test_every_fleet_key_is_listed_and_its_policy_keys_are_in_the_schema():
    assert set(FLEET_KEYS) == set(FleetSpec.model_fields), "a fleet: key the simulated world does not say it reads"
    for key, how in FLEET_KEYS.items():
        assert how.split(":")[0] in ("policy", "world"), key
        if how.startswith("policy:"):
            path = how.split(":")[1].split()[0]  # fleet.pool_size
            assert path.startswith("fleet.") and path.split(".", 1)[1] in Fleet.model_fields, (key, path)


def _run(tmp_path: Path, fleet_extra: dict, name: str):
    d = yaml.safe_load(BASE)
    d["fleet"].update(fleet_extra)
    d["name"] = name
    if fleet_extra.get("main") == "red":
        d["overrides"] = {"fleet": {"main_gates": [{"name": "tests", "run": ["python", "-m", "pytest", "-q"]}]}}
    sc = Scenario.model_validate(d)
    r = engine.run(sc, tmp_path / name)
    store = open_store(Path(r.workdir) / "fleet")
    return r, store


def _max_live(store) -> int:
    spans = [(a.started_at, a.ended_at or float("inf")) for a in store.agents()]
    return max((sum(s <= t < e for s, e in spans) for t, _ in spans), default=0)


@pytest.mark.parametrize("pool", [1, 2])
def test_pool_size_caps_the_live_agents(tmp_path, pool):
    """With pool_size 1 four agents launched at t=0 (the field report): now the pool holds."""
    r, store = _run(tmp_path, {"pool_size": pool}, f"pool-{pool}")
    try:
        assert r.ok, r.error or [c.message for c in r.failures]
        assert _max_live(store) == pool
        first = min(e.at for e in store.events(kinds=["dispatch.launched"]))
        assert sum(e.at == first for e in store.events(kinds=["dispatch.launched"])) == pool
    finally:
        store.close()


def test_the_world_keys_change_the_world(tmp_path):
    r, store = _run(tmp_path, {"main": "red", "files": {"notes/USER.md": "mine\n"}, "random_tickets": 2,
                               "standby_supervisor": True}, "world")
    try:
        root = Path(r.workdir) / "fleet"
        assert (root / "notes" / "USER.md").read_text() == "mine\n"
        assert len([t for t in store.tickets() if t.id.startswith("R-")]) == 2
        assert store.count_events("dispatch.launched") == 0  # main red from the start: the dispatcher's own pause
        holders = {e.payload.get("holder") for e in store.events(kinds=["supervisor.tick", "supervisor.skipped"])}
        assert any("standby" in str(h) for h in holders) or store.count_events("supervisor.skipped") > 0
    finally:
        store.close()


def test_a_red_main_nothing_judges_is_refused():
    d = yaml.safe_load(BASE)
    d["fleet"]["main"] = "red"
    with pytest.raises(ValueError, match="main_gates"):
        Scenario.model_validate(d)
