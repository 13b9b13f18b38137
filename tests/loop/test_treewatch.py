"""A snapshot that skips `git add -A` when nothing it reads has changed (healer/loop/treewatch.py): whatever is
done to the tree between two snapshots, the second is the tree git writes; the skip happens only when the
tree is really the same."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from healer.loop import gitops, treewatch, worktree
from tests.conftest import git
from tests.loop.conftest import git_add_tree as _truth
from tests.loop.conftest import loop_repo


class Adds:
    """How many `git add` the snapshots ran (the real git.run, counted)."""

    def __init__(self, monkeypatch) -> None:
        self.n = 0
        real = gitops.run

        def counted(cwd, *args, **kw):
            if args and args[0] == "add":
                self.n += 1
            return real(cwd, *args, **kw)

        monkeypatch.setattr(gitops, "run", counted)
        monkeypatch.setattr(worktree, "run", counted)  # the snapshot's `add` runs there


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = loop_repo(tmp_path / "repo")
    (r / "src").mkdir()
    (r / "src" / "a.py").write_text("a = 1\n")
    (r / "src" / "b.py").write_text("b = 2\n")
    (r / ".gitignore").write_text("*.log\nbuild/\n")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "src")
    yield r
    for d in (worktree.MEMORY.unchanged, worktree.MEMORY.scratch_tree, worktree.MEMORY.scratch_from):
        d.clear()


def test_an_untouched_tree_is_measured_once(repo, monkeypatch):
    adds = Adds(monkeypatch)
    a = worktree.snapshot(repo)
    b = worktree.snapshot(repo)
    assert a == b == _truth(repo)
    assert adds.n == 1


@pytest.mark.parametrize("change", [
    "append", "same-size-rewrite", "rewrite-then-old-mtime", "chmod", "new-file", "new-empty-dir-file", "delete",
    "rename", "symlink", "replace-dir-by-file", "gitignore", "ignored-file", "ignored-dir", "loop-file", "healer-own",
    "git-exclude"])
def test_every_change_is_seen_and_only_changes_that_matter_cost_an_add(repo, monkeypatch, change):
    worktree.snapshot(repo)
    adds = Adds(monkeypatch)
    a, b = repo / "src" / "a.py", repo / "src" / "b.py"
    if change == "append":
        a.write_text("a = 1\nmore\n")
    elif change == "same-size-rewrite":
        a.write_text("a = 9\n")
    elif change == "rewrite-then-old-mtime":  # a hostile gate covering its tracks: ctime still moves
        st = os.stat(a)
        a.write_text("a = 7\n")
        os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif change == "chmod":
        a.chmod(0o755)
    elif change == "new-file":
        (repo / "src" / "c.py").write_text("c\n")
    elif change == "new-empty-dir-file":
        (repo / "out").mkdir()
        (repo / "out" / "x").write_text("x\n")
    elif change == "delete":
        b.unlink()
    elif change == "rename":
        b.rename(repo / "src" / "bb.py")
    elif change == "symlink":
        (repo / "src" / "l").symlink_to("a.py")
    elif change == "replace-dir-by-file":
        a.unlink()
        b.unlink()
        (repo / "src").rmdir()
        (repo / "src").write_text("now a file\n")
    elif change == "gitignore":
        (repo / ".gitignore").write_text("build/\n")
        (repo / "x.log").write_text("was ignored\n")
    elif change == "ignored-file":
        (repo / "y.log").write_text("ignored\n")
    elif change == "ignored-dir":
        (repo / "build").mkdir()
        (repo / "build" / "o").write_text("o\n")
    elif change == "loop-file":
        (repo / "progress.md").write_text("notes\n")
    elif change == "healer-own":
        (repo / ".healer" / "mine").write_text("x\n")
    elif change == "git-exclude":
        (repo / ".git" / "info").mkdir(exist_ok=True)
        with open(repo / ".git" / "info" / "exclude", "a") as f:
            f.write("src/b.py\n")
        b.write_text("b = 3\n")  # tracked: still added
    got = worktree.snapshot(repo)
    assert got == _truth(repo)
    # an indexed file's new bytes, mode or target are hashed here; any other change costs an add (ignored
    # ones too), except in the files this module knows `add` leaves out
    free = ("healer-own", "loop-file", "append", "same-size-rewrite", "rewrite-then-old-mtime", "chmod")
    assert adds.n == (0 if change in free else 1), change
    assert worktree.snapshot(repo) == got  # and the tree then stays measured
    assert adds.n == (0 if change in free else 1)


@pytest.mark.parametrize("setting", ["gitattributes", "autocrlf", "filemode-false", "info-attributes"])
def test_a_tree_git_may_store_otherwise_than_its_bytes_is_left_to_git(repo, monkeypatch, setting):
    if setting == "gitattributes":
        (repo / ".gitattributes").write_text("*.py text eol=crlf\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "attrs")
    elif setting == "autocrlf":
        git(repo, "config", "core.autocrlf", "true")
    elif setting == "filemode-false":
        git(repo, "config", "core.fileMode", "false")
    else:
        (repo / ".git" / "info").mkdir(exist_ok=True)
        (repo / ".git" / "info" / "attributes").write_text("*.py -text\n")
    worktree.snapshot(repo)
    adds = Adds(monkeypatch)
    (repo / "src" / "a.py").write_text("a = 1\r\nb = 2\r\n")
    (repo / "src" / "b.py").chmod(0o755)
    assert worktree.snapshot(repo) == _truth(repo)
    assert adds.n == 1


OPS = st.lists(st.tuples(st.sampled_from(["write", "same-size", "append", "chmod", "delete", "mkdir", "link", "rename",
                                          "ignored", "backdate", "measure"]),
                         st.sampled_from(["src/a.py", "src/b.py", "src/c.py", "d/e.txt", "x.log", "top.txt"])),
               min_size=1, max_size=8)


@pytest.mark.long  # 13 s (2026-12-07): `make test-long`, which .ci/run runs after `make test`
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS)
def test_whatever_is_done_between_snapshots_the_snapshot_is_gits_tree(tmp_path_factory, ops):
    r = loop_repo(tmp_path_factory.mktemp("w") / "repo")
    (r / "src").mkdir()
    (r / "src" / "a.py").write_text("a = 1\n")
    (r / ".gitignore").write_text("*.log\n")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "src")
    try:
        worktree.snapshot(r)
        for op, rel in ops:
            p = r / rel
            if op == "measure":
                assert worktree.snapshot(r) == _truth(r)
                continue
            if op in ("write", "same-size", "append", "ignored"):
                p.parent.mkdir(parents=True, exist_ok=True)
                if p.is_dir() and not p.is_symlink():
                    continue
                if p.is_symlink():
                    p.unlink()
                mode = "a" if op == "append" else "w"
                with open(p, mode) as f:
                    f.write({"same-size": "z = 1\n", "append": "more\n"}.get(op, f"{op} {rel}\n"))
            elif op == "chmod" and p.is_file():
                p.chmod(p.stat().st_mode ^ 0o100)
            elif op == "delete" and (p.is_file() or p.is_symlink()):
                p.unlink()
            elif op == "mkdir" and not os.path.lexists(p):
                p.mkdir(parents=True)
            elif op == "link" and not os.path.lexists(p) and p.parent.is_dir():
                p.symlink_to("elsewhere")
            elif op == "rename" and (p.is_file() or p.is_symlink()):
                p.rename(p.with_name(p.name + ".moved"))
            elif op == "backdate" and p.is_file() and not p.is_symlink():
                os.utime(p, ns=(0, 0))  # an mtime from 1970: only ctime tells
        assert worktree.snapshot(r) == _truth(r)
    finally:
        for d in (worktree.MEMORY.unchanged, worktree.MEMORY.scratch_tree, worktree.MEMORY.scratch_from):
            d.clear()


def test_a_file_changed_in_the_same_clock_tick_is_compared_by_content(repo):
    """An entry not older than the stamp may have changed while git read it, or may change again within
    the same tick: it is hashed, and must hash as git indexed it."""
    a = repo / "src" / "a.py"
    future = os.stat(a).st_mtime_ns + 3600 * 10**9
    os.utime(a, ns=(future, future))  # dated after any stamp: "racy"
    tree = worktree.snapshot(repo)
    seen = worktree.MEMORY.unchanged[repo][2]
    assert any(len(k) == 7 for k in seen.signature[1])  # its blob id is part of what is compared
    assert treewatch.same(seen)
    a.write_text("a = 5\n")  # same size
    os.utime(a, ns=(future, future))
    assert not treewatch.same(seen)
    assert worktree.snapshot(repo) == _truth(repo) != tree


def test_a_file_that_does_not_hash_as_indexed_gives_no_fast_answer(repo):
    """A racy file whose bytes are not the blob the index holds (written while `add` ran, or read through a
    filter): nothing is remembered, git is asked next time."""
    a = repo / "src" / "a.py"
    since = os.stat(a).st_mtime_ns  # a stamp no later than the file: it is racy
    looked = treewatch.look(str(repo), since, frozenset({".git", ".healer"}), ())
    right = git(repo, "hash-object", "src/a.py")
    assert treewatch.take(looked, [(b"src/a.py", 0o100644, bytes.fromhex(right))]) is not None
    assert treewatch.take(looked, [(b"src/a.py", 0o100644, b"\0" * 20)]) is None
    assert treewatch.take(looked, [(b"src/a.py", 0o100755, bytes.fromhex(right))]) is None


def test_a_file_written_after_the_look_is_never_taken_for_unchanged(repo):
    """The race `look`-then-`add` closes: whatever changes after the look (before, during or after git reads
    it) differs from what was recorded."""
    worktree.snapshot(repo)
    looked = treewatch.look(str(repo), treewatch.stamp(repo / ".healer" / "snapshot.stamp"),
                            frozenset({".git", ".healer"}), ())
    (repo / "src" / "new.py").write_text("n\n")  # a file git's add would have found
    seen = treewatch.take(looked, [])
    assert seen is not None and not treewatch.same(seen)


def test_the_stamp_never_touches_what_a_link_in_its_place_points_to(repo, tmp_path):
    """An unsandboxed agent that swaps .healer/snapshot.stamp for a link cannot make healer re-date a file
    outside the tree."""
    outside = tmp_path / "outside.txt"
    outside.write_text("keep my dates\n")
    os.utime(outside, ns=(10**9, 10**9))
    stamp_file = repo / ".healer" / "snapshot.stamp"
    stamp_file.parent.mkdir(exist_ok=True)
    stamp_file.unlink(missing_ok=True)
    stamp_file.symlink_to(outside)
    assert treewatch.stamp(stamp_file) is not None
    assert os.stat(outside).st_mtime_ns == 10**9
    assert worktree.snapshot(repo) == _truth(repo)
    assert os.stat(outside).st_mtime_ns == 10**9
