"""Snapshots, protected paths and roll-backs on real repositories."""

from __future__ import annotations

import json
import os

from healer.loop import gitops, protect, worktree
from tests.conftest import git


def test_snapshot_is_content_addressed_and_ignores_loop_files(lrepo):
    a = worktree.snapshot(lrepo)
    (lrepo / "progress.md").write_text("loop notes\n")
    (lrepo / "lessons.md").write_text("lessons\n")
    (lrepo / ".healer" / "x").parent.mkdir(exist_ok=True)
    (lrepo / ".healer" / "x").write_text("own\n")
    assert worktree.snapshot(lrepo) == a
    (lrepo / "new.txt").write_text("hello\n")
    b = worktree.snapshot(lrepo)
    assert b != a
    git(lrepo, "add", "new.txt")
    assert worktree.snapshot(lrepo) == b  # staging changes nothing
    git(lrepo, "commit", "-q", "-m", "x")
    assert worktree.snapshot(lrepo) == b  # neither does committing
    (lrepo / "new.txt").unlink()
    assert worktree.snapshot(lrepo) == a
    assert git(lrepo, "status", "--porcelain") == "D  new.txt" or "new.txt" in git(lrepo, "status", "--porcelain")


def test_put_back_restores_bytes_and_quarantines_the_agents(lrepo):
    (lrepo / "tests").mkdir()
    (lrepo / "tests" / "test_a.py").write_text("original\n")
    os.chmod(lrepo / "tests" / "test_a.py", 0o755)
    git(lrepo, "add", "-A")
    git(lrepo, "commit", "-q", "-m", "t")
    before = worktree.snapshot(lrepo)
    (lrepo / "tests" / "test_a.py").write_text("cheated\n")
    (lrepo / "tests" / "test_new.py").write_text("new\n")
    git(lrepo, "add", "tests/test_new.py")  # even staged by the agent
    after = worktree.snapshot(lrepo)
    changed = gitops.changed_between(lrepo, before, after)
    assert changed == ["tests/test_a.py", "tests/test_new.py"]
    assert gitops.diff_lines(lrepo, before, after) == 3
    moved = protect.put_back(lrepo, before, changed, lrepo / ".healer" / "q", "protected path")
    assert {m.path: m.action for m in moved} == {"tests/test_a.py": "restored", "tests/test_new.py": "quarantined"}
    assert (lrepo / "tests" / "test_a.py").read_text() == "original\n"
    assert os.stat(lrepo / "tests" / "test_a.py").st_mode & 0o111
    assert not (lrepo / "tests" / "test_new.py").exists()
    assert worktree.snapshot(lrepo) == before
    saved = {m.path: m.saved_as for m in moved}
    with open(saved["tests/test_a.py"]) as f:
        assert f.read() == "cheated\n"
    with open(saved["tests/test_new.py"]) as f:
        assert f.read() == "new\n"


def test_protected_patterns():
    p = protect.protected
    assert p("tests/test_a.py", ["tests/"])
    assert not p("tests_helper.py", ["tests/"])
    assert p("tests/x", ["./tests"])
    assert p("src/conftest.py", ["*conftest.py"])
    assert not p(".github/x", ["./github/"])


def test_commit_all_skips_loop_files_and_empty(lrepo):
    assert gitops.commit_all(lrepo, "loop: goal reached at iteration 1") is None
    (lrepo / "progress.md").write_text("p\n")
    assert gitops.commit_all(lrepo, "loop: goal reached at iteration 1") is None
    (lrepo / "a.py").write_text("x = 1\n")
    sha = gitops.commit_all(lrepo, "loop: goal reached at iteration 1")
    assert sha and git(lrepo, "show", "--name-only", "--format=", sha) == "a.py"
    assert "?? progress.md" in git(lrepo, "status", "--porcelain")


def test_the_fallback_manifest_is_renamed_into_place_and_a_cut_one_kept(tmp_path):
    mf = tmp_path / "MANIFEST.json"
    protect._add_to_manifest(mf, [{"path": "a"}])
    protect._add_to_manifest(mf, [{"path": "b"}])
    assert [e["path"] for e in json.loads(mf.read_text())] == ["a", "b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["MANIFEST.json"]  # no temp file left
    mf.write_text('[{"path": "a"}, {"pa')  # cut short by a crash or a full disk, as an older healer wrote it
    protect._add_to_manifest(mf, [{"path": "c"}])
    assert [e["path"] for e in json.loads(mf.read_text())] == ["c"]
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("MANIFEST.json.unreadable-")]
    assert len(kept) == 1 and kept[0].read_text() == '[{"path": "a"}, {"pa'  # set aside, never dropped


def test_an_empty_own_gitignore_is_written_again(tmp_path):
    """A full disk or a crash mid-write used to leave `.healer/.gitignore` empty, and it was never
    written again: git then saw healer's own files in a repository that does not ignore them."""
    (tmp_path / ".healer").mkdir()
    (tmp_path / ".healer" / ".gitignore").write_text("")
    worktree.MEMORY.ignored_dirs.clear()
    worktree.ignore_own_dir(tmp_path)
    assert "*" in (tmp_path / ".healer" / ".gitignore").read_text().splitlines()
    assert sorted(p.name for p in (tmp_path / ".healer").iterdir()) == [".gitignore"]
