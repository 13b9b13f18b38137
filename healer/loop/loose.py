"""Git objects read and written here, as git stores them loose (zlib, a type and size header, the sha1 of it all).

A git process costs more than reading one small object file, so the loop reads the trees and blobs `add` has
just written, and writes the few trees and blobs it builds itself (healer/loop/worktree.py). Every function
answers None when git must answer instead (a packed object, another object directory, anything unusual).
"""

from __future__ import annotations

import os
import stat
import zlib
from pathlib import Path

from healer import digest
from healer.git import layout


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


def _loose_exists(cwd: Path, oid: str) -> bool:
    """The object is on disk as a loose object (an existence check git would pass; packs are left to git)."""
    if len(oid) != 40 or oid.strip("0123456789abcdef") or os.environ.get("GIT_OBJECT_DIRECTORY"):
        return False
    lay = layout(cwd)
    return lay is not None and os.path.isfile(lay.common / "objects" / oid[:2] / oid[2:])


_TREE_MODE = b"40000"


def _loose_tree(cwd: str | Path, oid: str) -> list[tuple[bytes, bytes, str]] | None:
    """(name, mode, oid) of each entry of a loose tree object, in its order; None when git must read it."""
    head = _loose_head(cwd, oid, 0)  # the same checks: no replace refs, no other object directory
    if head is None or head[0] != b"tree":
        return None
    lay = layout(cwd)
    if lay is None:
        return None
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
            sub = _loose_diff(cwd, x[1] if x is not None and xt else "", y[1] if y is not None and yt else "", path + "/")
            if sub is None:
                return None
            out += sub
        if (None if xt else x) != (None if yt else y):  # a blob, link or submodule on either side, and they differ
            out.append(path)
    return sorted(out)


EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


BLOB_CAP = 1 << 20  # bytes of a blob read here to count its lines; a bigger one is git's to diff


def _loose_blob(cwd: str | Path, oid: str) -> bytes | None:
    head = _loose_head(cwd, oid, 0)
    if head is None or head[0] != b"blob" or head[1] > BLOB_CAP:
        return None
    lay = layout(cwd)
    if lay is None:
        return None
    try:
        with open(lay.common / "objects" / oid[:2] / oid[2:], "rb") as f:
            data = zlib.decompress(f.read())
    except (OSError, zlib.error, AttributeError):
        return None
    nul = data.find(b"\0")
    if data[:nul] != b"blob %d" % head[1] or len(data) - nul - 1 != head[1] or digest.sha1(data).hexdigest() != oid:
        return None
    return data[nul + 1:]


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
