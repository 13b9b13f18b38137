"""Faults on the dispatcher's launch path (chaos/faults/registry.py): each leaves, in the simulated world, the state
the product's own checks recognise on a machine (its Git port, its process table), and nothing of it outlives the
game day."""

from __future__ import annotations

from chaos.engine.sim import SimEngine
from chaos.faults.worlds import SIM, inject
from chaos.scenario import Scenario
from chaos.scenario_parts import Fault
from healer import conventions as cv


def _engine(tmp_path) -> SimEngine:
    sc = Scenario.model_validate({
        "name": "toy-launch", "description": "tickets waiting on B-1", "mode": "simulated", "seed": 3, "duration": "1h",
        "fleet": {"tickets": [{"id": "B-1", "behaviour": "succeeds", "params": {"duration": "30m"}},
                              {"id": "H-1", "behaviour": "succeeds", "blocked_by": ["B-1"]}]},
        "expect": [{"tickets": {"match": "*", "state": "done", "min": 0}}]})
    e = SimEngine(sc, tmp_path)
    e.begin()
    e.advance(60.0)
    return e


def test_half_made_worktree_is_a_folder_git_does_not_know_and_held_is_busy(tmp_path):
    e = _engine(tmp_path)
    try:
        wt = cv.worktree_for(e.root, "H-1")
        out = inject(SIM, e, Fault(fault="half_made_worktree", target="H-1", at=60, params={"held": True}))
        assert "H-1" in out and "held" in out
        assert wt.is_dir() and "git does not know" in (e.git.half_made(e.root, wt) or "")
        assert any(e.ports.processes.busy([wt]).values())  # the product's process table sees the holder
        assert {str((wt / p).relative_to(e.root)) for p in ("README.md", "src/part.py")} <= set(e.injected)  # kept, wherever
        inject(SIM, e, Fault(fault="release_worktree", at=61))
        assert not any(e.ports.processes.busy([wt]).values())
    finally:
        e.abort()
