"""A fault is one record (issue 35): a toy fault registered from ONE `FaultSpec`, in this file and nowhere else, is
validated in a scenario, injected in the simulated world and in the real world (a real game day, real store), and
drawn by the explorer. No list to update elsewhere: chaos/scenario_parts.py, chaos/explore.py, the engines and
`gameday list --faults` read the registry."""

from __future__ import annotations

import pytest

from chaos import engine, explore
from chaos.faults.board import tickets
from chaos.faults.registry import FAULTS, REAL, SIM, Explore, FaultSpec, registered
from chaos.faults.world import World
from chaos.faults.worlds import rows, worlds
from chaos.scenario import Scenario
from chaos.scenario_parts import Fault


def toy(e: World, f: Fault) -> str:
    """Labels the target tickets `toy-<n>`: through the World interface only, so the same in both worlds."""
    ids = tickets(e, f)
    for tid in ids:
        e.store.label(tid, f"toy-{f.params['n']}", actor="gameday", at=e.now)
    return f"{len(ids)} ticket(s) labelled toy-{f.params['n']}"


TOY = FaultSpec("toy", "labels the target tickets toy-<n>", "-", ("target",), params={"n": "int", "why": "str"},
                required={"n": "how many toys"}, explore=Explore(ticket=True, size=lambda n: {"params": {"n": n}}),
                inject={SIM: toy, REAL: toy})


@pytest.fixture
def the_toy():
    with registered(TOY) as s:
        yield s
    assert "toy" not in FAULTS


def _scenario(mode: str, extra: dict | None = None) -> Scenario:
    return Scenario.model_validate({
        "name": f"toy-{mode}", "description": "a toy fault registered from one spec", "mode": mode, "seed": 1,
        "duration": "10m" if mode == "simulated" else "20s", "tick": "1s" if mode == "real" else None,
        "fleet": {"tickets": [{"id": "Y-1", "behaviour": "succeeds", "state": "done"},
                              {"id": "Y-2", "behaviour": "succeeds", "state": "done"}]},
        "faults": [{"at": "0s", "fault": "toy", "target": "Y-1", "params": {"n": 3}}],
        "expect": [{"name": "the toy labelled Y-1", "labels": {"match": "Y-1", "label": "toy-3", "present": True}},
                   {"name": "and only Y-1", "labels": {"match": "Y-2", "label": "toy-3", "present": False}}],
        **(extra or {})})


def test_the_toy_is_validated_in_a_scenario(the_toy):
    f = Fault(fault="toy", at=0, target="Y-1", params={"n": 2})
    assert f.params == {"n": 2}
    with pytest.raises(ValueError, match="expected a valid params.n: expected an integer"):
        Fault(fault="toy", at=0, params={"n": "two"})
    with pytest.raises(ValueError, match=r"expected params.n \(how many toys\) for fault: toy"):
        Fault(fault="toy", at=0, params={"why": "fun"})
    with pytest.raises(ValueError, match=r"got 'whyy' \(did you mean 'why'\?\)"):
        Fault(fault="toy", at=0, params={"n": 1, "whyy": "x"})
    assert worlds(the_toy) == (SIM, REAL)
    assert {"fault": "toy", "worlds": [SIM, REAL], "params": ["target", "params.n", "params.why"], "undone_by": None,
            "what": TOY.what, "undo": "-"} in rows()


def test_unregistered_the_toy_is_no_fault():
    assert "toy" not in FAULTS
    with pytest.raises(ValueError, match=r"expected a fault of the registry .*got 'toy'"):
        Fault(fault="toy", at=0)
    with pytest.raises(ValueError, match=r"did you mean 'kill_agent'"):
        Fault(fault="kill_agnet", at=0)


def test_the_toy_is_injected_in_the_simulated_world(the_toy, tmp_path):
    r = engine.run(_scenario("simulated"), tmp_path / "wd")
    assert r.ok, (r.error, [c.message for c in r.failures])
    [act] = [a for a in r.activities if a.type == "action"]
    assert (act.name, act.status, act.output) == ("fault toy on Y-1", "succeeded", "1 ticket(s) labelled toy-3")


def test_the_toy_is_injected_in_the_real_world(the_toy, tmp_path):
    """A real game day (chaos/engine/real.py): a real fleet repository and store, a real `healer supervise` tick."""
    r = engine.run(_scenario("real", {"real": {"dispatcher": "none"}}), tmp_path / "wd")
    assert r.ok, (r.error, r.stats.get("traceback"), [c.message for c in r.failures])
    [act] = [a for a in r.activities if a.type == "action"]
    assert (act.name, act.status, act.output) == ("fault toy on Y-1", "succeeded", "1 ticket(s) labelled toy-3")


def test_the_toy_is_explored(the_toy, tmp_path):
    assert explore.timed_faults()[-1] == "toy"  # drawn after the built-in ones: their seeds keep their schedules
    assert explore.make_fault("toy", 5, "E-1", 4) == {"fault": "toy", "at": "5m", "target": "E-1", "params": {"n": 4}}
    # the first seed whose schedule draws the toy (and is small), run in the simulated world against the invariants
    def small_with_a_toy(sch: dict) -> bool:
        return any(f["fault"] == "toy" for f in sch["faults"]) and len(sch["tickets"]) <= 3 and len(sch["faults"]) <= 3

    seed = next(s for s in range(500) if small_with_a_toy(explore.schedule_for_seed(s)))
    r = engine.run(explore.scenario_for_seed(seed), tmp_path / "wd")
    assert r.error is None, r.stats.get("traceback")
    toys = [a for a in r.activities if a.type == "action" and a.name.startswith("fault toy")]
    assert toys and all(a.status in ("succeeded", "skipped") for a in toys), [(a.name, a.output) for a in toys]
    assert all(c.ok for c in r.checks), [c.message for c in r.failures]
