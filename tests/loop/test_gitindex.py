"""The loop's start without `git status` and `git write-tree` (healer/loop/gitindex.py, gitops.measure):
on real repositories, in every state, the tree is the one git would write, and a start called clean is
one `git status` calls clean. Whatever the reader is unsure of falls back to git."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from healer.loop import gitindex, gitops
from tests.conftest import git, make_repo


def _index(repo: Path) -> Path:
    return Path(git(repo, "rev-parse", "--path-format=absolute", "--git-path", "index"))


def _git_tree(repo: Path, tmp: Path) -> str:
    """The snapshot as git alone computes it: `add -A` (the loop's files excluded) and `write-tree` in a copy."""
    idx = tmp / "ref.index"
    idx.unlink(missing_ok=True)
    if _index(repo).exists():
        shutil.copy2(_index(repo), idx)
    env = {**os.environ, "GIT_INDEX_FILE": str(idx)}
    own = [f":(exclude,top,glob){f[:-1]}[{f[-1]}]" for f in gitops.LOOP_FILES if (repo / f).exists()]
    subprocess.run(["git", "add", "-A", "--", ":/", *own], cwd=repo, env=env, check=True, capture_output=True)
    out = subprocess.run(["git", "write-tree"], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout
    idx.unlink()
    return out.strip()


def _fresh(repo: Path) -> None:
    # a new `healer loop run`: the process-wide caches of an earlier measure in this test process are gone
    gitops._scratch_from.pop(repo, None)
    gitops._scratch_tree.pop(repo, None)


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
    tree, idx = gitops.measure(repo)
    assert tree == want
    if _clean_says(repo, tree, idx):
        assert _dirty(repo) == [], state
    expected_clean = state in ("clean", "ignored-untracked", "loop-files", "tracked-loop-file-edited", "assume-unchanged",
                               "copied-clone", "empty-repo")
    assert _clean_says(repo, tree, idx) == (expected_clean and state != "empty-repo"), state
    # and a second measure in the same process (the scratch index reused) agrees
    assert gitops.snapshot(repo) == want


# -- trees compared from loose objects (gitops._diff_paths) -------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
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
    assert gitops._loose_diff(repo, a, b) == _git_diff(repo, a, b)
    assert gitops._diff_paths(repo, a, b) == _git_diff(repo, a, b)


def test_packed_trees_are_compared_by_git(tmp_path):
    repo = make_repo(tmp_path / "r", {"README.md": "r\n", "d/f.txt": "f\n"})
    a = git(repo, "rev-parse", "HEAD^{tree}")
    (repo / "d" / "f.txt").write_text("changed\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "2")
    b = git(repo, "rev-parse", "HEAD^{tree}")
    assert gitops._loose_diff(repo, a, b) == ["d/f.txt"]
    git(repo, "replace", "-f", b, a)  # replace refs change what an id reads as: only git reads then
    assert gitops._loose_tree(repo, a) is None and gitops._loose_diff(repo, a, b) is None
    git(repo, "replace", "-d", b)
    git(repo, "gc", "-q", "--prune=now")
    assert gitops._loose_diff(repo, a, b) is None  # packed: git answers
    assert gitops._diff_paths(repo, a, b) == ["d/f.txt"]
