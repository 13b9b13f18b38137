"""Whether a working tree can have changed since `git add -A` measured it, answered without git.

The loop measures its working tree after the agent and again after the gates (healer/loop/worktree.py's
`measure`). Gates most often leave the tree as they found it, and the second `git add -A` then costs a
process to learn nothing. `look` (before an `add`) and `take` (after it) record what any change would
have to alter:

- every folder's listing (inode, names and kinds; `.git` and healer's own entries left out), so a
  file created, deleted or renamed anywhere shows, ignored folders included (a change there only costs
  the fast path, never the truth);
- every indexed file's lstat: mode, size, inode, device, mtime and ctime. A write changes mtime and
  ctime, and ctime cannot be set back by a process (`touch -d` moves mtime only);
- the stat of each file that tells git what to ignore or how to read the tree (configs, excludes,
  attributes outside the tree; those inside it are indexed files or show in a listing).

All of it is read *before* the `add` (`look`), after a `stamp`: whatever changes while or after git
reads the tree then differs from the record, so the next `same` says so. An entry whose mtime or ctime is
not older than the stamp could change again within the same clock tick without a new date: such a file
is hashed, the hash compared by `same`, and, once the `add` is done (`take`), its blob id and mode must
be the ones the index holds, or nothing is remembered. Anything this module is not sure of returns None:
git is asked as before.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from healer import digest

MAX_ENTRIES = 5000  # entries walked: a bigger tree (node_modules...) is left to git's own stat cache


class Look:
    """The tree as `look` saw it, before an `add`."""

    __slots__ = ("top", "stamp", "skip", "configs", "listings", "files", "cfg")

    def __init__(self, top: str, stamp: int, skip: frozenset[str], configs: tuple[str, ...], listings: tuple,
                 files: dict[bytes, tuple], cfg: tuple) -> None:
        self.top, self.stamp, self.skip, self.configs = top, stamp, skip, configs
        self.listings, self.files, self.cfg = listings, files, cfg


class Seen:
    """What `same` compares: the listings, the indexed files' keys (with a hash when racy), the configs."""

    __slots__ = ("look", "paths", "signature", "items")

    def __init__(self, look: Look, paths: tuple[bytes, ...], signature: tuple,
                 items: tuple[tuple[bytes, int, bytes], ...]) -> None:
        self.look = look
        self.paths = paths
        self.signature = signature
        self.items = items  # the index `add` left: (path, mode, 20-byte id), in its order


def stamp(path: Path) -> int | None:
    """The file system's "now", in the clock it dates writes with: `path` touched, its mtime read. Never
    through a link (an agent that swapped the file for one cannot have healer touch what it points to)."""
    try:
        try:
            os.utime(path, follow_symlinks=False)
        except FileNotFoundError:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
            os.utime(path, follow_symlinks=False)
        return os.lstat(path).st_mtime_ns
    except OSError:
        return None


def _walk(top: str, skip_top: frozenset[str], stamp: int, files: dict[bytes, tuple] | None) -> tuple | None:
    """Every folder's (path, inode, sorted (name, kind)); with `files`, every other entry's key put in it."""
    out: list = []
    count = 0
    stack = [""]
    while stack:
        rel = stack.pop()
        d = os.path.join(top, rel) if rel else top
        names = []
        try:
            with os.scandir(d) as it:
                for e in it:
                    count += 1
                    if count > MAX_ENTRIES:
                        return None
                    n = e.name
                    if not rel and n in skip_top:
                        continue
                    if n == ".git":
                        return None  # a nested repository or submodule: git's to judge
                    r = os.path.join(rel, n) if rel else n
                    try:
                        if e.is_dir(follow_symlinks=False):
                            kind = "d"
                            stack.append(r)
                        else:
                            kind = "l" if e.is_symlink() else "f" if e.is_file(follow_symlinks=False) else "o"
                            if files is not None:
                                files[os.fsencode(r)] = _key(e.path, e.stat(follow_symlinks=False), stamp)
                    except OSError:
                        return None
                    names.append((n, kind))
            st = os.lstat(d)
        except OSError:
            return None
        names.sort()
        out.append((rel, st.st_ino, tuple(names)))
    out.sort()
    return tuple(out)


def _content(path: str, st_mode: int) -> bytes | None:
    """What git stores for the file or link at `path` (no filter applies: see the callers)."""
    try:
        if stat.S_ISLNK(st_mode):
            return os.fsencode(os.readlink(path))
        if not stat.S_ISREG(st_mode):
            return None  # a FIFO or a socket the agent left: an open would wait for a writer for ever
        # O_NONBLOCK|O_NOFOLLOW: swapped for a FIFO or a link since its lstat, it is not waited on or followed
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            return f.read()
    except OSError:
        return None


def _blob_id(data: bytes) -> bytes:
    h = digest.sha1(b"blob %d\0" % len(data))
    h.update(data)
    return h.digest()


def _blob(path: str, st: os.stat_result) -> bytes | None:
    data = _content(path, st.st_mode)
    return None if data is None else _blob_id(data)


def _key(path: str, st: os.stat_result, stamp: int) -> tuple:
    """A file's stat, plus its blob id when it is racy (dated no earlier than `stamp`); None as the id
    when it could not be read."""
    key = file_key(st)
    if max(st.st_mtime_ns, st.st_ctime_ns) >= stamp:
        key += (_blob(path, st),)
    return key


def file_key(st: os.stat_result) -> tuple:
    """What a change to a file would alter in its lstat."""
    return (st.st_mode, st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns)


def _mode(st_mode: int) -> int | None:
    if stat.S_ISLNK(st_mode):
        return 0o120000
    if stat.S_ISREG(st_mode):
        return 0o100755 if st_mode & 0o100 else 0o100644
    return None


def _configs(configs: tuple[str, ...]) -> tuple | None:
    out: list[tuple[int, int, int, int] | None] = []
    for c in configs:
        try:
            st = os.stat(c)
        except FileNotFoundError:
            out.append(None)
            continue
        except OSError:
            return None
        out.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(out)


def look(top: str, stamp: int | None, skip_top: frozenset[str], configs: tuple[str, ...]) -> Look | None:
    """The tree at `top` just before an `add`, `stamp` taken before this call (see `stamp`)."""
    if stamp is None:
        return None
    cfg = _configs(configs)
    if cfg is None or any(c is not None and max(c[2], c[3]) >= stamp for c in cfg):
        return None  # a config changed this very tick: git may read it otherwise than it is now
    files: dict[bytes, tuple] = {}
    listings = _walk(top, skip_top, stamp, files)
    if listings is None:
        return None
    return Look(top, stamp, skip_top, configs, listings, files, cfg)


def take(seen_before: Look | None, items: list[tuple[bytes, int, bytes]]) -> Seen | None:
    """What to compare from now on, once the `add` that followed `look` left the index holding `items`
    (path, mode, 20-byte blob id). None when a fast answer could be wrong."""
    if seen_before is None:
        return None
    own = {os.fsencode(n) for n in seen_before.skip}
    paths, keys = [], []
    for p, mode, oid in items:
        if p in own:
            continue  # a tracked loop file: `add` leaves it as indexed, whatever it holds
        key = seen_before.files.get(p)
        if key is None:
            return None  # indexed but not seen as a file: git saw something else
        if len(key) == 7 and (key[6] is None or (_mode(key[0]), key[6]) != (mode, oid)):
            return None  # not what git indexed (a filter, a mode git keeps, a write during the add)
        paths.append(p)
        keys.append(key)
    return Seen(seen_before, tuple(paths), (seen_before.listings, tuple(keys), seen_before.cfg), tuple(items))


def same(seen: Seen) -> bool:
    """Nothing the `add` behind `seen` depended on has changed since: it would write the same tree."""
    got = moved(seen, rehash=False)
    return got is not None and got[0].signature == seen.signature


def moved(seen: Seen, rehash: bool = True, max_bytes: int = 8 << 20) -> tuple[Seen, dict[str, bytes]] | None:
    """When the only change since `seen` is the content, mode or link target of indexed files (no entry
    made, removed or renamed anywhere, no config touched): the index `add -A` would now write, as a new
    Seen (its signature `seen`'s when nothing changed), and {blob id: content} of the new blobs. None
    otherwise, for a file over `max_bytes`, or for any changed file when not `rehash`.
    (The caller makes sure nothing can make git store a file otherwise than its bytes: filters, eol
    conversion, attributes, a file mode or link setting.)"""
    lk = seen.look
    if _configs(lk.configs) != lk.cfg or _walk(lk.top, lk.skip, lk.stamp, None) != lk.listings:
        return None
    own = {os.fsencode(n) for n in lk.skip}
    old = dict(zip(seen.paths, seen.signature[1], strict=True))
    items, keys, blobs = [], [], {}
    for p, mode, oid in seen.items:
        if p in own:
            items.append((p, mode, oid))
            continue
        full = os.path.join(lk.top, os.fsdecode(p))
        try:
            st = os.lstat(full)
        except OSError:
            return None
        key = file_key(st)
        was = old[p]
        if key == was[:6] and len(was) == 6:
            items.append((p, mode, oid))
            keys.append(was)
            continue
        m = _mode(st.st_mode)
        if m is None or st.st_size > max_bytes or (not rehash and key != was[:6]):
            return None
        data = _content(full, st.st_mode)
        if data is None:
            return None
        bid = _blob_id(data)
        if max(st.st_mtime_ns, st.st_ctime_ns) >= lk.stamp:
            key += (bid,)  # as `_key` records a racy file (a changed one always is: its ctime moved)
        items.append((p, m, bid))
        keys.append(key)
        if bid != oid:
            blobs[bid.hex()] = data
    return Seen(lk, seen.paths, (lk.listings, tuple(keys), lk.cfg), tuple(items)), blobs
