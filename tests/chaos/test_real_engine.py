"""The real engine's own guarantees (the real scenarios themselves run in test_suite.py):
faults journal their undo before acting, a SIGKILLed real game day leaves nothing behind once
`healer gameday clean` (or the next run) replays its journal, and a lock that is not ours is never touched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from chaos.engine.real import RealEngine
from chaos.faults import process as pfault
from chaos.faults import repo
from chaos.faults.undo import UndoJournal
from chaos.scenario import SCENARIO_DIR, load
from healer import procs
from healer.clock import system
from healer.errors import InvalidInput
from tests.conftest import wait_until

CLOCK = system()


def of_run(prefix: str, home: Path | None = None) -> list[psutil.Process]:
    """Living processes started by a real game day whose marker starts with `prefix`; with `home`, only those
    of the game day run under that HEALER_GAMEDAY_HOME (not strays of an earlier, failed run of the same test)."""
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            env = p.environ()
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.Error, OSError):
            continue
        marks = [env.get(procs.MARKER, ""), *env.get(procs.ANCESTORS, "").split(",")]
        if home is not None and env.get("HEALER_GAMEDAY_HOME") != str(home):
            continue
        if any(m.startswith(prefix) for m in marks):
            out.append(p)
    return out


KILLME = """\
name: killme
mode: real
duration: 90s
real: {supervisor: none, dispatcher: none}
fleet:
  tickets:
    - {id: S-1, state: in_progress, agent: live, worktree: true}
    - {id: K-1, state: done, age: 2h}
faults:
  - {at: 0s, fault: index_lock, target: main}
  - {at: 0s, fault: orphan_worktree, target: K-1}
  - {at: 0s, fault: busy_worktree, target: K-1}
  - {at: 0s, fault: stop_agent, target: S-1}
expect:
  - invariant: no_leftovers
"""


@pytest.mark.long  # 19 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_sigkilled_real_gameday_leaves_no_stopped_process_lock_or_process(tmp_path):
    sc = tmp_path / "scenarios" / "killme.yaml"
    sc.parent.mkdir()
    sc.write_text(KILLME)
    home = tmp_path / "home"
    env = {**os.environ, "HEALER_GAMEDAY_HOME": str(home), "TMPDIR": str(tmp_path)}  # clean sees only this test
    env.pop("HEALER_FAILPOINTS", None)
    lock = tmp_path / "wd" / "killme" / "fleet" / ".git" / "index.lock"
    runner = subprocess.Popen([sys.executable, "-m", "healer", "gameday", "run", str(sc), "--quiet", "--workdir",
                               str(tmp_path / "wd")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: [p for p in of_run("gameday-killme-", home) if procs.stopped(p.pid)], 60, "the stop_agent fault to stop the agent")
        assert lock.exists()
        holders = of_run("gameday-killme-", home)
        assert len(holders) >= 2  # the stopped agent and the busy-worktree holder
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=10)
    # the engine is gone; what it injected is still there, in sessions of its own
    assert [p for p in of_run("gameday-killme-", home) if procs.stopped(p.pid)]
    assert lock.exists()

    r = subprocess.run([sys.executable, "-m", "healer", "gameday", "clean", "--json"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    undone = json.loads(r.stdout)
    kinds = {line.split(": ")[1] for line in undone}
    assert {"sigcont", "remove_file", "kill_marker"} <= kinds, undone
    wait_until(lambda: not of_run("gameday-killme-", home), 60,
               what=lambda: f"no game-day process left: {[pfault.describe(p) for p in of_run('gameday-killme-', home)]}")
    assert not lock.exists()
    again = subprocess.run([sys.executable, "-m", "healer", "gameday", "clean"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 0 and "nothing left behind" in again.stdout  # the next run starts clean


def test_stop_journals_its_sigcont_before_stopping(tmp_path):
    journal = UndoJournal(tmp_path / "run")
    proc, tree = procs.spawn([sys.executable, "-c", pfault.HOLDER], cwd=tmp_path)
    try:
        pids = pfault.stop(journal, proc.pid, tree.marker, role="victim")
        assert pids == [proc.pid]
        wait_until(lambda: procs.stopped(proc.pid), 60)
        (u,) = journal.pending()
        assert u.kind == "sigcont" and u.data["pid"] == proc.pid and procs.same(proc.pid, u.data["pid_start"])
        # replayed as `gameday clean` would, after the engine died
        journal.undo_all()
        wait_until(lambda: not procs.stopped(proc.pid), 60)
        assert journal.pending() == []
    finally:
        tree.kill(0.2)


def test_holder_journals_its_kill_before_it_starts(tmp_path):
    journal = UndoJournal(tmp_path / "run")
    wt = tmp_path / "wt"
    wt.mkdir()
    proc, tree = pfault.hold(journal, wt)
    try:
        (u,) = journal.pending()
        assert u.kind == "kill_marker" and u.data["marker"] == tree.marker
        assert procs.busy_pids(wt) == [proc.pid]
        journal.undo_all()
        proc.wait(timeout=5)
        assert procs.busy_pids(wt) == []
    finally:
        tree.kill(0.2)


def test_a_reused_pid_psutil_remembers_is_still_killed(tmp_path):
    """psutil.process_iter hands back the object it made for an earlier process of the same pid (pid_max is
    32768 here: a long test session reuses pids). That object reads the newcomer's environment but refuses to
    signal it ("pid reused"), so the holder carried the marker, was found, and outlived its undo (CI)."""
    journal = UndoJournal(tmp_path / "run")
    wt = tmp_path / "wt"
    wt.mkdir()
    proc, tree = pfault.hold(journal, wt)
    try:
        stale = psutil.Process(proc.pid)  # as psutil keeps it for the pid's previous owner, started earlier
        stale._create_time = stale.create_time() - 100.0
        stale._ident = (proc.pid, stale._create_time)
        psutil._pmap[proc.pid] = stale
        journal.undo_all()
        proc.wait(timeout=30)  # undo_all reaped it already (psutil.wait_procs): its status is lost to Popen
        assert procs.busy_pids(wt) == []
    finally:
        psutil._pmap.pop(proc.pid, None)
        tree.kill(0.2)


def test_index_lock_is_ours_only(tmp_path):
    root = repo.init(tmp_path / "fleet")
    journal = UndoJournal(tmp_path / "run")
    lock = repo.index_lock(journal, root, "t1")
    assert lock == root / ".git" / "index.lock" and lock.exists()
    assert repo.index_lock(journal, root, "t2") is None  # one is there already: not ours to make
    journal.undo_all()
    assert not lock.exists()
    lock.write_text("held by a real git process\n")  # someone else's lock is never removed
    journal2 = UndoJournal(tmp_path / "run2")
    assert repo.index_lock(journal2, root, "t3") is None
    journal2.undo_all()
    assert lock.read_text() == "held by a real git process\n"


@pytest.mark.long  # 11 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
def test_kill_healer_real_aims_at_every_remedy_failpoint_the_cli_lists(tmp_path, monkeypatch):
    monkeypatch.setenv("HEALER_GAMEDAY_HOME", str(tmp_path / "home"))
    listed = subprocess.run([sys.executable, "-m", "healer", "failpoints", "--json"], capture_output=True, text=True,
                            timeout=60)
    assert listed.returncode == 0, listed.stderr
    remedy = sorted(d["name"] for d in json.loads(listed.stdout) if d["name"].startswith("remedy."))
    assert len(remedy) >= 4
    eng = RealEngine(load(SCENARIO_DIR / "kill-healer-mid-unblock-real.yaml"), tmp_path)
    try:
        eng.setup()
        assert sorted(name for name, action, hit in eng.fp_queue) == remedy
        assert {action for _, action, _ in eng.fp_queue} == {"kill"}
    finally:
        eng.store.close()
        eng.undo.undo_all()


def test_policy_placeholders_are_filled_for_the_children(tmp_path, monkeypatch):
    monkeypatch.setenv("HEALER_GAMEDAY_HOME", str(tmp_path / "home"))
    eng = RealEngine(load(SCENARIO_DIR / "hung-agent.yaml"), tmp_path)
    cmd = eng.policy.loop.agent.command
    assert cmd[0] == sys.executable
    assert cmd[1].endswith("chaos/agents/loop_hang.py") and Path(cmd[1]).exists()
    assert cmd[2] == str(tmp_path.resolve() / "hang-pids.txt")
    assert eng.policy.fleet.loop_command[0] == sys.executable  # healer's own {python} means the same interpreter
    assert "{workdir}" in eng.policy.fleet.loop_command  # healer's placeholders are left for healer


def test_a_bad_real_section_is_one_located_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("name: bad\nmode: real\nreal:\n  dispatcher: sometimes\nexpect:\n  - invariant: no_corpse\n")
    with pytest.raises(InvalidInput) as e:
        load(p)
    assert f"{p}:4:" in str(e.value) and "real.dispatcher" in str(e.value)
