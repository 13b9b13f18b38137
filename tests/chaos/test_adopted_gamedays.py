"""The adopted-loop game days run the product, not a mirror of it (chaos/engine/sim_adopt.py swaps the process table
only): break healer's own adoption rules on purpose and the scenarios fail, each on the expectation that names
what broke. And the adopted_* faults refuse what they cannot do, as every fault does."""

from __future__ import annotations

import pytest

from chaos import engine
from chaos.engine.sim import SimEngine
from chaos.engine.sim_adopt import SimProcTable
from chaos.faults import NotApplied
from chaos.faults.registry import REAL, SIM
from chaos.faults.worlds import inject, unsupported
from chaos.scenario import discover, load
from chaos.scenario_parts import Fault
from healer.core import adopt as core
from healer.remedy.handlers import adopted as handlers


def _run(name: str, tmp_path):
    return engine.run(load(discover([name])[0]), tmp_path)


@pytest.mark.long  # 6 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_the_simulated_world_hands_the_real_supervisor_its_process_table_and_nothing_else(tmp_path):
    e = SimEngine(load(discover(["adopted-runaway-cost"])[0]), tmp_path)
    e.begin()
    try:
        assert isinstance(e.supervisor.proctable, SimProcTable) and e.supervisor.proctable is e.adopt.table
        e.advance(1.0)
        [a] = e.store.adopted()  # registered by healer.adopt.scan, through the port
        assert a.pid == e.adopt.loops["L-1"].pid and a.worktree == str(e.adopt.loops["L-1"].worktree)
    finally:
        e.abort()


def test_a_core_that_judges_nothing_fails_the_runaway_cost_game_day(monkeypatch, tmp_path):
    monkeypatch.setattr(core, "judge", lambda v, r, now: [])
    r = _run("adopted-runaway-cost", tmp_path)
    broken = {c.name for c in r.failures}
    assert r.status == "failed" and {"snapshotted", "stopped at the cap", "the loop ended by the stop"} <= broken


def test_a_stop_that_skips_its_snapshot_is_caught_signalling_first(monkeypatch, tmp_path):
    # the rule's own snapshot_worktree step planned nothing, and the stop no longer snapshots first
    monkeypatch.setattr(handlers, "_snapshot_recorded", lambda ctx, aid, wt, why: {"ref": None})
    monkeypatch.setattr("healer.actions.snapshot_worktree.plan", lambda s: [])
    r = _run("adopted-endless-loop", tmp_path)
    assert "the snapshot came before any signal" in {c.name for c in r.failures}, [c.message for c in r.failures]


def test_an_adopted_fault_on_no_such_loop_is_not_applied(tmp_path):
    e = SimEngine(load(discover(["adopted-hung-cli"])[0]), tmp_path)
    e.begin()
    try:
        with pytest.raises(NotApplied, match="no running adopted loop"):
            inject(SIM, e, Fault(fault="adopted_hung_cli", at=0, target="L-9"))
        with pytest.raises(NotApplied, match="names its loop"):
            inject(SIM, e, Fault(fault="adopted_runaway_cost", at=0))
        e.advance(1.0)
        with pytest.raises(NotApplied, match="exists already"):
            inject(SIM, e, Fault(fault="adopted_loop", at=0, target="L-1"))
    finally:
        e.abort()
    assert unsupported("adopted_endless_loop", REAL)  # a real loop.sh's gates are its own: simulated only
    assert unsupported("adopted_killed_session", REAL) is None and unsupported("adopted_killed_session", SIM) is None


@pytest.mark.long  # ~35-40 s: the real Claude Code CLI in a real bash loop (2026-12-07)
def test_the_real_killed_session_day_runs_with_the_shipped_loop_where_the_reference_one_is_absent(monkeypatch, tmp_path):
    """A wheel installed elsewhere has no reference loop.sh: the real game days start chaos/agents/loop.sh (ours, the
    same shape) instead, and judge it the same way."""
    from chaos.faults import adopted
    from tests.agents.conftest import need_cli

    need_cli("claude")
    monkeypatch.delenv("HEALER_LOOP_SH_FIXTURE", raising=False)
    monkeypatch.setattr(adopted, "REFERENCE_LOOP_SH", tmp_path / "absent" / "loop.sh")
    assert adopted.loop_sh() == adopted.OWN_LOOP_SH and adopted.OWN_LOOP_SH.is_file()
    r = _run("adopted-killed-session-real", tmp_path)
    assert r.status == "passed", r.error or [c.message for c in r.failures]
