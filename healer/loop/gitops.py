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

import fnmatch
import json
import os
import re
import shutil
import stat
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from healer import digest, walk
from healer.errors import HealerError
from healer.files import write_atomic
from healer.git import GitError, layout, mentions, raw, rev, run
from healer.loop import gitindex, treewatch
from healer.remedy.quarantine import quarantine_many

LOOP_FILES = ("progress.md", "lessons.md")
HEALER_DIR = ".healer"
COMMIT_SUBJECT = "loop: goal reached at iteration {n}"
# who the loop's commits are by: set in the environment, which beats every config (GIT_AUTHOR_* the user exported too)
IDENTITY_ENV = {"GIT_AUTHOR_NAME": "healer", "GIT_AUTHOR_EMAIL": "healer@localhost",
                "GIT_COMMITTER_NAME": "healer", "GIT_COMMITTER_EMAIL": "healer@localhost"}


def trailers(run_id: str, n: int, base: str | None) -> str:
    """The trailers of a loop commit: which run made it, at which iteration, on which base."""
    return f"\n\nHealer-Run: {run_id}\nHealer-Iteration: {n}\nHealer-Base: {base or 'none'}"
TIMEOUT = 300.0  # `add -A` of a large tree


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


def is_loop_file(path: str) -> bool:
    return path in LOOP_FILES or path == HEALER_DIR or path.startswith(HEALER_DIR + "/")


_ignored_dirs: set[Path] = set()


def ignore_own_dir(cwd: str | Path) -> None:
    """Make sure git never sees .healer/, even in a repository that does not ignore it."""
    d = Path(cwd) / HEALER_DIR
    gi = d / ".gitignore"
    if gi in _ignored_dirs and gi.exists():
        return
    d.mkdir(parents=True, exist_ok=True)
    try:
        ok = "*" in gi.read_text(errors="replace").splitlines()
    except OSError:
        ok = False
    if not ok:  # renamed into place: a full disk or a crash mid-write must not leave an empty file that ignores nothing
        write_atomic(gi, "# healer's own files: never part of the work\n*\n")
    _ignored_dirs.add(gi)


def _split0(data: bytes) -> list[str]:
    return [p.decode("utf-8", "surrogateescape") for p in data.split(b"\0") if p]


def _blob_id(path: Path) -> str:
    """Git's blob id of a file on disk, so a file hashes the same committed or not."""
    try:
        if path.is_symlink():
            data = os.readlink(path).encode("utf-8", "surrogateescape")
        else:
            # never opened unless plain: a FIFO an agent left would block the read for ever
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return "unreadable"
                data = f.read()
    except FileNotFoundError:
        return "deleted"
    except (IsADirectoryError, PermissionError, OSError):
        return "unreadable"
    h = digest.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


_scratch_from: dict[Path, tuple | None] = {}


def _index_path(cwd: Path) -> Path:
    lay = layout(cwd)
    if lay is not None:
        return lay.index
    p = Path(run(cwd, "rev-parse", "--git-path", "index").stdout)
    return p if p.is_absolute() else cwd / p


def snapshot(cwd: str | Path) -> str:
    """The working tree's content as a git tree id: tracked files and untracked files that
    are not ignored, the loop's own files left out. Built in a scratch index (a copy of the
    real one, so only changed files are hashed); the real index, HEAD and refs are not
    touched. Same bytes at the same paths -> same id, whatever was committed or staged."""
    return measure(cwd)[0]


def measure(cwd: str | Path) -> tuple[str, gitindex.Index | None]:
    """(snapshot(cwd), the real index when the tree is exactly its content): the scratch index was copied
    from the real one in this call, `add -A` found nothing to change in it and the index is plain
    (gitindex.parse). Then the working tree holds what the index holds, and the tree is the index's
    cache-tree root when that one is valid and on disk (no `write-tree`)."""
    cwd = Path(cwd)
    ignore_own_dir(cwd)
    scratch = cwd / HEALER_DIR / "snapshot.index"
    real = _index_path(cwd)
    # `add -A` brings the scratch index in line with the tree whatever it held, so it is
    # copied from the real index only when that one changed (its stat cache saves hashing)
    try:
        rs = os.stat(real)
        key = (rs.st_mtime_ns, rs.st_size, rs.st_ino)
    except FileNotFoundError:
        rs, key = None, None
    kept = _unchanged.pop(cwd, None)
    if kept is not None and kept[0] == key and kept[1] == _stat_key(scratch):
        got = treewatch.moved(kept[2], rehash=kept[5])
        if got is not None and got[0].signature == kept[2].signature:
            _unchanged[cwd] = kept  # nothing `add -A` reads has changed since it last ran: the same answer
            return kept[3], kept[4]
        tree = _rehash(cwd, kept, got) if got is not None else None
        if tree is not None:
            return tree, None
    copied: bytes | None = None
    if key is None or _scratch_from.get(cwd) != key or not scratch.exists():
        if rs is None:
            scratch.unlink(missing_ok=True)
        else:
            copied = _copy_index(real, scratch, rs)
            if _unflag(cwd, copied, scratch):
                copied = None  # no longer the real index's bytes
        _scratch_from[cwd] = key
        _scratch_tree.pop(cwd, None)  # other entries: their tree is not known
    env = {"GIT_INDEX_FILE": str(scratch)}
    known = _scratch_tree.get(cwd)
    same = known is not None and known[0] is not None and known[0] == _stat_key(scratch)
    # the loop's files stay out: excluded from `add` (a tracked one keeps its indexed version,
    # so the loop writing it never moves the hash). -v names every entry `add` changes: when it
    # names none, the scratch index holds the entries it held at our last write-tree, and so
    # the same tree (the snapshot after the gates is most often the one after the agent)
    own = [f for f in LOOP_FILES if (cwd / f).exists()]
    looked = _look(cwd)
    r = run(cwd, "add", "-A", "-v", "--", ":/", *(_exclude(f) for f in own), check=False, env=env, timeout=TIMEOUT)
    if r.code != 0:
        # git refuses to name an ignored file even in an exclude; ignored files are not added anyway.
        # A nested repository without a commit cannot be added at all (not even as a link): it stays out
        # of the snapshot, as a file git cannot hold, instead of failing the run
        run(cwd, "add", "-A", "--", ":/", *(_exclude_path(n) for n in _uncommitted_repos(r.stderr)), env=env,
            timeout=TIMEOUT)
        same = False
        copied = None
    idx = gitindex.parse(copied, items=True) if copied is not None and not r.stdout else None
    if idx is not None and not idx.plain:
        idx = None
    tree = None
    if same and not r.stdout:
        tree = known[1]
    elif idx is not None and idx.root_tree is not None and _loose_exists(cwd, idx.root_tree):
        tree = idx.root_tree  # what `write-tree` would answer: git trusts a valid cache-tree whose object exists
        _remember_entries(tree, idx.items)
    if tree is None:
        tree = _write_tree(cwd, scratch)
    if tree is None:
        tree = run(cwd, "write-tree", env=env).stdout
    sk = _stat_key(scratch)
    _scratch_tree[cwd] = (sk, tree)
    seen = _watch(scratch, looked)
    if seen is not None:
        _unchanged[cwd] = (key, sk, seen, tree, idx, _plain_content(cwd, seen))
    return tree, idx


# cwd -> (real index's key, scratch index's key, what the tree looked like, tree, index, whether every file is
# stored as its bytes) after the last `add`
_unchanged: dict[Path, tuple] = {}

# what would make `add` store a file otherwise than its bytes and stat-given mode, or read a config not watched
_CONTENT_WORDS = (b"autocrlf", b"eol", b"safecrlf", b"filter", b"filemode", b"symlinks", b"bigfilethreshold",
                  b"attributes", b"encoding", b"ignorecase", b"precompose", b"include")


def _plain_content(cwd: Path, seen: treewatch.Seen) -> bool:
    """`add` stores each file of this tree as its bytes, with the mode its stat gives: no filter, eol
    conversion or attribute anywhere (no .gitattributes in the tree, no attributes file), and no config
    setting that changes how a file or link is read."""
    if os.environ.get("GIT_CONFIG_COUNT") or os.environ.get("GIT_CONFIG_PARAMETERS"):
        return False
    if any(n == ".gitattributes" for _r, _i, names in seen.look.listings for n, _k in names):
        return False
    lay = layout(cwd)
    if lay is None or not _no_attributes(cwd):  # the attribute files outside the tree, the system's too
        return False
    # `filemode = true` is what `git init` writes: the default, stat-given modes
    return not mentions([lay.common / "config", lay.git_dir / "config.worktree", *_user_configs()], _CONTENT_WORDS,
                        but=_DEFAULT_FILEMODE)


_DEFAULT_FILEMODE = re.compile(rb"(?m)^[ \t]*filemode[ \t]*=[ \t]*true[ \t]*$")


def _rehash(cwd: Path, kept: tuple, got: tuple[treewatch.Seen, dict[str, bytes]]) -> str | None:
    """The tree `add -A` would write when only indexed files changed since the last one (content, mode or
    link target: `got`, treewatch.moved's answer), built here: their blobs and the trees written as loose
    objects, as `_write_tree` does. The scratch index is left as it is (the next `add` brings it up to
    date: its remembered tree is dropped). None when git must do it."""
    lay = layout(cwd)
    if lay is None:
        return None
    seen, blobs = got
    built = gitindex.trees(list(seen.items))
    if built is None:
        return None
    root, trees = built
    store = lay.common / "objects"
    missing = [oid for oid in trees if not os.path.exists(store / oid[:2] / oid[2:])]
    if len(missing) > MISSING_TREES:
        return None  # most likely packed (a clone): git's to write
    for oid, body in blobs.items():
        _write_loose(store, oid, b"blob", body)
    for oid in missing:
        _write_loose(store, oid, b"tree", trees[oid])
    _scratch_tree.pop(cwd, None)
    _remember_entries(root, seen.items)
    _unchanged[cwd] = (kept[0], kept[1], seen, root, None, kept[5])
    return root


def _look(cwd: Path) -> treewatch.Look | None:
    """The tree as it is before an `add` (healer/loop/treewatch.py), for `_watch` to keep after it; None for
    a repository this module does not write objects for (`_plain_objects`: no shared repository, include or
    other object format) or ignore rules named by config."""
    lay = layout(cwd)
    if lay is None or os.environ.get("GIT_OBJECT_DIRECTORY") or not _plain_objects(lay.common):
        return None
    if mentions([str(lay.common / "config"), *_user_configs()], (b"excludesfile", b"attributesfile")):
        return None  # ignore or attribute rules in a file named by config: not watched here
    configs = (str(lay.common / "config"), str(lay.git_dir / "config.worktree"), str(lay.common / "info" / "exclude"),
               str(lay.common / "info" / "attributes"))
    since = treewatch.stamp(cwd / HEALER_DIR / "snapshot.stamp")
    return treewatch.look(str(lay.top), since, frozenset((".git", HEALER_DIR, *LOOP_FILES)), configs)


def _watch(scratch: Path, looked: treewatch.Look | None) -> treewatch.Seen | None:
    """What would tell the next `measure` that the tree is the one just measured; None unless the index
    `add` left is small and plain."""
    idx = _small_index(scratch) if looked is not None else None
    return treewatch.take(looked, idx.items) if idx is not None else None


def _small_index(path: Path) -> gitindex.Index | None:
    """The index file at `path` with its entries, when it is plain and small enough to be handled here."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    idx = gitindex.parse(data, items=True)
    return idx if idx is not None and idx.plain and idx.entries <= SMALL_INDEX else None


SMALL_INDEX = 300  # entries: above, git's own write-tree (which reuses the cache-tree) beats reading it all here
MISSING_TREES = 32  # trees not on disk as loose objects: more (a clone's packed trees) are git's to write
_entries_of: dict[str, dict[str, tuple[int, str]]] = {}  # tree id -> {path: (mode, blob id)}, for the trees built here


def _remember_entries(tree: str, items) -> None:
    if items is not None and len(items) <= SMALL_INDEX:
        if len(_entries_of) > 64:
            _entries_of.clear()
        _entries_of[tree] = {p.decode("utf-8", "surrogateescape"): (mode, oid.hex()) for p, mode, oid in items}


def _write_tree(cwd: Path, scratch: Path) -> str | None:
    """`git write-tree` of a small plain index, done here: the trees built as git builds them
    (gitindex.trees), the missing ones written as loose objects. None when git must do it."""
    lay = layout(cwd)
    if lay is None or os.environ.get("GIT_OBJECT_DIRECTORY") or str(cwd) in _git_writes_trees \
            or not _plain_objects(lay.common):
        return None
    idx = _small_index(scratch)
    if idx is None:
        return None
    built = gitindex.trees(idx.items)
    if built is None:
        return None
    root, objects = built
    store = lay.common / "objects"
    missing = [oid for oid in objects if not os.path.exists(store / oid[:2] / oid[2:])]
    if len(missing) > MISSING_TREES:
        _git_writes_trees.add(str(cwd))  # most likely packed (a clone): git checks its packs, writing loose copies costs more
        return None
    for oid in missing:
        _write_loose(store, oid, b"tree", objects[oid])
    _remember_entries(root, idx.items)
    return root


_git_writes_trees: set[str] = set()


_plain_objects_seen: dict[str, tuple] = {}


def _plain_objects(common: Path) -> bool:
    """Loose objects written here are the ones git would write, as git would write them: no shared-repository
    permissions to apply (core.sharedRepository, in any config file the repository reads), SHA-1 ids (not
    extensions.objectFormat), no fsync asked for (core.fsync, core.fsyncObjectFiles: git's default syncs no
    loose object, and neither does this module)."""
    files = [str(common / "config"), *_user_configs()]
    key = _stat_key_of(files)
    hit = _plain_objects_seen.get(str(common))
    if hit is not None and hit[0] == key:
        return hit[1]
    ok = not mentions(files, (b"sharedrepository", b"objectformat", b"include", b"fsync"))
    _plain_objects_seen[str(common)] = (key, ok)
    return ok


def _user_configs() -> list[str]:
    """The global and system config files git reads: none (healer.git runs git with GIT_CONFIG_NOSYSTEM, an empty
    GIT_CONFIG_GLOBAL and no XDG folder)."""
    return []


def _stat_key_of(files: list[str]) -> tuple:
    out = []
    for f in files:
        try:
            st = os.stat(f)
            out.append((st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append(None)
    return tuple(out)


def _write_loose(objects: Path, oid: str, kind: bytes, body: bytes) -> None:
    """Store one object as git stores a loose one (objects/xx/rest, read-only, zlib, written whole before it
    gets its name: a crash leaves a tmp_obj_ file, never a partial object), unless it is there."""
    d = objects / oid[:2]
    final = d / oid[2:]
    if os.path.exists(final):
        return
    d.mkdir(exist_ok=True)
    tmp = d / f"tmp_obj_{os.urandom(6).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(zlib.compress(b"%s %d\0" % (kind, len(body)) + body, 1))
        try:
            os.link(tmp, final)
        except FileExistsError:
            pass
        except OSError:  # no hard links here: as git does, rename
            os.replace(tmp, final)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def _copy_index(real: Path, scratch: Path, rs: os.stat_result) -> bytes:
    """Copy the real index to the scratch one and return the bytes copied (read once: what is parsed is
    what `add` starts from). With the real index's mtime: git takes an entry whose mtime is not older
    than its index file's as racily clean and compares content; a copy dated now would trust a file
    rewritten in the same clock tick as its checkout (same size, same stat) unchanged."""
    with open(real, "rb") as f:
        data = f.read()
    tmp = scratch.with_name(scratch.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, rs.st_mode & 0o7777)
    os.utime(tmp, ns=(rs.st_atime_ns, rs.st_mtime_ns))
    os.replace(tmp, scratch)
    return data


def _unflag(cwd: Path, data: bytes, scratch: Path) -> bool:
    """Clear, in the scratch copy, what makes `add -A` trust an entry without reading its file: the agent
    writes its own index, and `update-index --assume-unchanged` or `--skip-worktree` on a file it rewrote
    would keep the old blob in the snapshot (a gutted protected test no diff shows). Entries whose file is
    absent keep their flag (a sparse checkout's files are not there to read; a protected one gone from disk
    is hidden_changes' to see). Whether any was cleared; one git call only when the index says it has some
    (or is one gitindex does not read)."""
    idx = gitindex.parse(data)
    if idx is not None and not idx.flagged:
        return False
    env = {"GIT_INDEX_FILE": str(scratch)}
    paths = [rec[2:] for rec in raw(cwd, "ls-files", "-v", "-z", env=env).split(b"\0")
             if len(rec) > 2 and (rec[:1].islower() or rec[:1] == b"S")
             and os.path.lexists(os.path.join(os.fsencode(cwd), rec[2:]))]
    if not paths:
        return False
    raw(cwd, "update-index", "--no-assume-unchanged", "--no-skip-worktree", "-z", "--stdin",
        input=b"\0".join(paths) + b"\0", env=env)
    return True


def _loose_exists(cwd: Path, oid: str) -> bool:
    """The object is on disk as a loose object (an existence check git would pass; packs are left to git)."""
    if len(oid) != 40 or oid.strip("0123456789abcdef") or os.environ.get("GIT_OBJECT_DIRECTORY"):
        return False
    lay = layout(cwd)
    return lay is not None and os.path.isfile(lay.common / "objects" / oid[:2] / oid[2:])


_scratch_tree: dict[Path, tuple[tuple | None, str]] = {}  # cwd -> (scratch index's stat after our last use, its tree)


def _stat_key(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)


_NO_COMMIT = re.compile(r"^error: '(.+)/' does not have a commit checked out$", re.M)


def _uncommitted_repos(stderr: str) -> list[str]:
    return _NO_COMMIT.findall(stderr)


def _exclude_path(path: str) -> str:
    """An exclude pathspec for `path` exactly (a nested repository is not ignored, so git takes a literal one)."""
    return f":(exclude,top,literal){path}"


def _exclude(name: str) -> str:
    """An exclude pathspec for the top-level file `name` written as a glob (`progres[s].md`): git
    refuses a literal pathspec that names an ignored file, even to exclude it, and a refusal would
    cost a second `add` per snapshot; a pattern is never refused and matches the same one path."""
    return f":(exclude,top,glob){name[:-1]}[{name[-1]}]"


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


_TREE_MODE = b"40000"


def _loose_tree(cwd: str | Path, oid: str) -> list[tuple[bytes, bytes, str]] | None:
    """(name, mode, oid) of each entry of a loose tree object, in its order; None when git must read it."""
    head = _loose_head(cwd, oid, 0)  # the same checks: no replace refs, no other object directory
    if head is None or head[0] != b"tree":
        return None
    lay = layout(cwd)
    try:
        with open(lay.common / "objects" / oid[:2] / oid[2:], "rb") as f:
            raw_obj = zlib.decompress(f.read())
    except (OSError, zlib.error, AttributeError):
        return None
    nul = raw_obj.find(b"\0")
    body = raw_obj[nul + 1:]
    if raw_obj[:nul] != b"tree %d" % len(body) or digest.sha1(raw_obj).hexdigest() != oid:
        return None  # (the id checked too: a file planted under another object's name is not trusted)
    out = []
    pos, end = 0, len(body)
    while pos < end:
        sp = body.find(b" ", pos)
        nul = body.find(b"\0", sp)
        if sp < 0 or nul < 0 or nul + 21 > end:
            return None
        out.append((body[sp + 1:nul], body[pos:sp], body[nul + 1:nul + 21].hex()))
        pos = nul + 21
    return out


def _loose_diff(cwd: str | Path, a: str, b: str, prefix: str = "") -> list[str] | None:
    """Paths of the blobs and submodules that differ between trees `a` and `b` (either may be None: absent)."""
    ea = _loose_tree(cwd, a) if a else []
    eb = _loose_tree(cwd, b) if b else []
    if ea is None or eb is None:
        return None
    left = {name: (mode, oid) for name, mode, oid in ea}
    right = {name: (mode, oid) for name, mode, oid in eb}
    out: list[str] = []
    for name in sorted(left.keys() | right.keys()):
        x, y = left.get(name), right.get(name)
        if x == y:
            continue
        path = prefix + name.decode("utf-8", "surrogateescape")
        xt = x is not None and x[0] == _TREE_MODE
        yt = y is not None and y[0] == _TREE_MODE
        if xt or yt:
            sub = _loose_diff(cwd, x[1] if xt else "", y[1] if yt else "", path + "/")
            if sub is None:
                return None
            out += sub
        if (None if xt else x) != (None if yt else y):  # a blob, link or submodule on either side, and they differ
            out.append(path)
    return sorted(out)


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


PROTECTED_CAP = 50_000  # entries per walk: a huge protected folder is compared in part, never for ever


def protected_on_disk(cwd: Path, patterns: Sequence[str]) -> dict[str, tuple]:
    """Every file and link at the protected paths as the disk has them, ignored ones too: git's view (the
    snapshot) leaves out what .gitignore names, so an agent could add `tests/conftest.py` and the ignore line
    for it and no diff would show the change. path -> (mode, size, mtime_ns, ctime_ns, inode). Globs are
    git's to see. `__pycache__` is left out: an agent that runs the tests itself rewrites it every iteration
    (a forged .pyc is a known limit, docs/security.md)."""
    out: dict[str, tuple] = {}
    for pat in patterns:
        pat = (pat[2:] if pat.startswith("./") else pat).rstrip("/")
        if not pat or any(c in pat for c in "*?[") or ".." in pat.split("/"):
            continue
        top = os.path.join(cwd, pat)
        try:
            st = os.lstat(top)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            out[pat] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            continue
        got = walk.walk(top, entries=max(0, PROTECTED_CAP - len(out)), prune=lambda _r, n: n == "__pycache__")
        for r, st in got.entries:
            if not stat.S_ISDIR(st.st_mode):
                out[f"{pat}/{r}"] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        for r in got.over:  # too deep to read: the folder that holds it, under the protected one, counts as one
            if r:           # entry: one the agent made differs from before, and is set aside whole
                out[f"{pat}/{r.split('/', 1)[0]}"] = ("deep",)
        if len(out) >= PROTECTED_CAP:
            return out
    return out


def hidden_changes(cwd: Path, tree: str, before: dict[str, tuple], after: dict[str, tuple], known: set[str]) -> list[str]:
    """The protected paths that changed on disk (`protected_on_disk` before and after) where git, whose
    snapshot `tree` is, does not show it: ignored ones, and the ones `tree` holds with other content than
    the disk's, or that are gone from disk (an index flag the agent set, see _unflag). A file whose content
    is still the tree's (touched, rewritten the same) is not one."""
    cand = sorted(p for p in {*after, *before} if before.get(p) != after.get(p) and p not in known)
    if not cand:
        return []
    seen = _entries(cwd, tree, cand)
    return [p for p in cand if (p in after and p not in seen) or (p in seen and not _disk_is(cwd, p, *seen[p]))]


def _disk_is(cwd: Path, path: str, mode: str, blob: str) -> bool:
    """The disk holds `path` as the tree entry (mode, blob) says, by object id: the file's own bytes hashed
    as git hashes a blob, with no filter or attribute in between."""
    full = os.path.join(cwd, path)
    try:
        st = os.lstat(full)
    except OSError:
        return False
    if stat.S_ISLNK(st.st_mode):
        target = os.fsencode(os.readlink(full))
        return mode == "120000" and digest.sha1(b"blob %d\0" % len(target) + target).hexdigest() == blob
    if not stat.S_ISREG(st.st_mode) or mode not in ("100644", "100755"):
        return False
    # the bytes on disk, hashed as a blob: never through a filter or conversion (an attribute or config the
    # agent wrote could make `hash-object` store the intact test while the gates run the gutted one)
    return _blob_id(Path(full)) == blob


def protected(path: str, patterns: Sequence[str]) -> bool:
    for pat in patterns:
        pat = pat[2:] if pat.startswith("./") else pat
        if not pat:
            continue
        if pat.endswith("/"):
            if path.startswith(pat) or path == pat.rstrip("/"):
                return True
        elif path == pat or path.startswith(pat + "/") or fnmatch.fnmatchcase(path, pat):
            return True
    return False


@dataclass(frozen=True)
class Moved:
    path: str
    action: str  # "restored" (tracked: put back from base) or "quarantined" (new file moved away)
    saved_as: str | None  # where the agent's bytes now are


def _entries(cwd: Path, tree: str, paths: Sequence[str]) -> dict[str, tuple[str, str]]:
    """path -> (mode, blob) in `tree`, for the paths that exist there."""
    out: dict[str, tuple[str, str]] = {}
    for i in range(0, len(paths), 200):
        chunk = list(paths[i:i + 200])
        for rec in raw(cwd, "ls-tree", "-r", "-z", "--full-tree", tree, "--", *chunk).split(b"\0"):
            if not rec:
                continue
            meta, _, path = rec.partition(b"\t")
            mode, _typ, blob = meta.decode().split()
            out[path.decode("utf-8", "surrogateescape")] = (mode, blob)
    return out


def _blocker(cwd: Path, rel: str) -> str | None:
    """The first folder on `rel`'s way that is not a real folder (a symlink, or a file in its
    place), relative to `cwd`; None when the way is clear. Nothing is followed."""
    parts = rel.split("/")
    for i in range(1, len(parts)):
        a = "/".join(parts[:i])
        p = cwd / a
        if p.is_symlink() or (os.path.lexists(p) and not p.is_dir()):
            return a
    return None


def put_back(cwd: str | Path, tree: str, paths: Iterable[str], quarantine: Path, reason: str,
             clock=None) -> list[Moved]:
    """Return `paths` to their content in snapshot `tree` (the tree before the agent ran).
    Every changed file present on disk first moves to quarantine (restorable byte for
    byte); files that existed in `tree` are then written back from git's objects. Links are
    never followed: a symlink anywhere on a path (`tests -> /elsewhere`) is quarantined as a
    link and a real folder takes its place. The real index, HEAD and refs are not touched."""
    cwd = Path(cwd)
    paths = sorted(set(paths))
    if not paths:
        return []
    before = _entries(cwd, tree, paths)
    blockers = {b for p in paths if (b := _blocker(cwd, p))}
    present = [p for p in paths if not any(p == b or p.startswith(b + "/") for b in blockers)
               and os.path.lexists(cwd / p)]
    saved = _quarantine(cwd, sorted(blockers) + present, quarantine, reason, clock)
    moved: list[Moved] = []
    for p in paths:
        if p in before:
            mode, blob = before[p]
            if mode == "160000":  # a submodule: nothing to write
                continue
            _write_entry(cwd, p, mode, raw(cwd, "cat-file", "blob", blob), quarantine, reason, clock)
            moved.append(Moved(p, "restored", saved.get(p)))
        else:
            moved.append(Moved(p, "quarantined", saved.get(p)))
    for b in sorted(blockers - set(paths)):
        moved.append(Moved(b, "quarantined", saved.get(b)))
    return moved


def _write_entry(cwd: Path, rel: str, mode: str, data: bytes, quarantine: Path, reason: str, clock) -> None:
    """Create `rel` afresh with `data`, through real folders only (never through a link)."""
    b = _blocker(cwd, rel)
    if b is not None:  # appeared since (a leftover process): moved away like the others
        _quarantine(cwd, [b], quarantine, reason, clock)
    parent = (cwd / rel).parent
    parent.mkdir(parents=True, exist_ok=True)
    dst = cwd / rel
    if dst.is_dir() and not dst.is_symlink():
        try:
            os.rmdir(dst)  # an empty folder in the file's place (its files went to quarantine)
        except OSError:
            _quarantine_dir(dst, quarantine / rel)
    elif os.path.lexists(dst):
        _quarantine(cwd, [rel], quarantine, reason, clock)
    if mode == "120000":
        os.symlink(data.decode("utf-8", "surrogateescape"), dst)
        return
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if mode == "100755" else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(dst, 0o755 if mode == "100755" else 0o644, follow_symlinks=False)


def _quarantine_dir(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(dst):
        dst = dst.with_name(dst.name + f".{os.getpid()}")
    shutil.move(str(src), str(dst))


def set_aside(cwd: Path, rel: str, fallback_dir: Path, reason: str, clock) -> str | None:
    """Whatever stands at `rel` (a link, a FIFO, a folder, a file), moved into quarantine; where it went."""
    return _quarantine(cwd, [rel], fallback_dir, reason, clock).get(rel)


def _quarantine(cwd: Path, paths: list[str], fallback_dir: Path, reason: str, clock) -> dict[str, str]:
    """Move files into the fleet's quarantine (`healer quarantine list|restore` sees them);
    a file it refuses (e.g. a symlink leading outside the tree) goes to `fallback_dir`
    with a MANIFEST.json."""
    if not paths:
        return {}
    try:
        entries = quarantine_many(cwd, paths, reason, clock)
        q = cwd / ".healer" / "quarantine"
        return {e.path: str(q / e.batch / e.stored) for e in entries}
    except HealerError:
        pass
    out: dict[str, str] = {}
    manifest = []
    for p in paths:
        src, dst = cwd / p, fallback_dir / p
        if _blocker(fallback_dir, p) is not None:  # a link quarantined earlier sits on the way: never go through it
            dst = fallback_dir / "_flat" / p.replace("/", "%2F")
        dst.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(dst):
            dst = dst.with_name(dst.name + f".{len(manifest)}-{os.getpid()}")
        sha = _blob_id(src)
        if _same_fs(src, dst):
            os.replace(src, dst)
        else:
            shutil.move(str(src), str(dst))
        out[p] = str(dst)
        manifest.append({"path": p, "saved_as": str(dst), "reason": reason, "git_blob": sha})
    _add_to_manifest(fallback_dir / "MANIFEST.json", manifest)
    return out


def _add_to_manifest(mf: Path, entries: list[dict]) -> None:
    """Append to the fallback folder's MANIFEST.json, renamed into place: a crash or a full disk mid-write
    leaves the old one whole. One cut short by an older healer is kept beside it, never dropped."""
    try:
        old = json.loads(mf.read_text())
        if not isinstance(old, list):
            raise ValueError("not a list")
    except FileNotFoundError:
        old = []
    except (OSError, ValueError):
        os.replace(mf, mf.with_name(f"{mf.name}.unreadable-{os.getpid()}"))
        old = []
    write_atomic(mf, json.dumps(old + entries, indent=2) + "\n")


def _same_fs(a: Path, b: Path) -> bool:
    try:
        return os.stat(a.parent).st_dev == os.stat(b.parent).st_dev
    except OSError:
        return False


EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


class ProtectedChanged(HealerError):
    """The tree about to be committed changes a protected path: the commit is not made."""
    exit_code = 3

    def __init__(self, paths: list[str], tree: str, base: str) -> None:
        self.paths, self.tree, self.base = paths, tree, base
        shown = ", ".join(paths[:10]) + (f" (+{len(paths) - 10} more)" if len(paths) > 10 else "")
        super().__init__(f"commit refused: protected paths differ from the run's base {base[:12]}: {shown} "
                         f"(tree {tree[:12]} kept unreferenced for evidence)")


_trees: dict[str, str] = {}


def tree_of(cwd: str | Path, commit: str | None) -> str:
    if not commit:
        return EMPTY_TREE
    if commit not in _trees:  # a commit id names its tree for ever
        head = _loose_head(cwd, commit, 80)
        line = head[2].split(b"\n", 1)[0] if head is not None and head[0] == b"commit" else b""
        tree = line[5:].decode() if line.startswith(b"tree ") and len(line) in (45, 69) else \
            run(cwd, "rev-parse", f"{commit}^{{tree}}").stdout
        if len(commit) not in (40, 64):
            return tree  # a ref name moves: never cached
        _trees[commit] = tree
    return _trees[commit]


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
    sizes = [_loose_size(cwd, b) for b in blobs]
    if None in sizes:
        out = raw(cwd, "cat-file", "--batch-check=%(objectsize)", input=("\n".join(blobs) + "\n").encode())
        sizes = [int(x) for x in out.split() if x.isdigit()]
    return sorted(paths), lines, sum(sizes)


BLOB_CAP = 1 << 20  # bytes of a blob read here to count its lines; a bigger one is git's to diff


def _easy_diff_stat(cwd: str | Path, before: str, after: str) -> tuple[list[str], int, int] | None:
    """diff_stat without git, when both trees were built from indexes read here (their entries known) and
    every changed file is a change gitindex.easy_lines counts exactly (blobs loose, no link, no attribute
    anywhere that could make git read a file differently). None: git counts."""
    a, b = _entries_of.get(before), _entries_of.get(after)
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
        size += len(new if new is not None else old)
    return changed, lines, size


def _loose_blob(cwd: str | Path, oid: str) -> bytes | None:
    head = _loose_head(cwd, oid, 0)
    if head is None or head[0] != b"blob" or head[1] > BLOB_CAP:
        return None
    try:
        with open(layout(cwd).common / "objects" / oid[:2] / oid[2:], "rb") as f:
            data = zlib.decompress(f.read())
    except (OSError, zlib.error, AttributeError):
        return None
    nul = data.find(b"\0")
    if data[:nul] != b"blob %d" % head[1] or len(data) - nul - 1 != head[1] or digest.sha1(data).hexdigest() != oid:
        return None
    return data[nul + 1:]


def _no_attributes(cwd: str | Path, *trees: dict) -> bool:
    """No gitattributes can change how git sees a file: none in the trees, none in the repository
    (info/attributes), the user's (core.attributesFile, its default place) or the system's, and no
    config file that could name one (attributesfile, include) or make big files binary (bigFileThreshold)."""
    if any(p == ".gitattributes" or p.endswith("/.gitattributes") for t in trees for p in t):
        return False
    lay = layout(cwd)
    if lay is None:
        return False
    if os.path.lexists(lay.common / "info" / "attributes"):  # the only attribute file outside the tree git reads
        return False
    return not mentions([str(lay.common / "config"), str(lay.git_dir / "config.worktree"), *_user_configs()],
                         (b"attributesfile", b"include", b"bigfilethreshold"))


def _loose_head(cwd: str | Path, oid: str, want: int) -> tuple[bytes, int, bytes] | None:
    """(type, size, the first `want` bytes of the content) of a loose object, read from its file as
    git reads it: `add` has just written the blobs the loop measures, and a git process costs more
    than the loop's own work per iteration. None when git must answer (a packed object, an
    alternate object store, replace refs, anything unusual)."""
    if len(oid) not in (40, 64) or oid.strip("0123456789abcdef") or os.environ.get("GIT_OBJECT_DIRECTORY"):
        return None
    lay = layout(cwd)
    if lay is None or _replaces(lay.common):
        return None
    try:
        with open(lay.common / "objects" / oid[:2] / oid[2:], "rb") as f:
            data = f.read(4096)
        head = zlib.decompressobj().decompress(data, want + 32)
    except (OSError, zlib.error):
        return None
    kind, sp, rest = head.partition(b" ")
    size, nul, content = rest.partition(b"\0")
    if not sp or not nul or not size.isdigit():
        return None
    return kind, int(size), content[:want]


def _loose_size(cwd: str | Path, oid: str) -> int | None:
    head = _loose_head(cwd, oid, 0)
    return head[1] if head is not None and head[0] == b"blob" else None


def _replaces(common: Path) -> bool:
    """Replace refs would change what an object id reads as; healer's git never honours them
    (GIT_NO_REPLACE_OBJECTS, healer.git), so an object file read here is what git reads."""
    return False


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
                   keep_staged: Sequence[str] = (), measured: str | None = None, trailers: str = "") -> str | None:
    """Commit exactly what changed between snapshot `since` (the tree when the run began) and the
    tree now, on top of the run's base commit `base`: never the user's pre-existing changes, never
    the loop's own files, and what is committed is what was measured (the snapshot), not a fresh
    `add -A`. No hook runs (healer.git). Before the branch moves, the new tree's protected paths
    are checked equal to the base's: a mismatch raises ProtectedChanged (nothing committed).
    The branch moves by compare-and-swap from the commit HEAD points at now; the index is then
    brought in line with the commit, except the paths in `keep_staged` (the user's). Returns the
    new commit, or None when there was nothing to commit. `measured`: the snapshot the gates passed
    on, when the caller has it (it is then what is committed, without measuring again)."""
    cwd = Path(cwd)
    now_tree = measured or snapshot(cwd)
    every = _diff_paths(cwd, since, now_tree)
    paths = sorted(p for p in every if not is_loop_file(p))
    parent = head(cwd)
    base_tree = tree_of(cwd, base)
    if since == base_tree and len(paths) == len(every):
        # the run began on its base commit and the snapshot holds none of the loop's files: the
        # tree below would be the snapshot itself, so it is used as is (four git calls fewer)
        tree = now_tree
        bad = [p for p in paths if protected(p, patterns)]
    else:
        tree = _overlay(cwd, base_tree, now_tree, paths)
        bad = [p for p in changed_between(cwd, base_tree, tree) if protected(p, patterns)]
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


_COPYABLE = {b"TREE", b"REUC", b"UNTR", b"EOIE", b"IEOT"}  # extensions that describe the file's own entries


def _index_from_scratch(cwd: Path, tree: str) -> bool:
    """What `git reset -q HEAD -- :/` does to the index just after the commit of `tree`, when the scratch
    index still holds exactly `tree` (the snapshot that was committed): the real index becomes that file,
    which git wrote with the working tree's stat data. Written as git writes an index (index.lock, created
    exclusively, then renamed over it) and dated as the scratch, so git's racy-entry check sees what it
    saw there. False (the caller runs reset) for anything else: another tree, the scratch changed since, an
    index this module does not read, a lock held by someone else."""
    scratch = cwd / HEALER_DIR / "snapshot.index"
    known = _scratch_tree.get(cwd)
    kept = _unchanged.get(cwd)
    rehashed = kept is not None and kept[3] == tree and kept[1] is not None and kept[1] == _stat_key(scratch)
    if not rehashed and (known is None or known[1] != tree or known[0] is None or known[0] != _stat_key(scratch)):
        return False
    try:
        with open(scratch, "rb") as f:
            data = f.read()
        st = os.stat(scratch)
        real = _index_path(cwd)
        mode = os.stat(real).st_mode & 0o7777 if real.exists() else 0o644
    except OSError:
        return False
    if rehashed and (known is None or known[1] != tree):
        data = _patch_rehashed(cwd, data, kept[2])  # the scratch holds the tree before `_rehash`: brought up to it
        if data is None:
            return False
    idx = gitindex.parse(data)
    if idx is None or not idx.plain or not set(idx.extensions) <= _COPYABLE:
        return False
    lock = real.with_name(real.name + ".lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.utime(lock, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(lock, real)
    except OSError:
        lock.unlink(missing_ok=True)
        return False
    return True


def _patch_rehashed(cwd: Path, data: bytes, seen: treewatch.Seen) -> bytes | None:
    """The scratch index `data` with the entries `_rehash` hashed anew (those whose mode or id differ from
    `seen`'s) as `add` would record them: their stat read again and required to be the one hashed."""
    old = gitindex.parse(data, items=True)
    if old is None or old.items is None or [p for p, _m, _o in old.items] != [p for p, _m, _o in seen.items]:
        return None
    keys = dict(zip(seen.paths, seen.signature[1], strict=True))
    top = seen.look.top
    stats = {}
    for (p, m0, o0), (_p, m, o) in zip(old.items, seen.items, strict=True):
        if (m0, o0) == (m, o):
            continue
        try:
            st = os.lstat(os.path.join(top, os.fsdecode(p)))
        except OSError:
            return None
        k = keys.get(p)
        if k is None or k[:6] != treewatch.file_key(st):
            return None  # changed again since it was hashed
        stats[p] = (st, m, o)
    return gitindex.patched(data, stats)


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


# -- a tree too big to measure -------------------------------------------------------------

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


def set_aside_fast(cwd: str | Path, tree: str, paths: Sequence[str], quarantine: Path) -> int:
    """An oversized change rolled back without reading it: every path renamed into `quarantine` (same file
    system: the iteration's folder in the worktree; nothing hashed, nothing copied, nothing deleted, listed in
    its MANIFEST.json), then the files `tree` holds written back from git. Returns how many were moved."""
    cwd = Path(cwd)
    plan = [{"path": p, "saved_as": str(quarantine / "oversize" / p), "reason": "oversize"} for p in paths
            if _blocker(cwd, p) is None and os.path.lexists(cwd / p)]
    if not plan:
        return 0
    # the record first: a disk too full to write it (an agent that filled it) moves nothing (exit 74 follows)
    quarantine.mkdir(parents=True, exist_ok=True)
    _add_to_manifest(quarantine / "MANIFEST.json", plan)
    moved: list[dict] = []
    for m in plan:
        dst = Path(m["saved_as"])
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.rename(cwd / m["path"], dst)
        except OSError:
            continue
        moved.append(m)
    if moved:
        have = _entries(cwd, tree, [m["path"] for m in moved])
        for p, (mode, blob) in have.items():
            if mode != "160000":
                _write_entry(cwd, p, mode, raw(cwd, "cat-file", "blob", blob), quarantine, "oversize", None)
    return len(moved)
