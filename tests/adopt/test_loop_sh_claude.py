"""The fixture loop.sh (not ours) around the real Claude Code CLI (pinned; scripted model server on 127.0.0.1),
adopted by `healer adopt` and judged by the supervisor: its idle and stuck thresholds fire with nothing signalled
(no allow_stop), its spend is read from Claude Code's own transcripts, and its stop (allow_stop) comes after a
snapshot of its uncommitted work that leaves the worktree, the index and HEAD as they were."""

from __future__ import annotations

import subprocess

import pytest

from chaos.agents.models.server import ModelServer
from healer.conventions import RECOVERY_REFS
from tests.adopt.conftest import (
    CLAUDE_ARGV,
    adopt_json,
    claude_env,
    end,
    fleet,
    need_cli,
    need_loop_sh,
    policy,
    start,
    supervisor,
    until,
    worktree,
)


def _git(wt, *args) -> str:
    return subprocess.run(["git", "-C", str(wt), *args], capture_output=True, text=True, check=True).stdout


def _loop(tmp_path, model, **env):
    wt = worktree(tmp_path / "wt")
    e = {**claude_env(tmp_path / "home", model), "AGENT": CLAUDE_ARGV, "GATES": "false", "MAX_ITER": "50", **env}
    return wt, start(["bash", str(need_loop_sh())], wt, e)


def _kinds(rep) -> set[str]:
    return {f.kind for f in rep.decision.findings}


@pytest.mark.long  # 5 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_hung_claude_in_loop_sh_is_adopted_its_idle_and_stuck_fire_and_nothing_is_signalled(tmp_path):
    need_cli("claude")
    root = fleet(tmp_path / "fleet")
    with ModelServer("hang") as model:
        wt, p = _loop(tmp_path, model)
        try:
            pol = policy(root, cli="claude", idle="2s", stuck="4s", no_progress="1h", iterations_glob=".loop/prompt-*.md")
            until(lambda: any(m.turns() or m.requests for m in [model]))  # the CLI reached the model and hangs there
            loops = until(lambda: adopt_json(root))
            assert [(x["pid"], x["pgid"], x["cli"], x["worktree"]) for x in loops] == [(p.pid, p.pid, "claude", str(wt))]
            assert adopt_json(root)[0]["status"] == "known"  # registered once
            sup = supervisor(root, pol)
            rep = until(lambda: (r := sup.tick()) and "adopted_idle" in _kinds(r) and r)
            rep = until(lambda: (r := sup.tick()) and "adopted_stuck" in _kinds(r) and r)
            f = next(f for f in rep.decision.findings if f.kind == "adopted_stuck")
            assert f.evidence["age"] >= 4 and f.evidence["pid"] == p.pid
            assert p.poll() is None  # allow_stop is false: alerts and a snapshot, never a signal
            assert not [e for e in sup.store.events(prefix="adopt.stopped")]
            assert _git(wt, "for-each-ref", f"{RECOVERY_REFS}/")  # the default rules snapshot the worktree
        finally:
            end(p)


@pytest.mark.long  # 3 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_runaway_claude_in_loop_sh_is_stopped_at_its_cost_cap_after_its_work_is_snapshotted(tmp_path):
    need_cli("claude")
    root = fleet(tmp_path / "fleet")
    with ModelServer("cost_slow") as model:  # each turn bills 20k in + 2k out tokens, one every 0.3 s, until killed
        wt, p = _loop(tmp_path, model)
        try:
            pol = policy(root, cost_cap_usd=0.25, idle="1h", stuck="1h", no_progress="1h",
                         allow_stop=True, kill_grace="3s")
            until(lambda: adopt_json(root))
            (wt / "wip.txt").write_text("uncommitted work\n")
            (wt / "README.md").write_text("# wt\nedited, not committed\n")
            head, index = _git(wt, "rev-parse", "HEAD"), (wt / ".git" / "index").read_bytes()
            sup = supervisor(root, pol)
            rep = until(lambda: (r := sup.tick()) and "adopted_cost" in _kinds(r) and r, timeout=90)
            f = next(f for f in rep.decision.findings if f.kind == "adopted_cost")
            assert f.evidence["cost_usd"] >= 0.25 and f.evidence["sessions"]
            stopped = until(lambda: sup.store.events(prefix="adopt.stopped"))
            assert p.wait(timeout=15) is not None  # its whole group ended (loop.sh and the CLI under it)
            snaps = sup.store.events(prefix="adopt.snapshot")
            assert snaps and snaps[0].id < stopped[0].id  # the snapshot came before any signal
            ref = stopped[0].payload["snapshot"]
            assert ref.startswith(f"{RECOVERY_REFS}/A{p.pid}-")
            files = _git(wt, "ls-tree", "-r", "--name-only", ref).split()
            assert "wip.txt" in files and _git(wt, "show", f"{ref}:README.md") == "# wt\nedited, not committed\n"
            # the worktree, its index and HEAD are as the loop left them
            assert _git(wt, "rev-parse", "HEAD") == head and (wt / ".git" / "index").read_bytes() == index
            assert (wt / "wip.txt").read_text() == "uncommitted work\n"
            assert "?? wip.txt" in _git(wt, "status", "--porcelain")
        finally:
            end(p)
