"""The simulated world's git (chaos/engine/simgit.py) answers the Git port as a real repository does, and a git
fault is a real effect in it that the product finds as it finds it on a machine (issue 42)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.engine.sim import SimEngine
from chaos.engine.simgit import SimGit, SimRepo
from chaos.faults import repo
from chaos.scenario import Scenario
from healer.fleet.ports import RealGit
from healer.git import GitError


def _worlds(tmp_path: Path):
    """The same fleet twice: a real repository through RealGit, the model through SimGit, each with the main
    checkout's `.healer/` excluded and one worktree of `healer/T-1`."""
    real_root = repo.init(tmp_path / "real")
    (real_root / ".gitignore").unlink()  # the model's first commit is empty: the same tracked files in both
    repo.git(real_root, "rm", "-q", "--cached", ".gitignore", "README.md")
    (real_root / "README.md").unlink()
    repo.git(real_root, "commit", "-q", "-m", "empty")
    sim_root = tmp_path / "sim"
    sim_root.mkdir()
    out = []
    for root, port in ((real_root, RealGit()), (sim_root, SimGit(SimRepo(sim_root)))):
        port.ensure_excluded(root)
        wt = root / ".healer" / "worktrees" / "T-1"
        assert port.add_worktree(root, wt, "healer/T-1", "main") is True
        assert port.add_worktree(root, wt, "healer/T-1", "main") is False  # already there: kept
        out.append((root, port, wt))
    return out


def _answers(root: Path, port, wt: Path) -> dict:
    rel = lambda ps: sorted(str(Path(p).relative_to(root)) for p in ps)  # noqa: E731
    return {"is_repo": port.is_repo(wt), "top": port.is_toplevel(wt), "inner_top": port.is_toplevel(wt / "src"),
            "untracked": port.untracked(wt), "dirty": port.dirty(wt), "tracked_a": port.tracked(wt / "a.txt"),
            "tracked_x": port.tracked(wt / "x.txt"), "locks": rel(port.git_paths(wt, "index.lock")),
            "main_locks": rel(port.git_paths(root, "index.lock", "refs/heads/main.lock")),
            "half_made": port.half_made(root, wt), "stranger": port.half_made(root, root / ".healer" / "worktrees" / "Z"),
            "head_is_main": port.rev(wt) == port.rev(root, "refs/heads/main")}


def test_the_model_answers_the_git_port_as_a_real_repository_does(tmp_path):
    answers = []
    for root, port, wt in _worlds(tmp_path):
        (wt / "src").mkdir()
        (wt / "a.txt").write_text("tracked\n")
        (wt / "x.txt").write_text("unknown\n")
        (wt / "src" / "y.txt").write_text("unknown too\n")
        (wt / ".healer").mkdir()
        (wt / ".healer" / "progress.md").write_text("ignored: the loop's own\n")
        if isinstance(port, RealGit):
            repo.git(wt, "add", "a.txt")
            repo.git(wt, "commit", "-q", "-m", "a")
        else:
            port.repo.commit(wt, {"a.txt": b"tracked\n"}, "a")
        (root / ".healer" / "worktrees" / "Z").mkdir()
        first = _answers(root, port, wt)
        (wt / "a.txt").write_text("changed\n")  # modified: dirty, still tracked
        first["dirty_after_edit"] = port.dirty(wt)
        first["head_moved"] = port.rev(wt) != port.rev(root, "refs/heads/main")
        answers.append(first)
    real, sim = answers
    assert sim == real
    assert real["untracked"] == ["src/y.txt", "x.txt"] and ".healer/progress.md" in real["dirty"]


def test_a_stale_index_lock_stops_a_commit_and_a_merge_onto_main_as_git_does(tmp_path):
    r = SimRepo(tmp_path / "fleet")
    wt = tmp_path / "fleet" / ".healer" / "worktrees" / "T-1"
    r.add_worktree(wt, "healer/T-1", "main")
    lock = r.checkout(wt).git_dir / "index.lock"
    lock.write_text("someone's\n")
    with pytest.raises(GitError, match="index.lock': File exists"):
        r.commit(wt, {"work.txt": b"x"}, "work")
    lock.unlink()
    head = r.commit(wt, {"work.txt": b"x"}, "work")
    old = r.resolve("refs/heads/main")
    new, conflicts = r.merge(old, head, "merge T-1")
    assert conflicts == [] and new is not None and r.is_ancestor(head, new)
    (r.common / "index.lock").write_text("main's\n")
    with pytest.raises(GitError, match="index.lock"):
        r.advance("main", old, new)
    assert r.resolve("refs/heads/main") == old  # nothing moved
    (r.common / "index.lock").unlink()
    r.advance("main", old, new)
    assert (tmp_path / "fleet" / "work.txt").read_bytes() == b"x"  # the checked-out main follows
    with pytest.raises(GitError, match="moved while"):
        r.advance("main", old, new)  # compare-and-set: main is no longer at `old`


def test_a_merge_that_changes_what_main_changed_is_a_conflict(tmp_path):
    r = SimRepo(tmp_path / "fleet")
    a, b = (tmp_path / "fleet" / ".healer" / "worktrees" / t for t in ("A", "B"))
    r.add_worktree(a, "healer/A", "main")
    r.add_worktree(b, "healer/B", "main")
    ca = r.commit(a, {"same.txt": b"a\n"}, "a")
    cb = r.commit(b, {"same.txt": b"b\n", "other.txt": b"o\n"}, "b")
    main = r.resolve("main")
    merged, _ = r.merge(main, ca, "merge A")
    r.advance("main", main, merged)
    assert r.merge(merged, cb, "merge B") == (None, ["same.txt"])


def test_an_index_lock_fault_in_the_simulated_world_is_a_file_the_dispatcher_moves_aside(tmp_path):
    """The same fault code as real mode (chaos/faults/checkouts.py): a stale lock in main's git dir, where the
    Git port says git keeps it; the product's own stale-lock handling finds it there before its merge, moves it
    aside (kept), and the ticket's work is merged onto main."""
    sc = Scenario.model_validate({
        "name": "sim-index-lock", "mode": "simulated", "seed": 3, "duration": "1h",
        "fleet": {"tickets": [{"id": "T-1", "behaviour": "succeeds"}]},
        "faults": [{"at": "0s", "fault": "index_lock", "target": "main"}],
        "expect": [{"name": "T-1 done", "tickets": {"match": "T-1", "state": "done", "equals": 1}},
                   {"name": "lock moved", "event": {"kind": "dispatch.stale_lock_moved", "subject": "main"}}]})
    e = SimEngine(sc, tmp_path)
    e.begin()
    e.advance(sc.duration)
    moved = e.store.events(kinds=["dispatch.stale_lock_moved"])
    head = e.main_commit
    work = e.repo.commits[head].tree
    r = e.end()
    assert r.ok, [c.message for c in r.failures]
    assert len(moved) == 1 and Path(moved[0].payload["path"]) == e.root / ".git" / "index.lock"
    assert Path(moved[0].payload["to"]).read_text().startswith("stale lock left by game day")  # kept, never deleted
    assert "work/T-1.txt" in work  # merged onto main in the repository, not only on the board
