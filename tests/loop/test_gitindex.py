"""The loop's start without `git status` and `git write-tree` (healer/loop/gitindex.py, worktree.measure):
on real repositories, in every state, the tree is the one git would write, and a start called clean is
one `git status` calls clean. Whatever the reader is unsure of falls back to git."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from healer.loop import gitindex, gitops, loose, worktree
from tests.conftest import git, make_repo
from tests.loop.conftest import git_add_tree


def _index(repo: Path) -> Path:
    return Path(git(repo, "rev-parse", "--path-format=absolute", "--git-path", "index"))


def _git_tree(repo: Path, tmp: Path) -> str:
    """The snapshot as git alone computes it: `add -A` (the loop's files excluded) and `write-tree` in a copy."""
    idx = tmp / "ref.index"
    idx.unlink(missing_ok=True)
    if _index(repo).exists():
        shutil.copy2(_index(repo), idx)
    env = {**os.environ, "GIT_INDEX_FILE": str(idx)}
    own = [f":(exclude,top,glob){f[:-1]}[{f[-1]}]" for f in worktree.LOOP_FILES if (repo / f).exists()]
    subprocess.run(["git", "add", "-A", "--", ":/", *own], cwd=repo, env=env, check=True, capture_output=True)
    out = subprocess.run(["git", "write-tree"], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout
    idx.unlink()
    return out.strip()


def _fresh(repo: Path) -> None:
    # a new `healer loop run`: the process-wide caches of an earlier measure in this test process are gone
    worktree.MEMORY.scratch_from.pop(repo, None)
    worktree.MEMORY.scratch_tree.pop(repo, None)


def _clean_says(repo: Path, tree: str, idx) -> bool:
    return idx is not None and tree == gitops.tree_of(repo, gitops.head(repo))


def _dirty(repo: Path) -> list[str]:
    return gitops.dirty_tracked(repo)


def _odd_repo(tmp: Path) -> Path:
    files = {"README.md": "# r\n", "a b/with space.txt": "x\n", "bin.dat": "", "exec.sh": "#!/bin/sh\n",
             "x/y/z/deep.txt": "deep\n", "a.b": "1\n", "a-b": "2\n", "a/b": "3\n", "ü/名前.txt": "utf8\n"}
    repo = make_repo(tmp / "r", files)
    (repo / "bin.dat").write_bytes(bytes(range(256)) * 4)
    (repo / "exec.sh").chmod(0o755)
    os.symlink("README.md", repo / "link")
    os.symlink("/etc/passwd", repo / "outside")  # a link leading out of the tree is content like any other
    (repo / "new\nline.txt").write_text("newline in the name\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "odd")
    return repo


def test_parse_reads_what_git_wrote(tmp_path):
    repo = _odd_repo(tmp_path)
    data = _index(repo).read_bytes()
    idx = gitindex.parse(data)
    assert idx is not None and idx.plain and idx.version in (2, 3)
    assert idx.entries == len(git(repo, "ls-files", "-z").split("\0")) - (1 if git(repo, "ls-files", "-z").endswith("\0") else 0)
    assert idx.root_tree == git(repo, "rev-parse", "HEAD^{tree}") == git(repo, "write-tree")
    # a name longer than 0xFFF bytes (the index's long-name case; no file system takes it: only the index)
    blob = git(repo, "rev-parse", "HEAD:README.md")
    git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},{'/'.join(['d' * 200] * 21)}/f.txt")
    tree = git(repo, "write-tree")  # valid again
    long = gitindex.parse(_index(repo).read_bytes())
    assert long is not None and long.entries == idx.entries + 1 and long.root_tree == tree
    broken = bytearray(data)
    broken[40] ^= 1
    assert gitindex.parse(bytes(broken)) is None  # the checksum


@pytest.mark.parametrize("state", ["staged-change", "intent-to-add", "submodule", "unmerged", "v4", "split", "sparse",
                                   "skip-worktree"])
def test_parse_leaves_the_unusual_to_git(tmp_path, state):
    repo = make_repo(tmp_path / "r", {"README.md": "r\n", "d/f.txt": "f\n", "e/g.txt": "g\n"})
    head = git(repo, "rev-parse", "HEAD")
    if state == "staged-change":
        (repo / "README.md").write_text("changed\n")
        git(repo, "add", "README.md")
    elif state == "intent-to-add":
        (repo / "empty.txt").write_text("")
        git(repo, "add", "-N", "empty.txt")
    elif state == "submodule":
        git(repo, "update-index", "--add", "--cacheinfo", f"160000,{head},sub")
    elif state == "unmerged":
        blob = git(repo, "rev-parse", "HEAD:README.md")
        info = "".join(f"100644 {blob} {n}\tREADME.md\n" for n in (1, 2, 3))
        subprocess.run(["git", "update-index", "--index-info"], cwd=repo, input=f"0 {'0' * 40}\tREADME.md\n" + info,
                       text=True, check=True)
    elif state == "v4":
        git(repo, "update-index", "--index-version", "4")
    elif state == "split":
        git(repo, "update-index", "--split-index")
    elif state == "sparse":
        git(repo, "sparse-checkout", "init", "--cone", "--sparse-index")
        git(repo, "sparse-checkout", "set", "d")
    elif state == "skip-worktree":
        git(repo, "update-index", "--skip-worktree", "README.md")
    idx = gitindex.parse(_index(repo).read_bytes())
    if state == "staged-change":
        assert idx is not None and idx.plain and idx.root_tree is None  # the cache-tree is invalid there
    else:
        assert idx is None or not idx.plain


STATES = ["clean", "untracked", "ignored-untracked", "modified", "deleted", "staged-then-reverted", "staged-new",
          "mode-change", "link-retargeted", "loop-files", "tracked-loop-file-edited", "assume-unchanged", "intent-to-add",
          "copied-clone", "empty-repo"]


@pytest.mark.parametrize("state", STATES)
def test_measure_is_git_s_tree_and_a_clean_start_is_git_s_clean(tmp_path, state):
    if state == "empty-repo":
        repo = tmp_path / "r"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
    else:
        repo = _odd_repo(tmp_path)
    if state == "untracked":
        (repo / "x" / "new file.txt").write_text("new\n")
    elif state == "ignored-untracked":
        (repo / ".healer").mkdir(exist_ok=True)
        (repo / ".healer" / "own").write_text("ignored\n")
    elif state == "modified":
        (repo / "bin.dat").write_bytes(b"\0changed")
    elif state == "deleted":
        (repo / "a.b").unlink()
    elif state == "staged-then-reverted":
        (repo / "README.md").write_text("staged\n")
        git(repo, "add", "README.md")
        (repo / "README.md").write_text("# r\n")
    elif state == "staged-new":
        (repo / "staged.txt").write_text("s\n")
        git(repo, "add", "staged.txt")
    elif state == "mode-change":
        (repo / "exec.sh").chmod(0o644)
    elif state == "link-retargeted":
        (repo / "link").unlink()
        os.symlink("a.b", repo / "link")
    elif state == "loop-files":
        (repo / "progress.md").write_text("the loop's notes\n")
        (repo / "lessons.md").write_text("read only\n")
    elif state == "tracked-loop-file-edited":
        (repo / "progress.md").write_text("tracked\n")
        git(repo, "add", "progress.md")
        git(repo, "commit", "-q", "-m", "progress tracked")
        (repo / "progress.md").write_text("tracked, then edited by the loop\n")
    elif state == "assume-unchanged":
        git(repo, "update-index", "--assume-unchanged", "a-b")
    elif state == "intent-to-add":
        (repo / "empty.txt").write_text("")
        git(repo, "add", "-N", "empty.txt")
    elif state == "copied-clone":  # the bench's fresh clones: every stat in the index is another file's
        copy = tmp_path / "copy"
        shutil.copytree(repo, copy, symlinks=True)
        repo = copy
    _fresh(repo)
    want = _git_tree(repo, tmp_path)
    tree, idx = worktree.measure(repo)
    assert tree == want
    if _clean_says(repo, tree, idx):
        assert _dirty(repo) == [], state
    # an index flag (assume-unchanged) is the agent's to set: such an index is git's to read, never the fast path
    expected_clean = state in ("clean", "ignored-untracked", "loop-files", "tracked-loop-file-edited",
                               "copied-clone", "empty-repo")
    assert _clean_says(repo, tree, idx) == (expected_clean and state != "empty-repo"), state
    # and a second measure in the same process (the scratch index reused) agrees
    assert worktree.snapshot(repo) == want


# -- trees compared from loose objects (gitops._diff_paths) -------------------------------------------------

from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

NAMES = st.sampled_from(["a", "a.b", "a-b", "a0", "b", "with space", "new\nline", "ü", "Z", "a.b.c"])
KINDS = st.sampled_from(["file", "exec", "link", "dir"])


def _tree_spec(depth: int = 0):
    leaf = st.tuples(st.sampled_from(["file", "exec", "link"]), st.sampled_from(["one", "two", "three"]))
    if depth >= 2:
        return st.dictionaries(NAMES, leaf, max_size=4)
    return st.dictionaries(NAMES, st.one_of(leaf, st.deferred(lambda: _tree_spec(depth + 1))), max_size=4)


def _write(root: Path, spec: dict) -> None:
    for name, v in spec.items():
        p = root / name
        if isinstance(v, dict):
            p.mkdir()
            _write(p, v)
        elif v[0] == "link":
            os.symlink(v[1], p)
        else:
            p.write_text(v[1])
            if v[0] == "exec":
                p.chmod(0o755)


def _tree_of(repo: Path, spec: dict) -> str:
    for p in repo.iterdir():
        if p.name != ".git":
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    _write(repo, spec)
    git(repo, "add", "-A")
    return git(repo, "write-tree")


def _git_diff(repo: Path, a: str, b: str) -> list[str]:
    out = subprocess.run(["git", "diff-tree", "-r", "-z", "--name-only", "--no-renames", a, b], cwd=repo,
                         capture_output=True, check=True).stdout
    return sorted(x.decode("utf-8", "surrogateescape") for x in out.split(b"\0") if x)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_tree_spec(), _tree_spec())
def test_loose_trees_diff_as_git_diff_tree(tmp_path_factory, one, two):
    repo = tmp_path_factory.mktemp("t")
    git(repo, "init", "-q")
    a, b = _tree_of(repo, one), _tree_of(repo, two)
    assert loose._loose_diff(repo, a, b) == _git_diff(repo, a, b)
    assert gitops._diff_paths(repo, a, b) == _git_diff(repo, a, b)


def test_packed_trees_are_compared_by_git(tmp_path):
    repo = make_repo(tmp_path / "r", {"README.md": "r\n", "d/f.txt": "f\n"})
    a = git(repo, "rev-parse", "HEAD^{tree}")
    (repo / "d" / "f.txt").write_text("changed\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "2")
    b = git(repo, "rev-parse", "HEAD^{tree}")
    assert loose._loose_diff(repo, a, b) == ["d/f.txt"]
    git(repo, "replace", "-f", b, a)  # healer's git never honours replace refs (issue 31): the loose read is its answer
    from healer import git as hgit

    theirs = hgit.run(repo, "diff-tree", "-r", "--name-only", "--no-commit-id", a, b).stdout.split()
    assert loose._loose_diff(repo, a, b) == theirs == ["d/f.txt"]
    git(repo, "replace", "-d", b)
    git(repo, "gc", "-q", "--prune=now")
    assert loose._loose_diff(repo, a, b) is None  # packed: git answers
    assert gitops._diff_paths(repo, a, b) == ["d/f.txt"]


# -- write-tree and numstat done here (gitindex.trees, gitindex.easy_lines, gitops._easy_diff_stat) -----------

def _reset_caches(repo: Path) -> None:
    _fresh(repo)
    worktree.MEMORY.entries_of.clear()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_tree_spec(), _tree_spec())
def test_the_snapshot_tree_written_here_is_git_s_write_tree(tmp_path_factory, one, two):
    repo, scratch = tmp_path_factory.mktemp("w"), tmp_path_factory.mktemp("s")
    git(repo, "init", "-q")
    worktree.ignore_own_dir(repo)
    for spec in (one, two):
        for p in repo.iterdir():
            if p.name not in (".git", ".healer"):
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        _write(repo, spec)
        want = _git_tree(repo, scratch)
        tree = worktree.snapshot(repo)  # the second one goes through _write_tree (the first may too)
        assert tree == want
        assert tree in worktree.MEMORY.entries_of or tree == loose.EMPTY_TREE  # built here (git for an empty index)
        assert git(repo, "cat-file", "-t", tree) == "tree"
    assert subprocess.run(["git", "fsck", "--no-dangling"], cwd=repo, capture_output=True).returncode == 0


LINES = st.lists(st.sampled_from(["a", "b", "", "same", "x y", "\t"]), max_size=6)


def _content(lines: list[str], tail: bool, binary: bool) -> bytes:
    b = "\n".join(lines).encode() + (b"\n" if tail and lines else b"")
    return b"\0" + b if binary else b


def _blob(repo: Path, data: bytes) -> str:
    return subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=data, capture_output=True,
                          check=True).stdout.decode().strip()


def _git_lines(repo: Path, old: bytes | None, new: bytes | None) -> int:
    def tree(data):
        if data is None:
            return loose.EMPTY_TREE
        return subprocess.run(["git", "mktree"], cwd=repo, input=f"100644 blob {_blob(repo, data)}\tf\n".encode(),
                              capture_output=True, check=True).stdout.decode().strip()
    out = subprocess.run(["git", "diff-tree", "-r", "--numstat", tree(old), tree(new)], cwd=repo, capture_output=True,
                         text=True, check=True).stdout.split()
    return 0 if not out else 1 if out[0] == "-" else int(out[0]) + int(out[1])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(LINES, st.booleans(), st.booleans(), LINES, st.booleans(), st.booleans(), st.sampled_from(["both", "added", "deleted"]),
       st.booleans())
def test_easy_lines_are_git_s_numstat(tmp_path_factory, la, ta, ba, lb, tb, bb, kind, append):
    repo = tmp_path_factory.mktemp("n")
    git(repo, "init", "-q")
    old = _content(la, ta, ba)
    new = old + _content(lb, tb, bb) if append else _content(lb, tb, bb)
    if kind == "added":
        old = None
    elif kind == "deleted":
        new = None
    assume(old != new)  # the same blob: only a mode change calls for a count (binary 1, text 0: test_mode_only)
    n = gitindex.easy_lines(old, new)
    if n is not None:
        assert n == _git_lines(repo, old, new), (old, new)
    if kind == "both" and append and old is not None and (not old or old.endswith(b"\n")) and b"\0" not in new[:8000]:
        assert n is not None  # appending to a file that ends with a full line is always counted here


def _steps(repo: Path) -> list:
    """Edits an agent makes, one snapshot each: added, appended, cut, rewritten, binary, renamed, deleted, a link,
    a mode change, names with spaces and newlines."""
    return [
        lambda: (repo / "work.txt").write_text("step\n"),
        lambda: (repo / "work.txt").write_text("step\nstep\n"),
        lambda: (repo / "a b.txt").write_text("spaced\nname\n"),
        lambda: (repo / "work.txt").write_text("step\n"),
        lambda: (repo / "work.txt").write_text("rewritten in the middle\n"),
        lambda: (repo / "data.bin").write_bytes(b"\0\1\2" * 100),
        lambda: (repo / "a b.txt").rename(repo / "renamed\nname.txt"),
        lambda: (repo / "data.bin").unlink(),
        lambda: os.symlink("/etc/passwd", repo / "outside"),
        lambda: (repo / "exec.sh").chmod(0o644),
        lambda: (repo / "x" / "y").mkdir(parents=True) or (repo / "x" / "y" / "deep.txt").write_text("deep"),
        lambda: (repo / "x" / "y" / "deep.txt").write_text("deep\nmore\n"),
    ]


def test_diff_stat_here_is_git_s_for_each_kind_of_edit(tmp_path):
    repo = make_repo(tmp_path / "r", {"README.md": "r\n", "exec.sh": "#!/bin/sh\n"})
    (repo / "exec.sh").chmod(0o755)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "exec")
    _reset_caches(repo)
    before = worktree.snapshot(repo)
    easy = 0
    for step in _steps(repo):
        step()
        after = worktree.snapshot(repo)
        assert after == _git_tree(repo, tmp_path)
        here = gitops._easy_diff_stat(repo, before, after)
        saved = dict(worktree.MEMORY.entries_of)
        worktree.MEMORY.entries_of.clear()
        by_git = gitops.diff_stat(repo, before, after)
        worktree.MEMORY.entries_of.update(saved)
        if here is not None:
            easy += 1
            assert here == by_git
        assert gitops.diff_stat(repo, before, after) == by_git
        before = after
    assert easy >= 7  # most of these edits are counted without git


def test_attributes_leave_the_count_to_git(tmp_path):
    repo = make_repo(tmp_path / "r", {"README.md": "r\n"})
    _reset_caches(repo)
    before = worktree.snapshot(repo)
    (repo / "f.txt").write_text("one\n")
    after = worktree.snapshot(repo)
    assert gitops._easy_diff_stat(repo, before, after) == (["f.txt"], 1, 4)
    info = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir")) / "info" / "attributes"
    info.parent.mkdir(exist_ok=True)
    info.write_text("*.txt binary\n")
    assert gitops._easy_diff_stat(repo, before, after) is None
    assert gitops.diff_stat(repo, before, after) == (["f.txt"], 1, 4)  # binary by attribute: git says so
    info.unlink()
    (repo / ".gitattributes").write_text("*.txt -diff\n")
    after2 = worktree.snapshot(repo)
    assert gitops._easy_diff_stat(repo, before, after2) is None


def test_mode_only_changes_count_as_git_counts_them(tmp_path):
    repo = make_repo(tmp_path / "r", {"README.md": "r\n"})
    (repo / "b.bin").write_bytes(b"\0\1\2")
    (repo / "t.txt").write_text("text\n")
    _reset_caches(repo)
    before = worktree.snapshot(repo)
    (repo / "b.bin").chmod(0o755)
    (repo / "t.txt").chmod(0o755)
    after = worktree.snapshot(repo)
    here = gitops._easy_diff_stat(repo, before, after)
    worktree.MEMORY.entries_of.clear()
    assert here == gitops.diff_stat(repo, before, after) == (["b.bin", "t.txt"], 1, 8)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_tree_spec(), _tree_spec())
def test_diff_stat_here_is_git_s_between_any_two_trees(tmp_path_factory, one, two):
    repo = tmp_path_factory.mktemp("d")
    git(repo, "init", "-q")
    worktree.ignore_own_dir(repo)
    worktree.MEMORY.entries_of.clear()
    a, b = _tree_of(repo, one), None
    a = worktree.snapshot(repo)
    _tree_of(repo, two)
    b = worktree.snapshot(repo)
    here = gitops._easy_diff_stat(repo, a, b)
    worktree.MEMORY.entries_of.clear()
    by_git = gitops.diff_stat(repo, a, b)
    if here is not None:
        assert here == by_git


def test_a_planted_object_is_not_read_as_the_one_it_names(tmp_path):
    """An agent that can write the object store (it must, to commit) writes a file under the id of a tree the
    loop will read: the content does not hash to its name, so the loop asks git (which sees the same file)."""
    import zlib

    repo = make_repo(tmp_path / "r", {"README.md": "r\n"})
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    f = common / "objects" / tree[:2] / tree[2:]
    assert loose._loose_tree(repo, tree) is not None
    body = b"100644 other\0" + bytes(20)
    f.chmod(0o644)
    f.write_bytes(zlib.compress(b"tree %d\0" % len(body) + body))
    assert loose._loose_tree(repo, tree) is None


def test_a_clone_s_packed_trees_are_left_to_git_s_write_tree(tmp_path):
    repo = make_repo(tmp_path / "r", {f"d{i}/f.txt": f"{i}\n" for i in range(40)})
    git(repo, "gc", "-q")
    _reset_caches(repo)
    worktree.MEMORY.git_writes_trees.discard(str(repo))
    worktree.snapshot(repo)
    (repo / "d1" / "f.txt").write_text("changed\n")
    assert worktree.snapshot(repo) == _git_tree(repo, tmp_path)
    assert str(repo) in worktree.MEMORY.git_writes_trees  # 40 packed trees: not copied out as loose objects
    loose = [p for p in (repo / ".git" / "objects").glob("??/*")]
    assert len(loose) <= 3  # the changed blob and git's own new trees, no copies of the packed ones


# -- the index after the loop's commit (worktree._index_from_scratch) -----------------------------------------

def _commit_state(repo: Path) -> tuple:
    def raw_git(*a):
        return subprocess.run(["git", *a], cwd=repo, capture_output=True, check=False).stdout
    return (raw_git("ls-files", "-s", "-z"), raw_git("status", "--porcelain=v1", "-z", "--untracked-files=all"),
            subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=repo).returncode,
            subprocess.run(["git", "diff", "--quiet"], cwd=repo).returncode, raw_git("rev-parse", "HEAD^{tree}"))


@pytest.mark.parametrize("tracked_progress", [False, True])
def test_the_index_after_the_commit_is_what_git_reset_makes_it(tmp_path, monkeypatch, tracked_progress):
    """The commit leaves the real index as `git reset -q HEAD -- :/` would (the scratch index of the committed
    snapshot, copied in): same entries, same status, nothing staged, for every kind of edit."""
    files = {"README.md": "r\n", "exec.sh": "#!/bin/sh\n", "a b.txt": "spaced\n", "data.bin": "x"}
    if tracked_progress:
        files["progress.md"] = "tracked notes\n"
    base = make_repo(tmp_path / "base", files)
    (base / "exec.sh").chmod(0o755)
    git(base, "add", "-A")
    git(base, "commit", "-q", "-m", "exec")
    results = []
    for fast in (True, False):
        repo = tmp_path / f"r-{fast}"
        shutil.copytree(base, repo, symlinks=True)
        _reset_caches(repo)
        real, taken = worktree._index_from_scratch, []
        monkeypatch.setattr(gitops, "_index_from_scratch",
                            lambda cwd, tree, real=real, fast=fast, taken=taken: taken.append(fast and real(cwd, tree)) or taken[-1])
        head = gitops.head(repo)
        since = worktree.snapshot(repo)
        for step in _steps(repo):
            step()
        (repo / "progress.md").write_text("the loop's notes, never committed\n")
        (repo / "ignored.log").write_text("x\n")
        (repo / ".gitignore").write_text(".healer/\n*.log\n")
        measured = worktree.snapshot(repo)
        sha = gitops.commit_changes(repo, "loop: goal reached at iteration 1", since, head, ["tests/"], measured=measured)
        assert sha and git(repo, "rev-parse", "HEAD^{tree}") == measured
        results.append(_commit_state(repo))
        assert taken == [fast]  # the copy was made (fast), or `git reset` ran
        monkeypatch.undo()
    assert results[0] == results[1]
    assert results[0][2] == 0  # nothing staged after the commit


# -- the layout read from the files (git._plain_layout) ------------------------------------------------------

def _git_layout(cwd: Path) -> tuple | None:
    p = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-dir", "--git-common-dir",
                        "--git-path", "index"], cwd=cwd, capture_output=True, text=True)
    return tuple(p.stdout.split("\n")[:4]) if p.returncode == 0 else None


def test_the_layout_read_here_is_rev_parse_s_answer(tmp_path, monkeypatch):
    from healer import git as hgit

    main = make_repo(tmp_path / "main")
    (main / "sub" / "deep").mkdir(parents=True)
    (main / "sub" / "HEAD").write_text("a project file named HEAD\n")
    git(main, "worktree", "add", "-q", str(tmp_path / "wt"))
    (tmp_path / "wt" / "x").mkdir()
    os.symlink(main, tmp_path / "link")
    inner = make_repo(main / "sub" / "inner")
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    rel = tmp_path / "rel"  # a `.git` file with a relative gitdir, as a submodule's
    rel.mkdir()
    shutil.move(str(make_repo(tmp_path / "relsrc") / ".git"), str(tmp_path / "relsrc.git"))
    (rel / ".git").write_text("gitdir: ../relsrc.git\n")
    (main / "sub" / "stray" / ".git").mkdir(parents=True)  # not a repository: git looks further up
    (tmp_path / "plain").mkdir()
    cases = [main, main / "sub" / "deep", main / "sub", tmp_path / "link", tmp_path / "link" / "sub", tmp_path / "wt",
             tmp_path / "wt" / "x", inner, main / ".git", main / ".git" / "refs", bare, rel, main / "sub" / "stray",
             tmp_path / "plain"]
    fast = 0
    for cwd in cases:
        mine = hgit._plain_layout(str(cwd))
        want = _git_layout(cwd)
        if mine is not None:
            fast += 1
            assert want is not None and tuple(str(p) for p in (mine.top, mine.git_dir, mine.common, mine.index)) == want, cwd
    assert fast >= 7  # the plain checkouts, subfolders, links and linked worktrees are read here
    # anything that could move the work tree, or redirect git, is git's to answer
    git(main, "config", "core.worktree", str(main))
    assert hgit._plain_layout(str(main)) is None
    git(main, "config", "--unset", "core.worktree")
    assert hgit._plain_layout(str(main)) is not None
    monkeypatch.setenv("GIT_DIR", str(main / ".git"))
    assert hgit._plain_layout(str(main)) is None
    monkeypatch.delenv("GIT_DIR")
    os.chown(main, 12345, 12345)  # another owner: git's safe.directory check decides
    try:
        assert hgit._plain_layout(str(main)) is None
    finally:
        os.chown(main, os.getuid(), os.getgid())


@pytest.mark.parametrize("edits", ["append", "rewrite-same-size", "mode", "link-target", "several"])
def test_the_index_after_committing_a_tree_hashed_without_git_is_what_git_reset_makes_it(tmp_path, monkeypatch, edits):
    """Edits to indexed files only: the last snapshot is hashed here (worktree._rehash, no `add`), the scratch
    index then lags behind it, and the commit brings it up to the tree (worktree._patch_rehashed): the same
    entries, status and nothing staged as when git measured (whose index is the reset's, test above)."""
    base = make_repo(tmp_path / "base", {"README.md": "r\n", "exec.sh": "#!/bin/sh\n", "w.txt": "one\n", "d/n.txt": "n\n"})
    os.symlink("w.txt", base / "link")
    git(base, "add", "-A")
    git(base, "commit", "-q", "-m", "link")
    results = []
    for fast in (True, False):
        repo = tmp_path / f"r-{fast}"
        shutil.copytree(base, repo, symlinks=True)
        _reset_caches(repo)
        worktree.MEMORY.unchanged.clear()
        adds = []
        real_run = gitops.run
        counted = lambda cwd, *a, real_run=real_run, adds=adds, **kw: adds.append(a[0]) or real_run(cwd, *a, **kw)  # noqa: E731
        monkeypatch.setattr(gitops, "run", counted)
        monkeypatch.setattr(worktree, "run", counted)
        head = gitops.head(repo)
        since = worktree.snapshot(repo)
        if not fast:
            worktree.MEMORY.unchanged.clear()  # the reference: git measures, its scratch index copied in
        if edits in ("append", "several"):
            with open(repo / "w.txt", "a") as f:
                f.write("two\n")
        if edits in ("rewrite-same-size", "several"):
            (repo / "d" / "n.txt").write_text("m\n")
        if edits in ("mode", "several"):
            (repo / "w.txt").chmod(0o755)
        if edits in ("link-target", "several"):
            (repo / "link").unlink()
            os.symlink("README.md", repo / "link")
        measured = worktree.snapshot(repo)
        assert measured == git_add_tree(repo)
        sha = gitops.commit_changes(repo, "loop: goal reached at iteration 1", since, head, ["tests/"], measured=measured)
        assert sha and git(repo, "rev-parse", "HEAD^{tree}") == measured
        results.append(_commit_state(repo))
        assert "reset" not in adds, adds  # the index brought by a file here, both times
        assert adds.count("add") == (1 if fast else 2), adds
        monkeypatch.undo()
    assert results[0] == results[1]
    assert results[0][2] == 0 and results[0][3] == 0  # nothing staged, nothing unstaged



def test_a_nested_repository_without_a_commit_stays_out_of_the_snapshot(tmp_path):
    """`git add -A` refuses a nested repository that has no commit (it cannot even record it as a link): the
    snapshot leaves it out instead of failing the run (it was an exit 70 at iteration 0)."""
    repo = make_repo(tmp_path / "r")
    (repo / "new.txt").write_text("new\n")
    nested = repo / "we*ird [sub]"
    nested.mkdir()
    git(nested, "init", "-q")
    (nested / "f.txt").write_text("x\n")
    tree, _ = worktree.measure(repo)
    names = git(repo, "ls-tree", "-r", "--name-only", tree).splitlines()
    assert "new.txt" in names and not any(n.startswith("we*ird") for n in names)


def test_a_fifo_in_the_tree_is_never_opened_by_the_snapshot(tmp_path):
    """An agent leaves a FIFO dated in the future (so the snapshot's stat watch takes it as racy and would read it):
    opening it would wait for a writer for ever. The snapshot does not open what is not a file or a link."""
    import os

    repo = make_repo(tmp_path / "r")
    fifo = repo / "notes.fifo"
    os.mkfifo(fifo)
    future = 4_000_000_000 * 10**9
    os.utime(fifo, ns=(future, future))
    tree, _ = worktree.measure(repo)
    assert tree == worktree.measure(repo)[0]  # and again, from what it remembered
