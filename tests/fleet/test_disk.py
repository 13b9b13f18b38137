"""Disk pressure (healer/core/disk.py, healer/fleet/disk.py): below `fleet.min_free` nothing is launched, one
page goes out, the reserve is released for the store, healer's own files of finished tickets are reclaimed
(journal first), and once space is back the fleet goes on by itself. The rules pure, then a real fleet on a
small tmpfs (root needed: skipped elsewhere with the reason, required under CI=true)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from healer.core import disk
from healer.core.disk import Reading
from tests.conftest import fill_disk
from tests.fleet.conftest import make_fleet, scripted_policy

MiB = 1024 * 1024


# -- the rules ---------------------------------------------------------------------------------------

def test_going_low_pauses_records_and_pages_once_and_coming_back_lifts_only_its_own_pause():
    low = [Reading("/s", 1 * MiB), Reading("/w", 100 * MiB)]
    fx = disk.disk_changed(low, 8 * MiB, was_low=False, now=5.0, paused=False, paused_reason=None)
    assert [(e.op, e.key) for e in fx] == [("set", disk.SETTING), ("event", "dispatch.disk_low"), ("set", "dispatch.paused_reason"),
                                           ("set", "dispatch.paused"), ("notify", disk.ALERT)]
    assert fx[-1].severity == "critical" and "/s (1.0 MiB free)" in fx[-1].value and "/w" not in fx[-1].value
    assert disk.disk_changed(low, 8 * MiB, was_low=True, now=6.0, paused=True, paused_reason="disk_low") == []
    # someone else's pause (a red main) is neither taken over nor lifted
    fx = disk.disk_changed(low, 8 * MiB, was_low=False, now=5.0, paused=True, paused_reason="main_red")
    assert "dispatch.paused" not in [e.key for e in fx]
    ok = [Reading("/s", 50 * MiB)]
    assert [e.key for e in disk.disk_changed(ok, 8 * MiB, was_low=True, now=9.0, paused=True, paused_reason="main_red")] \
        == [disk.SETTING, "dispatch.disk_ok"]
    fx = disk.disk_changed(ok, 8 * MiB, was_low=True, now=9.0, paused=True, paused_reason="disk_low")
    assert [(e.key, e.value) for e in fx][-1] == ("dispatch.paused", False)
    assert disk.disk_changed(ok, 0, was_low=False, now=9.0, paused=False, paused_reason=None) == []
    assert disk.disk_changed(low, 0, was_low=False, now=9.0, paused=False, paused_reason=None) == []  # 0: no check


@given(st.lists(st.integers(0, 64 * MiB), min_size=1, max_size=3), st.integers(0, 32 * MiB), st.booleans())
def test_the_reserve_is_released_when_low_and_made_only_when_it_cannot_tip_the_disk_into_low(frees, min_free, has):
    readings = [Reading(f"/{i}", f) for i, f in enumerate(frees)]
    act = disk.reserve_action(readings, min_free, has)
    size = disk.reserve_size(min_free)
    if has and disk.low(readings, min_free):
        assert act == "release"
    if act == "make":
        assert not has and size > 0 and all(f - size >= min_free for f in frees)
    if act == "release":
        assert has
    assert 0 <= size <= disk.RESERVE_MAX


# -- a real fleet on a small disk --------------------------------------------------------------------

def _notes(root):
    p = root / ".healer" / "notifications.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def test_a_fleet_on_a_disk_that_fills_holds_launches_pages_once_and_finishes_every_ticket_once_freed(tiny_disk):
    policy = scripted_policy(pool_size=2)
    policy.fleet.min_free = 4 * MiB
    f = make_fleet(tiny_disk, policy)
    try:
        for i in range(1, 5):
            f.add(f"T-{i}", "success")
        f.d.tick()
        f.settle()
        f.d.tick()  # reaps and merges the first two, launches the next two
        f.settle()  # which end before the disk fills: reaped, gated and merged on a full disk
        assert (f.root / ".healer" / "disk.reserve").stat().st_size == MiB  # made while there was room
        done_before = [t.id for t in f.store.tickets() if t.state == "done"]
        assert done_before, [(t.id, t.state) for t in f.store.tickets()]
        run_dirs = [p for tid in done_before for p in (f.root / ".healer" / "worktrees" / tid / ".healer" / "runs").iterdir()]
        assert run_dirs

        ballast = tiny_disk / "ballast"
        fill_disk(ballast)  # the disk is full now: not one more byte
        for _ in range(3):
            rep = f.d.tick()
            assert rep.launched == [], rep
            f.clock.advance(30)
        assert not (f.root / ".healer" / "disk.reserve").exists()  # released for the store
        assert len(f.events("dispatch.disk_low")) == 1
        assert f.store.get_setting("dispatch.paused") is True and f.store.get_setting("dispatch.paused_reason") == "disk_low"
        assert [n["key"] for n in _notes(f.root) if n["key"].startswith("disk_low")] == ["disk_low:fleet"]
        st = subprocess.run([sys.executable, "-m", "healer", "status", "-C", str(f.root)], capture_output=True, text=True,
                            env={k: v for k, v in os.environ.items() if not k.startswith("HEALER_")}, timeout=120)
        assert st.returncode == 0 and "paused (disk_low)" in st.stdout and "disk low since" in st.stdout, st.stdout + st.stderr
        reclaimed = {p for e in f.events("dispatch.disk_reclaimed") for p in e.payload["paths"]}  # journal first, then gone
        assert set(map(str, run_dirs)) <= reclaimed and not any(p.exists() for p in run_dirs)

        os.unlink(ballast)  # space is back: nobody else does anything
        for _ in range(20):
            f.d.tick()
            f.settle()
            f.clock.advance(30)
            if all(t.state == "done" for t in f.store.tickets()):
                break
        assert [(t.id, t.state) for t in f.store.tickets()] == [(f"T-{i}", "done") for i in range(1, 5)]
        assert len(f.events("dispatch.disk_ok")) == 1 and f.store.get_setting("dispatch.paused") is False
        assert not f.events("dispatch.budget_exhausted") and not f.events("attempt.infra")
        assert (f.root / ".healer" / "disk.reserve").exists()
        merged = [t.data.get("merged_commit") for t in f.store.tickets()]
        assert len(set(merged)) == 4
    finally:
        f.d.stop_agents(grace=1.0)
        f.store.close()


def test_the_reserve_is_healers_own_and_nothing_else_is_reclaimed(tiny_disk):
    policy = scripted_policy(pool_size=1)
    policy.fleet.min_free = 4 * MiB
    f = make_fleet(tiny_disk, policy)
    try:
        f.add("T-1", "success")
        f.d.tick()
        f.settle()
        f.d.tick()
        assert f.state("T-1") == "done"
        wt = f.root / ".healer" / "worktrees" / "T-1"
        mine = wt / "user-notes.txt"
        mine.write_text("the user's\n")
        outside = tiny_disk / "elsewhere"
        outside.mkdir()
        (outside / "keep").write_text("keep\n")
        (wt / ".healer" / "runs" / "link").symlink_to(outside)  # a link never leads a deletion elsewhere
        fill_disk(tiny_disk / "ballast")
        f.d.tick()
        assert (outside / "keep").exists() and mine.exists() and (f.root / "README.md").exists()
        (rec,) = f.events("dispatch.disk_reclaimed")
        assert all("/.healer/runs/T-1-" in p or "/logs/agents/agent-T-1-" in p for p in rec.payload["paths"]), rec.payload
    finally:
        f.store.close()


# -- `healer up` on a small disk that fills, stays full for a while, and is freed ---------------------

@pytest.mark.campaign
def test_up_on_a_small_disk_that_fills_and_is_freed_finishes_every_ticket_with_no_help(tiny_disk, tmp_path):
    """The issue's run: on a small volume `up` failed ~450 passes in a row and finished 0 of 20 tickets. Now
    the full disk costs a few passes, no ticket: every one is done once, nothing escalated."""
    from chaos.storm import StormConfig, StormRun, problems
    from healer.store import open_store
    from tests.conftest import wait_until

    logs = tmp_path / "logs"
    logs.mkdir()
    run = StormRun(StormConfig(seed=2, tickets=20, kills=0, pool_size=4, agent_delay=0.3, finish_timeout=300), tiny_disk,
                   logs=logs, overrides={"fleet": {"min_free": 4 * MiB}})
    run.setup()
    proc, log = run.start_up(0)
    try:
        run.wait_started(proc, log)
        s = open_store(run.root)
        try:
            wait_until(lambda: any(t.state == "done" for t in s.tickets()), 120, "a first ticket done")
        finally:
            s.close()
        ballast = tiny_disk / "ballast"
        fill_disk(ballast)
        wait_until(lambda: b"disk low" in log.read_bytes(), 60, lambda: "the dispatcher to see the low disk:\n"
                   + log.read_text(errors="replace")[-3000:])
        for _ in range(5):  # a few seconds of full disk: `up` stays up
            assert proc.poll() is None, log.read_text()
            run.wall.sleep(1)
        ballast.unlink()
        s = open_store(run.root)
        try:
            wait_until(lambda: all(t.state == "done" for t in s.tickets()), 300,
                       lambda: "every ticket done once space is back:\n" + ", ".join(f"{t.id} {t.state}" for t in s.tickets())
                       + "\n" + log.read_text(errors="replace")[-4000:])
            kinds = [e.kind for e in s.events()]
            assert "dispatch.disk_low" in kinds and "dispatch.disk_ok" in kinds
            assert "dispatch.budget_exhausted" not in kinds and not s.tickets(states=["needs_human", "blocked"])
            notes = (run.root / ".healer" / "notifications.jsonl").read_text().splitlines()
            assert not [n for n in notes if "needs_human" in n or "same_commit" in n], notes
        finally:
            s.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        run.cleanup()
    out = log.read_text()
    assert "Traceback" not in out, out
    failed = out.count("pass failed")
    assert failed <= 20, f"{failed} failed passes:\n{out[-3000:]}"
    run.outputs.append(out)
    facts = run.facts()
    assert problems(facts) == [], facts


# -- a fast-forward of the checked-out main that the disk cut short --------------------------------------

def _half_merged(tmp_path, user_edit: bool = False):
    """main checked out at `old`; a proposal adding work/a.txt, changing README.md, deleting gone.txt; the
    fast-forward cut short after writing work/a.txt (git writes the files, then the index, then the ref)."""
    from healer.records import Proposal
    from tests.conftest import git, make_repo

    root = make_repo(tmp_path / "root", {"README.md": "# demo\n", "gone.txt": "bye\n"})
    old = git(root, "rev-parse", "HEAD")
    git(root, "checkout", "-q", "-b", "healer/T-1")
    (root / "work").mkdir()
    (root / "work" / "a.txt").write_text("the work\n")
    (root / "README.md").write_text("# demo\nchanged\n")
    (root / "gone.txt").unlink()
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "work\n\nHealer-Run: r-1")  # as healer's loop commits (proposals.foreign)
    commit = git(root, "rev-parse", "HEAD")
    git(root, "checkout", "-q", "main")
    (root / "work").mkdir()
    (root / "work" / "a.txt").write_text("the work\n")  # what the cut-short fast-forward had written
    if user_edit:
        (root / "README.md").write_text("# demo\na user's edit\n")
    return root, old, Proposal(1, "T-1", "healer/T-1", commit, "open", 0.0)


def test_a_fast_forward_of_main_the_disk_cut_short_is_finished_not_wedged(tmp_path):
    """The issue's "a work file reached main while its ticket still said review": every later merge refused to
    overwrite the half-written files, so the proposal was deferred for good. Now it is finished."""
    from healer.clock import system
    from healer.fleet.proposals import MERGED, gate_proposal
    from healer.policy.schema import Policy
    from tests.conftest import git

    root, old, p = _half_merged(tmp_path)
    import subprocess

    stuck = subprocess.run(["git", "merge", "--ff-only", "-q", p.commit], cwd=root, capture_output=True, text=True)
    assert stuck.returncode != 0 and "would be overwritten" in stuck.stderr  # plain git is stuck
    v = gate_proposal(root, Policy(), p, system())
    assert v.outcome == MERGED, v.log
    assert git(root, "rev-parse", "main") == v.main_after != old
    assert git(root, "status", "--porcelain") == ""
    assert (root / "README.md").read_text() == "# demo\nchanged\n" and not (root / "gone.txt").exists()
    assert git(root, "show", f"{old}:gone.txt") == "bye"  # what the merge deleted is kept in history


def test_a_users_change_among_the_merged_paths_is_never_touched(tmp_path):
    from healer.clock import system
    from healer.fleet.proposals import DEFERRED, gate_proposal
    from healer.policy.schema import Policy
    from tests.conftest import git

    root, old, p = _half_merged(tmp_path, user_edit=True)
    v = gate_proposal(root, Policy(), p, system())
    assert v.outcome == DEFERRED
    assert git(root, "rev-parse", "main") == old
    assert (root / "README.md").read_text() == "# demo\na user's edit\n" and (root / "work" / "a.txt").exists()


# -- the real-mode game day (chaos/scenarios/campaigns/disk-fills-real.yaml) ----------------------------

@pytest.fixture
def small_volume(tmp_path):
    """A 48 MB tmpfs for a game day's work folder, unmounted at the end."""
    from tests.conftest import need_root

    need_root()
    vol = tmp_path / "vol"
    vol.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(vol)], check=True)
    try:
        yield vol
    finally:
        subprocess.run(["umount", str(vol)], check=False)
        if os.path.ismount(vol):
            subprocess.run(["umount", "-l", str(vol)], check=False)


@pytest.mark.campaign
@pytest.mark.parametrize("disabled", [False, True], ids=["healer", "disabled"])
def test_the_disk_game_day_passes_and_fails_for_its_reason_disabled(small_volume, disabled):
    from chaos import engine
    from chaos.scenario import discover, load

    sc = load(discover(["disk-fills-real"])[0])
    assert not sc.warnings, sc.warnings
    r = engine.run(sc, small_volume / "gd", disabled=disabled)
    if not disabled:
        assert r.ok, r.error or "\n".join(c.message for c in r.failures)
        return
    assert r.status == "failed", r.error
    assert sc.broke_as_declared({c.name for c in r.failures}), [c.message for c in r.failures]
