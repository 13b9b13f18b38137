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


def test_adopt_refuses_a_root_that_is_not_the_process_marked():
    p = subprocess.Popen([PY, "-c", "import signal; signal.pause()"])
    try:
        boot, ticks = procs.mark(p.pid).split(":")
        # the mark of the process that had this pid a second before; an older healer's create time of it
        for stranger in (f"{boot}:{int(ticks) - 100}", psutil.Process(p.pid).create_time() - 1):
            t = procs.ProcessTree.adopt("no-such-marker", p.pid, stranger)
            assert t.root_pid == 0 and t.pids() == []
        for its_own in (procs.mark(p.pid), psutil.Process(p.pid).create_time()):
            assert procs.ProcessTree.adopt("no-such-marker", p.pid, its_own).pids() == [p.pid]
    finally:
        p.kill()
        p.wait()


def _step_the_clock(monkeypatch, seconds: float) -> None:
    """What an NTP step, a resumed virtual machine or `date -s` does to psutil: its create times add
    /proc/stat's boot time, which moves by the step (CI lost 8 tests to one: trees it could not kill)."""
    import psutil._pslinux as pslinux

    real = pslinux.boot_time
    monkeypatch.setattr(pslinux, "boot_time", lambda: real() + seconds)


def test_a_clock_step_leaves_every_tree_killable(tmp_path, monkeypatch):
    """A tree seen before a step of the wall clock is still recognised and killed after it: escapees
    found by marker, a root adopted by its mark, members checked for pid reuse."""
    pids = tmp_path / "pids"
    proc, tree = procs.spawn([PY, str(AGENTS / "loop_hang.py"), str(pids)], cwd=tmp_path)
    try:
        wait_until(lambda: pids.exists() and len(pids.read_text().split()) == 3, 60, "three pids written")
        agent_pids = [int(x) for x in pids.read_text().split()]
        root_mark = procs.mark(proc.pid)
        tree.refresh()
        _step_the_clock(monkeypatch, 3600.0)
        assert procs.same(proc.pid, root_mark)
        adopted = procs.ProcessTree.adopt(tree.marker, proc.pid, root_mark)
        assert adopted.root_pid == proc.pid
        assert set(agent_pids) <= {p.pid for p in tree.living()}
        assert set(agent_pids) <= set(tree.kill(0.5))
        wait_until(lambda: not live(agent_pids), 60, "every agent process gone")
    finally:
        kill_listed(pids)
        proc.kill()
        proc.wait()


def test_a_mark_is_the_same_in_every_process_and_tells_a_reused_pid_apart():
    """Marks are stored by one process and checked by another (state.json, intents, undo journals)."""
    import json
    import sys

    p = subprocess.Popen([PY, "-c", "import signal; signal.pause()"])
    try:
        out = subprocess.run([sys.executable, "-c", f"from healer import procs; print(procs.mark({p.pid}))"],
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == procs.mark(p.pid) and procs.same(p.pid, out)
        boot, ticks = out.split(":")
        assert procs.same(p.pid, None) and not procs.same(p.pid, f"{boot}:{int(ticks) + 1}")
        assert not procs.same(p.pid, f"0{boot[1:]}:{ticks}" if boot[0] != "0" else f"1{boot[1:]}:{ticks}")  # another boot
        json.dumps({"pid_start": out})
    finally:
        p.kill()
        p.wait()
    assert not procs.same(p.pid, out) and procs.mark(p.pid) is None


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


def test_a_byte_on_the_wake_fd_stops_the_run_without_waiting_for_the_poll(tmp_path):
    """The loop runner's signal wake-up fd: a SIGTERM is seen at once, so the runner polls rarely."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    asked = []
    try:
        res = procs.run([PY, "-c", "import time; time.sleep(120)"], cwd=tmp_path, timeout=300, grace=0.5, poll=200,
                        wake_fd=r, should_stop=lambda: asked.append(1) or True,
                        on_spawn=lambda proc, tree: os.write(w, b"\x0f"))
    finally:
        os.close(r)
        os.close(w)
    assert res.stopped and not res.timed_out and res.exit_code is None
    assert asked == [1]
    assert res.elapsed < 100  # the byte, not the 120 s child, the 200 s poll or the 300 s deadline


def test_waiting_polls_at_the_period_asked(tmp_path):
    asked = []
    res = procs.run([PY, "-c", "import time; time.sleep(1.5)"], cwd=tmp_path, timeout=300, grace=0.5, poll=1.0,
                    should_stop=lambda: asked.append(1) or False)
    assert res.exit_code == 0
    assert len(asked) <= 3  # ~1 per second (it was 20 per second: each wake-up costs CPU)


SUBREAPER_RUN = """
import json, os, sys
from healer import procs
assert procs.become_subreaper()
walks, at_kill = [], []
refresh, kill = procs.ProcessTree.refresh, procs.ProcessTree.kill
procs.ProcessTree.refresh = lambda self: walks.append(1) or refresh(self)
procs.ProcessTree.kill = lambda self, *a, **k: at_kill.append(len(walks)) or kill(self, *a, **k)
agent = '''
import os, sys, time
pidfile = sys.argv[1]
if os.fork() == 0:  # the classic daemon: setsid, fork, the middle exits at once
    os.setsid()
    if os.fork() == 0:
        with open(pidfile + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(pidfile + ".tmp", pidfile)
        time.sleep(600)
    os._exit(0)
for _ in range(6000):
    if os.path.exists(pidfile):
        break
    time.sleep(0.01)
time.sleep(0.5)
'''
res = procs.run([sys.executable, "-c", agent, sys.argv[1]], cwd=".", timeout=120, grace=0.5, adopt_orphans=True)
orphan = int(open(sys.argv[1]).read())
print(json.dumps({"code": res.exit_code, "killed": res.killed, "orphan": orphan, "walks_before_kill": at_kill[0],
                  "alive": procs.start_of(orphan) is not None}))
"""


def test_under_a_subreaper_the_tree_is_walked_at_its_end_only_and_still_loses_no_orphan(tmp_path):
    """The runner is a subreaper adopting orphans: a daemonised grandchild is reparented to it, so the
    walk when the root ends finds it without the walks every 0.2 s (each one CPU) that others need."""
    import json

    cp = subprocess.run([PY, "-c", SUBREAPER_RUN, str(tmp_path / "orphan.pid")], cwd=tmp_path, capture_output=True,
                        text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout)
    assert out["code"] == 0
    assert out["walks_before_kill"] == 0
    assert out["orphan"] in out["killed"] and not out["alive"]


def test_which_is_shutil_which(tmp_path, monkeypatch):
    import shutil

    a, b, c = (tmp_path / n for n in ("a", "b", "c"))
    for d in (a, b, c):
        d.mkdir()
    for d, name, mode in ((a, "tool", 0o644), (b, "tool", 0o755), (c, "tool", 0o755), (a, "only", 0o755)):
        (d / name).write_text("#!/bin/sh\n")
        (d / name).chmod(mode)
    (a / "adir").mkdir()
    (b / "adir").mkdir()
    monkeypatch.chdir(c)
    paths = [f"{a}:{b}:{c}", f"{a}:{a}:{c}", f":{a}", "", ":", f"{tmp_path / 'none'}:{b}", None, f"{a}::{b}"]
    cmds = ["tool", "only", "adir", "missing", str(b / "tool"), str(a / "tool"), "./tool", "a/tool", str(a)]
    for path in paths:
        if path is None:
            monkeypatch.setenv("PATH", f"{b}:{a}")
        for cmd in cmds:
            assert procs.which(cmd, path=path) == shutil.which(cmd, path=path), (cmd, path)
    monkeypatch.delenv("PATH")
    assert procs.which("sh") == shutil.which("sh")  # CS_PATH


def test_environ_is_a_fresh_copy_that_follows_the_environment(monkeypatch):
    e = procs.environ()
    assert e == dict(os.environ)
    e["HEALER_TEST_MUTATED"] = "1"
    assert "HEALER_TEST_MUTATED" not in procs.environ()  # a copy each time
    monkeypatch.setenv("HEALER_TEST_NEW", "v")
    assert procs.environ()["HEALER_TEST_NEW"] == "v"
    monkeypatch.setenv("HEALER_TEST_NEW", "w")
    assert procs.environ()["HEALER_TEST_NEW"] == "w"
    monkeypatch.delenv("HEALER_TEST_NEW")
    assert "HEALER_TEST_NEW" not in procs.environ()
    assert procs.environ() == dict(os.environ)
