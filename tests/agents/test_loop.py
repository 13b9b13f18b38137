"""One governed loop over each real CLI (claude, codex) against the scripted model kit, under the default sandbox."""

from __future__ import annotations

import subprocess
from pathlib import Path

from chaos.agents.models.server import ModelServer
from tests.agents.conftest import PY, agent_env, calc_repo, need_bwrap, policy, run_env
from tests.conftest import git
from tests.loop.conftest import events, final_line, loop_commits


def loop(repo: Path, pol: Path, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    task = repo.parent / "task.md"
    task.write_text("# Task\n\nFix add() in calc.py so that tests/test_calc.py passes.\n")
    args = [PY, "-m", "healer", "loop", "run", "--policy", str(pol), "--workdir", str(repo), "--task", str(task)]
    return subprocess.run(args, capture_output=True, text=True, env=run_env(env), timeout=timeout)


def test_converging_run_commits(tmp_path, preset, home):
    need_bwrap()
    repo = calc_repo(tmp_path / "repo")
    with ModelServer("converge") as m:
        cp = loop(repo, policy(tmp_path / "p.yaml", preset), agent_env(preset, home, m))
        assert cp.returncode == 0, cp.stdout + cp.stderr
        assert [r["kind"] for r in m.turns()][:3] == ["read", "write", "shell"]
    assert (repo / "calc.py").read_text().endswith("return a + b\n")
    assert len(loop_commits(repo)) == 1, final_line(cp)
    assert "calc.py" in git(repo, "show", "--stat", "HEAD")
    assert events(repo, "loop.started")[0].payload["sandbox"] == "bwrap"
    # the CLI wrote its session files in the run's own config home; the user's stayed as the user left it
    homes = list((repo / ".healer" / "runs").glob(f"*/{preset}-home"))
    assert len(homes) == 1 and any(homes[0].iterdir()), homes
    user = home / (".claude" if preset == "claude" else ".codex")
    assert sorted(p.name for p in user.iterdir()) == ([] if preset == "claude" else ["config.toml"])
    assert not (home / ".claude.json").exists()
