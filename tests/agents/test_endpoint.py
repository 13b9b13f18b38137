"""A model endpoint that is down (issue 40): the real Claude Code and Codex against a scripted model that answers 529
on every request, or on the first few only. A CLI that only ever got errors is the infrastructure's failure (exit 69,
`model_unavailable`, the run kept for a resume), never a stalled or failed iteration of the agent's; one that got
through after a few failures carries on as if nothing happened."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from chaos.agents.models.server import ModelServer
from tests.agents.conftest import PY, agent_env, calc_repo, codex_config, need_bwrap, policy, run_env
from tests.loop.conftest import events, final_line, loop_commits


def loop(repo: Path, pol: Path, env: dict, *more: str, timeout: float = 120) -> subprocess.CompletedProcess:
    task = repo.parent / "task.md"
    task.write_text("# Task\n\nFix add() in calc.py so that tests/test_calc.py passes.\n")
    args = [PY, "-m", "healer", "loop", "run", "--policy", str(pol), "--workdir", str(repo), "--task", str(task), *more]
    return subprocess.run(args, capture_output=True, text=True, env=run_env(env), timeout=timeout)


def _retrying(preset: str, home: Path, m: ModelServer, retries: int) -> dict:
    """The user's CLI set to retry a failed request `retries` times (the kit's default config retries none)."""
    env = agent_env(preset, home, m)
    if preset == "codex":
        (home / ".codex" / "config.toml").write_text(
            codex_config(m.openai_url).replace("request_max_retries = 0", f"request_max_retries = {retries}"))
    else:
        env["CLAUDE_CODE_MAX_RETRIES"] = str(retries)
    return env


@pytest.mark.long  # 23 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_an_endpoint_down_for_a_whole_iteration_is_infra_and_the_run_resumes(tmp_path, preset, home):
    need_bwrap()
    repo = calc_repo(tmp_path / "repo")
    pol = policy(tmp_path / "p.yaml", preset, max_iterations=2, iteration_timeout="12s")
    with ModelServer("converge", fail=None) as m:  # 529 on every request, until the deadline (Claude keeps retrying)
        cp = loop(repo, pol, agent_env(preset, home, m))
        failed = [r for r in m.requests if r.get("failed")]
    assert cp.returncode == 69, cp.stdout + cp.stderr
    assert failed and "model endpoint unavailable" in final_line(cp)
    run = next((repo / ".healer" / "runs").iterdir())
    res = json.loads((run / "result.json").read_text())
    assert res["cause"] == "model_unavailable" and res["iterations"] == 0, res  # no iteration recorded, none judged
    ev = events(repo, "loop.model_unavailable")
    assert len(ev) == 1 and ev[0].payload["errors"] >= 1, [e.payload for e in ev]
    assert events(repo, "loop.iteration") == []
    # the endpoint is back: the same run goes on from where it was and converges
    with ModelServer("converge") as m:
        cp = loop(repo, pol, agent_env(preset, home, m), "--resume", run.name)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert len(loop_commits(repo)) == 1


@pytest.mark.long  # 5 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_few_failed_requests_then_answers_carry_on(tmp_path, preset, home):
    need_bwrap()
    repo = calc_repo(tmp_path / "repo")
    with ModelServer("converge", fail=2) as m:  # the first two requests fail, the CLI's retries get through
        cp = loop(repo, policy(tmp_path / "p.yaml", preset), _retrying(preset, home, m, 4))
        assert len([r for r in m.requests if r.get("failed")]) == 2
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert events(repo, "loop.model_unavailable") == []
    assert len(loop_commits(repo)) == 1
