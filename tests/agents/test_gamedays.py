"""Real-mode game days with the real CLIs (chaos/scenarios/agents/): the field reports of issue 32, each passing
with healer and failing, exactly as declared, with --disable. The model is the scripted kit (real.model), the
CLI, its tools and healer's whole fleet (dispatcher, loop, sandbox) the real ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos import engine
from chaos.scenario import load
from tests.agents.conftest import need_bwrap, need_cli

DAYS = Path(__file__).resolve().parents[2] / "chaos" / "scenarios" / "agents"
# each game day with one CLI (both for the dead stream, the field report of Codex): about a minute a run, two runs
# a case; tests/agents/test_loop.py holds every script with both CLIs. Any day runs with the other CLI by hand:
# healer gameday run chaos/scenarios/agents/NAME.yaml --override loop.agent.preset=codex
# (self-commit-push is claude's: with --disable, `sandbox: none`, codex falls back on its own workspace-write sandbox,
# which keeps .git read-only too, so there is nothing to show)
CASES = [("never-ending-loop", "codex"), ("dead-stream", "claude"), ("dead-stream", "codex"),
         ("runaway-cost", "claude"), ("tests-rewritten", "codex"), ("self-commit-push", "claude")]


# about two minutes a case (two whole fleets): `make campaigns` (run by .ci/run after `make test`) holds them, so
# that `make test` stays within its ten minutes; tests/agents/test_loop.py keeps every script in `make test`
@pytest.mark.campaign
@pytest.mark.parametrize("name,cli", CASES, ids=[f"{n}-{c}" for n, c in CASES])
def test_game_day_passes_with_healer_and_breaks_without(name, cli, tmp_path):
    need_cli(cli)
    need_bwrap()
    sc = load(DAYS / f"{name}.yaml")
    assert not sc.warnings, sc.warnings
    over = {"loop": {"agent": {"preset": cli}}}
    r = engine.run(sc, tmp_path / "on", overrides=over, keep=False)
    assert r.ok, r.error or "\n".join(c.message for c in r.failures)
    d = engine.run(sc, tmp_path / "off", overrides=over, disabled=True, keep=False)
    assert d.status == "failed", d.error
    broken = {c.name for c in d.failures}
    assert sc.broke_as_declared(broken), (sorted(broken), "\n".join(c.message for c in d.failures))
