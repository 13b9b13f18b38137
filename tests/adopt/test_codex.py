"""The fixture loop.sh (not ours) around the real Codex CLI (pinned; scripted model server on 127.0.0.1, OpenAI's
Responses wire), adopted with `cli: auto`: its spend is read from Codex's own rollout files under the CODEX_HOME of
the loop's environment (not healer's), and at its cost cap it is stopped after its uncommitted work is snapshotted."""

from __future__ import annotations

import subprocess

import pytest

from chaos.agents.models.server import ModelServer
from healer.conventions import RECOVERY_REFS
from tests.adopt.conftest import adopt_json, end, fleet, need_cli, need_loop_sh, policy, start, supervisor, until, worktree
from tests.agents.conftest import cli_path, codex_config

CODEX_ARGV = ("codex exec --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check "
              "-c check_for_update_on_startup=false -c analytics.enabled=false -c feedback.enabled=false")


def _git(wt, *args) -> str:
    return subprocess.run(["git", "-C", str(wt), *args], capture_output=True, text=True, check=True).stdout


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_runaway_codex_in_loop_sh_is_costed_from_its_rollouts_and_stopped_at_its_cap(tmp_path):
    need_cli("codex")
    root = fleet(tmp_path / "fleet")
    home = tmp_path / "home"
    cx = home / "codex-home"  # not ~/.codex: healer must read the CODEX_HOME of the loop's own environment
    cx.mkdir(parents=True)
    tmp = home / ".tmp"
    tmp.mkdir()
    with ModelServer("cost_slow") as model:  # each turn bills 20k in + 2k out tokens, one every 0.3 s, until killed
        (cx / "config.toml").write_text(codex_config(model.openai_url))
        wt = worktree(tmp_path / "wt")
        env = {"HOME": str(home), "CODEX_HOME": str(cx), "PATH": cli_path(), "OPENAI_API_KEY": "sk-kit",
               "LANG": "C.UTF-8", "TMPDIR": str(tmp), "AGENT": CODEX_ARGV, "GATES": "false", "MAX_ITER": "50"}
        p = start(["bash", str(need_loop_sh())], wt, env)
        try:
            pol = policy(root, cli="auto", cost_cap_usd=0.25, idle="1h", stuck="1h", no_progress="1h",
                         allow_stop=True, kill_grace="3s")
            [row] = until(lambda: [x for x in adopt_json(root) if x["pid"] == p.pid])
            assert row["cli"] in ("codex", "command")  # loop.sh's argv names no CLI: costed from both CLIs' folders
            (wt / "wip.txt").write_text("uncommitted work\n")
            head = _git(wt, "rev-parse", "HEAD")
            sup = supervisor(root, pol)
            try:
                rep = until(lambda: (r := sup.tick()) and any(f.kind == "adopted_cost" for f in r.decision.findings)
                            and r, timeout=120)
                f = next(f for f in rep.decision.findings if f.kind == "adopted_cost")
                assert f.evidence["cost_usd"] >= 0.25
                assert f.evidence["sessions"] and all(str(cx) in s for s in f.evidence["sessions"])
                stopped = until(lambda: sup.store.events(prefix="adopt.stopped"))
                assert p.wait(timeout=15) is not None  # loop.sh and the Codex under it ended
                snaps = sup.store.events(prefix="adopt.snapshot")
                assert snaps and snaps[0].id < stopped[0].id  # its work saved before any signal
                ref = stopped[0].payload["snapshot"]
                assert ref.startswith(f"{RECOVERY_REFS}/A{p.pid}-")
                assert "wip.txt" in _git(wt, "ls-tree", "-r", "--name-only", ref).split()
                assert _git(wt, "rev-parse", "HEAD") == head
            finally:
                sup.store.close()
        finally:
            end(p)
