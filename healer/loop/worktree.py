"""The working tree's tree id (a snapshot): `git add -A` into a scratch index, or no git at all when nothing it
reads changed (healer/loop/treewatch.py) or only indexed files' bytes did (their blobs and trees written here).

The loop's own files (LOOP_FILES at the working-tree root, and everything under .healer/) never count: not in
the state hash, not in the diff cap, not as protected paths, and they are never committed by the loop.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from healer.files import write_atomic
from healer.git import layout, mentions, raw, run
from healer.loop import gitindex, treewatch
from healer.loop.loose import _loose_exists, _write_loose

LOOP_FILES = ("progress.md", "lessons.md")


HEALER_DIR = ".healer"


TIMEOUT = 300.0  # `add -A` of a large tree


def is_loop_file(path: str) -> bool:
    return path in LOOP_FILES or path == HEALER_DIR or path.startswith(HEALER_DIR + "/")


class Memory:
    """What the loop remembers between its git calls, so that a snapshot, a diff or a commit whose inputs did not
    change costs no git process (the loop's start-up shaving, measured in docs/loop.md's Benchmark section).

    One per process (MEMORY), and that is deliberate: a `healer loop run` process runs one loop, and every entry is
    keyed by what it describes (a working tree's path, a tree id, an object folder), so two trees never read each
    other's entries. It is an object so that a test, or a process that runs loops one after another, forgets it
    in one call (`forget`)."""

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        self.ignored_dirs: set[Path] = set()  # the .healer/.gitignore files written or found (ignore_own_dir)
        self.scratch_from: dict[Path, tuple | None] = {}  # cwd -> the real index's stat when the scratch copied it
        # cwd -> (real index's key, scratch index's key, what the tree looked like, tree, index, whether every file
        # is stored as its bytes) after the last `add`
        self.unchanged: dict[Path, tuple] = {}
        self.entries_of: dict[str, dict[str, tuple[int, str]]] = {}  # tree id -> {path: (mode, blob id)}, built here
        self.git_writes_trees: set[str] = set()  # working trees whose trees are git's to write (packed ones)
        self.plain_objects_seen: dict[str, tuple] = {}  # object folder -> the config's stat when found plain
        self.scratch_tree: dict[Path, tuple[tuple | None, str]] = {}  # cwd -> (scratch index's stat after our last use, its tree)
        self.trees: dict[str, str] = {}  # commit id -> its tree id (gitops.tree_of)


MEMORY = Memory()


def ignore_own_dir(cwd: str | Path) -> None:
    """Make sure git never sees .healer/, even in a repository that does not ignore it."""
    d = Path(cwd) / HEALER_DIR
    gi = d / ".gitignore"
    if gi in MEMORY.ignored_dirs and gi.exists():
        return
    d.mkdir(parents=True, exist_ok=True)
    try:
        ok = "*" in gi.read_text(errors="replace").splitlines()
    except OSError:
        ok = False
    if not ok:  # renamed into place: a full disk or a crash mid-write must not leave an empty file that ignores nothing
        write_atomic(gi, "# healer's own files: never part of the work\n*\n")
    MEMORY.ignored_dirs.add(gi)


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
    kept = MEMORY.unchanged.pop(cwd, None)
    if kept is not None and kept[0] == key and kept[1] == _stat_key(scratch):
        got = treewatch.moved(kept[2], rehash=kept[5])
        if got is not None and got[0].signature == kept[2].signature:
            MEMORY.unchanged[cwd] = kept  # nothing `add -A` reads has changed since it last ran: the same answer
            return kept[3], kept[4]
        tree = _rehash(cwd, kept, got) if got is not None else None
        if tree is not None:
            return tree, None
    copied: bytes | None = None
    if key is None or MEMORY.scratch_from.get(cwd) != key or not scratch.exists():
        if rs is None:
            scratch.unlink(missing_ok=True)
        else:
            copied = _copy_index(real, scratch, rs)
            if _unflag(cwd, copied, scratch):
                copied = None  # no longer the real index's bytes
        MEMORY.scratch_from[cwd] = key
        MEMORY.scratch_tree.pop(cwd, None)  # other entries: their tree is not known
    env = {"GIT_INDEX_FILE": str(scratch)}
    known = MEMORY.scratch_tree.get(cwd)
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
    if same and known is not None and not r.stdout:  # (same says known is there)
        tree = known[1]
    elif idx is not None and idx.root_tree is not None and _loose_exists(cwd, idx.root_tree):
        tree = idx.root_tree  # what `write-tree` would answer: git trusts a valid cache-tree whose object exists
        _remember_entries(tree, idx.items)
    if tree is None:
        tree = _write_tree(cwd, scratch)
    if tree is None:
        tree = run(cwd, "write-tree", env=env).stdout
    sk = _stat_key(scratch)
    MEMORY.scratch_tree[cwd] = (sk, tree)
    seen = _watch(scratch, looked)
    if seen is not None:
        MEMORY.unchanged[cwd] = (key, sk, seen, tree, idx, _plain_content(cwd, seen))
    return tree, idx


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


PACKED = ("packed",)  # _trees_to_write: too many trees missing as loose objects, most likely packed (a clone)


def _trees_to_write(lay, items):
    """The trees of index entries `items` as git builds them: (root, {oid: body}, the oids with no loose object
    yet); None when they cannot be built here, PACKED when more than MISSING_TREES are missing."""
    built = gitindex.trees(items)
    if built is None:
        return None
    root, trees = built
    store = lay.common / "objects"
    missing = [oid for oid in trees if not os.path.exists(store / oid[:2] / oid[2:])]
    return PACKED if len(missing) > MISSING_TREES else (root, trees, missing)


def _rehash(cwd: Path, kept: tuple, got: tuple[treewatch.Seen, dict[str, bytes]]) -> str | None:
    """The tree `add -A` would write when only indexed files changed since the last one (content, mode or
    link target: `got`, treewatch.moved's answer), built here: their blobs and the trees written as loose
    objects, as `_write_tree` does. The scratch index is left as it is (the next `add` brings it up to
    date: its remembered tree is dropped). None when git must do it."""
    lay = layout(cwd)
    if lay is None:
        return None
    seen, blobs = got
    planned = _trees_to_write(lay, list(seen.items))
    if planned is None or planned is PACKED:
        return None  # not built here, or most likely packed (a clone): git's to write
    root, trees, missing = planned
    store = lay.common / "objects"
    for oid, body in blobs.items():
        _write_loose(store, oid, b"blob", body)
    for oid in missing:
        _write_loose(store, oid, b"tree", trees[oid])
    MEMORY.scratch_tree.pop(cwd, None)
    _remember_entries(root, seen.items)
    MEMORY.unchanged[cwd] = (kept[0], kept[1], seen, root, None, kept[5])
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
    return treewatch.take(looked, idx.items) if idx is not None and idx.items is not None else None


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


def _remember_entries(tree: str, items) -> None:
    if items is not None and len(items) <= SMALL_INDEX:
        if len(MEMORY.entries_of) > 64:
            MEMORY.entries_of.clear()
        MEMORY.entries_of[tree] = {p.decode("utf-8", "surrogateescape"): (mode, oid.hex()) for p, mode, oid in items}


def _write_tree(cwd: Path, scratch: Path) -> str | None:
    """`git write-tree` of a small plain index, done here: the trees built as git builds them
    (gitindex.trees), the missing ones written as loose objects. None when git must do it."""
    lay = layout(cwd)
    if lay is None or os.environ.get("GIT_OBJECT_DIRECTORY") or str(cwd) in MEMORY.git_writes_trees \
            or not _plain_objects(lay.common):
        return None
    idx = _small_index(scratch)
    if idx is None:
        return None
    planned = _trees_to_write(lay, idx.items)
    if planned is PACKED:
        MEMORY.git_writes_trees.add(str(cwd))  # git checks its packs, writing loose copies costs more
    if planned is None or planned is PACKED:
        return None
    root, objects, missing = planned
    for oid in missing:
        _write_loose(lay.common / "objects", oid, b"tree", objects[oid])
    _remember_entries(root, idx.items)
    return root


def _plain_objects(common: Path) -> bool:
    """Loose objects written here are the ones git would write, as git would write them: no shared-repository
    permissions to apply (core.sharedRepository, in any config file the repository reads), SHA-1 ids (not
    extensions.objectFormat), no fsync asked for (core.fsync, core.fsyncObjectFiles: git's default syncs no
    loose object, and neither does this module)."""
    files = [str(common / "config"), *_user_configs()]
    key = _stat_key_of(files)
    hit = MEMORY.plain_objects_seen.get(str(common))
    if hit is not None and hit[0] == key:
        return hit[1]
    ok = not mentions(files, (b"sharedrepository", b"objectformat", b"include", b"fsync"))
    MEMORY.plain_objects_seen[str(common)] = (key, ok)
    return ok


def _user_configs() -> list[str]:
    """The global and system config files git reads: none (healer.git runs git with GIT_CONFIG_NOSYSTEM, an empty
    GIT_CONFIG_GLOBAL and no XDG folder)."""
    return []


def _stat_key_of(files: list[str]) -> tuple:
    out: list[tuple[int, int, int, int] | None] = []
    for f in files:
        try:
            st = os.stat(f)
            out.append((st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append(None)
    return tuple(out)


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


_COPYABLE = {b"TREE", b"REUC", b"UNTR", b"EOIE", b"IEOT"}  # extensions that describe the file's own entries


def _index_from_scratch(cwd: Path, tree: str) -> bool:
    """What `git reset -q HEAD -- :/` does to the index just after the commit of `tree`, when the scratch
    index still holds exactly `tree` (the snapshot that was committed): the real index becomes that file,
    which git wrote with the working tree's stat data. Written as git writes an index (index.lock, created
    exclusively, then renamed over it) and dated as the scratch, so git's racy-entry check sees what it
    saw there. False (the caller runs reset) for anything else: another tree, the scratch changed since, an
    index this module does not read, a lock held by someone else."""
    scratch = cwd / HEALER_DIR / "snapshot.index"
    known = MEMORY.scratch_tree.get(cwd)
    kept = MEMORY.unchanged.get(cwd)
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
    if rehashed and kept is not None and (known is None or known[1] != tree):  # (rehashed says kept is there)
        patched = _patch_rehashed(cwd, data, kept[2])  # the scratch holds the tree before `_rehash`: brought up to it
        if patched is None:
            return False
        data = patched
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
