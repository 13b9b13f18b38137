"""A three-ticket fleet (healer dispatch) over each real CLI: every ticket's work reaches main, once."""

from __future__ import annotations

import sys

import pytest

from chaos.agents.models.server import ModelServer
from healer.policy.schema import Policy
from tests.agents.conftest import CLAUDE_MODEL, agent_env, need_bwrap
from tests.conftest import git
from tests.fleet.conftest import make_fleet

CHECK = "import glob, sys; sys.exit(0 if glob.glob('t*.txt') else 1)"


def fleet_policy(preset: str) -> Policy:
    gate = {"name": "made", "run": [sys.executable, "-c", CHECK], "timeout": "30s"}
    return Policy.model_validate({
        "loop": {"max_iterations": 2, "iteration_timeout": "60s", "kill_grace": "1s", "protected_paths": [],
                 "agent": {"preset": preset, "model": CLAUDE_MODEL if preset == "claude" else None},
                 "gates": [gate]},
        "fleet": {"merge_gates": [gate], "pool_size": 3},
        "notify": {"notifiers": []},
    })


@pytest.mark.long  # 11 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_three_tickets_each_reach_main_once(tmp_path, preset, home, monkeypatch):
    need_bwrap()
    with ModelServer("ticket") as m:
        for k, v in agent_env(preset, home, m).items():
            if v:
                monkeypatch.setenv(k, v)
            else:
                monkeypatch.delenv(k, raising=False)
        f = make_fleet(tmp_path, fleet_policy(preset))
        try:
            for k in (1, 2, 3):
                f.store.add_ticket(f"ticket {k}", id=f"T-{k}", body=f"Create t{k}.txt with the word done.")
            assert len(f.d.tick().launched) == 3
            assert f.d.wait_idle(150)
            merged = []
            for _ in range(4):
                merged += f.d.tick().merged
                if len(merged) == 3:
                    break
            assert sorted(merged) == ["T-1", "T-2", "T-3"], f.store.tail(30)
        finally:
            f.d.stop_agents(grace=1.0)
            f.store.close()
    for k in (1, 2, 3):
        assert (f.root / f"t{k}.txt").read_text() == "done\n"
        assert len(git(f.root, "log", "--format=%H", "main", "--", f"t{k}.txt").split()) == 1  # once
    assert sorted({r["turn"] for r in m.turns()}) == [0, 1]


