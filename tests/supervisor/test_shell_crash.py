"""Acceptance 2: SIGKILL a real `healer supervise --once` at every failpoint of the
remediation path, restart it, and check the fleet healed exactly once with no corpse."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from healer import quarantine as q
from healer.records import Worktree
from healer.store import open_store
from tests.conftest import git, healer, make_repo

OLD = 6 * 3600  # seconds in the past: every threshold is long passed

pytestmark = pytest.mark.slow  # 22 real supervisor processes; still part of the default run and CI

REMEDY_POINTS = ["remedy.after_intent", "remedy.after_begun", "remedy.after_effect", "remedy.after_done"]
SUPERVISOR_POINTS = ["supervisor.after_lease", "supervisor.before_execute", "supervisor.after_tick"]
QUARANTINE_POINTS = ["quarantine.after_manifest", "quarantine.after_copy", "quarantine.after_move"]


def _fleet(tmp_path: Path) -> Path:
    root = make_repo(tmp_path / "fleet")
    r = healer("init", "--root", str(root))
    assert r.returncode == 0, r.stderr
    return root


def _age_everything(store) -> None:
    with store.tx() as db:
        db.execute("UPDATE tickets SET created_at = created_at - ?, updated_at = updated_at - ?", (OLD, OLD))
        db.execute("UPDATE labels SET added_at = added_at - ?", (OLD,))
        db.execute("UPDATE worktrees SET created_at = created_at - ?", (OLD,))


def _frozen_ticket(root: Path) -> None:
    s = open_store(root)
    s.add_ticket("frozen", id="T-1")
    s.move_ticket("T-1", "in_progress", actor="dispatch")
    _age_everything(s)
    s.close()


def _orphan_worktree(root: Path) -> Path:
    s = open_store(root)
    s.add_ticket("finished", id="T-9", state="closed")
    wt = root / ".healer" / "worktrees" / "T-9"
    wt.parent.mkdir(parents=True, exist_ok=True)
    git(root, "worktree", "add", "-q", "-b", "healer/T-9", str(wt), "main")
    (wt / "scratch.txt").write_text("left behind by an agent\n")
    (wt / "more.bin").write_bytes(os.urandom(4096))
    s.add_worktree(Worktree(str(wt), "T-9", "healer/T-9", s.now()))
    _age_everything(s)
    s.close()
    return wt


def _supervise(root: Path, failpoint: str | None):
    env = {"HEALER_FAILPOINTS": f"{failpoint}=kill@1"} if failpoint else {"HEALER_FAILPOINTS": ""}
    return healer("supervise", "--once", "--root", str(root), env=env, timeout=120)


def _no_corpse(root: Path) -> None:
    me = os.getpid()
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.pid == me:
            continue
        cmd = " ".join(p.info["cmdline"] or [])
        assert not ("supervise" in cmd and str(root) in cmd), f"leftover supervisor: {p.pid} {cmd}"
    locks = [p.relative_to(root).as_posix() for p in (root / ".git").rglob("*.lock")]
    assert locks == [], f"git locks left behind: {locks}"
    s = open_store(root)
    try:
        assert s.lease("supervisor") is None, "the one-shot supervisor left its lease behind"
        bad = [(i.id, i.action, i.state) for i in s.intents() if i.state not in ("done", "aborted")]
        assert bad == [], f"half-done intents: {bad}"
    finally:
        s.close()


@pytest.mark.long  # 43 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.parametrize("point", REMEDY_POINTS + SUPERVISOR_POINTS)
def test_kill_at_failpoint_then_restart_requeues_exactly_once(tmp_path, point):
    root = _fleet(tmp_path)
    _frozen_ticket(root)
    first = _supervise(root, point)
    assert first.returncode == -signal.SIGKILL, (point, first.returncode, first.stderr[-2000:])
    s = open_store(root)
    held = s.lease("supervisor")
    s.close()
    assert held is not None  # the dead supervisor's lease is still there: the restart must take it over

    second = _supervise(root, None)
    assert second.returncode == 0, second.stderr[-2000:]
    s = open_store(root)
    try:
        assert s.ticket("T-1").state == "queued"
        requeues = [e for e in s.events(kinds=["ticket.moved"], subject="T-1") if e.payload["to"] == "queued"]
        assert len(requeues) == 1, f"{point}: requeued {len(requeues)} times"
        taken = s.events(kinds=["lease.taken_over"])
        assert taken and taken[-1].payload["holder_dead"], "restart did not take the dead holder's lease"
        assert [i.state for i in s.intents() if i.action == "requeue_ticket"].count("done") == 1
    finally:
        s.close()
    _no_corpse(root)


@pytest.mark.long  # 26 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@pytest.mark.parametrize("point", QUARANTINE_POINTS + ["remedy.after_effect"])
def test_kill_mid_quarantine_then_restart_removes_orphan_once_and_loses_nothing(tmp_path, point):
    root = _fleet(tmp_path)
    wt = _orphan_worktree(root)
    want = {p.name: q.sha256_of(p) for p in (wt / "scratch.txt", wt / "more.bin")}
    first = _supervise(root, point)
    assert first.returncode == -signal.SIGKILL, (point, first.returncode, first.stderr[-2000:])
    second = _supervise(root, None)
    assert second.returncode == 0, second.stderr[-2000:]
    assert not wt.exists()
    ents = [e for e in q.entries(root) if e.state == "quarantined"]
    got = {Path(e.path).name: e.sha256 for e in ents}
    assert got == want, f"{point}: quarantine holds {got}"
    assert len(ents) == 2, f"{point}: a file was quarantined twice: {[e.id for e in ents]}"
    s = open_store(root)
    try:
        assert s.count_events("worktree.removed") == 1
    finally:
        s.close()
    assert "T-9" not in git(root, "worktree", "list")
    _no_corpse(root)
    # and it all comes back byte for byte
    for e in ents:
        q.restore(root, e.id)
    assert {p: q.sha256_of(wt / p) for p in want} == want


def test_removing_an_orphan_worktree_keeps_what_git_status_does_not_list(tmp_path):
    """`git worktree remove --force` deletes every file git does not hold: besides what `status` lists, an ignored
    file (the loop's own evidence under .healer/), an untracked nested repository, and a tracked file whose edit an
    index flag (the agent's to set) hides. Each is quarantined first, byte for byte."""
    root = _fleet(tmp_path)
    wt = _orphan_worktree(root)
    (wt / ".healer" / "runs" / "T-9-01").mkdir(parents=True)
    (wt / ".healer" / "runs" / "T-9-01" / "result.json").write_text('{"exit_code": 2}\n')  # ignored (.gitignore)
    (wt / "notes").mkdir()
    git(wt / "notes", "init", "-q")
    (wt / "notes" / "design.md").write_text("two days of notes\n")
    (wt / "README.md").write_text("a local edit\n")
    git(wt, "update-index", "--skip-worktree", "README.md")
    want = {"scratch.txt", "more.bin", ".healer/runs/T-9-01/result.json", "notes/design.md", "README.md"}
    r = _supervise(root, None)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not wt.exists()
    kept = {e.path.split("worktrees/T-9/", 1)[1]: e for e in q.entries(root) if e.state == "quarantined"}
    assert want <= set(kept), sorted(kept)

    def stored(e):
        return (root / ".healer" / "quarantine" / e.batch / e.stored).read_text()

    assert stored(kept["notes/design.md"]) == "two days of notes\n"
    assert stored(kept["README.md"]) == "a local edit\n"
    assert any(k.startswith("notes/.git/") for k in kept)  # the nested repository whole, its history too


def test_a_link_out_of_the_fleet_is_quarantined_as_a_link_and_does_not_pin_the_worktree(tmp_path):
    """An agent leaves links to /etc and beside the fleet in its worktree: they are moved as links (never followed,
    their targets untouched) and the orphan worktree is removed, instead of an abort on every tick."""
    root = _fleet(tmp_path)
    wt = _orphan_worktree(root)
    beside = tmp_path / "beside.txt"
    beside.write_text("not healer's\n")
    os.symlink("/etc", wt / "etc-link")
    os.symlink(beside, wt / "beside-link")
    r = _supervise(root, None)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not wt.exists(), r.stdout[-2000:]
    links = {e.path.rsplit("/", 1)[1]: e.link for e in q.entries(root) if e.link}
    assert links == {"etc-link": "/etc", "beside-link": str(beside)}
    assert beside.read_text() == "not healer's\n" and os.path.isdir("/etc")
