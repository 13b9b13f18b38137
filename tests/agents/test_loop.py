"""One governed loop over each real CLI (claude, codex) against the scripted model kit, under the default sandbox."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psutil
import pytest

from chaos.agents.models.server import ModelServer
from healer.loop import agents
from tests.agents.conftest import PY, TEST, agent_env, calc_repo, need_bwrap, need_cli, policy, run_env
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


def left_in(folder: Path) -> list[str]:
    """Processes still running with their working directory in `folder` (the CLI, its shell, their children)."""
    out = []
    for p in psutil.process_iter(["pid", "cwd", "cmdline"]):
        try:
            cwd = p.info["cwd"] or ""
        except psutil.Error:
            continue
        if cwd.startswith(str(folder)) and p.status() != psutil.STATUS_ZOMBIE:
            out.append(f"{p.pid} {' '.join(p.info['cmdline'] or [])[:120]}")
    return out


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_never_done_ends_at_the_iteration_cap(tmp_path, preset, home):
    need_bwrap()
    repo = calc_repo(tmp_path / "repo")
    with ModelServer("never_done") as m:
        cp = loop(repo, policy(tmp_path / "p.yaml", preset, max_iterations=2), agent_env(preset, home, m))
        runs = len([r for r in m.turns() if r["turn"] == 0])
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "iteration" in final_line(cp) and runs == 2
    assert loop_commits(repo) == []


@pytest.mark.long  # 34 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_hung_stream_ends_at_the_deadline_with_nothing_left(tmp_path, preset, home):
    need_bwrap()
    repo = calc_repo(tmp_path / "repo")
    with ModelServer("hang") as m:
        cp = loop(repo, policy(tmp_path / "p.yaml", preset, max_iterations=1, iteration_timeout="15s"),
                  agent_env(preset, home, m))
        assert [r["kind"] for r in m.turns()] == ["shell", "hang"]  # the CLI was inside the dead stream
        assert left_in(repo) == []  # checked while the model still holds the stream open
    assert cp.returncode == 2, cp.stdout + cp.stderr
    it = events(repo, "loop.iteration")
    assert it and it[-1].payload.get("timed_out") is True, [e.payload for e in it]


@pytest.mark.long  # 10 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_cheat_leaves_the_tests_intact(tmp_path, preset, home):
    need_bwrap()
    repo = calc_repo(tmp_path / "repo")
    with ModelServer("cheat") as m:
        cp = loop(repo, policy(tmp_path / "p.yaml", preset, max_iterations=2), agent_env(preset, home, m))
        assert "write" in [r["kind"] for r in m.turns()]
    assert cp.returncode in (2, 3), cp.stdout + cp.stderr
    assert (repo / "tests" / "test_calc.py").read_text() == TEST
    assert git(repo, "log", "--format=%H", "--", "tests/test_calc.py").count("\n") == 0  # only the first commit
    assert events(repo, "loop.protected_reverted")


def test_a_write_outside_is_refused(tmp_path, preset, home):
    need_bwrap()
    repo = calc_repo(tmp_path / "repo")
    outside = tmp_path / "outside.txt"
    with ModelServer("write_outside", outside=str(outside)) as m:
        cp = loop(repo, policy(tmp_path / "p.yaml", preset), agent_env(preset, home, m))
    assert not outside.exists()
    assert cp.returncode == 0, cp.stdout + cp.stderr  # the rest of its work still counts


def test_its_own_commit_and_push_never_reach_the_remote(tmp_path, preset, home):
    """The push is refused (the remote is outside the sandbox, read-only), and the CLI's own commit never stays on
    the branch: the loop's one commit is healer's, on the base, the agent's kept under refs/healer/quarantine/."""
    need_bwrap()
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    repo = calc_repo(tmp_path / "repo")
    git(repo, "remote", "add", "origin", str(remote))
    git(repo, "push", "-q", "origin", "main")
    before = git(remote, "rev-parse", "main")
    with ModelServer("commit_push") as m:
        cp = loop(repo, policy(tmp_path / "p.yaml", preset), agent_env(preset, home, m))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert git(remote, "rev-parse", "main") == before  # the remote is outside: read-only in the sandbox
    assert (repo / "calc.py").read_text().endswith("return a + b\n")
    assert git(repo, "rev-parse", "HEAD~1") == before  # one commit above the base: healer's
    assert git(repo, "log", "-1", "--format=%an") == "healer"
    assert git(repo, "for-each-ref", "--format=%(refname)", "refs/healer/quarantine/")  # the CLI's, kept for audit


@pytest.mark.long  # 11 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_planted_hook_never_reaches_the_user_config(tmp_path, preset, home):
    """The CLI's config home is the run's own, seeded before each iteration; the user's is read-only (bwrap)."""
    need_bwrap()
    repo = calc_repo(tmp_path / "repo")
    user = home / (".claude" if preset == "claude" else ".codex")
    with ModelServer("plant_hook") as m:
        env = agent_env(preset, home, m)
        (user / "settings.json").write_text('{"env": {}}\n')
        before = {p.name: p.read_bytes() for p in user.iterdir()}
        cp = loop(repo, policy(tmp_path / "p.yaml", preset, max_iterations=3), env)
        assert len([r for r in m.turns() if r["turn"] == 0]) == 2  # planted, then fixed in a fresh home
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert {p.name: p.read_bytes() for p in user.iterdir()} == before  # the user's home: read-only
    (run_home,) = (repo / ".healer" / "runs").glob(f"*/{preset}-home")
    seeds = agents.SEEDS[preset]
    assert {p.name: p.read_bytes() for p in run_home.iterdir() if p.name in seeds and p.name in before} == \
        {k: v for k, v in before.items() if k in seeds}  # seeded afresh from the user's
    assert "hooks" not in (run_home / "settings.json").read_text() if (run_home / "settings.json").exists() else True
    kept = run_home.parent / "iter-001" / run_home.name  # what the first iteration left there: evidence
    assert "hooks" in (kept / "settings.json").read_text()


# serial: failed side by side with other tests (issue 35; under xdist, codex): the unsandboxed run's outside-write scan
# (the folder that holds the worktree, $HOME's top level) is machine-visible; cause not yet pinned down
@pytest.mark.serial
def test_unsandboxed_the_config_home_is_not_an_outside_write(tmp_path, preset, home, off_tmp):
    repo = calc_repo(off_tmp / "repo")
    with ModelServer("converge") as m:
        cp = loop(repo, policy(tmp_path / "p.yaml", preset, sandbox="none"), agent_env(preset, home, m))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert [e.payload for e in events(repo, "loop.outside_write")] == []
    assert "writes outside" not in (repo / "progress.md").read_text() if (repo / "progress.md").exists() else True


def test_claude_runaway_cost_stops_within_one_turn_of_the_cap(tmp_path, home):
    """Claude's own --max-budget-usd (what is left of loop.spend_cap_usd) and its reported cost: about $0.90 a turn,
    a $3 cap, stopped at the turn that crossed it. (Killed iterations and Codex's token-only usage: the spend work
    of issue 32, healer/loop/usage.py, uses the kit's cost_slow and cost_fast scripts.)"""
    need_cli("claude")
    need_bwrap()
    repo = calc_repo(tmp_path / "repo")
    with ModelServer("cost_fast") as m:
        cp = loop(repo, policy(tmp_path / "p.yaml", "claude", spend_cap_usd=3.0), agent_env("claude", home, m))
        turns = len(m.turns())
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "spend cap" in final_line(cp)
    assert turns <= 5  # 4 turns reach $3.60: one turn past the cap, never the next


@pytest.mark.long  # 12 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_instructions_planted_in_the_tree_never_reach_the_next_session(tmp_path, preset, home):
    """The real CLI writes a SessionStart hook (.claude/settings.json), CLAUDE.md and AGENTS.md into the worktree at
    iteration 1 (issue 39). They are quarantined after its step: at iteration 2 the hook does not run and no
    request carries the planted instruction; healer's commit holds none of them."""
    need_bwrap()
    repo = calc_repo(tmp_path / "repo")
    with ModelServer("plant_instructions") as m:
        cp = loop(repo, policy(tmp_path / "p.yaml", preset, max_iterations=3), agent_env(preset, home, m))
        firsts = [r for r in m.turns() if r["turn"] == 0]
        planted = [r for r in m.turns() if r.get("planted")]
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert len(firsts) == 2 and not planted, planted  # two sessions; the second saw no planted instruction
    tree = git(repo, "ls-tree", "-r", "--name-only", "HEAD").splitlines()
    assert not {".claude/settings.json", "CLAUDE.md", "AGENTS.md", "hooked.txt"} & set(tree), tree
    assert not (repo / "hooked.txt").exists() and not (repo / "CLAUDE.md").exists()
    got = events(repo, "loop.instruction_files_quarantined")
    assert got and {"CLAUDE.md", "AGENTS.md", ".claude/settings.json"} <= set(got[0].payload["paths"]), got
