"""Git's index file (Documentation/gitformat-index.txt), read where that is exact: pure, no I/O.

`healer loop run` starts by measuring the working tree (healer/loop/worktree.py's snapshot). When the
scratch index was just copied from the real one and `git add -A` found nothing to change in it, the
tree it would write is the one the real index already names in its cache-tree extension, and the
start is clean exactly when that tree is HEAD's: then neither `git write-tree` nor `git status` has
to run. Anything this reader is not sure of (another version than 2 or 3, a bad checksum, a split or
sparse index, an unknown required extension, an unmerged entry, an assume-unchanged entry, an extended
flag such as intent-to-add or skip-worktree, a submodule, an invalid or missing cache-tree) makes `parse` say so,
and git is asked as before.

The same reading gives the tree `git write-tree` writes for a small index (`trees`: every tree object of
the index, built as git builds them), and the lines `git diff-tree --numstat` counts for the changes a
loop iteration most often makes (`easy_lines`: a file added, deleted, appended to or cut at its end);
anything else is git's to count.
"""

from __future__ import annotations

import os
import struct

from healer import digest

MAX_BYTES = 1 << 20  # a bigger index is left to git (hashing and walking it here would cost more)
_GITLINK = 0o160000
_DIR = 0o040000  # a sparse index's directory entry


class Index:
    """What the loop needs to know of one index file."""

    __slots__ = ("version", "entries", "plain", "root_tree", "items", "extensions", "flagged")

    def __init__(self, version: int, entries: int, plain: bool, root_tree: str | None,
                 items: list[tuple[bytes, int, bytes]] | None = None) -> None:
        self.version = version
        self.entries = entries  # how many entries
        self.plain = plain  # stage 0 only, no extended flag, no submodule, no directory entry
        self.root_tree = root_tree  # the cache-tree's root when it is valid and covers every entry
        self.items = items  # (path, mode, 20-byte id) of every entry, in the index's order, when asked for
        self.extensions: tuple[bytes, ...] = ()  # the signatures of its extensions, in order
        self.flagged = False  # an entry git trusts without looking at its file: assume-unchanged, skip-worktree


def parse(data: bytes, items: bool = False) -> Index | None:
    """The index in `data`, or None when git has to read it (see the module's docstring). `items`: keep
    every entry's path, mode and id too."""
    if len(data) < 32 or len(data) > MAX_BYTES or data[:4] != b"DIRC":
        return None
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3):
        return None
    end = len(data) - 20
    if digest.sha1(data[:end]).digest() != data[end:]:
        return None
    pos = 12
    plain = True
    flagged = False
    kept: list[tuple[bytes, int, bytes]] | None = [] if items else None
    for _ in range(count):
        if pos + 62 > end:
            return None
        mode, = struct.unpack_from(">I", data, pos + 24)
        flags, = struct.unpack_from(">H", data, pos + 60)
        off = 62
        if flags & 0x8000:  # CE_VALID: `update-index --assume-unchanged`
            plain, flagged = False, True
        if flags & 0x4000:  # extended flags follow (version 3): intent-to-add, skip-worktree
            if version < 3:
                return None
            plain = False
            off = 64
            ext, = struct.unpack_from(">H", data, pos + 62)
            if ext & 0x4000:  # CE_SKIP_WORKTREE
                flagged = True
        namelen = flags & 0xFFF
        if namelen == 0xFFF:  # a long name: up to its NUL
            nul = data.find(b"\0", pos + off, end)
            if nul < 0:
                return None
            namelen = nul - pos - off
        elif pos + off + namelen >= end or data[pos + off + namelen] != 0:
            return None
        if (flags >> 12) & 3 or mode in (_GITLINK, _DIR):
            plain = False
        if kept is not None:
            kept.append((data[pos + off:pos + off + namelen], mode, data[pos + 40:pos + 60]))
        pos += (off + namelen + 8) & ~7  # the entry, NUL-padded to a multiple of 8
    if pos > end:
        return None
    root = None
    exts: list[bytes] = []
    while pos < end:
        if pos + 8 > end:
            return None
        sig = data[pos:pos + 4]
        size, = struct.unpack_from(">I", data, pos + 4)
        body_end = pos + 8 + size
        if body_end > end:
            return None
        if sig in (b"link", b"sdir"):  # split or sparse index: other files or directory entries hold the truth
            return None
        exts.append(sig)
        if sig == b"TREE":
            root = _tree_root(data[pos + 8:body_end], count)
        elif not b"A" <= sig[:1] <= b"Z":  # a required extension this reader does not know
            return None
        pos = body_end
    idx = Index(version, count, plain, root, kept)
    idx.extensions = tuple(exts)
    idx.flagged = flagged
    return idx


def _tree_root(body: bytes, entries: int) -> str | None:
    """The root's tree id from a cache-tree extension, when it is valid and covers all `entries`."""
    nul = body.find(b"\0")
    if nul != 0:  # the root comes first, with an empty path
        return None
    lf = body.find(b"\n", 1)
    if lf < 0:
        return None
    parts = body[1:lf].split(b" ")
    if len(parts) != 2 or not parts[0].lstrip(b"-").isdigit() or not parts[1].isdigit():
        return None
    if int(parts[0]) != entries or len(body) < lf + 21:
        return None
    return body[lf + 1:lf + 21].hex()


_MODES = {0o100644: b"100644", 0o100755: b"100755", 0o120000: b"120000"}


def trees(items: list[tuple[bytes, int, bytes]]) -> tuple[str, dict[str, bytes]] | None:
    """(the root tree's id, {id: content} of every tree) for a plain index's entries, as `git write-tree`
    builds them: each folder's entries in the index's order (byte order of full paths, which is git's tree
    order, a folder sorting as its name and a slash), `MODE NAME\\0ID`. None for a mode git would not
    write this way (only plain files, executables and links are expected here)."""
    out: dict[str, bytes] = {}
    comps = [path.split(b"/") for path, _m, _o in items]
    sha1 = digest.sha1

    def build(lo: int, hi: int, depth: int) -> bytes | None:
        parts: list[bytes] = []
        i = lo
        while i < hi:
            c = comps[i]
            name = c[depth]
            if len(c) == depth + 1:
                m = _MODES.get(items[i][1])
                if m is None:
                    return None
                parts.append(m + b" " + name + b"\0" + items[i][2])
                i += 1
                continue
            j = i + 1  # the folder's entries follow one another (sorted paths)
            while j < hi and len(comps[j]) > depth + 1 and comps[j][depth] == name:
                j += 1
            sub = build(i, j, depth + 1)
            if sub is None:
                return None
            parts.append(b"40000 " + name + b"\0" + sub)
            i = j
        body = b"".join(parts)
        h = sha1(b"tree %d\0" % len(body) + body)
        out[h.hexdigest()] = body
        return h.digest()

    root = build(0, len(items), 0)
    if root is None:
        return None
    return root.hex(), out


BINARY_PEEK = 8000  # git looks for a NUL in this many first bytes to call a file binary (xdiff-interface.c)


def _lines(b: bytes) -> int:
    return b.count(b"\n") + (1 if b and not b.endswith(b"\n") else 0)


def easy_lines(old: bytes | None, new: bytes | None) -> int | None:
    """Lines added + removed as `git diff-tree --numstat` counts them between two versions of a file (None:
    absent), a binary one counting 1 as the loop counts it; None unless the change is one whose count does
    not depend on how a diff aligns lines: a file added or deleted, or one whose old content ends with a
    complete line and is all of the new content's start (lines appended), or the reverse (lines cut).
    (Callers make sure no attribute can change how git sees the files.)"""
    if any(b is not None and b"\0" in b[:BINARY_PEEK] for b in (old, new)):
        return 1
    if old is None or new is None:
        return _lines((new if old is None else old) or b"")
    if old == new:
        return 0
    if new.startswith(old) and (not old or old.endswith(b"\n")):
        return _lines(new[len(old):])
    if old.startswith(new) and (not new or new.endswith(b"\n")):
        return _lines(old[len(new):])
    return None


def patched(data: bytes, stats: dict[bytes, tuple[os.stat_result, int, bytes]]) -> bytes | None:
    """`data` (an index `parse` reads as plain) with the entries named in `stats` given a new stat, mode
    and 20-byte id, as `git add` records a file it re-hashed, each one smudged (its size field 0, as git
    marks an entry it cannot trust by its stat, so git compares its content next time); its optional
    extensions dropped (a cache-tree that no longer matches, among others) and its checksum made again.
    None when an entry named is not in it, or the index is not one `parse` reads as plain."""
    idx = parse(data)
    if idx is None or not idx.plain:
        return None
    out = bytearray(data[:12])
    pos, todo = 12, set(stats)
    for _ in range(idx.entries):
        flags, = struct.unpack_from(">H", data, pos + 60)
        off = 64 if flags & 0x4000 else 62
        namelen = flags & 0xFFF
        if namelen == 0xFFF:
            namelen = data.find(b"\0", pos + off) - pos - off
        size = (off + namelen + 8) & ~7
        entry = bytearray(data[pos:pos + size])
        path = bytes(entry[off:off + namelen])
        hit = stats.get(path)
        if hit is not None:
            st, mode, oid = hit
            m32 = 0xFFFFFFFF
            struct.pack_into(">IIIIIIIIII", entry, 0, st.st_ctime_ns // 10**9 & m32, st.st_ctime_ns % 10**9,
                             st.st_mtime_ns // 10**9 & m32, st.st_mtime_ns % 10**9, st.st_dev & m32, st.st_ino & m32,
                             mode, st.st_uid & m32, st.st_gid & m32, 0)
            entry[40:60] = oid
            todo.discard(path)
        out += entry
        pos += size
    if todo:
        return None
    out += digest.sha1(bytes(out)).digest()
    return bytes(out)
