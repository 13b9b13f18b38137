"""healer/procs.py gaps found by the loop: nested trees, adoption after a crash, subreaper."""

from __future__ import annotations

import os
import signal
import subprocess

import psutil

from healer import procs
from healer.clock import system
from tests.conftest import wait_until
from tests.loop.conftest import AGENTS, PY, kill_listed, live

CLOCK = system()


def test_outer_marker_finds_escapees_of_an_inner_tree_after_the_middle_dies(tmp_path):
    """A runner (middle) spawns an agent tree with its own marker; the runner is SIGKILLed;
    killing the runner's tree by ITS marker still reaches the agent's setsid grandchild."""
    pids = tmp_path / "pids"
    middle_code = (
        "import signal, sys\n"
        "from healer import procs\n"
        f"procs.spawn([{PY!r}, {str(AGENTS / 'loop_hang.py')!r}, {str(pids)!r}], cwd='.')\n"
        "signal.pause()\n"
    )
    proc, tree = procs.spawn([PY, "-c", middle_code], cwd=tmp_path)
    try:
        wait_until(lambda: pids.exists() and len(pids.read_text().split()) == 3, 15, "three pids written")
        agent_pids = [int(x) for x in pids.read_text().split()]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
        assert live(agent_pids)  # orphans, outside the middle's process group and session
        adopted = procs.ProcessTree.adopt(tree.marker)
        killed = adopted.kill(0.5)
        assert set(agent_pids) <= set(killed)
        wait_until(lambda: not live(agent_pids), 5, "every agent process gone")
    finally:
        kill_listed(pids)


def test_adopt_refuses_a_root_whose_create_time_differs():
    p = subprocess.Popen([PY, "-c", "import signal; signal.pause()"])
    try:
        t = procs.ProcessTree.adopt("no-such-marker", p.pid, create_time=1.0)
        assert t.root_pid == 0 and t.pids() == []
        t2 = procs.ProcessTree.adopt("no-such-marker", p.pid, create_time=psutil.Process(p.pid).create_time())
        assert t2.pids() == [p.pid]
    finally:
        p.kill()
        p.wait()


def test_run_kills_the_tree_at_the_deadline(tmp_path):
    pids = tmp_path / "pids"
    t0 = CLOCK.monotonic()
    res = procs.run([PY, str(AGENTS / "loop_hang.py"), str(pids)], cwd=tmp_path, timeout=1.0, grace=0.3)
    took = CLOCK.monotonic() - t0
    assert res.timed_out and res.exit_code is None
    assert took < 1.0 + 0.3 + 1.5
    seen = [int(x) for x in pids.read_text().split()]
    assert len(seen) == 3 and set(seen) <= set(res.killed)
    wait_until(lambda: not live(seen), 3, "every agent process gone")


def test_run_returns_quickly_for_a_quick_child(tmp_path):
    res = procs.run(["true"], cwd=tmp_path, timeout=5, grace=0.5)
    assert res.exit_code == 0 and not res.timed_out and res.elapsed < 1.0
