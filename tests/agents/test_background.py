"""The real CLIs leaving a process in the background (issue 39, item 6). Claude Code's Bash with run_in_background
prints its `result` and keeps the CLI alive while the shell lives: healer used to wait for the deadline, kill it and
skip the gates (three iterations, exit 3, the fix never committed). Now the CLI is ended
loop.agent.after_result_grace after its final event, with what it left, and the gates commit the fix at once."""

from __future__ import annotations

import os

import pytest

from chaos.agents.models.server import ModelServer
from tests.agents.conftest import agent_env, calc_repo, need_bwrap, policy
from tests.agents.test_loop import loop
from tests.conftest import git
from tests.loop.conftest import carrying, events, final_line, loop_commits


def _end(pids: list[int]) -> None:
    for p in pids:  # a failed test leaves nothing: only the processes found by their unique command line
        try:
            os.kill(p, 9)
        except OSError:
            pass


@pytest.mark.long  # 6 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_background_shell_ends_with_the_iteration_and_the_fix_is_committed(tmp_path, preset, home):
    need_bwrap()
    repo = calc_repo(tmp_path / "repo")
    sleep = f"1000.{os.getpid()}{len(str(tmp_path))}"  # unique: the background process, found on the host by it
    try:
        with ModelServer("background", sleep=sleep) as m:
            cp = loop(repo, policy(tmp_path / "p.yaml", preset, iteration_timeout="90s",
                                   agent={"preset": preset, "after_result_grace": "2s",
                                          **({"model": "claude-sonnet-4-5"} if preset == "claude" else {})}),
                      agent_env(preset, home, m))
            kinds = [r["kind"] for r in m.turns()]
        assert "background" in kinds, kinds
        assert cp.returncode == 0, cp.stdout + cp.stderr
        assert (repo / "calc.py").read_text().endswith("return a + b\n")
        assert len(loop_commits(repo)) == 1, final_line(cp)
        assert "calc.py" in git(repo, "show", "--stat", "HEAD")
        (it,) = events(repo, "loop.iteration")  # one iteration, judged by its gates
        assert it.payload["timed_out"] is False and it.payload["duration"] < 60, it.payload
        assert [g["outcome"] for g in it.payload["gates"]] == ["pass"], it.payload["gates"]
        ended = events(repo, "loop.agent_ended_after_result")
        if preset == "claude":  # Claude Code stays alive for its background shell: ended by healer
            assert ended and ended[0].payload["preset"] == "claude" and ended[0].payload["killed"], it.payload
            assert it.payload["agent_exit"] is None
        else:  # Codex (no background flag: `nohup CMD &`) exits at its turn's end; the sandbox ends what it left
            assert ended == [] and it.payload["agent_exit"] == 0, it.payload
        assert carrying(f"sleep {sleep}") == []  # nothing of the background process is left on the host
    finally:
        _end(carrying(f"sleep {sleep}"))
