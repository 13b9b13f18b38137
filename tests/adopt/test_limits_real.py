"""A real bash loop, adopted from /proc, judged by the real supervisor tick: its process count and resident memory
(its own process group: the loop and the children it left running) over the rule's numbers, and the same failure
written to its gate log three times in a row, while a passing write ends the run. Nothing is signalled (no
allow_stop). The loop advances one iteration when the test says so (a file it waits for), so each tick sees exactly
the writes the test expects: a state, never a sleep."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chaos.agents.models.scripts import Script, Turn
from chaos.agents.models.server import ModelServer
from healer.adopt import RealProcTable, failure_reading, observe, scan
from healer.clock import system
from healer.core.adopt import findings
from healer.core.model import Snapshot
from tests.adopt.conftest import (
    CLAUDE_ARGV,
    claude_env,
    end,
    fleet,
    need_cli,
    policy,
    start,
    supervisor,
    until,
    worktree,
)

LOOP = r"""
sleep 300 & sleep 300 & sleep 300 &   # what an agent leaves running: servers, watchers
mkdir -p .loop
i=0
while :; do
  i=$((i + 1))
  until [ -e .loop/go-$i ]; do read -r -t 0.05 _ <> .loop/never || :; done   # no child while it waits
  if [ -e .loop/pass-$i ]; then
    printf '3 passed in 0.%ds\n' "$i" > .loop/gates.log
  else
    printf 'FAILED tests/test_x.py::test_add - assert %d == 2 (0.0%ds)\n1 failed in 0.%ds\n' "$i" "$i" "$i" > .loop/gates.log
  fi
  : > .loop/done-$i
done
"""


def _kinds(rep) -> set[str]:
    return {f.kind for f in rep.decision.findings}


def _finding(rep, kind):
    return next(f for f in rep.decision.findings if f.kind == kind)


def test_a_real_loop_over_its_process_count_and_memory_and_failing_the_same_way_three_times(tmp_path):
    root = fleet(tmp_path / "fleet")
    wt = worktree(tmp_path / "wt")
    (wt / "loop.sh").write_text(LOOP)
    (wt / ".loop").mkdir()
    os.mkfifo(wt / ".loop" / "never")  # read with a timeout: a wait with no process of its own
    p = start(["bash", "loop.sh"], wt, dict(os.environ))
    try:
        pol = policy(root, max_procs=3, max_memory="1MiB", failure_files=[".loop/gates.log"], same_failure=3,
                     idle="1h", stuck="1h", no_progress="1h")
        sup = supervisor(root, pol)
        until(lambda: scan(sup.store, pol, system()).registered or sup.store.adopted())
        until(lambda: sum(1 for q in RealProcTable().scan() if q.pgid == p.pid) >= 4)  # its three children started

        def iteration(i: int, passing: bool = False):
            if passing:
                (wt / ".loop" / f"pass-{i}").touch()
            (wt / ".loop" / f"go-{i}").touch()
            until(lambda: (wt / ".loop" / f"done-{i}").exists())
            return sup.tick()

        rep = iteration(1)
        procs, memory = _finding(rep, "adopted_procs"), _finding(rep, "adopted_memory")
        assert procs.evidence["procs"] >= 4 and procs.evidence["max_procs"] == 3 and procs.evidence["pid"] == p.pid
        assert memory.evidence["rss"] > 1 << 20 and memory.evidence["max_memory"] == 1 << 20
        assert "adopted_same_failure" not in _kinds(rep)
        rep = iteration(2)
        assert "adopted_same_failure" not in _kinds(rep)  # two of three
        assert _finding(rep, "adopted_procs").since == procs.since  # over since the first tick: `for:` can debounce
        assert "adopted_same_failure" not in _kinds(sup.tick())  # the same write read again is no third failure
        rep = iteration(3)
        f = _finding(rep, "adopted_same_failure")
        assert f.evidence["times"] == 3 and f.evidence["files"] == [".loop/gates.log"]
        assert "assert" in f.evidence["line"] and "<n>" in f.evidence["line"]  # the numbers that change, taken out
        assert "adopted_same_failure" not in _kinds(iteration(4, passing=True))  # a pass ends the run
        assert p.poll() is None and not sup.store.events(prefix="adopt.stopped")  # no allow_stop: never signalled
    finally:
        end(p)


def test_the_failure_reading_is_the_newest_file_and_a_log_without_an_error_line_is_a_pass(tmp_path):
    wt = Path(tmp_path)
    assert failure_reading(str(wt), ["*.log"]) == (None, None, "")
    (wt / "a.log").write_text("ERROR: connection refused to 127.0.0.1:5432\n")
    key, sig, line = failure_reading(str(wt), ["*.log"])
    assert key and key.startswith("a.log:") and sig and "connection refused" in line
    os.utime(wt / "a.log", (1, 1))
    (wt / "b.log").write_text("all good\n")
    key, sig, line = failure_reading(str(wt), ["*.log"])
    assert key and key.startswith("b.log:") and sig is None and line == ""


@pytest.mark.long  # 4 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_the_real_claude_codes_failed_tool_calls_in_a_row_are_one_same_failure_finding(tmp_path):
    """Claude Code (pinned, scripted model) runs five shell commands in one session: two fail, one works, three fail
    the same way with numbers that differ. Its transcript's tool results give a run of three, not five."""
    need_cli("claude")
    root = fleet(tmp_path / "fleet")
    wt = worktree(tmp_path / "wt")
    fail = "python3 -c 'import sys; sys.exit(\"AssertionError: {} != 2 in test_add\")'"
    turns = [Turn("shell", fail.format(1)), Turn("shell", fail.format(2)), Turn("shell", "echo fixed"),
             *(Turn("shell", fail.format(n)) for n in (3, 4, 5)), Turn("text", "done")]
    (wt / "loop.sh").write_text(f"{CLAUDE_ARGV} 'make the tests pass' > .claude-out 2>&1\n: > .claude-done\n"
                                "while :; do read -r -t 1 _ <> .fifo || :; done\n")
    os.mkfifo(wt / ".fifo")
    with ModelServer(Script("same-failure", tuple(turns))) as model:
        p = start(["bash", "loop.sh"], wt, claude_env(tmp_path / "home", model))
        try:
            pol = policy(root, cli="claude", same_failure=3, idle="1h", stuck="1h", no_progress="1h")
            sup = supervisor(root, pol)
            until(lambda: scan(sup.store, pol, system()).registered or sup.store.adopted())
            until(lambda: (wt / ".claude-done").exists(), timeout=120)
            f = _finding(sup.tick(), "adopted_same_failure")
            assert f.evidence["source"] == "transcript" and f.evidence["times"] == 3
            assert f.evidence["files"] and f.evidence["files"][0].endswith(".jsonl")
            assert "AssertionError: <n> != <n> in test_add" in f.evidence["line"]
            assert _finding(sup.tick(), "adopted_same_failure").evidence["times"] == 3  # read again: no new failure
            four = policy(root, cli="claude", same_failure=4, idle="1h", stuck="1h", no_progress="1h")
            views = observe(sup.store, four, system(), write=False)
            assert not [x for x in findings(Snapshot(now=system().now(), adopted=views), four)
                        if x.kind == "adopted_same_failure"]  # three in a row is not four
            assert p.poll() is None  # alerted and snapshotted: never signalled
        finally:
            end(p)
