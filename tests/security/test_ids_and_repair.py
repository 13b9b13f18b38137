"""Ticket ids are safe git ref components at creation (exit 65); the repair agent's budget is
durable per fleet and day whatever its run id; it may quarantine unknown files in a ticket's
worktree, never healer's own state."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from healer.conventions import branch_for, ticket_id_problem
from healer.errors import HealerError
from healer.init import init_fleet
from healer.policy.schema import Policy
from healer.repair.server import Refused, RepairTools
from tests.conftest import healer, make_repo


def _git_accepts(tid: str) -> bool:
    return subprocess.run(["git", "check-ref-format", "--branch", branch_for(tid)], capture_output=True).returncode == 0


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="ab9._-", min_size=1, max_size=12))
def test_ticket_id_rule_never_lets_through_what_git_refuses(tid):
    if ticket_id_problem(tid) is None:
        assert _git_accepts(tid), tid


@pytest.mark.parametrize("tid", ["x.lock", "a..b", "end.", "-x", ".x", "a/b", "a b", "é"])
def test_bad_ticket_ids_refused_at_creation(tmp_path, store, tid):
    with pytest.raises(HealerError) as e:
        store.add_ticket("t", id=tid)
    assert e.value.exit_code == 65


def test_board_add_bad_id_exit_65(tmp_path):
    root = make_repo(tmp_path / "f")
    init_fleet(root)
    cp = healer("board", "add", "x", "--id", "x.lock", cwd=root)
    assert cp.returncode == 65 and len(cp.stderr.strip().splitlines()) == 1, cp.stderr


def test_budget_durable_across_restarts_and_run_ids(tmp_path, store, vclock):
    pol = Policy.model_validate({"version": 1, "repair_agent": {"max_tool_calls": 2, "max_runs_per_day": 2}})
    root = tmp_path
    allowed = 0
    per_run = []
    for run in ("a", "a", "b", "c"):  # a restart of a, then new run ids
        t = RepairTools(root, store, pol, vclock, run_id=run)
        per_run.append(allowed)
        for _ in range(3):
            try:
                n = t.gate("fleet_status", {})
            except Refused as e:
                t.refuse(t.calls, "fleet_status", {}, str(e))
                continue
            t.run("fleet_status", n, {})
            allowed += 1
    per_run.append(allowed)
    gained = [b - a for a, b in zip(per_run, per_run[1:], strict=False)]
    assert gained[:2] == [2, 0]  # a restart of the same run refills nothing
    assert allowed <= 4  # at most 2 runs' worth a day (refused attempts count too), whatever the ids


def test_repair_may_quarantine_in_worktree_not_healer_state(tmp_path, store):
    root = tmp_path
    wt = root / ".healer" / "worktrees" / "T1"
    (wt / ".healer" / "runs").mkdir(parents=True)
    (wt / "stray.txt").write_text("x")
    (wt / ".healer" / "runs" / "state.json").write_text("{}")
    (root / ".healer" / "healer.db.bak").write_text("x")
    t = RepairTools(root, store, Policy(), run_id="r")
    ok, why = t._screen_path(".healer/worktrees/T1/stray.txt")
    assert ok and why is None
    for bad in (".healer/worktrees/T1/.healer/runs/state.json", ".healer/healer.db.bak", ".healer/worktrees/T1/.git"):
        ok, why = t._screen_path(bad)
        assert ok is None and why, bad
