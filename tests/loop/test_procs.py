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
        wait_until(lambda: pids.exists() and len(pids.read_text().split()) == 3, 60, "three pids written")
        agent_pids = [int(x) for x in pids.read_text().split()]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
        assert live(agent_pids)  # orphans, outside the middle's process group and session
        adopted = procs.ProcessTree.adopt(tree.marker)
        killed = adopted.kill(0.5)
        assert set(agent_pids) <= set(killed)
        wait_until(lambda: not live(agent_pids), 60, "every agent process gone")
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
    # the check needs the whole tree (agent, setsid child, grandchild) up before the deadline: a loaded machine may
    # not even start the agent within 1 s, so a run that fired before the tree was complete is run again with a
    # longer deadline (it proves nothing either way); the first complete tree is judged
    for timeout in (1.0, 5.0, 20.0):
        pids = tmp_path / f"pids-{timeout:g}"
        t0 = CLOCK.monotonic()
        res = procs.run([PY, str(AGENTS / "loop_hang.py"), str(pids)], cwd=tmp_path, timeout=timeout, grace=0.3)
        took = CLOCK.monotonic() - t0
        assert res.timed_out and res.exit_code is None
        assert took < timeout + 30  # the agent hangs forever: returning at all is the deadline firing
        seen = [int(x) for x in pids.read_text().split()] if pids.exists() else []
        wait_until(lambda seen=seen: not live(seen), 60, "every agent process gone")
        if len(seen) == 3:
            break
    assert len(seen) == 3, f"the hung tree never came up within {timeout:g}s"
    assert set(seen) <= set(res.killed)


def test_run_returns_quickly_for_a_quick_child(tmp_path):
    res = procs.run(["true"], cwd=tmp_path, timeout=120, grace=0.5)
    assert res.exit_code == 0 and not res.timed_out and res.elapsed < 60  # the child's exit, not the 120 s deadline
