"""Crash windows of the dispatcher that a restart storm hits: nothing started twice, nothing left stuck."""

from __future__ import annotations

import os
import sys

import psutil

from healer import git, lifecycle, procs
from tests.conftest import wait_until
from tests.fleet.conftest import AGENT, scripted_policy


def test_an_agent_started_but_not_registered_is_adopted_not_started_twice(fleet_factory):
    f = fleet_factory(scripted_policy())
    f.add("T-1", "success")
    # the dispatcher died between spawning the agent and registering it
    f.store.move_ticket("T-1", lifecycle.IN_PROGRESS, actor="dispatch", reason="launch")
    att = f.store.add_attempt("T-1", "launch", run_id="T-1-01")
    wt = f.root / ".healer" / "worktrees" / "T-1"
    git.add_worktree(f.root, wt, "healer/T-1", "main")
    task = f.root / "task.md"
    task.write_text("behaviour: success\n")
    env = {**os.environ, "HEALER_AGENT_ID": f"agent-T-1-{att.id}", "HEALER_ROOT": str(f.root), "HEALER_RUN_ID": "T-1-01",
           "HEALER_TICKET": "T-1", "HEALER_FLEET_DELAY": "1.5"}
    proc, _ = procs.spawn([sys.executable, str(AGENT), "--task", str(task), "--workdir", str(wt), "--run-id", "T-1-01"],
                          cwd=wt, env=env)
    try:
        # the agent as the dead dispatcher left it: exec'd, its environment readable (under load a fork can still be
        # the test's own copy when the tick looks, and a process that is not yet the agent is adopted a tick later)
        wait_until(lambda: psutil.Process(proc.pid).environ().get("HEALER_AGENT_ID") == env["HEALER_AGENT_ID"], 60,
                   "the agent exec'd")
        f.d.tick()
        assert f.events("dispatch.adopted") and not f.events("dispatch.launched")
        assert [a.pid for a in f.running("T-1")] == [proc.pid]
        proc.wait(timeout=60)
        f.d.tick()
        assert f.state("T-1") == lifecycle.DONE
        assert len(f.store.attempts("T-1")) == 1
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_stale_index_lock_from_an_agent_killed_mid_commit_is_quarantined(fleet_factory):
    f = fleet_factory(scripted_policy(backoff=["1s"]))
    f.add("T-1", "fail,success")
    f.d.tick()
    f.settle()
    f.d.tick()
    assert f.state("T-1") == lifecycle.QUEUED
    wt = f.root / ".healer" / "worktrees" / "T-1"
    lock = wt / git.run(wt, "rev-parse", "--git-path", "index.lock").stdout
    lock.write_text("")  # what `git commit` leaves when SIGKILLed
    f.clock.advance(2)
    f.d.tick()
    assert f.events("dispatch.stale_lock_moved") and not lock.exists()
    assert list(lock.parent.glob("index.lock.stale-*"))  # kept aside, not deleted
    f.settle()
    f.d.tick()
    assert f.state("T-1") == lifecycle.DONE


def test_git_locks_left_in_the_fleet_root_by_a_dispatcher_killed_mid_merge_are_moved_aside(fleet_factory):
    f = fleet_factory(scripted_policy())
    f.add("T-1", "success")
    f.d.tick()
    f.settle()
    locks = [f.root / ".git" / "index.lock", f.root / ".git" / "refs" / "heads" / "main.lock"]
    for lock in locks:  # what a SIGKILL during `git merge --ff-only` / `git update-ref` leaves
        lock.write_text("")
    f.d.tick()
    assert f.state("T-1") == lifecycle.DONE
    assert not any(lock.exists() for lock in locks)
    assert len(f.events("dispatch.stale_lock_moved")) == 2
    assert list((f.root / ".git").glob("index.lock.stale-*"))  # kept aside, not deleted


def test_a_half_made_scratch_worktree_does_not_block_the_merge(fleet_factory):
    f = fleet_factory(scripted_policy())
    f.add("T-1", "success")
    f.d.tick()
    f.settle()
    prop_id = 1
    half = f.root / ".healer" / "scratch" / f"T-1-p{prop_id}"  # `git worktree add` SIGKILLed halfway: unknown to git
    half.mkdir(parents=True)
    (half / "README.md").write_text("half checked out\n")
    f.d.tick()
    assert f.state("T-1") == lifecycle.DONE
    assert not half.exists() and list((f.root / ".healer" / "scratch-stale").iterdir())  # kept aside


def test_a_locked_missing_scratch_worktree_does_not_block_the_merge(fleet_factory):
    # `git worktree add` SIGKILLed after registering the worktree: git's entry stays locked ("initializing")
    # and every later `worktree add` of that path fails, which remove and prune alone do not clear.
    f = fleet_factory(scripted_policy())
    f.add("T-1", "success")
    f.d.tick()
    f.settle()
    half = f.root / ".healer" / "scratch" / "T-1-p1"
    git.run(f.root, "worktree", "add", "--detach", str(half), "main")
    git.run(f.root, "worktree", "lock", "--reason", "initializing", str(half))
    half.rename(f.root / "moved-away")  # the folder gone, the locked entry left
    f.d.tick()
    assert f.state("T-1") == lifecycle.DONE


# -- a ticket worktree half-made by a `git worktree add` SIGKILLed with its dispatcher ---------------------------

def _kill_worktree_add_mid_checkout(root, wt, tmp) -> None:
    """A REAL `git worktree add -b healer/T-1` SIGKILLed (with its process group, as a host crash does) while it
    checks the files out: a smudge filter holds the checkout until the kill lands, so the window is hit exactly."""
    import signal
    import subprocess

    from tests.conftest import git as sh_git
    from tests.conftest import wait_until

    (root / ".gitattributes").write_text("slow.txt filter=slow\n")
    (root / "slow.txt").write_text("checked out last\n")
    (root / "keep.txt").write_text("must stay on main\n")
    sh_git(root, "add", "-A")
    sh_git(root, "commit", "-q", "-m", "files a half-made checkout misses")
    inside = tmp / "in-filter"
    hold = tmp / "hold.sh"
    hold.write_text(f"#!/bin/sh\ntouch {inside}\nexec sleep 600\n")
    hold.chmod(0o755)
    wt.parent.mkdir(parents=True, exist_ok=True)
    p = subprocess.Popen(["git", "-c", f"filter.slow.smudge={hold}", "-c", "filter.slow.required=true", "worktree", "add",
                          "-b", "healer/T-1", str(wt), "main"], cwd=root, start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(inside.exists, 60, "git worktree add is checking out")
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    # what the kill left: git's entry locked ("initializing"), a folder with some files, no index
    assert "locked" in git.run(root, "worktree", "list", "--porcelain").stdout
    assert wt.is_dir() and not (wt / "slow.txt").exists()


def test_a_ticket_worktree_half_made_by_a_killed_worktree_add_is_set_aside_and_relaunched(fleet_factory, tmp_path):
    f = fleet_factory(scripted_policy())
    f.add("T-1", "success")
    wt = f.root / ".healer" / "worktrees" / "T-1"
    _kill_worktree_add_mid_checkout(f.root, wt, tmp_path)  # the dispatcher died in `_launch`: T-1 is still queued
    f.d.tick()
    assert f.events("dispatch.worktree_set_aside", "T-1")
    assert not f.events("dispatch.launch_failed")
    f.settle()
    f.d.tick()
    assert f.state("T-1") == lifecycle.DONE
    assert len(f.store.attempts("T-1")) == 1
    # the agent worked in a whole checkout: main keeps every file (a half-made index would have committed deletions)
    tree = git.run(f.root, "ls-tree", "--name-only", "main").stdout.split()
    assert {"keep.txt", "slow.txt", ".gitattributes"} <= set(tree)
    # kept aside, never deleted; git's locked entry gone
    stale = list((f.root / ".healer" / "worktrees-stale").iterdir())
    assert len(stale) == 1 and (stale[0] / "keep.txt").exists()
    assert "locked" not in git.run(f.root, "worktree", "list", "--porcelain").stdout


def test_a_locked_entry_whose_folder_is_gone_does_not_fail_every_launch(fleet_factory):
    # git's entry left locked by a killed `worktree add`, the folder gone since: every `worktree add` of that
    # path fails ("missing but locked worktree"), which would spend the ticket's launch budget for nothing
    f = fleet_factory(scripted_policy())
    f.add("T-1", "success")
    wt = f.root / ".healer" / "worktrees" / "T-1"
    git.run(f.root, "worktree", "add", "-b", "healer/T-1", str(wt), "main")
    git.run(f.root, "worktree", "lock", "--reason", "initializing", str(wt))
    wt.rename(f.root / ".healer" / "elsewhere")
    f.d.tick()
    assert not f.events("dispatch.launch_failed")
    f.settle()
    f.d.tick()
    assert f.state("T-1") == lifecycle.DONE


def test_a_folder_git_does_not_know_at_the_worktree_path_is_set_aside_not_deleted(fleet_factory):
    # killed before git registered it: a plain folder at the ticket's path makes every `worktree add` fail
    f = fleet_factory(scripted_policy())
    f.add("T-1", "success")
    wt = f.root / ".healer" / "worktrees" / "T-1"
    wt.mkdir(parents=True)
    (wt / "notes.txt").write_text("whatever was there\n")
    f.d.tick()
    assert not f.events("dispatch.launch_failed")
    f.settle()
    f.d.tick()
    assert f.state("T-1") == lifecycle.DONE
    kept = list((f.root / ".healer" / "worktrees-stale").glob("*/notes.txt"))
    assert [p.read_text() for p in kept] == ["whatever was there\n"]
