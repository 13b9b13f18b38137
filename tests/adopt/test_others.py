"""Loops this project did not write, adopted: ralph-orchestrator (PyPI) driving Claude Code, a Claude Code session left
in a tmux pane; and what is never done: a process that is not the adopted one (pid reuse) is not signalled, a
process that matches no rule is left alone."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from chaos.agents.models.server import ModelServer
from healer.adopt import RealProcTable, scan
from healer.clock import system
from healer.conventions import RECOVERY_REFS
from healer.core.model import PlannedAction
from healer.remedy import actions as remedy
from tests.adopt.conftest import adopt_json, claude_env, end, fleet, need_cli, policy, start, supervisor, until, worktree


def _group_alive(pgid: int) -> bool:
    return any(p.pgid == pgid for p in RealProcTable().scan())


@pytest.mark.long  # 8 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_ralph_orchestrator_driving_claude_is_adopted_and_stopped_at_its_cost_cap(tmp_path):
    need_cli("claude")
    ralph = shutil.which("ralph", path=os.path.dirname(sys.executable))
    if ralph is None:
        why = "ralph-orchestrator is not installed (the dev extra pins it: pip install -e .[dev])"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {why}")
        pytest.skip(reason=why)
    root = fleet(tmp_path / "fleet")
    wt = worktree(tmp_path / "wt")
    (wt / "PROMPT.md").write_text("Make the tests pass.\n")
    with ModelServer("cost_slow") as model:
        # ralph's Claude adapter (claude-agent-sdk) passes --dangerously-skip-permissions, which Claude Code refuses
        # as root unless IS_SANDBOX=1; an unprivileged user needs neither
        env = {**claude_env(tmp_path / "home", model), "IS_SANDBOX": "1"}
        env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env['PATH']}"
        p = start([ralph, "run", "-a", "claude", "-P", "PROMPT.md", "-i", "500", "-t", "600", "--no-archive"], wt, env)
        try:
            pol = policy(root, match=[r"(^|/)ralph run"], cli="claude", cost_cap_usd=0.2, idle="1h", stuck="1h",
                         no_progress="1h", allow_stop=True, kill_grace="3s")
            loops = until(lambda: adopt_json(root))
            assert [(x["pid"], x["cli"]) for x in loops] == [(p.pid, "claude")]  # ralph, not the CLI it starts
            sup = supervisor(root, pol)
            until(lambda: (r := sup.tick()) and any(f.kind == "adopted_cost" for f in r.decision.findings), timeout=120)
            until(lambda: sup.store.events(prefix="adopt.stopped"))
            p.wait(timeout=15)
            until(lambda: not _group_alive(p.pid), timeout=15)  # ralph and the CLI under it
        finally:
            end(p)


def test_a_claude_session_left_in_tmux_is_adopted_and_not_the_tmux_server(tmp_path):
    need_cli("claude")
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip(reason="tmux is not installed")
    root = fleet(tmp_path / "fleet")
    wt = worktree(tmp_path / "wt")
    sock = tmp_path / "sock"
    with ModelServer("hang") as model:
        env = {**claude_env(tmp_path / "home", model), "TERM": "xterm"}
        # past the first-run screens (else it checks api.anthropic.com and exits): it waits at its API-key prompt,
        # a session left open in a pane as people leave them
        (tmp_path / "home" / ".claude.json").write_text(
            json.dumps({"hasCompletedOnboarding": True, "projects": {str(wt): {"hasTrustDialogAccepted": True}}}))
        exports = " ".join(f"{k}={v}" for k, v in env.items())
        subprocess.run([tmux, "-S", str(sock), "new-session", "-d", "-c", str(wt), "-x", "120", "-y", "40",
                        f"env {exports} claude --model claude-sonnet-4-5"], check=True, env={**os.environ, **env})
        try:
            policy(root, match=[r"(^|/)claude( |$)"], exclude=["tmux"])
            loops = until(lambda: adopt_json(root))
            assert len(loops) == 1 and loops[0]["cli"] == "claude" and loops[0]["worktree"] == str(wt)
            argv = loops[0]["argv"]
            assert "tmux" not in argv[0] and any("claude" in a for a in argv)
        finally:
            subprocess.run([tmux, "-S", str(sock), "kill-server"], check=False)


def test_a_reused_pid_is_never_signalled_and_a_stranger_is_left_alone(tmp_path):
    root = fleet(tmp_path / "fleet")
    wt = worktree(tmp_path / "wt")
    (wt / "loop.sh").write_text("while :; do sleep 1; done\n")
    loop = start(["bash", "loop.sh"], wt, dict(os.environ))
    stranger = start(["sleep", "300"], wt, dict(os.environ))  # same worktree, matches no rule
    try:
        pol = policy(root, allow_stop=True, kill_grace="1s")
        sup = supervisor(root, pol)
        until(lambda: scan(sup.store, pol, system()).registered or sup.store.adopted())
        [a] = sup.store.adopted()
        assert a.pid == loop.pid and a.pgid == loop.pid

        class Reused(RealProcTable):
            """The same pid, another start time: what the kernel shows once the pid went to another process."""

            def start_ticks(self, pid: int) -> int | None:
                got = super().start_ticks(pid)
                return got + 1 if (pid == a.pid and got is not None) else got

        ctx = replace(sup.context("t"), proctable=Reused())
        out = remedy.execute(ctx, PlannedAction("stop_adopted", a.id, {"adopted": a.id}, reason="test"))
        assert out.status == "aborted" and "no longer" in out.reason
        assert sup.store.events(prefix="adopt.identity_changed")
        assert loop.poll() is None and stranger.poll() is None  # nothing signalled
        assert not subprocess.run(["git", "-C", str(wt), "for-each-ref", f"{RECOVERY_REFS}/"],
                                  capture_output=True, text=True).stdout  # and nothing acted on

        out = remedy.execute(sup.context("t2"), PlannedAction("stop_adopted", a.id, {"adopted": a.id}, reason="test"))
        assert out.ok, out
        assert loop.wait(timeout=10) is not None and stranger.poll() is None  # the stranger still runs
        assert Path(wt, "loop.sh").exists()
    finally:
        end(loop)
        end(stranger)


def test_restart_only_with_the_declared_command_and_never_over_a_live_loop(tmp_path):
    root = fleet(tmp_path / "fleet")
    wt = worktree(tmp_path / "wt")
    (wt / "loop.sh").write_text("while :; do sleep 1; done\n")
    loop = start(["bash", "loop.sh"], wt, dict(os.environ))
    restarted = None
    try:
        pol = policy(root, allow_stop=True, kill_grace="1s", restart_command=["bash", "loop.sh"])
        sup = supervisor(root, pol)
        until(lambda: scan(sup.store, pol, system()).registered or sup.store.adopted())
        [a] = sup.store.adopted()
        run = lambda name: remedy.execute(sup.context(name), PlannedAction(name, a.id, {"adopted": a.id}))  # noqa: E731
        out = run("restart_adopted")
        assert out.status == "aborted" and "still running" in out.reason and loop.poll() is None
        assert run("stop_adopted").ok and loop.wait(timeout=10) is not None
        out = run("restart_adopted")
        assert out.ok, out
        restarted = out.detail["pid"]
        assert RealProcTable().start_ticks(restarted) is not None  # running, in the worktree, a session of its own
        assert os.readlink(f"/proc/{restarted}/cwd") == str(wt) and os.getpgid(restarted) == restarted
        assert run("restart_adopted").status == "aborted"  # once per adopted loop
        # the new process is a new adoption (another identity), judged afresh
        until(lambda: [x for x in scan(sup.store, pol, system()).registered if x.pid == restarted])
    finally:
        end(loop)
        if restarted:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(restarted, signal.SIGKILL)  # the group healer started for this test


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_the_agents_healer_launched_are_its_governed_loops_never_adopted(tmp_path):
    """A rule broad enough to match healer's own agents (`loop.sh` anywhere) adopts the twin a user started, never the
    tree under a running agent of the fleet's records on this host (the kernel's parent links from its pid)."""
    from healer.fleet.snapshot import HOST
    from healer.records import Agent
    from healer.store import open_store

    root = fleet(tmp_path / "fleet")
    ours, theirs = worktree(tmp_path / "ours"), worktree(tmp_path / "theirs")
    for wt in (ours, theirs):
        (wt / "loop.sh").write_text("while :; do sleep 1; done\n")
    policy(root)
    # healer's agent: a wrapper (its pid in the agents table) that runs the same loop.sh below it
    wrapper = start(["bash", "-c", "bash loop.sh; :"], ours, {"PATH": "/usr/bin:/bin"})
    twin = start(["bash", "loop.sh"], theirs, {"PATH": "/usr/bin:/bin"})
    try:
        store = open_store(root, system())
        try:
            store.upsert_agent(Agent(id="A-1", ticket_id=None, state="running", pid=wrapper.pid, host=HOST,
                                     worktree=str(ours), started_at=system().now()))
        finally:
            store.close()
        until(lambda: any(p.argv[:2] == ("bash", "loop.sh") and p.ppid == wrapper.pid for p in RealProcTable().scan()))
        rows = until(lambda: [x for x in adopt_json(root) if x["pid"] == twin.pid])
        assert all(x["worktree"] != str(ours) for x in adopt_json(root)), rows
    finally:
        end(wrapper)
        end(twin)
