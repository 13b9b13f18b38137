"""A CLI that reported its result and did not exit (issue 39, item 6: Claude Code's run_in_background keeps the
process): after loop.agent.after_result_grace it and what it left running are ended, and the iteration goes on
as after any end: the gates run and judge. A `command` agent here (a fake CLI printing Claude's result line and
leaving a child); the real Claude Code does the same in tests/agents/test_background.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from healer.loop import decide, usage
from tests.loop.conftest import (
    carrying,
    events,
    kill_listed,
    loop_commits,
    run_loop_cli,
    solved_gate,
    state,
    write_policy,
)

# fixes the task (or not), starts a child that would run for 1000 s (its command line carries MARK, the way the
# test finds it on the host), prints the CLI's final event, then stays: a CLI whose background shell keeps it
AGENT = """\
import json, subprocess, sys, time
fix, mark, final = sys.argv[1], sys.argv[2], sys.argv[3]
if fix == "fix":
    open("attempt.txt", "w").write("SOLVED\\n")
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)", mark], stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL, start_new_session=True)
print(json.dumps({"type": "system", "subtype": "init", "model": "claude-sonnet-4-5"}), flush=True)
print(final, flush=True)
if fix != "exit":
    time.sleep(1000)
"""
RESULT = '{"type": "result", "subtype": "success", "is_error": false, "result": "Done. All tests pass."}'
CODEX_END = '{"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}}'


def agent_cmd(tmp_path: Path, fix: str, mark: Path, final: str = RESULT) -> list[str]:
    script = tmp_path / "stays.py"
    script.write_text(AGENT)
    return [sys.executable, str(script), fix, str(mark), final]


@pytest.fixture
def mark(tmp_path):
    m = tmp_path / "left-running"
    yield m
    kill_listed(m)  # nothing outlives a failed test


@pytest.mark.parametrize(("final", "sandbox"), [(RESULT, "auto"), (CODEX_END, "auto"), (RESULT, "none")],
                         ids=["claude-result", "codex-turn-completed", "claude-result-unsandboxed"])
@pytest.mark.long  # 12 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_cli_that_stays_after_its_result_is_ended_and_the_gates_commit(lrepo, tmp_path, mark, final, sandbox):
    """Under `none` what it left is found by the tree sweep, not by a pid namespace."""
    pol = write_policy(tmp_path / "p.yaml", iteration_timeout="60s", idle_timeout=None, gates=[solved_gate()],
                       sandbox=sandbox,
                       agent={"preset": "command", "command": agent_cmd(tmp_path, "fix", mark, final),
                              "after_result_grace": "1s"})
    # unsandboxed, no cgroup either (an unprivileged runner's usual case): the tree sweep alone finds what it left
    cp = run_loop_cli(lrepo, pol, "--run-id", "stays", env={"HEALER_CGROUP": "off"} if sandbox == "none" else {})
    assert cp.returncode == 0, cp.stdout + cp.stderr
    (h,) = state(lrepo, "stays")["history"]  # one iteration: the fix committed
    assert h["stopped"] == "after_result" and not h["timed_out"]
    assert h["duration"] < 30  # ended a second after its result, not at the 60 s deadline
    assert [g["exit_code"] for g in h["gates"]] == [0]
    assert len(loop_commits(lrepo)) == 1
    ended = events(lrepo, "loop.agent_ended_after_result", subject="stays")
    assert len(ended) == 1 and ended[0].payload["grace"] == 1.0 and ended[0].payload["killed"]
    assert carrying(mark) == []  # the child it left running is gone too
    assert "ended after its result" in (lrepo / "progress.md").read_text()


@pytest.mark.long  # 5 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_a_forged_result_only_shortens_the_agents_own_iteration(lrepo, tmp_path, mark):
    """The final event is the agent's own word: it ends the iteration early, and the gates still judge."""
    pol = write_policy(tmp_path / "p.yaml", iteration_timeout="60s", idle_timeout=None, gates=[solved_gate()],
                       max_iterations=2, stall={"same_state": 5},
                       agent={"preset": "command", "command": agent_cmd(tmp_path, "nofix", mark),
                              "after_result_grace": "1s"})
    cp = run_loop_cli(lrepo, pol, "--run-id", "forged", env={})
    assert cp.returncode == 2, cp.stdout + cp.stderr  # the iteration cap: never "goal reached"
    hist = state(lrepo, "forged")["history"]
    assert [h["stopped"] for h in hist] == ["after_result"] * 2
    assert all(h["gates"][0]["exit_code"] == 1 for h in hist)
    assert loop_commits(lrepo) == []
    assert carrying(mark) == []


def test_a_cli_that_exits_after_its_result_is_a_plain_end(lrepo, tmp_path, mark):
    """Exiting within the grace is the usual case: no event, its exit code recorded, what it left ended."""
    pol = write_policy(tmp_path / "p.yaml", iteration_timeout="60s", idle_timeout=None, gates=[solved_gate()],
                       agent={"preset": "command", "command": agent_cmd(tmp_path, "exit", mark),
                              "after_result_grace": "30s"})
    cp = run_loop_cli(lrepo, pol, "--run-id", "exits", env={})
    assert cp.returncode == 2 or cp.returncode == 3, cp.stdout + cp.stderr  # "exit" mode fixes nothing
    hist = state(lrepo, "exits")["history"]
    assert hist[0]["stopped"] == "" and hist[0]["agent_exit"] == 0
    assert events(lrepo, "loop.agent_ended_after_result", subject="exits") == []
    assert carrying(mark) == []


def test_the_final_event_by_preset():
    def results(preset: str, line: str) -> int:
        m = usage.Meter(preset)
        m.feed(line)
        return m.results

    assert results("claude", RESULT) == 1 and results("claude", CODEX_END) == 0
    assert results("codex", CODEX_END) == 1 and results("codex", RESULT) == 0
    assert results("codex", '{"type": "turn.failed", "error": {"message": "x"}}') == 1
    assert results("command", RESULT) == 1 and results("command", CODEX_END) == 1
    assert results("claude", '{"type": "assistant", "message": {}}') == 0
    assert results("claude", b'  {"type": "result"}') == 1


def test_after_result_is_a_pure_rule():
    assert not decide.after_result(10.0, None, 5.0)
    assert not decide.after_result(10.0, 6.0, 5.0)
    assert decide.after_result(11.0, 6.0, 5.0)
