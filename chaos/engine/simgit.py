"""The simulated world's git: a small repository with git's semantics, its objects and refs in memory, its
checkouts and lock files on disk; and the Git port (healer/fleet/ports.py) the real Dispatcher, Supervisor and
remediation executor talk to, answered from it.

Why a model and not a real git in a tmpfs: a simulated game day asks the Git port about 2,000 times (every
dispatcher pass reads main's head, every supervisor tick lists each worktree's unknown files); a git process costs
about 10 ms on this machine, which would multiply the simulated suite's time several fold. What the model keeps of
git is what the product and the faults rely on:

- objects: blobs named as git names them (`sha1("blob N\\0" + bytes)`), commits named by their parents, tree and
  message (deterministic: a run stays a pure function of its scenario and seed);
- refs: `refs/heads/<branch>`, moved by commits, merges and a compare-and-set `advance`;
- checkouts: the fleet root on main and linked worktrees, each with its branch and its index (path -> blob); a
  linked worktree's folder has a `.git` file naming its git dir, `<root>/.git/worktrees/<name>`, as git lays it out;
  checking out writes the tree's files, so a worktree's files are tracked, modified or unknown as in git;
- `index.lock`: a commit or a merge in a checkout takes it with O_EXCL in that checkout's git dir and fails as git
  fails ("Unable to create ... index.lock: File exists") when it is there; the faults make a stale one on disk and
  the product's own stale-lock handling finds it there (`git_paths`);
- merges: fast-forward or a merge commit from the merge base, refused on a conflict (both sides changed a path);
- `info/exclude`: what `ensure_excluded` writes is what `untracked` leaves out.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from healer.errors import HealerError
from healer.git import GitError
from healer.loop.worktree import is_loop_file


@dataclass(frozen=True)
class Commit:
    parents: tuple[str, ...]
    tree: Mapping[str, str]  # path -> blob id
    message: str


@dataclass
class Checkout:
    path: Path
    git_dir: Path  # where its index.lock lives
    branch: str | None  # the branch checked out; None: detached at `detached`
    index: dict[str, str] = field(default_factory=dict)  # path -> blob id (what git's index holds)
    detached: str | None = None
    locked: str | None = None  # `git worktree lock`'s reason


def blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class SimRepo:
    """The fleet's repository: `root` is its main checkout, on `main`."""

    def __init__(self, root: Path, main: str = "main") -> None:
        self.root = Path(root)
        self.common = self.root / ".git"
        (self.common / "worktrees").mkdir(parents=True, exist_ok=True)
        (self.common / "refs" / "heads").mkdir(parents=True, exist_ok=True)
        self.blobs: dict[str, bytes] = {}
        self.commits: dict[str, Commit] = {}
        self._ancestors: dict[str, frozenset[str]] = {}
        self.refs: dict[str, str] = {}
        self.checkouts: dict[str, Checkout] = {}
        self._exclude: tuple[tuple[int, int] | None, set[str]] = (None, set())
        self._stat_ids: dict[str, tuple[tuple[int, int, int], str]] = {}
        self.main = main
        first = self._commit_object((), {}, "initial")
        self.refs[f"refs/heads/{main}"] = first
        self.checkouts[str(self.root)] = Checkout(self.root, self.common, main)

    # -- objects and refs ---------------------------------------------------------------------------------
    def _commit_object(self, parents: tuple[str, ...], tree: Mapping[str, str], message: str) -> str:
        sha = hashlib.sha1(repr((parents, sorted(tree.items()), message)).encode()).hexdigest()
        self.commits[sha] = Commit(parents, dict(tree), message)
        return sha

    def resolve(self, ref: str, checkout: Checkout | None = None) -> str | None:
        """`git rev-parse --verify REF^{commit}`: HEAD (of `checkout`), a full ref, a branch name, a commit id."""
        if ref == "HEAD":
            return None if checkout is None else self.head(checkout)
        for name in (ref, f"refs/heads/{ref}"):
            if name in self.refs:
                return self.refs[name]
        return ref if ref in self.commits else None

    def head(self, c: Checkout) -> str | None:
        return self.refs.get(f"refs/heads/{c.branch}") if c.branch else c.detached

    def ancestors(self, sha: str) -> frozenset[str]:
        """`sha` and every commit it descends from (kept: a commit never changes)."""
        got = self._ancestors.get(sha)
        if got is None:
            c = self.commits.get(sha)
            if c is None:
                return frozenset()
            got = frozenset({sha}.union(*(self.ancestors(p) for p in c.parents)))
            self._ancestors[sha] = got
        return got

    def is_ancestor(self, a: str, b: str) -> bool:
        return a in self.ancestors(b)

    # -- checkouts -----------------------------------------------------------------------------------------
    def checkout(self, path: str | Path) -> Checkout | None:
        """The registered checkout whose folder is `path` itself (and still there)."""
        c = self.checkouts.get(str(path))
        return c if c is not None and c.path.is_dir() else None

    def enclosing(self, path: str | Path) -> Checkout | None:
        """The checkout git would find from `path`: the nearest registered one at or above it."""
        key = str(path)
        c = self.checkouts.get(key)  # asked of a checkout's own folder every pass: no Path arithmetic then
        if c is not None and os.path.isdir(key):
            return c if c.path == self.root or os.path.isfile(os.path.join(key, ".git")) else None
        p = Path(path)
        if not p.is_dir():
            return None
        for q in p.parents:
            c = self.checkout(q)
            if c is not None and (c.path == self.root or (c.path / ".git").is_file()):
                return c
        return None

    def _write_tree(self, c: Checkout, old: Mapping[str, str], new: Mapping[str, str]) -> None:
        """Move the files of `c` from tree `old` to tree `new` (a checkout, a merge's fast-forward)."""
        for rel, bid in new.items():
            if old.get(rel) != bid:
                f = c.path / rel
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_bytes(self.blobs[bid])
        for rel in set(old) - set(new):
            (c.path / rel).unlink(missing_ok=True)
        c.index = dict(new)

    def branch_user(self, branch: str) -> Checkout | None:
        return next((c for c in self.checkouts.values() if c.branch == branch), None)

    def add_worktree(self, path: str | Path, branch: str, base: str) -> bool:
        """`git worktree add [-b BRANCH] PATH [BASE]` as healer.git.add_worktree runs it; True when made anew."""
        path = Path(path)
        if self.checkout(path) is not None:
            return False
        self.prune()
        if path.exists() and any(path.iterdir()):
            raise GitError(f"{self.root}: git worktree add {path} failed (128): fatal: '{path}' already exists")
        ref = f"refs/heads/{branch}"
        if ref in self.refs:
            if self.branch_user(branch) is not None:
                raise GitError(f"{self.root}: git worktree add {path} {branch} failed (128): fatal: "
                               f"'{branch}' is already checked out")
        else:
            start = self.resolve(base)
            if start is None:
                raise GitError(f"{self.root}: git worktree add -b {branch} {path} {base} failed (128): "
                               f"fatal: invalid reference: {base}")
            self.refs[ref] = start
        gd = self.common / "worktrees" / path.name
        gd.mkdir(parents=True, exist_ok=True)
        path.mkdir(parents=True, exist_ok=True)
        (path / ".git").write_text(f"gitdir: {gd}\n")
        c = self.checkouts[str(path)] = Checkout(path, gd, branch)
        self._write_tree(c, {}, self.commits[self.refs[ref]].tree)
        return True

    def prune(self) -> None:
        """`git worktree prune`: forget the unlocked linked worktrees whose folder is gone."""
        for key, c in list(self.checkouts.items()):
            if c.path != self.root and not c.path.is_dir() and c.locked is None:
                del self.checkouts[key]
                _clear_dir(c.git_dir)

    def files(self, c: Checkout, *, ignored: bool = True) -> Iterator[tuple[str, os.DirEntry]]:
        """Every file in `c`'s folder (relative, with its directory entry), without the `.git` file and other checkouts'
        folders (`ignored` False: nor the excluded folders, which `git status` does not descend into either)."""
        top = str(c.path)
        others = {k for k in self.checkouts if k != top}
        pats = self._patterns() if not ignored else set()
        todo = [(top, "")]
        while todo:
            d, rel_dir = todo.pop()
            try:
                entries = sorted(os.scandir(d), key=lambda x: x.name)
            except (FileNotFoundError, NotADirectoryError):
                continue
            for x in entries:
                if not rel_dir and x.name == ".git":
                    continue
                if x.is_dir(follow_symlinks=False):
                    if x.path not in others and (ignored or x.name + "/" not in pats):
                        todo.append((x.path, rel_dir + x.name + "/"))
                else:
                    yield rel_dir + x.name, x

    def _patterns(self) -> set[str]:
        """The lines of `<common>/info/exclude` (what ensure_excluded wrote: a folder `x/` or a name), re-read
        when the file changes."""
        ex = self.common / "info" / "exclude"
        try:
            st = ex.stat()
        except FileNotFoundError:
            return set()
        key = (st.st_mtime_ns, st.st_size)
        if self._exclude[0] != key:
            lines = {ln.strip() for ln in ex.read_text().splitlines()}
            self._exclude = (key, {ln for ln in lines if ln and not ln.startswith("#")})
        return self._exclude[1]

    def excluded(self, rel: str) -> bool:
        """Left out of `git status` by `<common>/info/exclude`."""
        parts = rel.split("/")
        pats = self._patterns()
        return any(p + "/" in pats for p in parts[:-1]) or any(p in pats for p in parts)

    def blob_of(self, f: Path | str, st: os.stat_result | None = None) -> str:
        """The blob id of a file's content, re-read only when its stat data changed (as git's index does)."""
        key = str(f)
        st = st or os.stat(key, follow_symlinks=False)
        sig = (st.st_mtime_ns, st.st_size, st.st_ino)
        got = self._stat_ids.get(key)
        if got is not None and got[0] == sig:
            return got[1]
        if stat.S_ISLNK(st.st_mode):  # git holds a link's target text
            bid = blob_id(os.readlink(key).encode())
        else:
            with open(key, "rb") as fh:
                bid = blob_id(fh.read())
        self._stat_ids[key] = (sig, bid)
        return bid

    def status(self, c: Checkout, *, full: bool = True) -> tuple[list[str], list[str], list[str]]:
        """(untracked, ignored, modified) files of `c`, relative (`full` False: the untracked ones only, the
        others left empty, as `git status --ignored=no` reads no tracked file's content to list them)."""
        untracked, ign, modified = [], [], []
        for rel, x in self.files(c, ignored=full):
            bid = c.index.get(rel)
            if bid is None:
                (ign if self.excluded(rel) else untracked).append(rel)
            elif full and self.blob_of(x.path, x.stat(follow_symlinks=False)) != bid:
                modified.append(rel)
        return sorted(untracked), sorted(ign), sorted(modified)  # git lists by path

    # -- writes -------------------------------------------------------------------------------------------
    @contextmanager
    def index_lock(self, c: Checkout) -> Iterator[None]:
        """What every git command that writes a checkout's index does first: create its index.lock, exclusively."""
        lock = c.git_dir / "index.lock"
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise GitError(f"{c.path}: fatal: Unable to create '{lock}': File exists.") from None
        os.close(fd)
        try:
            yield
        finally:
            lock.unlink(missing_ok=True)

    def commit(self, path: str | Path, files: Mapping[str, bytes], message: str, *, remove: tuple[str, ...] = ()) -> str:
        """`git add FILES && git rm REMOVE && git commit` in the checkout at `path`: the new HEAD."""
        c = self.checkout(path)
        if c is None:
            raise GitError(f"{path}: fatal: not a git repository")
        with self.index_lock(c):
            for rel, data in files.items():
                f = c.path / rel
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_bytes(data)
                bid = blob_id(data)
                self.blobs[bid] = data
                c.index[rel] = bid
            for rel in remove:
                c.index.pop(rel, None)
                (c.path / rel).unlink(missing_ok=True)
            head = self.head(c)
            sha = self._commit_object((head,) if head else (), c.index, message)
            if c.branch:
                self.refs[f"refs/heads/{c.branch}"] = sha
            else:
                c.detached = sha
        return sha

    def merge(self, onto: str, commit: str, message: str) -> tuple[str | None, list[str]]:
        """`git merge --no-ff COMMIT` on top of `onto`, as a commit not yet on any branch: (its id, []), or
        (None, the conflicting paths)."""
        if self.is_ancestor(commit, onto):
            return onto, []
        base = self._merge_base(onto, commit)
        b = self.commits[base].tree if base else {}
        ours, theirs = self.commits[onto].tree, self.commits[commit].tree
        tree, conflicts = {}, []
        for rel in sorted(set(b) | set(ours) | set(theirs)):
            o, t, x = ours.get(rel), theirs.get(rel), b.get(rel)
            if o == t or t == x:
                got = o
            elif o == x:
                got = t
            else:
                conflicts.append(rel)
                continue
            if got is not None:
                tree[rel] = got
        if conflicts:
            return None, conflicts
        return self._commit_object((onto, commit), tree, message), []

    def _merge_base(self, a: str, b: str) -> str | None:
        """The best common ancestor: walking back from `b`, the first commits `a` descends from (their own
        ancestors are common too, and worse), then the one no other of them descends from."""
        of_a = self.ancestors(a)
        found, seen, todo = [], set(), [b]
        while todo:
            s = todo.pop()
            if s in seen or s not in self.commits:
                continue
            seen.add(s)
            if s in of_a:
                found.append(s)
            else:
                todo.extend(self.commits[s].parents)
        best = [s for s in found if not any(s != t and s in self.ancestors(t) for t in found)]
        return min(best) if best else None

    def advance(self, branch: str, old: str, new: str) -> None:
        """healer.git.advance: move `branch` from `old` to `new` (a descendant), never a force; where the branch is
        checked out, its files and index follow, under that checkout's index.lock."""
        ref = f"refs/heads/{branch}"
        if not self.is_ancestor(old, new):
            raise GitError(f"{branch}: {new[:12]} does not descend from {old[:12]}; refusing to move {branch}")
        if self.refs.get(ref) != old:
            raise GitError(f"{branch} moved while the proposal was gated")
        c = self.branch_user(branch)
        if c is None:
            self.refs[ref] = new
            return
        with self.index_lock(c):
            self._write_tree(c, self.commits[old].tree, self.commits[new].tree)
            self.refs[ref] = new

    def tracked_clean(self, path: Path) -> bool:
        """Is this file's content held by git (tracked in its checkout and unchanged)? Removing it loses nothing."""
        c = self.enclosing(path.parent)
        if c is None or not path.is_file():
            return False
        rel = path.relative_to(c.path).as_posix()
        return c.index.get(rel) == self.blob_of(path)


def _clear_dir(d: Path) -> None:
    """A linked worktree's git dir goes with it (as `git worktree remove --force` and prune remove it)."""
    if not d.is_dir():
        return
    for p in sorted(d.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        p.rmdir() if p.is_dir() and not p.is_symlink() else p.unlink()
    d.rmdir()


class SimGit:
    """The Git port over the world's `SimRepo` (what healer/fleet/ports.py's RealGit answers from a real one)."""

    def __init__(self, repo: SimRepo) -> None:
        self.repo = repo

    def is_repo(self, path) -> bool:
        return self.repo.enclosing(path) is not None

    def rev(self, path, ref="HEAD"):
        c = self.repo.enclosing(path)
        return None if c is None else self.repo.resolve(ref, c)

    def ensure_excluded(self, root, pattern: str = ".healer/") -> None:
        ex = self.repo.common / "info" / "exclude"
        ex.parent.mkdir(parents=True, exist_ok=True)
        lines = ex.read_text().splitlines() if ex.exists() else []
        if pattern not in lines:
            with ex.open("a") as f:
                f.write(pattern + "\n")

    def add_worktree(self, root, path, branch, base) -> bool:
        return self.repo.add_worktree(path, branch, base)

    def state(self, worktree):
        c = self.repo.checkout(worktree)
        if c is None:
            return None, None
        head = self.repo.head(c)
        snap = sorted((rel, self.repo.blob_of(x.path, x.stat(follow_symlinks=False))) for rel, x in self.repo.files(c)
                      if not is_loop_file(rel))
        return head, hashlib.sha256(f"{head}:{snap}".encode()).hexdigest()[:16]

    def contains(self, root, ref, commit) -> bool:
        tip = self.rev(root, ref)
        return tip is not None and self.repo.is_ancestor(commit, tip)

    def sweep_scratch(self, root) -> list[str]:
        return []  # the simulated gates merge without a scratch checkout: none is ever left

    def half_made(self, root, path) -> str | None:
        p = Path(path)
        c = self.repo.checkouts.get(str(p))
        if c is None:
            return "a folder git does not know (a `git worktree add` killed before it registered it)" \
                if p.exists() or p.is_symlink() else None
        if c.locked is not None and not p.is_dir():
            return f"git's entry is locked ({c.locked or 'no reason given'}) and its folder is gone"
        return None

    def set_aside(self, root, path, to) -> Path | None:
        p, to = Path(path), Path(to)
        c = self.repo.checkouts.get(str(p))
        if c is not None:
            c.locked = None
        moved = None
        if p.exists() or p.is_symlink():
            to.parent.mkdir(parents=True, exist_ok=True)
            p.rename(to)
            moved = to
        self.repo.prune()
        return moved

    def untracked(self, path) -> list[str]:
        c = self.repo.enclosing(path)
        return [] if c is None else self.repo.status(c, full=False)[0]

    def is_toplevel(self, path) -> bool:
        return self.repo.checkout(path) is not None and self.repo.enclosing(path) is not None

    def dirty(self, path) -> list[str]:
        """healer.git.unsaved: untracked, ignored and modified files (what a forced removal would destroy)."""
        c = self.repo.enclosing(path)
        if c is None:
            return []
        untracked, ignored, modified = self.repo.status(c)
        return sorted(untracked + ignored + modified)

    def tracked(self, path) -> bool:
        p = Path(path)
        c = self.repo.enclosing(p.parent)
        return c is not None and p.relative_to(c.path).as_posix() in c.index

    def remove_worktree(self, path) -> None:
        """`git worktree remove --force`, after the executor quarantined every dirty file: a file that appeared
        since is never deleted (the simulated world refuses, where a real git would destroy it)."""
        p = Path(path)
        c = self.repo.checkouts.get(str(p))
        if p.exists():
            left = self.dirty(p)
            if left:
                raise HealerError(f"{p}: files appeared during removal: {left[:3]}")
            if c is not None:
                for rel in c.index:
                    (p / rel).unlink(missing_ok=True)
            (p / ".git").unlink(missing_ok=True)
            for d in sorted((d for d in p.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
                d.rmdir()
            p.rmdir()
        if c is not None and c.path != self.repo.root:
            del self.repo.checkouts[str(p)]
            _clear_dir(c.git_dir)
        self.repo.prune()

    def git_paths(self, path, *names) -> list[Path]:
        c = self.repo.enclosing(path)
        if c is None:
            raise GitError(f"{path}: fatal: not a git repository")
        # refs and the like are the repository's (its common dir), the index and its lock the checkout's
        return [(self.repo.common if n.startswith(("refs/", "logs/", "packed-refs")) else c.git_dir) / n for n in names]
