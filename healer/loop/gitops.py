"""Git for the governed loop: measure the working tree, put back what must not change, commit.

Nothing here deletes: a file that must go is moved to quarantine (restorable byte for
byte), a file that existed before is written back from the snapshot taken before the
agent ran, after its current bytes went to quarantine. No `reset --hard`, no force.
Git itself runs through healer.git.

The loop's own files (LOOP_FILES at the working-tree root, and everything under
.healer/) never count: not in the state hash, not in the diff cap, not as protected
paths, and they are never committed by the loop.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from healer import digest
from healer.errors import HealerError
from healer.git import GitError, layout, raw, rev, run
from healer.loop import gitindex
from healer.loop.loose import EMPTY_TREE, _loose_blob, _loose_diff, _loose_head, _loose_size
from healer.loop.protect import _entries, protected
from healer.loop.worktree import HEALER_DIR, MEMORY, TIMEOUT, _index_from_scratch, _no_attributes, is_loop_file, snapshot

COMMIT_SUBJECT = "loop: goal reached at iteration {n}"


# who the loop's commits are by: set in the environment, which beats every config (GIT_AUTHOR_* the user exported too)
IDENTITY_ENV = {"GIT_AUTHOR_NAME": "healer", "GIT_AUTHOR_EMAIL": "healer@localhost",
                "GIT_COMMITTER_NAME": "healer", "GIT_COMMITTER_EMAIL": "healer@localhost"}


def trailers(run_id: str, n: int, base: str | None) -> str:
    """The trailers of a loop commit: which run made it, at which iteration, on which base."""
    return f"\n\nHealer-Run: {run_id}\nHealer-Iteration: {n}\nHealer-Base: {base or 'none'}"


def _read_ref(git_dir: Path, common: Path, ref: str) -> str | None:
    for base in (git_dir, common):
        try:
            return (base / ref).read_text().strip() or None
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            continue
    try:
        for line in (common / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref) and not line.startswith(("#", "^")):
                return line.split(" ", 1)[0]
    except FileNotFoundError:
        pass
    return None


def head(cwd: str | Path) -> str | None:
    """The commit HEAD points at (None in a repository without commits). Read from the
    files when they are plain (a loop reads HEAD often; a git process costs milliseconds)."""
    cwd = Path(cwd)
    try:
        lay = layout(cwd)
        if lay is None:
            raise ValueError("not a working tree")
        gd, cd = lay.git_dir, lay.common
        text = (gd / "HEAD").read_text().strip()
        if text.startswith("ref: "):
            sha = _read_ref(gd, cd, text[5:])
        else:
            sha = text
        if sha is None or len(sha) in (40, 64):
            return sha
    except (OSError, GitError, ValueError):
        pass
    return run(cwd, "rev-parse", "--verify", "-q", "HEAD", check=False).stdout or None


def subject(cwd: str | Path, rev: str = "HEAD") -> str:
    return run(cwd, "log", "-1", "--format=%s", rev, check=False).stdout


def _split0(data: bytes) -> list[str]:
    return [p.decode("utf-8", "surrogateescape") for p in data.split(b"\0") if p]


def state(cwd: str | Path) -> tuple[str | None, str | None]:
    """(HEAD, state hash of HEAD + snapshot); (None, None) when the worktree is gone.

    The fleet counts resumes on the same state with it: the loop's own files are left
    out of the snapshot, since a resumed loop rewrites progress.md every time and that
    must not pass for progress."""
    if not Path(cwd).is_dir():
        return None, None
    try:
        sha, tree = rev(cwd), snapshot(cwd)
    except GitError:
        return None, None
    return sha, digest.sha256(f"{sha}:{tree}".encode()).hexdigest()[:16]


def changed_between(cwd: str | Path, before: str, after: str) -> list[str]:
    """Paths whose content differs between two snapshots (added, modified, deleted)."""
    return sorted(p for p in _diff_paths(cwd, before, after) if not is_loop_file(p))


def _diff_paths(cwd: str | Path, before: str, after: str) -> list[str]:
    """The paths `diff-tree -r --name-only --no-renames` names between two trees (sorted), compared
    from the loose tree objects when both trees and every subtree that differs are loose (the
    snapshots the loop just wrote), else by git."""
    if before == after:
        return []
    paths = _loose_diff(cwd, before, after)
    if paths is not None:
        return paths
    return _split0(raw(cwd, "diff-tree", "-r", "-z", "--name-only", "--no-renames", before, after))


def diff_lines(cwd: str | Path, before: str, after: str) -> int:
    """Lines added + removed between two snapshots; a binary file counts 1."""
    if before == after:
        return 0
    out = raw(cwd, "diff-tree", "-r", "-z", "--numstat", "--no-renames", before, after)
    total = 0
    for rec in _split0(out):
        parts = rec.split("\t", 2)
        if len(parts) < 3 or is_loop_file(parts[2]):
            continue
        total += 1 if parts[0] == "-" else int(parts[0]) + int(parts[1])
    return total


class ProtectedChanged(HealerError):
    """The tree about to be committed changes a protected path: the commit is not made."""
    exit_code = 3

    def __init__(self, paths: list[str], tree: str, base: str) -> None:
        self.paths, self.tree, self.base = paths, tree, base
        shown = ", ".join(paths[:10]) + (f" (+{len(paths) - 10} more)" if len(paths) > 10 else "")
        super().__init__(f"commit refused: protected paths differ from the run's base {base[:12]}: {shown} "
                         f"(tree {tree[:12]} kept unreferenced for evidence)")


def tree_of(cwd: str | Path, commit: str | None) -> str:
    if not commit:
        return EMPTY_TREE
    if commit not in MEMORY.trees:  # a commit id names its tree for ever
        head = _loose_head(cwd, commit, 80)
        line = head[2].split(b"\n", 1)[0] if head is not None and head[0] == b"commit" else b""
        tree = line[5:].decode() if line.startswith(b"tree ") and len(line) in (45, 69) else \
            run(cwd, "rev-parse", f"{commit}^{{tree}}").stdout
        if len(commit) not in (40, 64):
            return tree  # a ref name moves: never cached
        MEMORY.trees[commit] = tree
    return MEMORY.trees[commit]


def dirty_tracked(cwd: str | Path) -> list[str]:
    """Tracked files with changes, staged or not (the loop's own files left out)."""
    items = raw(cwd, "status", "--porcelain=v1", "-z", "--untracked-files=no", "--ignored=no").split(b"\0")
    out: list[str] = []
    i = 0
    while i < len(items):
        item = items[i].decode("utf-8", "surrogateescape")
        i += 1
        if len(item) < 4:
            continue
        if item[0] in "RC":
            i += 1
        name = item[3:]
        if not is_loop_file(name):
            out.append(name)
    return sorted(out)


def staged(cwd: str | Path) -> list[str]:
    if not head(cwd):
        return _split0(raw(cwd, "ls-files", "-z"))
    return _split0(raw(cwd, "diff-index", "--cached", "--name-only", "--no-renames", "-z", "HEAD"))


def diff_size(cwd: str | Path, before: str, after: str) -> tuple[int, int]:
    """(lines added + removed, bytes) between two snapshots, in one git call (plus one for sizes).
    A binary file counts 1 line; bytes count every file by size: an added or modified file its
    new size, a deleted one its old size. Binary or not, a file is never free."""
    return diff_stat(cwd, before, after)[1:]


def diff_stat(cwd: str | Path, before: str, after: str) -> tuple[list[str], int, int]:
    """(changed paths as `changed_between` lists them, lines, bytes as `diff_size` counts them):
    the loop needs all three after each agent run, from one diff-tree (plus one for sizes)."""
    if before == after:
        return [], 0, 0
    easy = _easy_diff_stat(cwd, before, after)
    if easy is not None:
        return easy
    recs = raw(cwd, "diff-tree", "-r", "-z", "--raw", "--numstat", "--no-renames", before, after).split(b"\0")
    blobs: list[str] = []
    paths: list[str] = []
    lines = 0
    i = 0
    while i < len(recs):
        rec = recs[i].decode("utf-8", "surrogateescape")
        i += 1
        if rec.startswith(":"):  # --raw: meta NUL path
            path = recs[i].decode("utf-8", "surrogateescape") if i < len(recs) else ""
            i += 1
            om, nm, osha, nsha, status = rec[1:].split()[:5]
            if path and not is_loop_file(path):
                paths.append(path)
                if "160000" not in (om, nm):
                    blobs.append(osha if status.startswith("D") else nsha)
        elif rec:  # --numstat: added TAB removed TAB path
            parts = rec.split("\t", 2)
            if len(parts) == 3 and not is_loop_file(parts[2]):
                lines += 1 if parts[0] == "-" else int(parts[0]) + int(parts[1])
    if not blobs:
        return sorted(paths), lines, 0
    loose = [_loose_size(cwd, b) for b in blobs]
    sizes = [s for s in loose if s is not None]
    if len(sizes) < len(loose):  # one git must read: it reads them all
        out = raw(cwd, "cat-file", "--batch-check=%(objectsize)", input=("\n".join(blobs) + "\n").encode())
        sizes = [int(x) for x in out.split() if x.isdigit()]
    return sorted(paths), lines, sum(sizes)


def _easy_diff_stat(cwd: str | Path, before: str, after: str) -> tuple[list[str], int, int] | None:
    """diff_stat without git, when both trees were built from indexes read here (their entries known) and
    every changed file is a change gitindex.easy_lines counts exactly (blobs loose, no link, no attribute
    anywhere that could make git read a file differently). None: git counts."""
    a, b = MEMORY.entries_of.get(before), MEMORY.entries_of.get(after)
    if a is None or b is None:
        return None
    changed = sorted(p for p in a.keys() | b.keys() if a.get(p) != b.get(p) and not is_loop_file(p))
    if not changed or not _no_attributes(cwd, a, b):
        return None if changed else ([], 0, 0)
    lines = size = 0
    for p in changed:
        x, y = a.get(p), b.get(p)
        if any(e is not None and e[0] not in (0o100644, 0o100755) for e in (x, y)):
            return None  # links and submodules: git's
        old = _loose_blob(cwd, x[1]) if x is not None else None
        new = _loose_blob(cwd, y[1]) if y is not None else None
        if (x is not None and old is None) or (y is not None and new is None):
            return None
        n = gitindex.easy_lines(old, new)
        if n is None:
            return None
        lines += n
        size += len(new) if new is not None else len(old) if old is not None else 0
    return changed, lines, size


def diff_bytes(cwd: str | Path, before: str, after: str) -> int:
    return diff_size(cwd, before, after)[1]


def commit_all(cwd: str | Path, message: str, patterns: Sequence[str] = ()) -> str | None:
    """Commit every change against HEAD (tracked and untracked, never the loop's own files)."""
    base = head(cwd)
    return commit_changes(cwd, message, tree_of(cwd, base), base, patterns)


def made_by_run(cwd: str | Path, sha: str, run_id: str, base: str | None) -> bool:
    """`sha` is the loop commit of run `run_id`: its only parent is the run's base and it carries the run's
    trailer (found on resume after a runner killed between the commit and its record)."""
    r = run(cwd, "cat-file", "commit", sha, check=False)
    if r.code != 0:
        return False
    head, _, body = r.stdout.partition("\n\n")
    parents = [ln[7:] for ln in head.splitlines() if ln.startswith("parent ")]
    return parents == ([base] if base else []) and f"Healer-Run: {run_id}" in body.splitlines()


def _refuse_symbolic_branch(cwd: Path) -> None:
    """HEAD names a branch whose ref is a plain id: `update-ref HEAD` follows every link, so a branch
    made a link to main would move main (the guard sets it back after each step; this is the last word)."""
    lay = layout(cwd)
    try:  # read from the files, no git process: a packed ref cannot be a link, a loose one says `ref: `
        head = (lay.git_dir / "HEAD").read_text(errors="replace") if lay else ""
        branch = head[5:].strip() if head.startswith("ref: ") else ""
        linked = bool(branch) and lay is not None and (lay.common / branch).read_text(errors="replace").startswith("ref:")
    except OSError:
        linked = False
    if linked:
        raise GitError(f"{cwd}: the branch {branch} is a link to another ref; the loop does not commit through it")


def commit_changes(cwd: str | Path, message: str, since: str, base: str | None, patterns: Sequence[str],
                   keep_staged: Sequence[str] = (), measured: str | None = None, trailers: str = "",
                   guard: Callable[[str], bool] | None = None) -> str | None:
    """Commit exactly what changed between snapshot `since` (the tree when the run began) and the
    tree now, on top of the run's base commit `base`: never the user's pre-existing changes, never
    the loop's own files, and what is committed is what was measured (the snapshot), not a fresh
    `add -A`. No hook runs (healer.git). Before the branch moves, the new tree's protected paths
    are checked equal to the base's: a mismatch raises ProtectedChanged (nothing committed).
    The branch moves by compare-and-swap from the commit HEAD points at now; the index is then
    brought in line with the commit, except the paths in `keep_staged` (the user's). Returns the
    new commit, or None when there was nothing to commit. `measured`: the snapshot the gates passed
    on, when the caller has it (it is then what is committed, without measuring again). `guard`: the paths
    guarded beyond `patterns` (healer/guarded.py: the fleet's configuration, instruction files), refused alike."""
    cwd = Path(cwd)
    if guard is None:
        guard = lambda p: protected(p, patterns)  # noqa: E731
    now_tree = measured or snapshot(cwd)
    every = _diff_paths(cwd, since, now_tree)
    paths = sorted(p for p in every if not is_loop_file(p))
    parent = head(cwd)
    base_tree = tree_of(cwd, base)
    if since == base_tree and len(paths) == len(every):
        # the run began on its base commit and the snapshot holds none of the loop's files: the
        # tree below would be the snapshot itself, so it is used as is (four git calls fewer)
        tree = now_tree
        bad = [p for p in paths if guard(p)]
    else:
        tree = _overlay(cwd, base_tree, now_tree, paths)
        bad = [p for p in changed_between(cwd, base_tree, tree) if guard(p)]
    if bad:
        raise ProtectedChanged(bad, tree, base or EMPTY_TREE)
    if parent != base:
        # the branch is not where the run began (the guard puts an agent's commits aside after each step: this is
        # the last word): never a commit on top of commits healer did not make
        raise GitError(f"{cwd}: the branch is at {(parent or 'nothing')[:12]}, not at the run's base "
                       f"{(base or 'nothing')[:12]}; the loop commits only on its base")
    if tree == tree_of(cwd, base):
        return None
    # the run's base is the only parent, and the identity is healer's: whatever the user's environment or
    # config say (healer.git runs with no user config), the commit says who made it and from what
    args = ["commit-tree", tree, "-m", message + trailers] + (["-p", base] if base else [])
    r = run(cwd, *args, check=False, env=IDENTITY_ENV)
    if r.code != 0:
        raise GitError(f"git commit-tree failed in {cwd}: {r.text[-300:]}")
    new = r.stdout
    _refuse_symbolic_branch(cwd)
    run(cwd, "update-ref", "-m", f"loop: {message}", "HEAD", new, base or "0" * 40)
    # the index follows the commit; what the user had staged before the run stays staged
    keep = set(keep_staged)
    if not keep:  # every entry follows: one `reset` of the whole tree instead of asking which differ first
        if not _index_from_scratch(cwd, tree):
            run(cwd, "reset", "-q", "HEAD", "--", ":/", check=False)
        return new
    resync = [p for p in staged(cwd) if p not in keep]
    for i in range(0, len(resync), 200):
        run(cwd, "reset", "-q", "HEAD", "--", *(f":(literal){p}" for p in resync[i:i + 200]), check=False)
    return new


def _overlay(cwd: Path, base_tree: str, now_tree: str, paths: list[str]) -> str:
    """`base_tree` with `paths` as they are in `now_tree`, built in a scratch index."""
    idx = cwd / HEALER_DIR / "commit.index"
    idx.unlink(missing_ok=True)
    env = {"GIT_INDEX_FILE": str(idx)}
    run(cwd, "read-tree", base_tree, env=env)
    if paths:
        have = _entries(cwd, now_tree, paths)
        lines = [f"{have[p][0]} {have[p][1]}\t{p}" if p in have else f"0 {'0' * 40}\t{p}" for p in paths]
        raw(cwd, "update-index", "-z", "--index-info", input=("\0".join(lines) + "\0").encode("utf-8", "surrogateescape"),
            env=env)
    tree = run(cwd, "write-tree", env=env).stdout
    idx.unlink(missing_ok=True)
    return tree


LIST_CAP = 1_000_000  # entries `ls-files` may name before the answer is "too big" without reading the rest


@dataclass(frozen=True)
class Oversize:
    why: str
    paths: list[str]  # what the agent added or changed, as git lists it (not ignored)
    size: int = 0  # their bytes on disk
    lines: int = 0  # the least number of lines they add (one per new non-empty file)


def oversize(cwd: str | Path, max_lines: int, max_bytes: int, timeout: float = TIMEOUT) -> Oversize | None:
    """The agent's change already over the scope caps by what the disk says, before `add -A` hashes it: the
    files git would add (untracked and not ignored, or tracked and modified by their stat), by size and by
    count. `add -A` of a 6 GB sparse file or of 100,000 new files took a minute past an 8 s deadline.
    Exact, not a guess: every byte of an added or modified file counts in `diff_size`, and a new non-empty
    file adds at least one line (a binary one counts one), so over these bounds the measured diff is over
    the caps too. One `ls-files`, no hashing. None: within bounds, measured as usual."""
    cwd = Path(cwd)
    out = raw(cwd, "ls-files", "-z", "-t", "-o", "-m", "--exclude-standard", "--", ":/", timeout=timeout)
    paths: list[str] = []
    size = lines = 0
    for rec in out.split(b"\0"):
        if len(rec) < 3:
            continue
        tag, p = rec[:1], rec[2:].decode("utf-8", "surrogateescape")
        if is_loop_file(p) or p in paths[-1:]:
            continue
        try:
            st = os.lstat(cwd / p)
        except OSError:
            continue
        paths.append(p)
        size += st.st_size
        if tag == b"?" and st.st_size:
            lines += 1
        if len(paths) > LIST_CAP:
            break
    if size > max_bytes:
        return Oversize(f"{size} bytes on disk > {max_bytes}, before measuring", paths, size, lines)
    if lines > max_lines:
        return Oversize(f"{lines} new files > {max_lines} lines, before measuring", paths, size, lines)
    return None
